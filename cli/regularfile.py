"""The one way ctl reads a file it is pointed at: a regular file only, never blocking.

A FIFO in a facts directory hung `ctl nodes --facts DIR` forever (open waits for a writer),
and a symlink there to another file had that file read and its first line quoted in the
error. So every input file (catalog, inventory, facts, ctl's own state) is opened without
blocking, checked to be a regular file before a byte is read, and read no further than its
reader's limit; the facts and the state files are not read through a symlink at all (an
operator's catalog or inventory may well be one: Ansible follows them).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotARegularFileError(OSError):
    """A FIFO, a device, a socket or a directory where a file was expected, or a symlink
    where none is followed; `strerror` says which, for `cannot read: ...`."""


def read_regular_file(path: Path, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """At most `limit + 1` bytes of the regular file at `path` (one more than a reader takes,
    so that it can say the file is too big). Raises OSError: NotARegularFileError for what
    is no regular file, FileNotFoundError and the rest as open(2) and read(2) raise them."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_symlinks and path.is_symlink():
            raise NotARegularFileError(errno.ELOOP, "a symbolic link, not followed") from None
        raise
    try:
        kind = stat.S_IFMT(os.fstat(handle).st_mode)
        if kind != stat.S_IFREG:
            raise NotARegularFileError(
                errno.EINVAL, f"not a regular file but {_KINDS.get(kind, 'a special file')}"
            )
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(handle, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(handle)


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}
