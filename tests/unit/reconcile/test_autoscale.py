"""The autoscaler (cli/reconcile/autoscale.py) on its own and inside the planner: what the
load decides, when, and how each decision is explained in the plan."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest

from cli.catalog.schema import Autoscale
from cli.errors import InputError
from cli.facts.model import ReplicaLoad
from cli.reconcile.autoscale import Memory, decide
from cli.reconcile.ledger import load_scale_memory, save_scale_memory, scale_memory_path
from cli.reconcile.planner import Plan, plan
from cli.reconcile.report import plan_json
from cli.ui.plan import render_plan
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, snapshot

QUEUE = Autoscale(signal="queue", target=4, up_seconds=30, down_seconds=300)


def waiting(*figures: float) -> list[ReplicaLoad]:
    return [ReplicaLoad(replica=f"r-{i}", waiting=w) for i, w in enumerate(figures)]


def test_a_queue_above_target_adds_one_replica_only_once_held_for_the_up_window() -> None:
    first = decide("chat", QUEUE, 1, 4, 2, 0, waiting(9, 10), None, NOW)
    assert (first.desired, first.why) == (2, "9.5 waiting per replica > 4 for 0 s of 30 s")
    later = decide(
        "chat", QUEUE, 1, 4, 2, 0, waiting(9, 10), first.memory, NOW + timedelta(seconds=40)
    )
    assert (later.desired, later.change) == (3, 1)
    assert later.why == "9.5 waiting per replica > 4 for 40 s"
    assert later.memory == Memory()  # the next replica needs a window of its own


def test_no_replica_is_added_at_replicas_max_or_while_the_last_one_starts() -> None:
    since = Memory(above_since=NOW - timedelta(seconds=60))
    full = decide("chat", QUEUE, 1, 2, 2, 0, waiting(9, 9), since, NOW)
    assert (full.desired, full.why) == (
        2,
        "9.0 waiting per replica > 4 for 60 s; at replicas.max 2",
    )
    starting = decide("chat", QUEUE, 1, 4, 3, 1, waiting(9, 9), since, NOW)
    assert (starting.desired, starting.why) == (
        3,
        "9.0 waiting per replica > 4 for 60 s; waiting for 1 starting",
    )
    assert starting.memory == since  # the window goes on


def test_one_fewer_only_after_the_down_window_and_only_if_the_rest_stay_under_target() -> None:
    # 3 replicas with 1 waiting each: 2 would carry 1.5 each, under 4.
    first = decide("chat", QUEUE, 1, 4, 3, 0, waiting(1, 1, 1), None, NOW)
    assert first.desired == 3
    assert first.why == "1.0 waiting per replica, 1.5 with one fewer ≤ 4 for 0 s of 300 s"
    later = decide(
        "chat", QUEUE, 1, 4, 3, 0, waiting(1, 1, 1), first.memory, NOW + timedelta(seconds=301)
    )
    assert (later.desired, later.why) == (
        2,
        "1.0 waiting per replica, 1.5 with one fewer ≤ 4 for 301 s",
    )
    # Hysteresis: 3 waiting each is under target, but 2 replicas would carry 4.5.
    busy = decide(
        "chat", QUEUE, 1, 4, 3, 0, waiting(3, 3, 3), first.memory, NOW + timedelta(seconds=301)
    )
    assert (busy.desired, busy.memory) == (3, Memory())
    assert busy.why == "3.0 waiting per replica ≤ 4, 4.5 with one fewer"
    at_min = decide(
        "chat", QUEUE, 2, 4, 2, 0, waiting(0, 0), first.memory, NOW + timedelta(seconds=999)
    )
    assert (at_min.desired, at_min.why) == (2, "0.0 waiting per replica ≤ 4")


def test_a_load_nobody_read_holds_the_count_and_restarts_the_windows() -> None:
    since = Memory(above_since=NOW - timedelta(seconds=600))
    unknown = decide("chat", QUEUE, 1, 4, 2, 0, [ReplicaLoad(replica="r")], since, NOW)
    assert (unknown.desired, unknown.value, unknown.memory) == (2, None, Memory())
    assert unknown.why == "load unknown (no replica's /metrics read): holding at 2"


def test_the_kv_signal_is_the_mean_share_in_use() -> None:
    policy = Autoscale(signal="kv", up_seconds=0)
    loads = [ReplicaLoad(replica="a", kv_use=0.9), ReplicaLoad(replica="b", kv_use=1.0)]
    up = decide("chat", policy, 1, 4, 2, 0, loads, None, NOW)
    assert (up.desired, up.target, up.why) == (3, 0.8, "KV use 95% > 80% for 0 s")


def test_below_min_or_above_max_the_bounds_decide_not_the_load() -> None:
    low = decide("chat", QUEUE, 2, 4, 1, 0, waiting(0), None, NOW)
    assert (low.desired, low.why) == (2, "1 of replicas.min 2 running")
    high = decide("chat", QUEUE, 1, 2, 4, 0, waiting(99, 99, 99, 99), None, NOW)
    assert (high.desired, high.why) == (2, "4 running, above replicas.max 2")


# --------------------------------------------------------------------------- in the planner

SCALED = catalog(
    """\
    models:
      chat:
        source: hf://org/chat
        replicas: {min: 1, max: 3}
        autoscale: {signal: queue, target: 4, up_seconds: 30, down_seconds: 300}
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)
ADDRESSES = {"hgx-1": "10.0.0.1"}


def _plan(loads: list[ReplicaLoad], replicas: int, memory: Memory | None) -> Plan:
    shards = [shard(f"chat-{i}", "chat", [i - 1], port=8000 + i, profile="x1")
              for i in range(1, replicas + 1)]  # fmt: skip
    fleet = snapshot(hgx("hgx-1", shards=shards, load=loads))
    memory_of = {} if memory is None else {"chat": memory}
    return plan(SCALED, fleet, {}, ADDRESSES, random.Random(1), scale_memory=memory_of)


def test_the_planner_starts_one_more_replica_and_says_why_in_text_and_json() -> None:
    loads = [ReplicaLoad(replica="chat-1", waiting=9), ReplicaLoad(replica="chat-2", waiting=10)]
    result = _plan(loads, 2, Memory(above_since=NOW - timedelta(seconds=40)))
    [start] = result.starts
    assert start.reason == "scale up: 9.5 waiting per replica > 4 for 40 s"
    text = "\n".join(render_plan(result))
    assert "scale  chat-3  2 → 3  why: 9.5 waiting per replica > 4 for 40 s" not in text
    assert "scale  chat    2 → 3  why: 9.5 waiting per replica > 4 for 40 s" in text
    assert "why: scale up: 9.5 waiting per replica > 4 for 40 s" in text
    [scaling] = plan_json(result)["scaling"]
    assert scaling == {
        "model": "chat", "signal": "queue", "value": 9.5, "target": 4.0, "replicas": 2,
        "desired": 3, "why": "9.5 waiting per replica > 4 for 40 s",
    }  # fmt: skip
    assert result.scale_memory == {"chat": Memory()}


def test_a_start_that_restores_replicas_min_is_not_called_a_scale_up() -> None:
    result = _plan([], 0, None)
    [start] = result.starts
    assert start.reason == "0 of 1 running"
    assert [d.why for d in result.scaling] == ["0 of replicas.min 1 running"]


def test_the_planner_drains_one_replica_after_the_down_window_and_never_below_min() -> None:
    loads = [ReplicaLoad(replica=f"chat-{i}", waiting=0) for i in (1, 2, 3)]
    result = _plan(loads, 3, Memory(below_since=NOW - timedelta(seconds=301)))
    [drain] = result.drains
    assert drain.drain  # in-flight requests finish; the router stops sending first
    assert drain.reason.startswith("scale down: 0.0 waiting per replica, 0.0 with one fewer")
    assert not result.starts
    one = _plan(
        [ReplicaLoad(replica="chat-1", waiting=0)], 1, Memory(below_since=NOW - timedelta(days=1))
    )
    assert not one.drains and not one.starts


def test_a_load_held_but_not_long_enough_changes_nothing_and_keeps_its_window() -> None:
    loads = [ReplicaLoad(replica="chat-1", waiting=9)]
    since = NOW - timedelta(seconds=10)
    result = _plan(loads, 1, Memory(above_since=since))
    assert result.empty
    assert result.scale_memory == {"chat": Memory(above_since=since)}
    assert render_plan(result) == [
        "nothing to do: the fleet runs what the catalog asks",
        "scale  chat  1  why: 9.0 waiting per replica > 4 for 10 s of 30 s",
    ]


def test_the_load_of_a_node_not_reached_this_pass_is_no_ones() -> None:
    shards = [shard("chat-1", "chat", [0], profile="x1")]
    stale = hgx("hgx-1", shards=shards, load=[ReplicaLoad(replica="chat-1", waiting=50)],
                unreachable_for=timedelta(seconds=30))  # fmt: skip
    result = plan(SCALED, snapshot(stale), {}, ADDRESSES, random.Random(1),
                  scale_memory={"chat": Memory(above_since=NOW - timedelta(hours=1))})  # fmt: skip
    [decision] = result.scaling
    assert decision.value is None and not result.starts


# --------------------------------------------------------------------------- the catalog


@pytest.mark.parametrize(
    ("policy", "replicas", "said"),
    [
        ("{signal: queue}", "{min: 2, max: 2}",
         "catalog.yaml:4: models.chat.autoscale: nothing to scale: replicas.max (2) must be"
         " above replicas.min (2)"),
        ("{signal: kv, target: 80}", "{min: 1, max: 2}",
         "catalog.yaml:4: models.chat.autoscale.target: the kv signal is the share of the KV"
         " cache in use, 0 to 1, not 80"),
        ("{up_seconds: 60, down_seconds: 30}", "{min: 1, max: 2}",
         "catalog.yaml:4: models.chat.autoscale.down_seconds: down_seconds 30 is shorter than"
         " up_seconds 60: the count would flap"),
        ("{signal: rps}", "{min: 1, max: 2}", "models.chat.autoscale.signal"),
    ],
)  # fmt: skip
def test_a_policy_that_cannot_work_is_refused_at_load(
    policy: str, replicas: str, said: str
) -> None:
    text = f"""\
    models:
      chat:
        replicas: {replicas}
        autoscale: {policy}
        profiles:
          - {{name: x1, priority: 1, engine: llama.cpp, source: hf://org/chat}}
    """
    with pytest.raises(InputError) as raised:
        catalog(text)
    assert said in str(raised.value)


def test_the_defaults_are_a_queue_of_4_up_after_30_s_down_after_300_s() -> None:
    policy = (
        catalog(
            """\
        models:
          chat:
            replicas: {min: 1, max: 2}
            autoscale: {}
            profiles:
              - {name: x1, priority: 1, engine: llama.cpp, source: hf://org/chat}
        """
        )
        .models["chat"]
        .autoscale
    )
    assert policy is not None
    assert (policy.signal, policy.goal, policy.up_seconds, policy.down_seconds) == (
        "queue",
        4,
        30,
        300,
    )


# --------------------------------------------------------------------------- its memory


def test_the_memory_is_kept_in_the_state_directory_and_a_bad_file_only_restarts_windows(
    tmp_path: Path,
) -> None:
    path = scale_memory_path(tmp_path / "inventory", tmp_path)
    assert path.parent == tmp_path / "autoscale"
    memory = {"chat": Memory(above_since=NOW), "code": Memory(below_since=NOW)}
    save_scale_memory(path, memory)
    assert load_scale_memory(path) == (memory, None)
    path.write_text('{"chat": {"above_since": "2026-01-01T00:00:00"}}')  # no UTC offset
    empty, warning = load_scale_memory(path)
    assert empty == {}
    assert warning is not None and "a time is not a time with its UTC offset" in warning
    assert load_scale_memory(tmp_path / "none.json") == ({}, None)


def test_a_replica_the_load_asks_for_that_fits_nowhere_is_a_refusal_with_its_reasons() -> None:
    shards = [shard("chat-1", "chat", [0], profile="x1")]
    # One H100, held by chat-1: the next replica has nowhere to go.
    only = NodeSpec("hgx-1", "H100", 1, [[0]], shards=shards,
                    load=[ReplicaLoad(replica="chat-1", waiting=20)])  # fmt: skip
    fleet = snapshot(only)
    held = {"chat": Memory(above_since=NOW - timedelta(seconds=60))}
    result = plan(SCALED, fleet, {}, ADDRESSES, random.Random(1), scale_memory=held)
    [decision] = result.scaling
    assert decision.change == 1
    assert not result.starts
    [refused] = result.unplaced
    assert refused.replica == "chat-2" and refused.rejections
    assert any(line.startswith("refuse chat-2") for line in render_plan(result))
