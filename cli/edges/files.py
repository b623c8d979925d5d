"""The one way ctl writes a file, and where it keeps its state.

`atomic_write` replaces a file whole or not at all: a temporary file in the same
directory (a rename never crosses file systems) is given its final mode before its first
byte (a key is 0600 from the start, whatever the umask), written, synced, renamed over the
path, and then the directory is synced so that the rename itself survives a crash. A
reader sees the old file or the new one, never half of either; on any error the temporary
file is removed and the old file is left as it was.

`state_dir` and `state_key`: ctl's own state (facts cache, backoff ledger, logs) lives in
$XDG_STATE_HOME/modelfleet, else ~/.local/state/modelfleet, one key per inventory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def atomic_write(
    path: Path,
    data: bytes | str,
    mode: int | None = 0o644,
    *,
    exclusive: bool = False,
    durable: bool = True,
) -> Path:
    """Put `data` (str: UTF-8) at `path` in one step, with `mode`; returns the path written.

    `mode` None: what a new file gets under the umask (0666 less the umask), as an editor
    makes it. A symlink at `path` is written through: its target is replaced, the link
    stays. `exclusive`: `path` must not exist (not even as a symlink): FileExistsError
    naming `path` if it does, and nothing is replaced (a hard link, not a rename, puts the
    file in place). Not `durable`: still whole or absent to a reader, but not synced to
    disk, so a power loss may take it back to the old file or to none (a cache's files,
    which the next run learns again: syncing each of 2,000 was most of a pass's writes).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    target = path.resolve() if path.is_symlink() and not exclusive else path
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    directory = target.parent
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as file:
            os.fchmod(file.fileno(), mode)  # before the first byte; mkstemp made it 0600
            file.write(payload)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        if exclusive:
            try:
                target.hardlink_to(temporary)
            except FileExistsError as error:
                raise FileExistsError(error.errno, error.strerror, str(target)) from None
            Path(temporary).unlink()
        else:
            Path(temporary).replace(target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if durable:
        sync_directory(directory)
    return target


def sync_directory(directory: Path) -> None:
    """Make a rename or a new name in `directory` durable."""
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def state_dir() -> Path:
    """$XDG_STATE_HOME/modelfleet, else ~/.local/state/modelfleet."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "modelfleet"


def state_key(inventory: Path) -> str:
    """The name of one inventory's state: its resolved path, hashed, 16 hex digits."""
    return hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
