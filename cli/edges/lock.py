"""One writer at a time: an exclusive lock on a file, held for a whole edit or pass.

Two operators (or two terminals) running `ctl cordon` on different nodes at once each read
the inventory, each planned an edit of the same file, and the second write undid the
first; two `ctl reconcile` started the same replica twice. Every command that changes the
inventory or the fleet holds the fleet's lock (`fleet_lock_path`) from its first read to
its last check, and a second one waits for it.

flock(2): the kernel drops the lock when its holder exits, killed or not, so a crash never
leaves a stale lock behind. While held, the lock file says who holds it (PID, command,
since when) for the message a waiter prints; it is only a hint: an empty or half-written
file just means "another ctl". Within one process the lock is re-entrant (`ctl drain`
cordons the node, then runs a reconcile pass, each of which takes it): flock would
otherwise block a process on its own second open of the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from cli.edges.files import state_dir, state_key

POLL_SECONDS = 0.05
HOLDER_LIMIT = 4096  # bytes of the lock file read for the holder's description

_held: dict[Path, int] = {}  # lock path → depth, for this process


class LockTimeoutError(Exception):
    """The lock stayed held by someone else for longer than the timeout."""

    def __init__(self, path: Path, holder: str, timeout: float) -> None:
        super().__init__(
            f"{path}: held by {holder} for more than {timeout:g} s; nothing was changed"
            " (wait for it, or raise --lock-timeout)"
        )
        self.path = path
        self.holder = holder


def fleet_lock_path(inventory: Path, root: Path | None = None) -> Path:
    """The lock of the fleet that `inventory` describes, in ctl's state directory.

    Keyed on the directory the inventory is read from (a directory, or the one a file is
    in: where its group_vars/ and host_vars/ are, which every edit may touch), resolved: a
    lock held for `inv` stops `ctl cordon -i inv/hosts.yml` too. Two inventory files in one
    directory share a lock: they share those variables."""
    base = inventory if inventory.is_dir() else inventory.parent
    return (root or state_dir()) / "locks" / f"{state_key(base)}.lock"


@contextlib.contextmanager
def exclusive(
    path: Path,
    *,
    timeout: float,
    command: str,
    waiting: Callable[[str], None] = lambda _: None,
) -> Iterator[None]:
    """Hold the lock at `path` while the block runs; wait up to `timeout` seconds for it.

    `command`: what this process is doing, for a waiter's message; `waiting`: told once,
    with the holder's description, when the lock is held by someone else. Raises
    LockTimeoutError when it is still held after `timeout`.
    """
    key = path.resolve()
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        _acquire(handle, path, timeout, waiting)
        _describe(handle, command)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(handle, 0)
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def _acquire(handle: int, path: Path, timeout: float, waiting: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(handle)
            if time.monotonic() >= deadline:
                raise LockTimeoutError(path, holder, timeout) from None
            if not told:
                waiting(f"waiting for {holder} to finish (lock {path}, up to {timeout:g} s)")
                told = True
            time.sleep(POLL_SECONDS)


def _describe(handle: int, command: str) -> None:
    since = datetime.now(UTC).isoformat(timespec="seconds")
    record = json.dumps({"pid": os.getpid(), "command": command, "since": since})
    os.ftruncate(handle, 0)
    os.pwrite(handle, record.encode("utf-8"), 0)


def _holder(handle: int) -> str:
    """Who holds the lock, as its file says; "another ctl" when it says nothing usable."""
    try:
        record = json.loads(os.pread(handle, HOLDER_LIMIT, 0).decode("utf-8"))
        pid, command, since = int(record["pid"]), str(record["command"]), str(record["since"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "another ctl"
    # As it came, cut short: the command line that prints it escapes what is not text.
    return f"PID {pid} ({command[:200]}, since {since})"
