"""ctl place MODEL on the real test fleet: one more replica, started now and kept by
reconcile while its model stays within replicas.max."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import CLEAN, chat, ctl_on_standins, rank0

pytestmark = pytest.mark.fleet

CATALOG = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [talk]
    replicas: {min: 1, max: 2}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
"""


def test_place_starts_one_more_replica_that_reconcile_keeps_within_max(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    try:
        first_pass = ctl("reconcile")
        assert first_pass.returncode == 0, first_pass.stdout + first_pass.stderr
        (first,) = ctl.shards()

        placed = ctl("place", "talk")
        assert placed.returncode == 0, placed.stdout + placed.stderr
        started = re.search(r"^started (chat-\d+)$", placed.stdout, re.MULTILINE)
        assert started, placed.stdout
        replicas = ctl.shards()
        assert sorted(replicas) == sorted([first, started.group(1)])
        ((_, record),) = replicas[started.group(1)]
        assert (record.origin, record.state) == ("manual", "running")
        address, rank_0 = rank0(fleet, replicas[started.group(1)])
        chat(address, rank_0.port or 0, "chat")

        kept = ctl("reconcile", "--dry-run")
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert kept.stdout == "nothing to do: the fleet runs what the catalog asks\n"

        refused = ctl("place", "chat")
        assert refused.returncode == 1
        assert refused.stderr == (
            f"error: chat runs 2 replica(s), its replicas.max is 2: raise it in {ctl.catalog}"
            " to run another; nothing was started\n"
        )
        assert sorted(ctl.shards()) == sorted(replicas)
    finally:
        for name in fleet.names[:3]:
            fleet.ssh(name, CLEAN)
