"""cli/edges/lock.py: one holder at a time, a waiter told who holds it, no stale locks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.edges.lock import LockTimeoutError, exclusive, fleet_lock_path

ROOT = Path(__file__).resolve().parents[3]

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from cli.edges.lock import exclusive
    with exclusive(Path(sys.argv[1]), timeout=5, command="ctl cordon hgx-1 -r 'PSU'"):
        print("held", flush=True)
        time.sleep(60)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """Another process holding the lock at tmp_path/fleet.lock."""
    path = tmp_path / "locks" / "fleet.lock"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "held\n"
    yield path, process
    process.kill()
    process.wait(timeout=10)


def test_a_waiter_is_told_who_holds_the_lock_and_gives_up_after_the_timeout(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    path, process = holder
    told: list[str] = []
    started = time.monotonic()

    with (
        pytest.raises(LockTimeoutError) as raised,
        exclusive(path, timeout=0.3, command="ctl reconcile", waiting=told.append),
    ):
        pytest.fail("the lock was taken while another process held it")

    assert time.monotonic() - started >= 0.3
    assert len(told) == 1
    assert told[0].startswith(f"waiting for PID {process.pid} (ctl cordon hgx-1 -r 'PSU', since ")
    assert f"(lock {path}, up to 0.3 s)" in told[0]
    assert str(raised.value).startswith(f"{path}: held by PID {process.pid} (ctl cordon hgx-1")
    assert str(raised.value).endswith(
        "for more than 0.3 s; nothing was changed (wait for it, or raise --lock-timeout)"
    )


def test_a_killed_holder_leaves_no_stale_lock(holder: tuple[Path, subprocess.Popen[str]]) -> None:
    path, process = holder
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)

    with exclusive(path, timeout=2, command="ctl reconcile"):
        record = json.loads(path.read_text(encoding="utf-8"))

    assert record["pid"] == os.getpid()
    assert record["command"] == "ctl reconcile"
    assert path.read_text(encoding="utf-8") == ""  # released: it describes no holder


def test_the_lock_is_reentrant_within_a_process_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "locks" / "fleet.lock"
    with exclusive(path, timeout=0.2, command="ctl drain hgx-1"):
        with exclusive(path, timeout=0.2, command="ctl cordon hgx-1"):
            inner = json.loads(path.read_text(encoding="utf-8"))
        still = json.loads(path.read_text(encoding="utf-8"))

    assert inner["command"] == still["command"] == "ctl drain hgx-1"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_holder_whose_file_says_nothing_is_another_ctl(tmp_path: Path) -> None:
    path = tmp_path / "fleet.lock"
    script = textwrap.dedent(
        """
        import fcntl, os, sys, time
        handle = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
        os.write(handle, b"\\x1b]52;c;aGk=\\x07 not json")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"held\n"
        told: list[str] = []
        with (
            pytest.raises(LockTimeoutError),
            exclusive(path, timeout=0.1, command="ctl reconcile", waiting=told.append),
        ):
            pass
        assert told == [f"waiting for another ctl to finish (lock {path}, up to 0.1 s)"]
    finally:
        process.kill()
        process.wait(timeout=10)


def test_each_inventory_has_its_own_lock_in_the_state_directory(tmp_path: Path) -> None:
    one = fleet_lock_path(tmp_path / "a" / "hosts.yml", tmp_path / "state")
    other = fleet_lock_path(tmp_path / "b" / "hosts.yml", tmp_path / "state")

    assert one.parent == tmp_path / "state" / "locks"
    assert one != other
    assert one == fleet_lock_path(tmp_path / "a" / ".." / "a" / "hosts.yml", tmp_path / "state")


def test_an_inventory_directory_and_a_file_in_it_are_one_fleet_with_one_lock(
    tmp_path: Path,
) -> None:
    # A lock held for `inv` did not stop `ctl cordon -i inv/hosts.yml` (issue 25).
    inventory = tmp_path / "inv"
    (inventory / "more").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all: {}\n")
    state = tmp_path / "state"
    (tmp_path / "link").symlink_to(inventory)
    assert fleet_lock_path(inventory, state) == fleet_lock_path(inventory / "hosts.yml", state)
    assert fleet_lock_path(inventory, state) == fleet_lock_path(tmp_path / "link", state)
    assert fleet_lock_path(inventory, state) != fleet_lock_path(inventory / "more", state)
