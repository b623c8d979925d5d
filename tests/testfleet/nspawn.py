"""Booting and stopping the nodes: one `systemd-nspawn --boot` per node in the background,
in the node's own cgroups, waited for until its sshd answers; and whether this machine can
run such containers at all (check_host)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

from tests.testfleet.cgroups import (
    CGROUP_NAME,
    cgroup_pids,
    cgroup_roots,
    clear_cgroups,
    join_cgroups,
    node_cgroups,
    remove_cgroup,
    thaw_cgroups,
)
from tests.testfleet.nodefiles import SSH_PORT
from tests.testfleet.specs import FleetError, node_address, node_index
from tests.testfleet.state import Say, node_dir, rootfs_dir, write_text

BOOT_TIMEOUT: Final = 60.0  # seconds for one node's sshd to answer, from its start
BOOT_TIMEOUT_PER_EXTRA_NODE: Final = 3.0  # nodes booting at once share the CPUs
STOP_TIMEOUT: Final = 30.0  # seconds for a clean poweroff before SIGKILL

# Every node's systemd, journald, logind and dbus hold inotify instances, counted against
# root's fs.inotify.max_user_instances (the nodes share the host's root): 8 a node at rest
# and 27-30 watches, measured on a booted fleet (docs/testfleet.md). A stock kernel's 128
# instances boot about 18 nodes, then systemd in the next ones says "Too many open files".
# The allowance has room for a boot's peak and the host's own users.
INOTIFY_LIMITS: Final = Path("/proc/sys/fs/inotify")
INOTIFY_PER_NODE: Final = {"max_user_instances": 12, "max_user_watches": 256}
INOTIFY_HOST: Final = {"max_user_instances": 128, "max_user_watches": 8192}
# What a node's console says when it will not come up, from systemd's src/core/main.c
# (the manager could not be made: "Failed to allocate manager object", then "Freezing
# execution") and from any unit out of inotify instances or descriptors.
FATAL_CONSOLE: Final = re.compile(
    r"Failed to allocate manager object|Freezing execution|Too many open files"
)
FATAL_GRACE: Final = 5.0  # seconds a node has to answer after such a line, before it fails


def check_host() -> str | None:
    """Why this machine cannot run the fleet's containers, or None when it can."""
    if os.geteuid() != 0:
        return "not root: systemd-nspawn needs root"
    nspawn = shutil.which("systemd-nspawn")
    if nspawn is None:
        return "systemd-nspawn is missing (apt-get install systemd-container)"
    roots = cgroup_roots()
    if not roots:
        return "no cgroup2 or name=systemd cgroup hierarchy is mounted"
    for root in roots:
        if not os.access(root, os.W_OK):
            return f"cannot create cgroups under {root} (no privileges for containers here?)"
    # A quick container: an empty tree with the host's /usr bound in, running true.
    with tempfile.TemporaryDirectory(prefix="testfleet-probe-") as directory:
        tree = Path(directory)
        (tree / "usr").mkdir()
        for link in ("bin", "sbin", "lib", "lib64"):
            if Path("/", link).is_symlink():
                (tree / link).symlink_to(Path("/", link).readlink())
        cgroups = [root / CGROUP_NAME / f"probe-{os.getpid()}" for root in roots]
        try:
            for cgroup in cgroups:
                cgroup.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(
                [
                    nspawn,
                    "--quiet",
                    "--register=no",
                    "--keep-unit",
                    f"--machine=testfleet-probe-{os.getpid()}",
                    f"--directory={tree}",
                    "--bind-ro=/usr",
                    "/usr/bin/true",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                preexec_fn=join_cgroups(cgroups),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"a test container could not be started: {error}"
        finally:
            for cgroup in cgroups:
                remove_cgroup(cgroup)
        if result.returncode != 0:
            lines = [
                line
                for line in result.stderr.splitlines()
                if line.strip() and "we can't allow that" not in line
            ]
            return (
                f"a test container (systemd-nspawn ... /usr/bin/true) failed with exit code"
                f" {result.returncode}: {' / '.join(lines[-3:]) or 'no message'}"
            )
    return None


def _listening(address: str, port: int) -> str | None:
    """Who listens on address:port already: the address text, or None when nobody does."""
    wanted = {
        "".join(reversed([f"{int(part):02X}" for part in address.split(".")])): address,
        "00000000": "0.0.0.0",
    }
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        host, _, port_hex = local.partition(":")
        if state == "0A" and int(port_hex, 16) == port and host in wanted:
            return f"{wanted[host]}:{port}"
    return None


_children: dict[int, subprocess.Popen[bytes]] = {}  # nspawn processes this process started


def _process_start(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _pid_file(state: Path, name: str) -> Path:
    return node_dir(state, name) / "nspawn.pid"


def running_pid(state: Path, name: str) -> int | None:
    """The node's systemd-nspawn pid while it runs (a reused pid or a zombie is not it)."""
    try:
        pid_text, start_text = _pid_file(state, name).read_text().split()
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return None
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]
        return None
    now = _process_start(pid)
    if now is None or now[1] != start or now[0] in ("Z", "X"):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if f"--machine={name}".encode() not in command:
        return None
    return pid


def _sshd_answers(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, SSH_PORT), timeout=timeout) as connection:
            connection.settimeout(timeout)
            return connection.recv(64).startswith(b"SSH-")
    except OSError:
        return False


# up: sshd answers; booting: systemd-nspawn runs, sshd does not answer yet; orphaned: the
# container runs without its systemd-nspawn (killed), start/up/down clear it; down.
NodeState = Literal["up", "booting", "orphaned", "down"]


def node_state(state: Path, name: str) -> NodeState:
    if running_pid(state, name) is None:
        if any(cgroup_pids(cgroup) for cgroup in node_cgroups(state, name)):
            return "orphaned"
        return "down"
    return "up" if _sshd_answers(node_address(node_index(name))) else "booting"


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no console log)"
    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    return "\n".join("    " + ansi.sub("", line) for line in text.splitlines()[-lines:])


def preflight(state: Path, name: str) -> None:
    """Before a node starts: clear what is left of it, check that its address is free."""
    clear_cgroups(node_cgroups(state, name))  # a container whose nspawn was killed
    taken = _listening(node_address(node_index(name)), SSH_PORT)
    if taken is not None:
        raise FleetError(
            f"{name}: something already listens on {taken}, so the node's sshd could not."
            " Another test fleet (another MODELFLEET_TESTFLEET_DIR)? A host sshd on all"
            " addresses? Give it explicit ListenAddress lines without 127.0.1.x."
        )


def launch(state: Path, name: str) -> int:
    """Start one node's systemd-nspawn in the background (after preflight); its pid."""
    directory = node_dir(state, name)
    rootfs = rootfs_dir(state)
    upper = directory / "upper"
    cgroups = node_cgroups(state, name)
    for cgroup in cgroups:
        cgroup.mkdir(parents=True, exist_ok=True)
    command = [
        shutil.which("systemd-nspawn") or "systemd-nspawn",
        "--boot",
        "--register=no",  # no host systemd-machined to register with
        "--keep-unit",  # no host systemd to make a scope unit
        f"--machine={name}",
        f"--directory={rootfs}",
        f"--overlay={rootfs}:{upper}:/",
        "--console=read-only",
        "--link-journal=no",
    ]
    log_path = directory / "console.log"
    with log_path.open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n=== testfleet: {' '.join(command)} at {stamp}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Into the node's own cgroups before exec (see cgroup_roots); no threads here.
            preexec_fn=join_cgroups(cgroups),  # noqa: PLW1509
        )
    _children[process.pid] = process
    started = _process_start(process.pid)
    write_text(_pid_file(state, name), f"{process.pid} {started[1] if started else 0}\n")
    return process.pid


def inotify_needs(nodes: int) -> dict[str, int]:
    """The inotify limits `nodes` nodes need (INOTIFY_PER_NODE)."""
    return {key: INOTIFY_HOST[key] + nodes * each for key, each in INOTIFY_PER_NODE.items()}


def raise_inotify_limits(nodes: int, say: Say, limits: Path = INOTIFY_LIMITS) -> None:
    """Raise the kernel's inotify limits to what `nodes` nodes need, saying so; never lower
    them. Where they cannot be written (a read-only /proc/sys), a warning: the nodes that
    run out say so on their consoles, and wait_for_sshd reports it within seconds."""
    for key, need in inotify_needs(nodes).items():
        path = limits / key
        try:
            have = int(path.read_text())
        except (OSError, ValueError) as error:
            say(f"warning: cannot read fs.inotify.{key} ({error}); booting all the same")
            continue
        if have >= need:
            continue
        try:
            path.write_text(f"{need}\n")
        except OSError as error:
            say(
                f"warning: fs.inotify.{key} is {have}, {nodes} nodes need {need}, and it cannot"
                f" be raised here ({error.strerror}): sysctl -w fs.inotify.{key}={need}"
            )
            continue
        say(
            f"raised fs.inotify.{key} from {have} to {need}: each node's systemd needs"
            f" about {INOTIFY_PER_NODE[key]}"
        )


def fatal_console_line(path: Path, window: int = 16384) -> str | None:
    """The last line of a node's console (its last `window` bytes) saying that it will not
    come up (FATAL_CONSOLE), as text; None when there is none."""
    try:
        with path.open("rb") as console:
            console.seek(max(console.seek(0, os.SEEK_END) - window, 0))
            tail = console.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    fatal = [line for line in tail.splitlines() if FATAL_CONSOLE.search(line)]
    return ansi.sub("", fatal[-1]).strip() if fatal else None


def wait_for_sshd(state: Path, names: Sequence[str], timeout: float, say: Say) -> None:
    """Until every node's sshd answers; a node whose nspawn exits, whose console says it will
    not come up (FATAL_CONSOLE, then FATAL_GRACE seconds), or that takes longer than
    `timeout` is stopped and reported."""
    began = time.monotonic()
    pending = list(names)
    failed: list[str] = []
    doomed: dict[str, float] = {}  # node → when its console first said it will not come up
    while pending:
        for name in list(pending):
            address = node_address(node_index(name))
            console = node_dir(state, name) / "console.log"
            if running_pid(state, name) is None:
                failed.append(f"{name}: systemd-nspawn exited while booting")
                pending.remove(name)
            elif _sshd_answers(address, timeout=0.5):
                say(f"{name} up at {address} ({time.monotonic() - began:.1f} s)")
                pending.remove(name)
            elif (line := fatal_console_line(console)) is not None and (
                time.monotonic() - doomed.setdefault(name, time.monotonic()) > FATAL_GRACE
            ):
                failed.append(f"{name}: its console says {line!r}")
                pending.remove(name)
            elif time.monotonic() - began > timeout:
                failed.append(f"{name}: sshd did not answer on {address}:22 in {timeout:.0f} s")
                pending.remove(name)
        if pending:
            time.sleep(0.2)
    if failed:
        broken = [line.partition(":")[0] for line in failed]
        stop_nodes(state, broken, say)
        details = "\n".join(
            f"{line}\n  {node_dir(state, name) / 'console.log'} ends with:\n"
            + log_tail(node_dir(state, name) / "console.log")
            for line, name in zip(failed, broken, strict=True)
        )
        raise FleetError(f"{len(failed)} node(s) did not come up:\n{details}")


def stop_nodes(state: Path, names: Sequence[str], say: Say, timeout: float = STOP_TIMEOUT) -> None:
    """Power nodes off: SIGTERM to systemd-nspawn, which asks the container's systemd to shut
    down (SIGRTMIN+3) and waits for it; SIGKILL to whatever is left after `timeout`. Then the
    nodes' cgroups are removed. The containers' mounts live in their own mount namespaces
    and go with them."""
    began = time.monotonic()
    running = {name: pid for name in names if (pid := running_pid(state, name)) is not None}
    for name in running:
        thaw_cgroups(node_cgroups(state, name))
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    while running and time.monotonic() - began < timeout:
        for name in list(running):
            if running_pid(state, name) is None:
                say(f"{name} down ({time.monotonic() - began:.1f} s)")
                del running[name]
        if running:
            time.sleep(0.1)
    for name, pid in running.items():
        say(f"{name} did not power off in {timeout:.0f} s: killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for name in names:
        clear_cgroups(node_cgroups(state, name))
        _pid_file(state, name).unlink(missing_ok=True)
    _reap_children()


def _reap_children() -> None:
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]
