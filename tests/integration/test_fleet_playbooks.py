"""The shard playbooks on real nodes: a second run with the same shards changes nothing."""

from __future__ import annotations

import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli.catalog.load import parse_catalog
from cli.facts.model import ShardRecord
from cli.ops.context import KNOWN_HOSTS_NAME
from cli.ops.executor import AnsibleExecutor
from cli.reconcile.planner import RunningShard, Stop
from cli.shards.engines import Rank
from cli.shards.units import shard_files
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import install_standin

pytestmark = pytest.mark.fleet

CATALOG = parse_catalog(
    """\
models:
  tiny:
    source: file:///srv/models/tiny.gguf
    profiles:
      - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 1}
""",
    "catalog.yaml",
)


def test_starting_and_stopping_twice_changes_nothing_the_second_time(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    install_standin(fleet)
    node = fleet.nodes[2]
    profile = CATALOG.models["tiny"].profiles[0]
    place = Rank(0, 1, 8500, node.address, listen=node.address)
    files = shard_files(node.name, node.address, "tiny-9", profile, place, datetime.now(UTC))
    executor = AnsibleExecutor(
        fleet.inventory_dir, fleet.inventory_dir / KNOWN_HOSTS_NAME, tmp_path / "logs"
    )
    assert executor.start([files]) == {}
    assert executor.start([files]) == {}
    first, second = executor.runs
    assert first.changed > 0
    assert second.changed == 0, second.log.read_text()
    record = ShardRecord.model_validate_json(files.record_text)
    stop = Stop("tiny-9", "tiny", (RunningShard(node.name, record),), "test", drain=True)
    assert executor.stop([stop]) == {}
    assert executor.stop([stop]) == {}
    _, _, stopped, again = executor.runs
    assert stopped.changed > 0 and again.changed == 0, again.log.read_text()
    left = subprocess.run(
        fleet.ssh_command(node.name, shlex.join(["ls", "/var/lib/modelfleet/shards"])),
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert "tiny-9" not in left.stdout
