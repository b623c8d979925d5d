"""The fleet's state directory: where each file lives, the fleet `up` configured (Node,
Fleet, read from fleet.json), and the lock that lets one testfleet command run at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.testfleet.specs import (
    FleetError,
    NodeSpec,
    node_address,
    node_index,
    node_spec_from_dict,
    node_spec_to_dict,
    specs_yaml,
)

STATE_ENV: Final = "MODELFLEET_TESTFLEET_DIR"
DEFAULT_STATE_DIR: Final = Path("/var/tmp/modelfleet-testfleet")

Say = Callable[[str], None]


def print_say(message: str) -> None:
    print(message, flush=True)


@dataclass(frozen=True)
class Node:
    name: str
    spec: NodeSpec

    @property
    def index(self) -> int:
        return node_index(self.name)

    @property
    def address(self) -> str:
        return node_address(self.index)


@dataclass(frozen=True)
class Fleet:
    """A configured fleet: what `up` wrote, whether or not its nodes are running now."""

    state_dir: Path
    nodes: tuple[Node, ...]

    @property
    def inventory_dir(self) -> Path:
        return self.state_dir / "inventory"

    @property
    def inventory(self) -> Path:
        return self.inventory_dir / "hosts.yml"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def inventory_known_hosts(self) -> Path:
        """Where ctl looks by default: hidden, or Ansible and ctl would read it as an
        inventory source of the directory (cli/ops/context.py KNOWN_HOSTS_NAME)."""
        return self.inventory_dir / ".known_hosts"

    @property
    def client_key(self) -> Path:
        return self.state_dir / "client" / "id_ed25519"

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise FleetError(f"{name} is not in the fleet ({', '.join(self.names())})")

    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def ssh_command(self, node: str, *command: str) -> list[str]:
        """An ssh command line to a node that trusts nothing but the fleet's known_hosts."""
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            f"root@{self.node(node).address}",
            *command,
        ]


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(STATE_ENV) or DEFAULT_STATE_DIR).absolute()


def rootfs_dir(state: Path) -> Path:
    return state / "rootfs"


def rootfs_marker(state: Path) -> Path:
    return state / "rootfs.complete"


def node_dir(state: Path, name: str) -> Path:
    return state / "nodes" / name


def load_fleet(state: Path | None = None) -> Fleet | None:
    """The fleet `up` configured last, or None when there is none."""
    state = state or state_dir()
    path = state / "fleet.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Fleet(
        state_dir=state,
        nodes=tuple(
            Node(name, node_spec_from_dict(spec, f"{path}: {name}"))
            for name, spec in data["nodes"].items()
        ),
    )


def save_fleet(fleet: Fleet) -> None:
    data = {"nodes": {node.name: node_spec_to_dict(node.spec) for node in fleet.nodes}}
    write_text(fleet.state_dir / "fleet.json", json.dumps(data, indent=2) + "\n")
    write_text(
        fleet.state_dir / "specs.yml",
        "# The specs of the fleet's nodes (testfleet up --specs FILE reads this format).\n"
        + specs_yaml({node.name: node.spec for node in fleet.nodes}),
    )


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(mode)
    temporary.replace(path)


@contextlib.contextmanager
def locked(state: Path, say: Say) -> Iterator[None]:
    """One testfleet command at a time per state directory (parallel test workers wait)."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another testfleet command (lock {state / 'lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
