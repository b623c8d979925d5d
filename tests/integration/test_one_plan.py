"""One plan: `place --all --dry-run`, `reconcile --dry-run` and the reconcile pass agree.

Issue 13, finding 4: on one fleet the two previews put chat-2 on GPU 4 and on GPU 0, and
big-1's rank 0 on two different nodes, and the backoff's "until" moved between a dry run
and the pass. Here the three run on the same facts snapshot and backoff ledger — the dry
runs as an operator runs them (ctl in a new process), the pass in-process with the
playbooks replaced by the fake executor (tests/fakes/executor.py) — and must name the same
replicas on the same nodes and GPUs, and the same instant for every backoff.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from cli.catalog.load import load_catalog
from cli.ops import reconcile as ops
from cli.ops.context import AppContext
from cli.ops.fleet import load_fleet
from cli.reconcile.ledger import load_ledger
from cli.reconcile.report import reconcile_json
from tests.ctl import ROOT, ctl
from tests.fakes.executor import FakeFleet

EXAMPLES = ROOT / "examples"

# (replica, rank) → (node, GPU indices)
Layout = dict[tuple[str, int], tuple[str, tuple[int, ...]]]


def _indices(text: str) -> tuple[int, ...]:
    """`0-3` → (0, 1, 2, 3); `0,2-3` → (0, 2, 3)."""
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        found += range(int(low), int(high or low) + 1)
    return tuple(found)


def reconcile_layout(text: str) -> Layout:
    """The `start` blocks of `ctl reconcile --dry-run`'s plan."""
    layout: Layout = {}
    replica = None
    for line in text.splitlines():
        head = re.match(r"start  +(\S+) +\S+ +(\S+)  (?:GPU (\S+))?", line)
        if head is not None:
            replica = head.group(1)
            gpus = _indices(head.group(3)) if head.group(3) else ()
            rank = re.search(r"rank (\d+)$", line)
            layout[(replica, int(rank.group(1)) if rank else 0)] = (head.group(2), gpus)
            continue
        more = re.match(r" {20,}(\S+)  GPU (\S+) .*rank (\d+)$", line)
        if more is not None and replica is not None:
            layout[(replica, int(more.group(3)))] = (more.group(1), _indices(more.group(2)))
        elif not line.startswith(" "):
            replica = None
    return layout


def place_layout(document: dict[str, object]) -> Layout:
    placements = document["placements"]
    assert isinstance(placements, list)
    return {
        (p["replica"], s["rank"]): (s["node"], tuple(s["gpus"]))
        for p in placements
        if p["placed"]
        for s in p["shards"]
    }


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    """The example fleet, with llama-3.1-8b-1's only shard failed on hgx-2: a fresh
    failure, so its model backs off, and its GPU goes to the plan's placements."""
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)
    hgx2 = json.loads((facts / "hgx-2.json").read_text())
    assert hgx2["shards"][0]["replica"] == "llama-3.1-8b-1"
    hgx2["shards"][0]["state"] = "failed"
    # Its process is gone with its unit: nvidia-smi no longer lists it on GPU 0, whose
    # memory is free again (a process still there would make the GPU unusable).
    processes = hgx2["gpu_processes"]
    assert processes[0]["pid"] == 20311
    hgx2["gpu_processes"] = processes[1:]
    assert hgx2["gpus"][0]["index"] == 0
    hgx2["gpus"][0]["memory_used_mib"] = 4
    (facts / "hgx-2.json").write_text(json.dumps(hgx2))
    return facts


def dry_runs(facts: Path, state: Path) -> tuple[dict[str, object], str]:
    args = ["--catalog", str(EXAMPLES / "catalog.yaml"), "--inventory", str(EXAMPLES / "inventory")]
    args += ["--facts", str(facts)]
    env = {"XDG_STATE_HOME": str(state)}
    placed = ctl("place", "--all", "--dry-run", "--json", *args, env=env)
    assert placed.returncode == 1, placed.stderr  # deepseek-v3 does not fit; llama-3.1-8b waits
    planned = ctl("reconcile", "--dry-run", *args, env=env)
    assert planned.returncode == 1, planned.stderr
    return json.loads(placed.stdout), planned.stdout


def the_pass(facts: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeFleet, Path]:
    """`ctl reconcile`'s pass on the same inputs, the playbooks replaced by the fake."""
    fake = FakeFleet()
    monkeypatch.setattr(ops, "AnsibleExecutor", lambda *args, **kwargs: fake)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "OnePlan" * 5)  # the example's Llama models' token
    options = AppContext(state_dir=state / "modelfleet")
    inventory = EXAMPLES / "inventory"
    catalog = load_catalog(EXAMPLES / "catalog.yaml")
    fleet = load_fleet(options, inventory, facts)
    the_plan = ops.plan_pass(options, catalog, fleet, inventory, warn=pytest.fail)
    applied = ops.apply_plan(options, fleet, the_plan, inventory, catalog, lambda run: None, print)
    assert not applied.complete  # deepseek-v3 unplaced, llama-3.1-8b waiting
    return fake, ops.ledger_file(options, inventory)


def test_both_previews_and_the_pass_start_the_same_replicas_on_the_same_gpus(
    snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed, planned = dry_runs(snapshot, tmp_path / "state")
    fake, _ = the_pass(snapshot, tmp_path / "state", monkeypatch)
    started: Layout = {
        (record.replica, record.rank): (node, record.gpus)
        for (node, _), record in fake.records.items()
    }
    expected = {
        ("bge-m3-1", 0): ("l40s-1", (0,)),
        ("bge-m3-2", 0): ("l40s-1", (1,)),
        ("qwen2.5-coder-14b-2", 0): ("hgx-2", (0, 1)),  # GPU 0: the failed llama-3.1-8b-1's
        ("qwen2.5-coder-7b-1", 0): ("l40s-1", (2,)),
        ("llama-3.2-3b-1", 0): ("cpu-big", ()),
        # a100-1 has the GPUs, but its model store is full of a retired model's weights
        ("mistral-small-24b-1", 0): ("a100-2", (0, 1)),
        ("llama-3.1-70b-1", 0): ("hgx-1", (0, 1, 2, 3, 4, 5, 6, 7)),
        ("llama-3.1-70b-2", 0): ("hgx-3", (0, 1, 2, 3)),
        ("llama-3.1-70b-2", 1): ("hgx-4", (2, 3, 4, 5)),
    }
    assert place_layout(placed) == expected
    assert reconcile_layout(planned) == expected
    assert started == expected


def test_a_backoff_ends_at_the_same_instant_in_both_previews_and_the_pass(
    snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed, planned = dry_runs(snapshot, tmp_path / "state")
    waiting = placed["waiting"]
    assert isinstance(waiting, dict)
    assert set(waiting) == {"llama-3.1-8b"}
    assert waiting["llama-3.1-8b"]["failures"] == 1
    until = datetime.fromisoformat(waiting["llama-3.1-8b"]["until"])
    shown = re.search(r"^wait +llama-3\.1-8b +.* until (\d\d:\d\d:\d\d) UTC", planned, re.M)
    assert shown is not None, planned
    assert shown.group(1) == until.strftime("%H:%M:%S")
    _, ledger = the_pass(snapshot, tmp_path / "state", monkeypatch)
    saved = load_ledger(ledger)[0]["llama-3.1-8b"]
    assert (saved.failures, saved.until) == (1, until)
    # The snapshot's moment is the newest gather in it (2026-11-30 09:00 UTC); a first
    # failure waits 15 to 30 s.
    assert datetime.fromisoformat("2026-11-30T09:00:15+00:00") <= until
    assert until <= datetime.fromisoformat("2026-11-30T09:00:30+00:00")


def test_the_dry_runs_agree_with_each_other_run_after_run(snapshot: Path, tmp_path: Path) -> None:
    first = dry_runs(snapshot, tmp_path / "state")
    again = dry_runs(snapshot, tmp_path / "state")
    assert first == again  # no fresh clock, no unseeded jitter


def test_the_pass_is_not_done_while_a_model_waits_out_its_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13, finding 5: the pass exited 0 while a model waited; its help says 1."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    hgx-2:\n")
    facts = tmp_path / "facts"
    facts.mkdir()
    hgx2 = json.loads((EXAMPLES / "facts" / "hgx-2.json").read_text())
    hgx2["shards"][0]["state"] = "failed"
    (facts / "hgx-2.json").write_text(json.dumps(hgx2))
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "models:\n  llama-3.1-8b:\n    source: hf://meta-llama/Llama-3.1-8B-Instruct\n"
        "    replicas: {min: 1, max: 2}\n    profiles:\n"
        "      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}\n"
    )
    fake = FakeFleet()
    monkeypatch.setattr(ops, "AnsibleExecutor", lambda *args, **kwargs: fake)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "OnePlan" * 5)  # the example's Llama models' token
    options = AppContext(state_dir=tmp_path / "state")
    loaded = load_catalog(catalog)
    fleet = load_fleet(options, inventory, facts)
    the_plan = ops.plan_pass(options, loaded, fleet, inventory, warn=pytest.fail)
    assert [s.replica for s in the_plan.stops] == ["llama-3.1-8b-1"]
    assert [w.model for w in the_plan.waits] == ["llama-3.1-8b"]
    assert not (the_plan.starts or the_plan.unplaced or fleet.partial)
    applied = ops.apply_plan(options, fleet, the_plan, inventory, loaded, lambda run: None, print)
    assert fake.calls == [("stop", ("llama-3.1-8b-1",))]
    assert applied.complete is False  # exit code 1


def test_reconcile_json_is_the_same_plan_and_says_only_what_was_verified(
    snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed, planned = dry_runs(snapshot, tmp_path / "state")
    args = ["--catalog", str(EXAMPLES / "catalog.yaml"), "--inventory", str(EXAMPLES / "inventory")]
    result = ctl(
        "reconcile", "--dry-run", "--json", *args, "--facts", str(snapshot),
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # the same exit code as the text form
    document = json.loads(result.stdout)
    assert (document["format"], document["dry_run"], document["complete"]) == (
        "modelfleet.reconcile/v1", True, False,
    )  # fmt: skip
    plan = document["plan"]
    layout = {
        (start["replica"], shard["rank"]): (shard["node"], tuple(shard["gpus"]))
        for start in plan["starts"]
        for shard in start["shards"]
    }
    assert layout == reconcile_layout(planned) == place_layout(placed)
    assert [(s["replica"], s["drain"]) for s in plan["stops"]] == [("llama-3.1-8b-1", False)]
    [wait] = plan["waits"]
    waiting = placed["waiting"]
    assert isinstance(waiting, dict)
    assert (wait["model"], wait["until"]) == ("llama-3.1-8b", waiting["llama-3.1-8b"]["until"])
    assert [u["replica"] for u in plan["unplaced"]] == ["deepseek-v3-1"]
    assert document["outcome"] is None  # a dry run did nothing

    # The pass's outcome, as the JSON form carries it: started only what the fake verified.
    fake = FakeFleet(fail={("bge-m3-2", 0)})
    monkeypatch.setattr(ops, "AnsibleExecutor", lambda *args, **kwargs: fake)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "OnePlan" * 5)  # the example's Llama models' token
    options = AppContext(state_dir=tmp_path / "pass" / "modelfleet")
    inventory = EXAMPLES / "inventory"
    catalog = load_catalog(EXAMPLES / "catalog.yaml")
    fleet = load_fleet(options, inventory, snapshot)
    the_plan = ops.plan_pass(options, catalog, fleet, inventory, warn=pytest.fail)
    applied = ops.apply_plan(options, fleet, the_plan, inventory, catalog, lambda run: None, print)
    done = reconcile_json(the_plan, dry_run=False, complete=False, outcome=applied.outcome)
    outcome = done["outcome"]
    assert "bge-m3-2" not in outcome["started"]
    assert [f["replica"] for f in outcome["failed"]] == ["bge-m3-2"]
    assert sorted(outcome["started"]) == sorted(
        start.replica for start in the_plan.starts if start.replica != "bge-m3-2"
    )
    # The broken replica stopped first; the one that failed to start, stopped whole.
    assert outcome["stopped"] == ["llama-3.1-8b-1", "bge-m3-2"]
