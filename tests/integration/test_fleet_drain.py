"""ctl drain on the real test fleet: the node is cordoned in the inventory, its replica is
placed elsewhere and serves, and only then is the old one drained."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.inventory.load import load_inventory
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import CLEAN, chat, ctl_on_standins, rank0

pytestmark = pytest.mark.fleet

CATALOG = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
"""


def plan_of(output: str) -> list[str]:
    """The plan a drain printed: its lines after the cordon's, before what the pass did."""
    lines = output.splitlines()
    first = next(
        i
        for i, line in enumerate(lines)
        if re.match(r"(stop|start|drain|wait|leave|refuse) ", line)
    )
    done = re.compile(r"(started|FAILED|NOT (STOPPED|DRAINED)|ROUTERS) ")
    last = next((i for i, line in enumerate(lines) if done.match(line)), len(lines))
    return lines[first:last]


def test_draining_a_node_moves_its_replica_before_stopping_it(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    first = ctl("reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    ((replica, shards),) = ctl.shards().items()
    node = shards[0][0]
    dry = ctl("drain", node, "--reason", "kernel upgrade", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    result = ctl("drain", node, "--reason", "kernel upgrade")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{node} cordoned" in result.stdout
    # The dry run showed the plan the drain carried out, not one on the drained node.
    assert plan_of(result.stdout) == dry.stdout.splitlines(), (dry.stdout, result.stdout)
    moved = re.search(r"start +(chat-\d+) +h100x1 +(node-\d+)", result.stdout)
    assert moved and moved.group(2) != node, result.stdout
    assert re.search(rf"drain +{replica} +node drained", result.stdout), result.stdout
    running = ctl.shards()
    assert list(running) == [moved.group(1)]
    address, record = rank0(fleet, running[moved.group(1)])
    chat(address, record.port or 0, "chat")
    assert load_inventory(ctl.inventory).host(node).vars.cordoned == "kernel upgrade"
    for name in fleet.names[:3]:
        fleet.ssh(name, CLEAN)


EMBED_ONLY_ON_NODE_3 = """\
models:
  embed:
    source: hf://BAAI/bge-m3
    profiles:
      - {name: l40s, priority: 50, engine: vllm, gpu_class: L40S, gpus_per_node: 1,
         embedding: true}
"""


def test_a_drain_with_no_room_leaves_the_replica_serving_unless_forced(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    """node-3 is the only L40S node: embed-1 has nowhere to go. The dry run shows the plan the
    drain carries out, and the drain leaves embed-1 serving (exit 1); --force drains it."""
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, EMBED_ONLY_ON_NODE_3)
    first = ctl("reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    ((replica, shards),) = ctl.shards().items()
    assert (replica, shards[0][0]) == ("embed-1", "node-3")
    dry = ctl("drain", "node-3", "--reason", "kernel upgrade", "--dry-run")
    assert dry.returncode == 1, dry.stdout + dry.stderr
    assert load_inventory(ctl.inventory).host("node-3").vars.cordoned is None  # a dry run
    result = ctl("drain", "node-3", "--reason", "kernel upgrade")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0].startswith("node-3 cordoned"), result.stdout
    assert plan_of(result.stdout) == dry.stdout.splitlines(), (dry.stdout, result.stdout)
    assert " ".join(dry.stdout.split()).startswith(
        "leave embed-1 on node-3, being drained: no replacement could be placed, so it serves on"
        " (drain --force stops it) refuse embed-2 NOT PLACED — blocked"
    ), dry.stdout
    assert "1 cordoned (node-3: kernel upgrade)" in " ".join(dry.stdout.split())
    assert not re.search(r"^(drain|stop) ", result.stdout, re.MULTILINE), result.stdout
    running = ctl.shards()
    assert list(running) == ["embed-1"]
    address, record = rank0(fleet, running["embed-1"])
    chat(address, record.port or 0, "embed")
    forced = ctl("drain", "node-3", "--force")
    assert re.search(
        r"^drain +embed-1 +node drained \(--force: no replacement could be placed\) \[node-3\]",
        forced.stdout, re.MULTILINE,
    ), forced.stdout  # fmt: skip
    assert forced.returncode == 1, forced.stdout + forced.stderr  # embed has no replica now
    assert ctl.shards() == {}
    assert load_inventory(ctl.inventory).host("node-3").vars.cordoned == "kernel upgrade"
    for name in fleet.names[:3]:
        fleet.ssh(name, CLEAN)
