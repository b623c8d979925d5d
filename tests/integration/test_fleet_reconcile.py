"""ctl reconcile on the real test fleet: real systemd units, real ansible-playbook, the
stand-in engines answering chat completions — and the three faults recovered from.

One test, in steps, because each step starts from the fleet the previous one left.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from cli.catalog.load import load_catalog
from cli.facts.model import ShardRecord
from cli.inventory.load import load_inventory
from cli.ops.context import AppContext
from cli.ops.fleet import gather_fleet
from tests.ctl import ctl
from tests.fakes.standin_install import INSTALL_ENGINES, INSTALL_FLAG_DATA, flag_data_tar
from tests.integration.conftest import LiveFleet
from tests.terminal import on_a_terminal
from tests.testfleet.engines import REMOVE_REPLICAS

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "tests" / "fakes" / "engine.py"
CATALOG = ROOT / "examples" / "testfleet" / "catalog.yaml"


CLEAN = REMOVE_REPLICAS + "; "


def install_standin(fleet: LiveFleet) -> None:
    """The stand-in engine under the three names ctl's command lines use, on nodes with
    nothing of ours left from an earlier run."""
    script = CLEAN + INSTALL_ENGINES
    for node in fleet.nodes[:3]:
        subprocess.run(
            fleet.ssh_command(node.name, f"sh -c {shlex.quote(script)}"),
            input=ENGINE.read_bytes(), check=True, timeout=60,
        )  # fmt: skip
        # The real parsers' options, which the stand-in checks every command line against.
        subprocess.run(
            fleet.ssh_command(node.name, f"sh -c {shlex.quote(INSTALL_FLAG_DATA)}"),
            input=flag_data_tar(), check=True, timeout=60,
        )  # fmt: skip


class Ctl:
    def __init__(self, fleet: LiveFleet, tmp_path: Path, catalog: str | None = None) -> None:
        self.inventory = tmp_path / "inventory"
        shutil.copytree(fleet.inventory_dir, self.inventory)
        # Only the first three nodes: the catalog is made for them.
        hosts = self.inventory / "hosts.yml"
        keep = {n.name for n in fleet.nodes[:3]}
        data = yaml.safe_load(hosts.read_text())
        data["all"]["hosts"] = {k: v for k, v in data["all"]["hosts"].items() if k in keep}
        for group in data["all"].get("children", {}).values():
            group["hosts"] = {k: v for k, v in (group.get("hosts") or {}).items() if k in keep}
        hosts.write_text(yaml.safe_dump(data, sort_keys=False))
        # The stand-in loads in half a second: a rank 0 not serving in a minute is broken.
        with (self.inventory / "group_vars" / "all.yml").open("a") as group_vars:
            group_vars.write("modelfleet_health_timeout: 60\n")
        self.state = tmp_path / "state"
        self.catalog = tmp_path / "catalog.yaml"
        self.catalog.write_text(CATALOG.read_text() if catalog is None else catalog)

    def arguments(self, *args: str, lost_after: str = "1h") -> list[str]:
        settings = ["--timeout", "3", "--lost-after", lost_after]
        inputs = ["--catalog", str(self.catalog), "--inventory", str(self.inventory)]
        return [*settings, *args, *inputs]

    @property
    def environment(self) -> dict[str, str]:
        return {"XDG_STATE_HOME": str(self.state), "COLUMNS": "120"}

    def __call__(self, *args: str, lost_after: str = "1h") -> subprocess.CompletedProcess[str]:
        arguments = self.arguments(*args, lost_after=lost_after)
        return ctl(*arguments, env=self.environment, timeout=600)

    def shards(self) -> dict[str, list[tuple[str, ShardRecord]]]:
        """replica → its (node, record), from live facts."""
        options = AppContext(state_dir=self.state / "probe", connect_timeout=3)
        fleet = gather_fleet(load_inventory(self.inventory), self.inventory, options)
        found: dict[str, list[tuple[str, ShardRecord]]] = {}
        for node in fleet.snapshot.nodes:
            if fleet.facts[node.name].error is None:
                for record in node.shards:
                    found.setdefault(record.replica, []).append((node.name, record))
        return found


def ctl_on_standins(fleet: LiveFleet, tmp_path: Path, catalog: str | None = None) -> Ctl:
    """A ctl for the first three nodes, which run the stand-in engines."""
    install_standin(fleet)
    return Ctl(fleet, tmp_path, catalog)


def _post(address: str, port: int, path: str, body: dict[str, object]) -> dict[str, object]:
    """POST `body` to an engine directly; its answer, which must be a 200."""
    request = urllib.request.Request(
        f"http://{address}:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())  # type: ignore[no-any-return]


def chat(address: str, port: int, model: str, text: str = "hello") -> dict[str, object]:
    messages = [{"role": "user", "content": text}]
    return _post(address, port, "/v1/chat/completions", {"model": model, "messages": messages})


def embed(address: str, port: int, model: str, text: str = "hello") -> dict[str, object]:
    """An embeddings request to an embedding replica (vLLM's pooling runner serves no chat)."""
    answer = _post(address, port, "/v1/embeddings", {"model": model, "input": text})
    data = answer["data"]
    assert isinstance(data, list) and data[0]["embedding"], answer
    return answer


def embedding_models(catalog: Path) -> set[str]:
    """The catalog's models whose profiles run as embedding models."""
    models = load_catalog(catalog).models
    return {name for name, model in models.items() if any(p.spec.embedding for p in model.profiles)}


def rank0(fleet: LiveFleet, shards: list[tuple[str, ShardRecord]]) -> tuple[str, ShardRecord]:
    node, record = next((n, r) for n, r in shards if r.rank == 0)
    return fleet.address(node), record


def test_reconcile_runs_the_catalog_and_recovers_without_an_operator(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path)

    # 1. An empty fleet gets every replica, and each answers at its rank 0.
    result = ctl("reconcile")
    assert result.returncode == 0, result.stdout + result.stderr
    running = ctl.shards()
    assert sorted(r.split("-")[0] for r in running) == ["big", "chat", "chat", "embed", "tiny"]
    embedding = embedding_models(ctl.catalog)
    assert embedding == {"embed"}
    for replica, shards in running.items():
        assert all(r.state == "running" for _, r in shards), (replica, shards)
        address, record = rank0(fleet, shards)
        ask = embed if record.model in embedding else chat
        answer = ask(address, record.port or 0, record.model)
        assert record.model in json.dumps(answer)
    big = next(shards for replica, shards in running.items() if replica.startswith("big"))
    assert sorted((n, r.rank) for n, r in big) == [("node-1", 0), ("node-2", 1)]
    assert ctl("reconcile", "--dry-run").stdout.strip() == (
        "nothing to do: the fleet runs what the catalog asks"
    )

    # 2. Kill one shard's process: the replica is failed whole, backed off, rebuilt.
    worker_node = next(n for n, r in big if r.rank == 1)
    unit = next(r.unit for n, r in big if r.rank == 1)
    subprocess.run(fleet.ssh_command(worker_node, "systemctl", "kill", "-s", "KILL", str(unit)),
                   check=True, timeout=30)  # fmt: skip
    time.sleep(2)
    result = ctl("reconcile")
    # Rank 0 dies with its peer (as with NCCL): both are failed, both stopped.
    assert re.search(r"stop +big-1 +(rank 0 on node-1, )?rank 1 on node-2 failed", result.stdout)
    assert re.search(r"wait +big +backoff after 1 failure", result.stdout), result.stdout
    assert not [r for r in ctl.shards() if r.startswith("big")]  # every rank stopped
    time.sleep(31)  # the first backoff is at most 30 s
    result = ctl("reconcile")
    assert result.returncode == 0, result.stdout + result.stderr
    rebuilt_id = re.search(r"started (big-\d+)", result.stdout)
    assert rebuilt_id, result.stdout
    rebuilt = ctl.shards()[rebuilt_id.group(1)]
    address, record = rank0(fleet, rebuilt)
    chat(address, record.port or 0, "big")

    # 3. Lower chat's replicas.min: the surplus replica drains, and a request it is
    #    answering still completes.
    lowered = ctl.catalog.read_text().replace("{min: 2, max: 3}", "{min: 1, max: 1}")
    ctl.catalog.write_text(lowered)
    plan = ctl("reconcile", "--dry-run").stdout
    drained = re.search(r"drain +(chat-\d+)", plan)
    assert drained, plan
    address, record = rank0(fleet, ctl.shards()[drained.group(1)])
    answers: list[object] = []
    slow = threading.Thread(
        target=lambda: answers.append(chat(address, record.port or 0, "chat", "sleep 4"))
    )
    slow.start()
    time.sleep(1)
    result = ctl("reconcile")
    slow.join(timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(answers) == 1, "the request in flight during the drain did not complete"
    assert drained.group(1) not in ctl.shards()

    # 4. Stop a node: Unreachable first (left alone), then Lost, and its replica moves.
    chats = {r: s for r, s in ctl.shards().items() if r.startswith("chat")}
    (chat_replica, chat_shards), = chats.items()  # fmt: skip
    lost_node = chat_shards[0][0]
    fleet.stop(lost_node)
    result = ctl("reconcile", "--dry-run")
    assert f"leave  {chat_replica}" in result.stdout or "leave " in result.stdout
    assert "start  chat" not in result.stdout  # a blip is not a loss
    # Lost counts from the first failure seen (the dry run's), never from the last
    # success: it must have been seen failing for longer than lost_after.
    time.sleep(1.5)
    result = ctl("reconcile", lost_after="1s")
    assert re.search(r"start +chat-\d+ +h100x1 +node-\d", result.stdout), result.stdout
    moved = {r: s for r, s in ctl.shards().items() if r.startswith("chat")}
    assert moved and all(n != lost_node for s in moved.values() for n, _ in s)
    fleet.start(lost_node)

    # 5. A catalog of no models drains everything, but only when asked twice: a pass that
    # stops more than half of the running replicas refuses without a terminal...
    ctl.catalog.write_text("models: {}\n")
    before = ctl.shards()
    assert before
    refused = ctl("reconcile")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert re.search(r"this pass stops \d+ of \d+ running replicas", refused.stderr)
    assert ctl.shards() == before
    # ...asks on a terminal, where "n" changes nothing either...
    question = "running replicas, with nothing in their place. Go on? [y/N]:"
    screen = on_a_terminal(
        ctl.arguments("reconcile"), 120, tmp_path, env=ctl.environment, reply=(question, "n")
    )
    assert screen.returncode == 1, screen.lines
    asked = [line for line in screen.lines if question in line]
    assert len(asked) == 1 and asked[0].endswith(" n"), screen.lines
    assert ctl.shards() == before
    # ...and --yes carries it out: nothing of ours is left running.
    result = ctl("reconcile", "--yes")
    assert ctl.shards() == {}, result.stdout + result.stderr
    assert datetime.now(UTC)  # the steps above ran against the real clock


STARTS_AND_FAILURES = """\
models:
  good:
    source: hf://org/good
    profiles:
      - {name: l40s, priority: 1, engine: vllm, gpu_class: L40S, gpus_per_node: 1}
  badargs:
    source: hf://org/badargs
    profiles:
      - {name: l40s, priority: 1, engine: vllm, gpu_class: L40S, gpus_per_node: 1,
         args: [--max-model-len, lots]}
  noexec:
    source: file:///srv/models/noexec.gguf
    profiles:
      - {name: l40s, priority: 1, engine: llama.cpp, gpu_class: L40S, gpus_per_node: 1}
"""


def test_a_start_is_reported_only_when_verified_each_shard_on_its_own(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    """On node-3 (the only L40S node): `noexec` cannot even be executed (its llama-server is
    gone: systemctl start fails), `badargs` starts and exits at once on a bad argument, and
    `good` serves. A failed start on the node spares no other shard its checks."""
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, STARTS_AND_FAILURES)
    node = "node-3"
    fleet.ssh(node, "rm -f /usr/local/bin/llama-server")
    try:
        result = ctl("reconcile")
    finally:
        fleet.ssh(node, "cp /usr/local/bin/vllm /usr/local/bin/llama-server")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert re.findall(r"^started (\S+)$", out, re.MULTILINE) == ["good-1"], out
    assert (
        "FAILED badargs-1: rank 0 on node-3: unit failed: its process exited with status 2"
        " — stopped whole" in out
    ), out
    assert "FAILED noexec-1: rank 0 on node-3: unit failed: its command could not be run" in out
    print(out)  # what an operator reads (pytest -s)
    # Each failure comes with its unit's journal, fetched from the node, as text.
    journal = out.split("modelfleet-badargs-1-rank0.service on node-3, its journal's last lines:")
    assert len(journal) == 2, out
    assert "argument --max-model-len: invalid size value: 'lots'" in journal[1], out
    noexec = out.split("modelfleet-noexec-1-rank0.service on node-3, its journal's last lines:")
    assert len(noexec) == 2, out
    noexec_journal = noexec[1].split("\nFAILED")[0]
    assert "Failed to locate executable llama-server" in noexec_journal, out
    assert "-- Boot" not in noexec_journal, out  # this run's lines, not an earlier boot's
    running = ctl.shards()
    assert list(running) == ["good-1"], running  # the failed ones are stopped whole
    address, record = rank0(fleet, running["good-1"])
    chat(address, record.port or 0, "good")
    for name in fleet.names[:3]:
        fleet.ssh(name, CLEAN)
