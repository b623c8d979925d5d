"""Every command's exit codes are the ones its help promises, and no others.

Issue 13, finding 5: `reconcile` exited 0 while a model waited out a backoff, though its
help says 1 when something could not be done; `ctl nodes` exited 0 with an Unreachable
node, though its help says 1. Here each command's help is read for its "exit code"
sentence, and each code it names must come out of a scenario run as an operator runs
`ctl`; every scenario's code must be one the help names (0, success, always may be).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer

from cli.app import app
from cli.ops.keys import keys_file, save_keys
from cli.routes.keys import new_key
from tests.ctl import ROOT, ctl
from tests.sshd import Sshd, free_port, missing_reason, running_sshd

EXAMPLES = ROOT / "examples"
EXAMPLE_FLEET = ("--inventory", str(EXAMPLES / "inventory"), "--facts", str(EXAMPLES / "facts"))
EXAMPLE_CATALOG = ("--catalog", str(EXAMPLES / "catalog.yaml"))

CHAT = """\
models:
  llama-3.1-8b:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    replicas: {min: 1, max: 2}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
"""
# Wants nothing: a reachable node with no shards already runs all of it.
NOTHING = """\
models:
  tiny:
    source: hf://org/tiny
    replicas: {min: 0, max: 1}
    profiles:
      - {name: cpu, priority: 1, engine: llama.cpp}
"""


def commands() -> dict[str, Any]:
    """Every command `ctl --help` lists, by its words: "place", "catalog check"…"""
    found: dict[str, Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:  # Typer's own click's classes
        if hasattr(command, "list_commands"):
            context = typer.Context(command, info_name="ctl")
            for name in command.list_commands(context):
                child = command.get_command(context, name)
                if child is not None and not child.hidden:
                    walk(child, (*path, name))
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), ())
    return found


def documented_codes(help_text: str) -> set[int]:
    """The codes the help's sentences about exit codes name: `Exit code 0 when …, 1 when
    …, 2 on bad input.` → {0, 1, 2}; `… left running (exit code 1) unless --force.` → {1}."""
    text = " ".join(help_text.split())
    sentences = [s for s in re.split(r"(?<=\.)\s+", text) if "exit code" in s.lower()]
    return {int(code) for s in sentences for code in re.findall(r"(?<![\w.-])([0-2])(?![\w.])", s)}


def test_the_help_parser_reads_each_form_the_helps_use() -> None:
    assert documented_codes(
        "Place.\n\n    With --dry-run nothing changes. Exit code\n    0 when placed, 1 when"
        " not, 2 on bad input.\n"
    ) == {0, 1, 2}
    assert documented_codes("Drain. A replica is left running (exit code 1) unless --force.") == {1}
    assert documented_codes("An existing CA is never overwritten: exit code 2, and so on.") == {2}
    assert documented_codes("Start 2 replicas. Nothing about codes here.") == set()
    assert documented_codes("Exit code 2 on bad input; waits 30 s, 1.5 times.") == {2}


# --- the fleets the scenarios run on ------------------------------------------------------


@dataclass(frozen=True)
class World:
    tmp: Path
    sshd: Sshd | None

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return str(path)

    def hgx2(self, state: str = "running") -> tuple[str, ...]:
        """hgx-2 of the example fleet alone, its llama-3.1-8b-1 shard in `state`."""
        name = f"hgx2-{state}"
        inventory = self.tmp / name / "inventory"
        inventory.mkdir(parents=True)
        (inventory / "hosts.yml").write_text("all:\n  hosts:\n    hgx-2:\n")
        facts = self.tmp / name / "facts"
        facts.mkdir()
        document = json.loads((EXAMPLES / "facts" / "hgx-2.json").read_text())
        document["shards"][0]["state"] = state
        (facts / "hgx-2.json").write_text(json.dumps(document))
        return ("--inventory", str(inventory), "--facts", str(facts))

    def live(self, reachable: bool) -> str:
        """An inventory of one node on loopback: this machine's sshd, or a closed port."""
        inventory = self.tmp / ("reachable" if reachable else "closed") / "inventory"
        inventory.mkdir(parents=True, exist_ok=True)
        if reachable:
            if self.sshd is None:
                pytest.skip(f"no sshd to reach: {missing_reason()}")
            port, key = self.sshd.port, self.sshd.client_key
            (inventory / ".known_hosts").write_text(self.sshd.known_hosts_line())
        else:
            port, key = free_port(), self.tmp / "no-key"
        (inventory / "hosts.yml").write_text(
            "all:\n  hosts:\n    local:\n      ansible_host: 127.0.0.1\n"
            f"      ansible_port: {port}\n      ansible_user: root\n"
            f"      ansible_ssh_private_key_file: {key}\n"
        )
        return str(inventory)

    def inventory_copy(self) -> str:
        copy = self.tmp / "editable"
        shutil.copytree(EXAMPLES / "inventory", copy)
        return str(copy)

    def with_key(self, kept: str | None = None) -> str:
        """A copy of the example inventory with one key made for it, 0000000a of team
        search, in the scenarios' state directory; or with `kept` as its keys file."""
        inventory = self.inventory_copy()
        path = keys_file(self.tmp / "s" / "modelfleet", Path(inventory))
        _, key = new_key("0000000a", "s" * 43, "search", None, {}, datetime.now(UTC), None)
        save_keys(path, (key,))
        if kept is not None:
            path.write_text(kept)
        return inventory

    def held_inventory(self) -> tuple[str, ...]:
        """A copy of the example inventory whose fleet lock another process holds, and the
        setting that makes ctl wait half a second for it."""
        inventory = self.inventory_copy()
        root = self.tmp / "s" / "modelfleet"  # the scenarios' XDG_STATE_HOME, below
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, inventory, str(root)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        HOLDERS.append(holder)
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        return ("--lock-timeout", "0.5")


Args = Callable[[World], tuple[str, ...]]

HOLD = """
import sys, time
from pathlib import Path
from cli.edges.lock import exclusive, fleet_lock_path
path = fleet_lock_path(Path(sys.argv[1]), Path(sys.argv[2]))
with exclusive(path, timeout=5, command="ctl reconcile"):
    print("held", flush=True)
    time.sleep(120)
"""
HOLDERS: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_holder_outlives_its_test() -> Iterator[None]:
    yield
    while HOLDERS:
        holder = HOLDERS.pop()
        holder.kill()
        holder.wait(timeout=10)


# (command, code) → the ctl arguments that give it: each a reason the help names.
SCENARIOS: dict[tuple[str, int], Args] = {
    ("place", 0): lambda w: ("place", "coder", "--dry-run", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("place", 1): lambda w: ("place", "--all", "--dry-run", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("place", 2): lambda w: ("place", "nosuch", "--dry-run", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("nodes", 0): lambda w: ("nodes", *w.hgx2()),
    # l40s-2 is Unreachable in the example snapshot.
    ("nodes", 1): lambda w: ("nodes", *EXAMPLE_FLEET),
    ("nodes", 2): lambda w: ("nodes", "--inventory", str(w.tmp / "nowhere")),
    ("top", 0): lambda w: ("top", "--once", *EXAMPLE_CATALOG, *w.hgx2()),
    ("top", 1): lambda w: ("top", "--once", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("top", 2): lambda w: (
        "top",
        "--once",
        *EXAMPLE_CATALOG,
        "--inventory",
        str(w.tmp / "nowhere"),
    ),
    ("facts", 0): lambda w: ("--timeout", "5", "facts", "--inventory", w.live(True)),
    ("facts", 1): lambda w: ("--timeout", "5", "facts", "--inventory", w.live(False)),
    ("facts", 2): lambda w: ("facts", "--inventory", str(w.tmp / "nowhere")),
    ("reconcile", 0): lambda w: (
        "reconcile",
        "--dry-run",
        "--catalog",
        w.file("chat.yaml", CHAT),
        *w.hgx2(),
    ),
    # Its only shard failed: stopped, and the model waits out its backoff.
    ("reconcile", 1): lambda w: (
        "reconcile",
        "--dry-run",
        "--catalog",
        w.file("chat.yaml", CHAT),
        *w.hgx2("failed"),
    ),
    ("reconcile", 2): lambda w: ("reconcile", "--dry-run", "--catalog", str(w.tmp / "no.yaml")),
    ("drain", 0): lambda w: (
        "--timeout",
        "5",
        "drain",
        "local",
        "--dry-run",
        "--catalog",
        w.file("nothing.yaml", NOTHING),
        "--inventory",
        w.live(True),
    ),
    ("drain", 1): lambda w: (
        "--timeout",
        "5",
        "drain",
        "local",
        "--dry-run",
        "--catalog",
        w.file("nothing.yaml", NOTHING),
        "--inventory",
        w.live(False),
    ),
    ("drain", 2): lambda w: ("drain", "nosuch", "--dry-run", "--inventory", w.inventory_copy()),
    ("targets", 0): lambda w: ("targets", *EXAMPLE_CATALOG, *w.hgx2()),
    ("targets", 1): lambda w: ("targets", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("targets", 2): lambda w: ("targets", *EXAMPLE_CATALOG, "--inventory", str(w.tmp / "nowhere")),
    ("routes", 0): lambda w: ("routes", "--catalog", w.file("chat.yaml", CHAT), *w.hgx2()),
    ("routes", 1): lambda w: ("routes", *EXAMPLE_CATALOG, *EXAMPLE_FLEET),
    ("routes", 2): lambda w: ("routes", "--catalog", str(w.tmp / "no.yaml"), *EXAMPLE_FLEET),
    ("cordon", 0): lambda w: ("cordon", "hgx-1", "-r", "fan", "--inventory", w.inventory_copy()),
    ("cordon", 2): lambda w: ("cordon", "nosuch", "-r", "fan", "--inventory", w.inventory_copy()),
    # Another ctl holds the fleet's lock past --lock-timeout: nothing written.
    ("cordon", 1): lambda w: (
        *w.held_inventory(),
        "cordon",
        "hgx-1",
        "-r",
        "fan",
        "--inventory",
        str(w.tmp / "editable"),
    ),
    ("uncordon", 0): lambda w: ("uncordon", "hgx-5", "--inventory", w.inventory_copy()),
    ("uncordon", 1): lambda w: (
        *w.held_inventory(),
        "uncordon",
        "hgx-5",
        "--inventory",
        str(w.tmp / "editable"),
    ),
    ("uncordon", 2): lambda w: ("uncordon", "nosuch", "--inventory", w.inventory_copy()),
    ("catalog check", 0): lambda w: ("catalog", "check", *EXAMPLE_CATALOG),
    ("catalog check", 2): lambda w: (
        "catalog",
        "check",
        "--catalog",
        w.file("bad.yaml", "models: {x: {source: 1}}\n"),
    ),
    ("keys create", 0): lambda w: (
        "keys",
        "create",
        "ops",
        "--all",
        *EXAMPLE_CATALOG,
        "--inventory",
        w.inventory_copy(),
    ),
    ("keys create", 1): lambda w: (
        *w.held_inventory(),
        "keys",
        "create",
        "ops",
        "--all",
        "--inventory",
        str(w.tmp / "editable"),
    ),
    ("keys create", 2): lambda w: (
        "keys",
        "create",
        "ops",
        "--models",
        "nosuch",
        *EXAMPLE_CATALOG,
        "--inventory",
        w.inventory_copy(),
    ),
    ("keys list", 0): lambda w: ("keys", "list", "--inventory", w.with_key()),
    ("keys list", 2): lambda w: ("keys", "list", "--inventory", w.with_key(kept="{}")),
    ("keys revoke", 0): lambda w: ("keys", "revoke", "0000000a", "--inventory", w.with_key()),
    ("keys revoke", 1): lambda w: (
        *w.held_inventory(),
        "keys",
        "revoke",
        "0000000a",
        "--inventory",
        str(w.tmp / "editable"),
    ),
    ("keys revoke", 2): lambda w: ("keys", "revoke", "0000000b", "--inventory", w.with_key()),
    ("keys rotate", 0): lambda w: ("keys", "rotate", "search", "--inventory", w.with_key()),
    ("keys rotate", 1): lambda w: (
        *w.held_inventory(),
        "keys",
        "rotate",
        "search",
        "--inventory",
        str(w.tmp / "editable"),
    ),
    ("keys rotate", 2): lambda w: ("keys", "rotate", "ops", "--inventory", w.with_key()),
    ("ca init", 0): lambda w: ("ca", "init", "--ca-dir", str(w.tmp / "ca")),
    ("ca init", 2): lambda w: ("ca", "init", "--ca-dir", str(w.tmp / "ca")),  # after the 0
}
# Codes held by the suite elsewhere, each by a named test that asserts it: these need a
# fake Proxmox API or an onboarded node, which their own files set up.
ELSEWHERE: dict[tuple[str, int], str] = {
    (
        "provision-node",
        0,
    ): "test_provision_cli.py::test_a_node_with_gpus_from_nothing_to_its_address",
    ("provision-node", 1): "test_provision_cli.py::test_a_failed_clone_shows_the_task_log",
    ("provision-node", 2): "test_provision_cli.py::test_bad_input_is_exit_2_and_contacts_nothing",
    ("onboard-node", 1): "test_onboard.py::test_an_unreachable_node_exits_1_and_changes_nothing",
    ("onboard-node", 2): "test_onboard.py::test_no_ca_is_bad_input",
    (
        "offboard-node",
        0,
    ): "test_offboard.py::test_offboarding_removes_exactly_the_nodes_lines_revokes_and_forgets",
    (
        "offboard-node",
        1,
    ): "test_offboard.py::test_a_replica_nothing_else_can_take_is_refused_naming_it",
    ("offboard-node", 2): "test_offboard.py::test_an_unknown_node_is_bad_input",
    (
        "deprovision-node",
        0,
    ): "test_deprovision.py::test_the_vm_provision_node_made_is_stopped_destroyed_and_purged",
    (
        "deprovision-node",
        1,
    ): "test_deprovision.py::test_a_vm_named_so_by_hand_is_left_alone_with_exit_1",
    ("deprovision-node", 2): "test_deprovision.py::test_no_token_is_bad_input_and_contacts_nothing",
}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd | None]:
    if missing_reason() is not None:
        yield None
        return
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


HELPS = {name: command.help or "" for name, command in commands().items()}
# Commands whose every documented code is run here (the others' are held ELSEWHERE).
HELD_HERE = (
    "place", "nodes", "top", "targets", "facts", "reconcile", "drain", "routes", "cordon",
    "uncordon", "catalog check", "ca init", "keys create", "keys list", "keys revoke",
    "keys rotate",
)  # fmt: skip


def test_every_command_is_in_the_table_and_its_help_has_an_exit_code_sentence() -> None:
    tabled = {name for name, _ in SCENARIOS} | {name for name, _ in ELSEWHERE}
    assert tabled == set(HELPS)
    for name, text in HELPS.items():
        assert documented_codes(text), f"ctl {name}: its help names no exit code"


@pytest.mark.parametrize("name", HELD_HERE)
def test_each_code_the_help_names_has_a_scenario_and_each_scenario_is_named(name: str) -> None:
    documented = documented_codes(HELPS[name])
    scenarios = {code for command, code in SCENARIOS if command == name}
    assert documented <= scenarios, f"ctl {name}: no scenario for {documented - scenarios}"
    assert scenarios <= documented | {0}, f"ctl {name}: its help does not name {scenarios}"


def test_the_codes_held_elsewhere_are_asserted_by_the_named_tests() -> None:
    for name in {name for name, _ in ELSEWHERE}:
        held = {code for command, code in ELSEWHERE if command == name}
        assert documented_codes(HELPS[name]) <= held, name
    for (name, code), where in ELSEWHERE.items():
        assert code in documented_codes(HELPS[name]), (name, code)
        file, _, test = where.partition("::")
        source = (ROOT / "tests" / "integration" / file).read_text()
        body = source.split(f"def {test}(", 1)[1].split("\ndef ", 1)[0]
        assert f"returncode == {code}" in body, where


@pytest.mark.parametrize(
    ("name", "code"), sorted(SCENARIOS), ids=[f"{n}-{c}" for n, c in sorted(SCENARIOS)]
)
def test_the_scenario_exits_with_its_code(
    name: str, code: int, tmp_path: Path, sshd: Sshd | None
) -> None:
    world = World(tmp_path, sshd)
    if (name, code) == ("ca init", 2):
        first = ctl(*SCENARIOS[(name, 0)](world), env={"XDG_STATE_HOME": str(tmp_path / "s")})
        assert first.returncode == 0, first.stderr
    result = ctl(*SCENARIOS[(name, code)](world), env={"XDG_STATE_HOME": str(tmp_path / "s")})
    assert result.returncode == code, result.stdout + result.stderr


# Each command that changes the nodes, with the fleet's lock held by another ctl: it says
# who holds it, waits --lock-timeout, exits 1, and has changed nothing (drain's cordon too).
LOCKED_COMMANDS: dict[str, Callable[[World, str], tuple[str, ...]]] = {
    "reconcile": lambda w, inventory: (
        "reconcile", "--catalog", w.file("chat.yaml", CHAT), "--inventory", inventory,
    ),
    "drain": lambda w, inventory: ("drain", "hgx-1", *EXAMPLE_CATALOG, "--inventory", inventory),
    "routes --apply": lambda w, inventory: (
        "routes", "--apply", *EXAMPLE_CATALOG, "--inventory", inventory,
    ),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(LOCKED_COMMANDS))
def test_a_changing_command_waits_for_the_fleets_lock_and_changes_nothing(
    command: str, tmp_path: Path
) -> None:
    world = World(tmp_path, None)
    wait = world.held_inventory()
    inventory = tmp_path / "editable"
    before = {path: path.read_bytes() for path in sorted(inventory.rglob("*")) if path.is_file()}
    result = ctl(
        *wait, *LOCKED_COMMANDS[command](world, str(inventory)),
        env={"XDG_STATE_HOME": str(tmp_path / "s")},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"waiting for PID \d+ \(ctl reconcile, since ", result.stderr)
    assert "for more than 0.5 s; nothing was changed" in result.stderr
    after = {path: path.read_bytes() for path in sorted(inventory.rglob("*")) if path.is_file()}
    assert after == before
