"""The fleet's operations, the API the tests and benchmarks use: up, start, stop, down,
status, clean. Each takes the state directory's lock (state.locked) while it changes
anything."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.testfleet.access import ensure_key, host_key_path, write_access_files
from tests.testfleet.cgroups import cgroup_roots, clear_cgroups, fleet_cgroup, node_cgroups
from tests.testfleet.defaults import default_spec
from tests.testfleet.faults import remove_cut
from tests.testfleet.hardware import NodeFile
from tests.testfleet.nodefiles import files_digest, install_node_files, node_files
from tests.testfleet.nspawn import (
    BOOT_TIMEOUT,
    BOOT_TIMEOUT_PER_EXTRA_NODE,
    NodeState,
    check_host,
    launch,
    node_state,
    preflight,
    raise_inotify_limits,
    running_pid,
    stop_nodes,
    wait_for_sshd,
)
from tests.testfleet.rootfs import ensure_rootfs
from tests.testfleet.specs import (
    MAX_NODES,
    NODE_NAME,
    FleetError,
    NodeSpec,
    SpecError,
    node_index,
    node_name,
)
from tests.testfleet.state import (
    Fleet,
    Node,
    Say,
    load_fleet,
    locked,
    node_dir,
    print_say,
    rootfs_marker,
    save_fleet,
    state_dir,
    write_text,
)


def _configure_node(state: Path, node: Node, client_pub: bytes) -> tuple[dict[str, NodeFile], str]:
    key = host_key_path(state, node.name)
    ensure_key(key, f"root@{node.name}")
    files = node_files(
        node.name,
        node.spec,
        key.read_bytes(),
        key.with_name(key.name + ".pub").read_bytes(),
        client_pub,
    )
    return files, files_digest(files)


def _applied_digest(state: Path, name: str) -> str | None:
    try:
        return (node_dir(state, name) / "applied.sha256").read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class UpResult:
    fleet: Fleet
    started: tuple[str, ...]  # nodes booted by this call (the others were up already)


def boot_timeout(nodes_at_once: int) -> float:
    return BOOT_TIMEOUT + BOOT_TIMEOUT_PER_EXTRA_NODE * max(nodes_at_once - 1, 0)


def up(
    count: int,
    specs: Mapping[str, NodeSpec] | None = None,
    *,
    state: Path | None = None,
    timeout: float | None = None,
    mirror: str | None = None,
    router: str | None = None,
    say: Say = print_say,
) -> UpResult:
    """Make node-1..node-COUNT run with their specs; returns the fleet.

    A node keeps its spec from the last `up` unless `specs` names it; a node new to the
    fleet gets its default spec. Nodes that are up with an unchanged configuration stay up;
    a running node whose configuration changed is restarted; nodes beyond COUNT are stopped.
    With a `router`, the inventory puts that node in the group `routers`; without, in none
    (the inventory is written anew each time).
    """
    if not 1 <= count <= MAX_NODES:
        raise FleetError(f"a fleet has 1 to {MAX_NODES} nodes, not {count}")
    state = state or state_dir()
    specs = dict(specs or {})
    for name in specs:
        if node_index(name) > count:
            raise SpecError(f"the specs name {name}, beyond the {count} nodes asked for")
    problem = check_host()
    if problem is not None:
        raise FleetError(f"this machine cannot run the test fleet: {problem}")
    raise_inotify_limits(count, say)
    with locked(state, say):
        previous = load_fleet(state)
        kept = {node.name: node.spec for node in previous.nodes} if previous else {}
        nodes = tuple(
            Node(
                name,
                specs.get(name) or kept.get(name) or default_spec(index),
            )
            for index in range(1, count + 1)
            for name in [node_name(index)]
        )
        fleet = Fleet(state, nodes)
        if router is not None:
            fleet.node(router)  # one of the fleet's, or a FleetError naming them
        rootfs = ensure_rootfs(state, say, mirror)
        ensure_key(fleet.client_key, "modelfleet-testfleet client")
        fleet.client_key.parent.chmod(0o700)
        client_pub = fleet.client_key.with_name("id_ed25519.pub").read_bytes()

        beyond = [
            path.name
            for path in sorted((state / "nodes").glob("node-*"))
            if NODE_NAME.match(path.name) and node_index(path.name) > count
        ]
        if any(running_pid(state, name) is not None for name in beyond):
            say(f"stopping nodes beyond node-{count}")
            stop_nodes(state, beyond, say)

        to_start: list[str] = []
        for node in nodes:
            files, digest = _configure_node(state, node, client_pub)
            running = running_pid(state, node.name) is not None
            if running and _applied_digest(state, node.name) == digest:
                continue
            if running:
                say(f"{node.name}: its configuration changed, restarting it")
                stop_nodes(state, [node.name], say)
            else:  # an orphaned container must not run on the upper directory we write
                clear_cgroups(node_cgroups(state, node.name))
            upper = node_dir(state, node.name) / "upper"
            upper.mkdir(parents=True, exist_ok=True)
            install_node_files(upper, rootfs, files)
            write_text(node_dir(state, node.name) / "applied.sha256", digest + "\n")
            to_start.append(node.name)

        save_fleet(fleet)
        write_access_files(fleet, router)
        if to_start:
            for name in to_start:
                preflight(state, name)
            say(f"booting {', '.join(to_start)}")
            for name in to_start:
                launch(state, name)
            wait_for_sshd(
                state,
                to_start,
                timeout if timeout is not None else boot_timeout(len(to_start)),
                say,
            )
        else:
            say(f"all {count} nodes were up already")
        return UpResult(fleet, tuple(to_start))


def fleet_or_error(state: Path) -> Fleet:
    fleet = load_fleet(state)
    if fleet is None:
        raise FleetError(f"no fleet in {state}: run `testfleet up N` first")
    return fleet


def start(
    name: str, *, state: Path | None = None, timeout: float | None = None, say: Say = print_say
) -> None:
    """Boot one node of the configured fleet (as `up` left it) and wait for its sshd."""
    state = state or state_dir()
    with locked(state, say):
        fleet = fleet_or_error(state)
        fleet.node(name)
        if running_pid(state, name) is not None:
            say(f"{name} is running already")
            return
        preflight(state, name)
        launch(state, name)
        wait_for_sshd(state, [name], timeout if timeout is not None else BOOT_TIMEOUT, say)


def stop(name: str, *, state: Path | None = None, say: Say = print_say) -> None:
    """Power one node off (the others stay up): an unreachable node for tests."""
    state = state or state_dir()
    with locked(state, say):
        fleet_or_error(state).node(name)
        if running_pid(state, name) is None:
            say(f"{name} is not running")
        stop_nodes(state, [name], say)


def down(*, state: Path | None = None, say: Say = print_say) -> tuple[str, ...]:
    """Power every node off; returns the nodes that were running."""
    state = state or state_dir()
    with locked(state, say):
        names = [
            path.name
            for path in sorted(
                (state / "nodes").glob("node-*"), key=lambda p: (len(p.name), p.name)
            )
            if NODE_NAME.match(path.name)
        ]
        names += [
            cgroup.name
            for root in cgroup_roots()
            for cgroup in sorted(fleet_cgroup(root, state).glob("node-*"))
            if cgroup.name not in names
        ]
        running = tuple(name for name in names if running_pid(state, name) is not None)
        stop_nodes(state, names, say)
        fleet = load_fleet(state)
        for node in fleet.nodes if fleet else ():
            if remove_cut(node.address, node.name):  # the next `up` must reach its sshd
                say(f"{node.name} healed")
        if not running:
            say("no node was running")
        return running


def status(state: Path | None = None) -> list[tuple[Node, NodeState]]:
    state = state or state_dir()
    fleet = load_fleet(state)
    if fleet is None:
        return []
    return [(node, node_state(state, node.name)) for node in fleet.nodes]


def clean(*, everything: bool = False, state: Path | None = None, say: Say = print_say) -> None:
    """Forget the fleet (node directories, keys, inventory); with `everything`, the cached
    root filesystem too. The nodes must be down."""
    state = state or state_dir()
    with locked(state, say):
        fleet = load_fleet(state)
        if fleet is not None and any(running_pid(state, name) for name in fleet.names()):
            raise FleetError("nodes are running: run `testfleet down` first")
        for path in ("nodes", "client", "inventory"):
            shutil.rmtree(state / path, ignore_errors=True)
        for path in ("fleet.json", "specs.yml", "known_hosts"):
            (state / path).unlink(missing_ok=True)
        if everything:
            rootfs_marker(state).unlink(missing_ok=True)
            for path in ("rootfs", "rootfs.partial"):
                shutil.rmtree(state / path, ignore_errors=True)
        say(f"cleaned {state}" + (" (root filesystem included)" if everything else ""))
