"""Weights staged on the node before a shard starts, on the real test fleet, from a fake hub
on loopback (tests/fakes/hub.py, the download endpoints huggingface_hub speaks): the
staging playbook downloads them into the node's model store, the engine starts on the
local copy, offline, and a replica moved to a node that holds them downloads nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.facts.model import store_directory
from tests.ctl import ctl as run_ctl
from tests.fakes.hub import LFS_THRESHOLD, Hub, run_hub
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import CLEAN, Ctl, ctl_on_standins

pytestmark = pytest.mark.fleet

SOURCE = "hf://org/chat"
GATED = "hf://org/gated"
TOKEN = "hf_" + "Fleet5ecret" * 3 + "x"
STORE = "/var/lib/modelfleet/models"
CATALOG = f"""\
models:
  chat:
    source: {SOURCE}
    replicas: {{min: 1}}
    profiles:
      - {{name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}}
"""
GATED_MODEL = f"""\
  gated:
    source: {GATED}
    token: {{env: HF_TOKEN}}
    replicas: {{min: 1}}
    profiles:
      - {{name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}}
"""


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    repo = tmp_path / "hub" / "models" / "org" / "chat"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "llama"}')
    (repo / "model.safetensors").write_bytes(os.urandom(LFS_THRESHOLD + 4321))
    gated = tmp_path / "hub" / "models" / "org" / "gated"
    gated.mkdir(parents=True)
    (gated / "config.json").write_text('{"model_type": "llama"}')
    # about 4 s for the 10 MB file: long enough for ctl to show the download's progress
    with run_hub(tmp_path / "hub", {"org/gated": TOKEN}, bytes_per_second=2.5e6) as served:
        yield served


def staging_on(ctl: Ctl, hub: Hub) -> None:
    """On the GPU nodes (the fleet's group_vars/all.yml turns staging off everywhere)."""
    (ctl.inventory / "group_vars" / "gpu.yml").write_text(
        f"modelfleet_stage_weights: true\nmodelfleet_hf_endpoint: {hub.endpoint}\n"
    )


def chat_node(ctl: Ctl) -> str:
    ((node, _),) = next(s for r, s in ctl.shards().items() if r.startswith("chat"))
    return node


def repo_bytes(hub: Hub) -> int:
    base = hub.root / "models" / "org" / "chat"
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


def test_weights_are_staged_before_the_start_and_a_move_to_a_holder_downloads_nothing(
    fleet_exclusive: LiveFleet, tmp_path: Path, hub: Hub
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    staging_on(ctl, hub)
    directory = f"{STORE}/{store_directory(SOURCE)}"
    nodes = [node.name for node in fleet.nodes[:3]]
    try:
        # 1. The first pass stages the weights, then starts vLLM on the local copy, offline.
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^staging weights: hf://org/chat on node-\d$", result.stderr, re.M)
        assert "stage_weights.yml: exit 0" in result.stderr
        # its progress, read from the node while the playbook downloaded
        bars = re.findall(
            r"^  staging hf://org/chat on node-\d: \[[#.]{20}\] (\d+)% ", result.stderr, re.M
        )
        assert bars and all(0 <= int(p) <= 100 for p in bars), result.stderr
        assert "started chat-1" in result.stdout
        first = chat_node(ctl)
        assert hub.bytes_sent == repo_bytes(hub)
        marker = fleet.ssh(first, "cat", f"{directory}/.modelfleet-complete")
        assert json.loads(marker.stdout)["source"] == SOURCE, marker.stderr
        assert json.loads(marker.stdout)["bytes"] == repo_bytes(hub)
        unit = fleet.ssh(first, "cat", "/etc/systemd/system/modelfleet-chat-1-rank0.service")
        assert f'"vllm" "serve" "{directory}"' in unit.stdout, unit.stdout
        env = fleet.ssh(first, "cat", "/etc/modelfleet/shards/chat-1-rank0.env")
        assert 'HF_HUB_OFFLINE="1"' in env.stdout.splitlines()

        # 2. Drained off its node, the replica's weights go to the new node first.
        moved = ctl("drain", first)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        second = chat_node(ctl)
        assert second != first
        assert hub.bytes_sent == 2 * repo_bytes(hub)

        # 3. Back to the first node, which holds them: nothing is downloaded.
        uncordon = run_ctl("uncordon", first, "--inventory", str(ctl.inventory))
        assert uncordon.returncode == 0, uncordon.stderr
        back = ctl("drain", second)
        assert back.returncode == 0, back.stdout + back.stderr
        assert chat_node(ctl) == first
        assert hub.bytes_sent == 2 * repo_bytes(hub)
        resolved = [p for p in hub.requests if p.startswith("/org/chat/resolve/")]
        assert sum(hub.requests[p] for p in resolved) == 2 * 2  # two files, twice
        assert hub.tokens_seen == []  # the catalog gave chat no token: none was sent

        # 4. A gated model's token, named by reference, is sent to the hub and nowhere else.
        ctl.catalog.write_text(CATALOG + GATED_MODEL)
        environment = {**ctl.environment, "HF_TOKEN": TOKEN}
        gated = run_ctl(*ctl.arguments("reconcile"), env=environment, timeout=600)
        assert gated.returncode == 0, gated.stdout + gated.stderr
        assert "started gated-1" in gated.stdout
        assert set(hub.tokens_seen) == {f"Bearer {TOKEN}"}
        leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in
                 p.read_bytes() and hub.root not in p.parents]  # fmt: skip
        assert leaks == [], leaks
        assert TOKEN not in gated.stdout + gated.stderr
        for node in nodes:
            found = fleet.ssh(
                node, "sh", "-c", shlex.quote(f"grep -rl {TOKEN} /etc /var/lib/modelfleet "
                "/root /tmp /var/tmp 2>/dev/null; journalctl --no-pager | grep -c " + TOKEN),
                timeout=120,
            )  # fmt: skip
            assert found.stdout.split() == ["0"], (node, found.stdout)
    finally:
        for node in nodes:
            script = CLEAN + f"rm -rf {shlex.quote(STORE)}"
            fleet.ssh(node, "sh", "-c", shlex.quote(script), timeout=120)
