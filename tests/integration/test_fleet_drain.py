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


def test_draining_a_node_moves_its_replica_before_stopping_it(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    assert ctl("reconcile").returncode == 0
    ((replica, shards),) = ctl.shards().items()
    node = shards[0][0]
    result = ctl("drain", node, "--reason", "kernel upgrade")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{node} cordoned" in result.stdout
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
