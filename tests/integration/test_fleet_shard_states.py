"""Shard states on the real test fleet: what systemd says of a shard's unit, in `ctl nodes`.

Issue 13, finding 3: after node-2 restarted, `ctl nodes` still listed its shards as if
they ran and counted their GPUs held. Here a shard's unit runs on a node, the node
restarts (our units are not enabled, so systemd says `inactive` of it after the boot),
and `ctl nodes` must list the shard as failed, its GPU no longer held. While the node is
down, `ctl nodes` exits 1 (issue 13, finding 5: its help says 1 for an unreachable node).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.ctl import ctl
from tests.integration.conftest import LiveFleet

pytestmark = pytest.mark.fleet

REPLICA = "statecheck-1"
UNIT = f"modelfleet-{REPLICA}-rank0.service"
RECORD = {
    "replica": REPLICA,
    "model": "statecheck",
    "profile": "p",
    "rank": 0,
    "gpus": [0],
    "port": 8990,
    "engine": "vllm",
    "unit": UNIT,
}
# A unit like ours (Restart=no, not enabled) whose process holds nothing but time.
UNIT_TEXT = "[Unit]\nDescription=ctl test shard\n[Service]\nExecStart=/bin/sleep infinity\n"
REMOVE = (
    f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT}"
    f" /var/lib/modelfleet/shards/{REPLICA}-rank0.json; systemctl daemon-reload;"
    f" systemctl reset-failed {UNIT} 2>/dev/null; true"
)


def nodes(fleet: LiveFleet, tmp_path: Path, *extra: str) -> tuple[int, str]:
    result = ctl(
        "--timeout", "3", "nodes", "--inventory", str(fleet.inventory_dir), *extra,
        env={"XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip
    return result.returncode, result.stdout


def test_a_shard_whose_unit_is_gone_after_a_restart_shows_failed_and_frees_its_gpu(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    node = next(n for n in fleet.nodes if n.spec.gpus is not None and n.spec.gpus.count >= 1)
    install = (
        f"{REMOVE}; set -e; install -d /var/lib/modelfleet/shards;"
        f" printf %s {shlex.quote(json.dumps(RECORD))} >"
        f" /var/lib/modelfleet/shards/{REPLICA}-rank0.json;"
        f" printf %s {shlex.quote(UNIT_TEXT)} > /etc/systemd/system/{UNIT};"
        f" systemctl daemon-reload; systemctl start {UNIT}; systemctl is-active {UNIT}"
    )
    started = fleet.ssh(node.name, f"sh -c {shlex.quote(install)}")
    assert started.stdout.strip() == "active", started.stderr
    try:
        code, before = nodes(fleet, tmp_path, "--json")
        assert code == 0, before
        (view,) = [n for n in json.loads(before)["nodes"] if n["name"] == node.name]
        assert [(s["replica"], s["state"]) for s in view["shards"]] == [(REPLICA, "running")]
        assert view["gpus"][0]["held_by"] == REPLICA

        fleet.stop(node.name)
        code, down = nodes(fleet, tmp_path)
        assert code == 1, down  # Unreachable, as its help says
        assert any(line.split()[:2] == [node.name, "Unreachable"] for line in down.splitlines())
        fleet.start(node.name)

        code, table = nodes(fleet, tmp_path)
        assert code == 0, table
        (row,) = [line for line in table.splitlines() if line.startswith(f"{node.name} ")]
        assert f"{REPLICA}/0 failed" in row, table
        assert f"{node.name}: shard {REPLICA}/0 failed: GPU 0 no longer held" in table
        code, after = nodes(fleet, tmp_path, "--json")
        (view,) = [n for n in json.loads(after)["nodes"] if n["name"] == node.name]
        assert [(s["replica"], s["state"]) for s in view["shards"]] == [(REPLICA, "failed")]
        assert view["gpus"][0]["held_by"] is None
    finally:
        fleet.ssh(node.name, f"sh -c {shlex.quote(REMOVE)}")
