"""The cgroups each node's systemd-nspawn runs in: how a node is told apart from the others,
how its CPU time is read, and how what is left of it is found and killed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from tests.testfleet.specs import FleetError
from tests.testfleet.state import state_dir

CGROUP_NAME: Final = "modelfleet-testfleet"


def cgroup_roots() -> list[Path]:
    """The hierarchies a container's processes are tracked in: the cgroup2 mount and, on a
    hybrid host, the name=systemd v1 one. Each node's nspawn is started in its own cgroup in
    each: with --keep-unit nspawn creates `supervisor` and `payload` in the cgroup it is
    started in, and two nodes started in one cgroup would share one payload cgroup."""
    roots: list[Path] = []
    with Path("/proc/self/mounts").open(encoding="utf-8") as mounts:
        for line in mounts:
            _, point, kind, options, *_ = line.split()
            if kind == "cgroup2" or (kind == "cgroup" and "name=systemd" in options.split(",")):
                roots.append(Path(point.replace("\\040", " ")))
    return roots


def fleet_cgroup(root: Path, state: Path) -> Path:
    """ROOT/modelfleet-testfleet/ID, ID from the state directory: two fleets' node-1 (one
    running, one failing to start on the same address) never share a cgroup."""
    return root / CGROUP_NAME / hashlib.sha256(str(state).encode()).hexdigest()[:12]


def node_cgroups(state: Path, name: str) -> list[Path]:
    return [fleet_cgroup(root, state) / name for root in cgroup_roots()]


def cgroup_pids(cgroup: Path) -> set[int]:
    pids: set[int] = set()
    if not cgroup.is_dir():
        return pids
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids |= {int(pid) for pid in procs.read_text().split()}
    return pids


def _kill_cgroup(cgroup: Path) -> None:
    kill = cgroup / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1")
    for pid in cgroup_pids(cgroup):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_cgroup(cgroup: Path) -> None:
    if not cgroup.is_dir():
        return
    for directory in sorted(
        (path for path in cgroup.rglob("*") if path.is_dir()),
        key=lambda path: len(path.parts),
        reverse=True,
    ):
        with contextlib.suppress(OSError):
            directory.rmdir()
    # The node's cgroup, then its parents up to modelfleet-testfleet/ when they are empty.
    for directory in (cgroup, *cgroup.parents):
        try:
            directory.rmdir()
        except OSError:
            break
        if directory.name == CGROUP_NAME:
            break


def clear_cgroups(cgroups: Sequence[Path], timeout: float = 10.0) -> None:
    """SIGKILL whatever is still in a node's cgroups, wait for it to go, remove them."""
    deadline = time.monotonic() + timeout
    while any(cgroup_pids(cgroup) for cgroup in cgroups):
        if time.monotonic() > deadline:
            left = sorted(set().union(*(cgroup_pids(cgroup) for cgroup in cgroups)))
            raise FleetError(f"processes {left} in {cgroups[0]} did not die on SIGKILL")
        for cgroup in cgroups:
            _kill_cgroup(cgroup)
        time.sleep(0.1)
    for cgroup in cgroups:
        remove_cgroup(cgroup)


def thaw_cgroups(cgroups: Sequence[Path]) -> None:
    """Undo `testfleet freeze`: a frozen node would neither shut down nor die on a signal."""
    for cgroup in cgroups:
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.freeze").write_text("0")


def join_cgroups(cgroups: Sequence[Path]) -> Callable[[], None]:
    def join() -> None:  # runs in the child between fork and exec
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return join


def node_cpu_seconds(name: str, state: Path | None = None) -> float | None:
    """CPU time used so far by everything in a node (its sshd, the commands run over SSH,
    its systemd...), from its cgroup2 `cpu.stat`; None without a cgroup2 hierarchy or when
    the node is down. The benchmark takes differences of it."""
    state = state or state_dir()
    for cgroup in node_cgroups(state, name):
        with contextlib.suppress(OSError):
            for line in (cgroup / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    return None
