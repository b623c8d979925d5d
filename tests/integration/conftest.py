"""The local test fleet (scripts/testfleet) as a pytest fixture.

`testfleet` (session scope) brings up node-1..node-3, or reuses a fleet that is up (a bigger
one included: it is reused whole), and yields a `LiveFleet`: the state directory, the
inventory, the known_hosts, the client key, the nodes with their addresses and specs.
It skips only where this machine cannot run containers (not root, no systemd-nspawn, a
test container fails), saying which; any other problem bringing the fleet up is an error.

Several pytest processes (xdist workers, two sessions) share the one fleet:

- A fleet this fixture booted from nothing is powered off by the last session to finish
  with it; one that was up before (`testfleet up N` by hand, .ci/run) is left up. Set
  MODELFLEET_TESTFLEET_KEEP=1 to leave it up anyway (faster reruns).
- A test that stops, starts or changes nodes asks for `fleet_exclusive` as well: it then
  runs alone among the fleet tests, and the nodes are all started again after it. Every
  other test that uses `testfleet` holds a shared lock meanwhile, so it sees the fleet up.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests import testfleet as fleet_script

FLEET_SIZE = 3
KEEP_ENV = "MODELFLEET_TESTFLEET_KEEP"
STARTED_BY_TESTS = "started-by-tests"


def _say(message: str) -> None:
    print(f"testfleet: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LiveFleet:
    """A running test fleet, as the tests see it."""

    state_dir: Path
    inventory: Path  # inventory/hosts.yml
    inventory_dir: Path  # hosts.yml, group_vars/, .known_hosts (where ctl looks by default)
    known_hosts: Path  # the same keys, in the state directory (Ansible's group_vars use it)
    key: Path  # the client's private key; root on every node accepts it
    nodes: tuple[fleet_script.Node, ...]  # .name, .address, .spec

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def node(self, name: str) -> fleet_script.Node:
        return next(node for node in self.nodes if node.name == name)

    def address(self, name: str) -> str:
        return self.node(name).address

    def spec(self, name: str) -> fleet_script.NodeSpec:
        return self.node(name).spec

    def ssh_command(self, name: str, *command: str) -> list[str]:
        """ssh to root on a node, trusting only the fleet's known_hosts."""
        return fleet_script.Fleet(self.state_dir, self.nodes).ssh_command(name, *command)

    def ssh(
        self, name: str, *command: str, stdin: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.ssh_command(name, *command),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self, name: str) -> None:
        """Power a node off (needs `fleet_exclusive`)."""
        fleet_script.stop(name, state=self.state_dir, say=_say)

    def start(self, name: str) -> None:
        """Boot a node again and wait for its sshd (needs `fleet_exclusive`)."""
        fleet_script.start(name, state=self.state_dir, say=_say)

    def state(self, name: str) -> fleet_script.NodeState:
        return fleet_script.node_state(self.state_dir, name)


def _lock(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")


@pytest.fixture(scope="session")
def testfleet() -> Iterator[LiveFleet]:
    problem = fleet_script.check_host()
    if problem is not None:
        pytest.skip(f"this machine cannot run the test fleet's containers: {problem}")
    state = fleet_script.state_dir()
    # Held shared for the whole session: the fleet is powered off only once nobody uses it.
    users = _lock(state / "users.lock")
    fcntl.flock(users, fcntl.LOCK_SH)
    try:
        # Not while another session's test has nodes stopped on purpose.
        with _lock(state / "nodes.lock") as nodes_lock:
            fcntl.flock(nodes_lock, fcntl.LOCK_SH)
            states = fleet_script.status(state)
            was_down = all(state_ == "down" for _, state_ in states)
            # A fleet that is up is reused whole; a fleet that is down comes up with 3 nodes.
            size = FLEET_SIZE if was_down else max(FLEET_SIZE, len(states))
            try:
                result = fleet_script.up(size, state=state, say=_say)
            except fleet_script.FleetError as error:
                pytest.fail(f"testfleet up {size} failed: {error}", pytrace=False)
        if was_down and result.started:  # booted from nothing: ours to power off
            (state / STARTED_BY_TESTS).touch()
        fleet = result.fleet
        yield LiveFleet(
            state_dir=state,
            inventory=fleet.inventory,
            inventory_dir=fleet.inventory_dir,
            known_hosts=fleet.known_hosts,
            key=fleet.client_key,
            nodes=fleet.nodes,
        )
    finally:
        fcntl.flock(users, fcntl.LOCK_UN)
        marker = state / STARTED_BY_TESTS
        if marker.exists() and not os.environ.get(KEEP_ENV):
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another session still uses it; the last one powers it off
            else:
                if marker.exists():
                    fleet_script.down(state=state, say=_say)
                    marker.unlink(missing_ok=True)
        users.close()


@pytest.fixture
def fleet_exclusive(testfleet: LiveFleet) -> Iterator[LiveFleet]:
    """The fleet, for a test that stops or starts nodes: alone, and all nodes up after."""
    with _lock(testfleet.state_dir / "nodes.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield testfleet
        finally:
            for node in testfleet.nodes:
                if fleet_script.node_state(testfleet.state_dir, node.name) in ("down", "orphaned"):
                    fleet_script.start(node.name, state=testfleet.state_dir, say=_say)


@pytest.fixture(autouse=True)
def _fleet_shared(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test using the fleet without `fleet_exclusive` sees every node as it was booted."""
    if "testfleet" not in request.fixturenames or "fleet_exclusive" in request.fixturenames:
        yield
        return
    fleet: LiveFleet = request.getfixturevalue("testfleet")
    with _lock(fleet.state_dir / "nodes.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield
