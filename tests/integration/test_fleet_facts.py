"""Facts from the real test fleet: real systemd, real sshd, fake hardware from each spec."""

from __future__ import annotations

import re
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.cluster.snapshot import Reachability
from cli.facts.gpuclass import gpu_class
from cli.inventory.load import load_inventory
from cli.ops.context import KNOWN_HOSTS_NAME, AppContext
from cli.ops.fleet import Fleet, gather_fleet
from tests.ctl import ctl
from tests.integration.conftest import LiveFleet

pytestmark = pytest.mark.fleet


def gather(
    inventory_dir: Path, state: Path, now: datetime | None = None, timeout: float = 5
) -> Fleet:
    options = AppContext(state_dir=state, connect_timeout=timeout, command_timeout=20)
    inventory = load_inventory(inventory_dir)
    return gather_fleet(inventory, inventory_dir, options, now=now)


def copy_inventory(fleet: LiveFleet, tmp_path: Path) -> Path:
    target = tmp_path / "inventory"
    shutil.copytree(fleet.inventory_dir, target)
    return target


def test_gathered_facts_match_every_nodes_spec(testfleet: LiveFleet, tmp_path: Path) -> None:
    result = gather(testfleet.inventory_dir, tmp_path / "state")
    assert result.unreached == {}
    for node in testfleet.nodes:
        spec, facts = node.spec, result.facts[node.name]
        assert facts.memory is not None
        assert abs(facts.memory.total_mib - spec.memory_gib * 1024) <= 1, node.name
        if spec.gpus is None:
            assert facts.gpus == (), node.name
            continue
        assert facts.gpus is not None and len(facts.gpus) == spec.gpus.count, node.name
        assert {gpu_class(g.name, {}) for g in facts.gpus} == {gpu_class(spec.gpus.model, {})}
        for gpu in facts.gpus:
            expected = spec.gpus.uncorrected_ecc.get(gpu.index, 0) if spec.gpus.ecc else None
            assert gpu.ecc_uncorrected == expected, (node.name, gpu.index)
        pids = sorted(p.pid for p in facts.gpu_processes or ())
        assert pids == sorted(p.pid for p in spec.gpus.processes), node.name
        if spec.gpus.nvlink == "all":
            assert facts.nvlink_domains == (tuple(range(spec.gpus.count)),)
        elif spec.gpus.nvlink == "none":
            assert facts.nvlink_domains == tuple((i,) for i in range(spec.gpus.count))
        active = sorted(h.name for h in spec.hcas if h.state == "ACTIVE")
        assert sorted(p.hca for p in facts.hcas or () if p.active) == active, node.name


def test_ctl_nodes_shows_the_live_fleet_with_its_memory(
    testfleet: LiveFleet, tmp_path: Path
) -> None:
    result = ctl(
        "nodes", "--inventory", str(testfleet.inventory_dir),
        env={"XDG_STATE_HOME": str(tmp_path), "COLUMNS": "120"}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:] if line.strip()}
    for node in testfleet.nodes:
        row = rows[node.name]
        assert re.search(r"\bReady\b", row), row
        memory = f"{node.spec.memory_gib:.0f}" if node.spec.memory_gib >= 10 else None
        if memory is not None:
            assert f" {memory} " in row, row
        if node.spec.gpus is not None:
            assert f"/{node.spec.gpus.count} " in row, row


def test_a_changed_host_key_is_refused_and_the_others_are_gathered(
    testfleet: LiveFleet, tmp_path: Path
) -> None:
    inventory = copy_inventory(testfleet, tmp_path)
    known = inventory / KNOWN_HOSTS_NAME
    lines = known.read_text().splitlines()
    first, second = testfleet.nodes[0], testfleet.nodes[1]
    key_of = {line.split()[0]: line.split(None, 1)[1] for line in lines if line.strip()}
    # The first node's entry now holds the second node's key: as if it had been replaced.
    swapped = [
        f"{first.address} {key_of[second.address]}" if line.split()[0] == first.address else line
        for line in lines
    ]
    known.write_text("\n".join(swapped) + "\n")
    result = gather(inventory, tmp_path / "state")
    assert set(result.unreached) == {first.name}
    reason = result.unreached[first.name]
    assert reason.startswith("host key mismatch: known_hosts") and reason.count("SHA256:") == 2
    assert known.read_text() == "\n".join(swapped) + "\n"  # never rewritten


def test_a_stopped_node_is_unreachable_within_its_timeout_then_lost_much_later(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet, state = fleet_exclusive, tmp_path / "state"
    stopped = fleet.nodes[-1]
    now = datetime.now(UTC)
    before = gather(fleet.inventory_dir, state, now)
    assert before.unreached == {}
    fleet.stop(stopped.name)
    started = time.monotonic()
    blip = gather(fleet.inventory_dir, state, now + timedelta(minutes=2), timeout=3)
    assert time.monotonic() - started < 3 + 20  # its timeouts, not more
    assert set(blip.unreached) == {stopped.name}
    assert blip.unreached[stopped.name] == "connection refused on port 22"
    view = blip.snapshot.node(stopped.name)
    assert view.reachability is Reachability.UNREACHABLE
    assert blip.facts[stopped.name].memory == before.facts[stopped.name].memory
    assert all(blip.snapshot.node(n.name).reachability is Reachability.READY
               for n in fleet.nodes if n is not stopped)  # fmt: skip
    later = gather(fleet.inventory_dir, state, now + timedelta(hours=2), timeout=3)
    assert later.snapshot.node(stopped.name).reachability is Reachability.LOST


def test_a_cordon_survives_regathering(testfleet: LiveFleet, tmp_path: Path) -> None:
    inventory = copy_inventory(testfleet, tmp_path)
    node = testfleet.nodes[0].name
    host_vars = inventory / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / f"{node}.yml").write_text('cordoned: "fan replacement"\n')
    before = {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    for _ in range(2):
        result = gather(inventory, tmp_path / "state")
        assert result.snapshot.node(node).cordon == "fan replacement"
    assert {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()} == before
