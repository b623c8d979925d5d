"""The reconcile planner, with a synthetic clock and seeded randomness: Nomad-style safety
properties — something bad never happens — case by case."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from cli.cluster.snapshot import Snapshot
from cli.reconcile.backoff import Backoff, delay_bounds
from cli.reconcile.planner import Plan, applied, plan
from tests.builders import NOW, catalog, hgx, shard, snapshot

MODELS = catalog(
    """\
    models:
      small:
        source: hf://org/small
        replicas: {min: 2, max: 3}
        profiles:
          - {name: x2, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 2}
          - {name: x1, priority: 50, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
    """
)
FABRIC = [("ib", ["mlx5_0", "mlx5_1"])]
ADDRESSES = {f"hgx-{i}": f"10.0.0.{i}" for i in range(1, 6)}


def reconcile(fleet: Snapshot, ledger: dict[str, Backoff] | None = None, seed: int = 1) -> Plan:
    return plan(MODELS, fleet, ledger or {}, ADDRESSES, random.Random(seed))


def empty_fleet() -> Snapshot:
    return snapshot(*(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(1, 5)))


def test_an_empty_fleet_gets_every_models_minimum() -> None:
    result = reconcile(empty_fleet())
    assert sorted(s.replica for s in result.starts) == ["big-1", "small-1", "small-2"]
    assert not result.stops and not result.drains and not result.unplaced


def test_a_multi_node_replica_lists_its_workers_apart_from_rank_0() -> None:
    (big,) = [s for s in reconcile(empty_fleet()).starts if s.model == "big"]
    assert big.leader.rank == 0 and [w.rank for w in big.workers] == [1]
    assert big.leader.health_url is not None and big.workers[0].health_url is None
    master = ADDRESSES[big.leader.node]
    assert f'"--dist-init-addr" "{master}:18000"' in big.workers[0].unit_text


def test_planning_the_result_of_an_applied_plan_yields_an_empty_plan() -> None:
    fleet = empty_fleet()
    first = reconcile(fleet)
    second = reconcile(applied(first, fleet))
    assert second.empty and not second.waits, second


def test_no_plan_hands_one_gpu_to_two_replicas() -> None:
    fleet = snapshot(hgx("hgx-1", shards=[shard("other-1", "other", range(5), profile="x")]))
    result = reconcile(fleet)
    gpus = [(sh.node, g) for s in result.starts for sh in s.placement.shards for g in sh.gpus]
    assert len(gpus) == len(set(gpus)) and len(gpus) == 3  # small: 2 + 1 (only 3 left)
    assert all(g >= 5 for _, g in gpus)  # 0-4 are the other replica's


def test_a_new_shard_skips_the_port_a_running_shard_holds() -> None:
    fleet = snapshot(hgx("hgx-1", shards=[shard("small-1", "small", [0, 1], profile="x2")]))
    result = reconcile(fleet)
    ports = [(f.node, f.port) for s in result.starts for f in s.files]
    assert ports == [("hgx-1", 8001)]  # small-1 holds 8000; big needs two nodes


PAIRS = catalog(
    """\
    models:
      pair:
        source: hf://org/pair
        replicas: {min: 2}
        profiles:
          - {name: x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 4,
             nodes: 2, tensor_parallel: 8}
    """
)


def test_two_new_shards_on_one_node_get_distinct_ports_and_rendezvous_ports() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=FABRIC), hgx("hgx-2", fabrics=FABRIC))
    result = plan(PAIRS, fleet, {}, ADDRESSES, random.Random(1))
    files = [(f.replica, f.node, f.rank, f.port) for s in result.starts for f in s.files]
    assert files == [
        ("pair-1", "hgx-1", 0, 8000),
        ("pair-1", "hgx-2", 1, 8000),
        ("pair-2", "hgx-1", 0, 8001),
        ("pair-2", "hgx-2", 1, 8001),
    ]
    first, second = result.starts
    assert '"--master-port" "18000"' in first.workers[0].unit_text
    assert '"--master-port" "18001"' in second.workers[0].unit_text


def test_a_port_whose_rendezvous_port_is_in_use_is_skipped() -> None:
    fleet = snapshot(hgx("hgx-1", listening=[8000, 18001]))
    models = catalog(
        """\
        models:
          m:
            source: hf://org/m
            profiles:
              - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
        """
    )
    (start,) = plan(models, fleet, {}, ADDRESSES, random.Random(1)).starts
    assert start.leader.port == 8002  # 8000 listens; 8001's rendezvous port 18001 does


def test_a_lost_nodes_replica_is_stopped_where_it_runs_and_placed_elsewhere() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC, unreachable_for=timedelta(hours=2),
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2)]),
        hgx("hgx-2", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 1, profile="x16", nodes=2)]),
        hgx("hgx-3", fabrics=FABRIC),
        hgx("hgx-4", fabrics=FABRIC),
        hgx("hgx-5", fabrics=FABRIC),
    )  # fmt: skip
    result = reconcile(fleet)
    (stop,) = [s for s in result.stops if s.replica == "big-1"]
    assert [(s.node, s.record.rank) for s in stop.shards] == [("hgx-2", 1)]  # hgx-1 is gone
    assert not stop.drain and stop.reason.startswith("hgx-1 lost")
    (start,) = [s for s in result.starts if s.model == "big"]
    nodes = {f.node for f in start.files}
    assert len(nodes) == 2 and "hgx-1" not in nodes
    assert start.replica == "big-2" and "replaces big-1 (hgx-1 lost" in start.reason


def test_an_unreachable_nodes_replica_is_left_alone_and_still_counts() -> None:
    fleet = snapshot(
        hgx("hgx-1", unreachable_for=timedelta(minutes=5),
            shards=[shard("small-1", "small", [0, 1], profile="x2")]),
        hgx("hgx-2", shards=[shard("small-2", "small", [0, 1], profile="x2")]),
        hgx("hgx-3", fabrics=FABRIC), hgx("hgx-4", fabrics=FABRIC),
    )  # fmt: skip
    result = reconcile(fleet)
    assert [leave.replica for leave in result.leaves] == ["small-1"]
    assert not [s for s in result.starts if s.model == "small"]
    assert not [s for s in (*result.stops, *result.drains) if s.model == "small"]


def test_a_failed_shard_fails_its_replica_whole_and_the_model_backs_off() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2)]),
        hgx("hgx-2", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 1, profile="x16", nodes=2, state="failed")]),
        hgx("hgx-3", fabrics=FABRIC), hgx("hgx-4", fabrics=FABRIC),
    )  # fmt: skip
    result = reconcile(fleet)
    (stop,) = result.stops
    assert sorted(s.record.rank for s in stop.shards) == [0, 1]  # every rank, not just one
    assert stop.reason == "rank 1 on hgx-2 failed" and not stop.drain
    assert not [s for s in result.starts if s.model == "big"]
    (wait,) = result.waits
    assert wait.failures == 1
    # After the first failure: between half and all of 30 s.
    assert NOW + timedelta(seconds=15) <= wait.until <= NOW + timedelta(seconds=30)


def test_a_replica_missing_a_rank_is_failed() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2)]),
        hgx("hgx-2", fabrics=FABRIC),
    )  # fmt: skip
    (stop,) = reconcile(fleet).stops
    assert stop.reason == "rank 1 missing" and not stop.drain
    assert [(s.node, s.record.rank) for s in stop.shards] == [("hgx-1", 0)]


def test_a_replica_missing_its_rank_0_is_stopped_whole() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC),
        hgx("hgx-2", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 1, profile="x16", nodes=2)]),
    )  # fmt: skip
    result = reconcile(fleet)
    (stop,) = result.stops
    assert (stop.replica, stop.reason, stop.drain) == ("big-1", "rank 0 missing", False)
    assert [(s.node, s.record.rank) for s in stop.shards] == [("hgx-2", 1)]
    assert [(w.model, w.failures) for w in result.waits] == [("big", 1)]


def test_the_backoff_grows_exponentially_with_jitter_within_bounds() -> None:
    # 30 s × 2ⁿ⁻¹ after the n-th failure, capped at 30 minutes; drawn from its upper half.
    assert delay_bounds(1) == (timedelta(seconds=15), timedelta(seconds=30))
    assert delay_bounds(3) == (timedelta(seconds=60), timedelta(seconds=120))
    assert delay_bounds(6) == (timedelta(minutes=8), timedelta(minutes=16))
    assert delay_bounds(7) == (timedelta(minutes=15), timedelta(minutes=30))  # 32 min, capped
    assert delay_bounds(30) == (timedelta(minutes=15), timedelta(minutes=30))
    ledger = {"big": Backoff(failures=3, until=NOW - timedelta(seconds=1), counted=("big-1@?",))}
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-2", "big", range(8), 0, profile="x16", nodes=2, state="failed")]),
        hgx("hgx-2", fabrics=FABRIC,
            shards=[shard("big-2", "big", range(8), 1, profile="x16", nodes=2)]),
    )  # fmt: skip
    waits = set()
    for seed in range(20):
        (wait,) = reconcile(fleet, dict(ledger), seed).waits
        assert wait.failures == 4
        assert NOW + timedelta(seconds=120) <= wait.until <= NOW + timedelta(seconds=240)
        waits.add(wait.until)
    assert len(waits) > 10  # jittered, not one moment for everyone


def test_a_failure_is_counted_once_however_often_it_is_seen() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2, state="failed")]),
    )  # fmt: skip
    first = reconcile(fleet)
    again = reconcile(fleet, dict(first.ledger))
    assert first.ledger["big"].failures == again.ledger["big"].failures == 1


@pytest.mark.parametrize(
    "until", [NOW - timedelta(seconds=1), NOW], ids=["a-second-ago", "exactly-now"]
)
def test_an_expired_backoff_is_a_start_not_a_wait(until: datetime) -> None:
    ledger = {"small": Backoff(failures=2, until=until, counted=("small-1@?", "small-2@?"))}
    result = reconcile(empty_fleet(), ledger)
    assert result.waits == ()
    assert sorted(s.replica for s in result.starts) == ["big-1", "small-1", "small-2"]


def test_a_backoff_still_running_is_a_wait_not_a_start() -> None:
    until = NOW + timedelta(seconds=1)
    ledger = {"small": Backoff(failures=2, until=until, counted=("small-1@?", "small-2@?"))}
    result = reconcile(empty_fleet(), ledger)
    assert [(w.model, w.until, w.failures) for w in result.waits] == [("small", until, 2)]
    assert [s.replica for s in result.starts] == ["big-1"]


def test_a_model_serving_as_wanted_forgets_its_failures() -> None:
    fleet = empty_fleet()
    healthy = applied(reconcile(fleet), fleet)
    ledger = {"big": Backoff(failures=2, until=NOW - timedelta(minutes=1))}
    assert "big" not in reconcile(healthy, ledger).ledger


def test_scaling_down_drains_the_lowest_priority_profile_first_and_keeps_manual_ones() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("small-1", "small", [0, 1], profile="x2")]),
        hgx("hgx-2", shards=[shard("small-2", "small", [0], profile="x1", port=8001)]),
        hgx("hgx-3", shards=[shard("small-3", "small", [0, 1], profile="x2")]),
        hgx("hgx-4", shards=[shard("small-4", "small", [0], profile="x1", origin="manual")]),
    )
    result = reconcile(fleet)
    drained = [d for d in result.drains if d.model == "small"]
    # 4 running, min 2, max 3, one of them manual: the manual one is one more on top of
    # min, so the model keeps 3 and only one of reconcile's own (the lowest priority) goes.
    assert [(d.replica, d.drain) for d in drained] == [("small-2", True)]
    assert drained[0].reason == "scale down: 4 running, replicas.min 2"


def test_manual_replicas_above_replicas_max_are_drained_down_to_it() -> None:
    fleet = snapshot(*(
        hgx(f"hgx-{i}", shards=[shard(f"small-{i}", "small", [0, 1], profile="x2",
                                      origin="manual", started=NOW - timedelta(hours=5 - i))])
        for i in range(1, 5)
    ))  # fmt: skip
    result = reconcile(fleet)
    # 4 running, all started by hand, min 2, max 3: only the newest goes, to reach max.
    assert [(d.replica, d.reason) for d in result.drains] == [
        ("small-4", "scale down: 4 running, replicas.min 2")
    ]


def test_scaling_down_never_drains_a_replica_on_an_unreachable_node() -> None:
    fleet = snapshot(
        hgx("hgx-1", unreachable_for=timedelta(minutes=5),
            shards=[shard("small-1", "small", [0], profile="x1")]),
        hgx("hgx-2", shards=[shard("small-2", "small", [0, 1], profile="x2")]),
        hgx("hgx-3", shards=[shard("small-3", "small", [0, 1], profile="x2")]),
    )  # fmt: skip
    result = reconcile(fleet)
    # small-1 would go first (lowest priority), but its node is unreachable: left alone.
    assert [leave.replica for leave in result.leaves] == ["small-1"]
    assert [(d.replica, [s.node for s in d.shards]) for d in result.drains] == [
        ("small-2", ["hgx-2"])
    ]


def test_an_unwanted_replica_is_drained_only_where_its_node_is_reachable() -> None:
    fleet = snapshot(
        hgx("hgx-1", unreachable_for=timedelta(minutes=5),
            shards=[shard("old-1", "retired", range(8), 0, nodes=2)]),
        hgx("hgx-2", shards=[shard("old-1", "retired", range(8), 1, nodes=2)]),
    )  # fmt: skip
    (drain,) = [d for d in reconcile(fleet).drains if d.replica == "old-1"]
    assert [(s.node, s.record.rank) for s in drain.shards] == [("hgx-2", 1)]
    assert drain.drain and drain.reason == "no catalog model retired wants it"


def test_a_replica_no_catalog_model_wants_is_drained() -> None:
    fleet = snapshot(hgx("hgx-1", shards=[shard("old-1", "retired", [0])]))
    (drain,) = [d for d in reconcile(fleet).drains if d.replica == "old-1"]
    assert drain.drain and drain.reason == "no catalog model retired wants it"


def test_draining_a_node_places_its_replicas_elsewhere_before_they_stop() -> None:
    fleet = snapshot(
        hgx("hgx-1", cordoned="maintenance",
            shards=[shard("small-1", "small", [0, 1], profile="x2")]),
        hgx("hgx-2", shards=[shard("small-2", "small", [0, 1], profile="x2")]),
        hgx("hgx-3"),
    )  # fmt: skip
    result = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1), evict=frozenset({"hgx-1"}))
    assert [d.replica for d in result.drains] == ["small-1"]
    (start,) = [s for s in result.starts if s.model == "small"]
    # Not hgx-1 (being drained), nor hgx-2 (small-2 is there and hgx-3 is free).
    assert [(sh.node, sh.gpus) for sh in start.placement.shards] == [("hgx-3", (0, 1))]
    assert not result.stops  # nothing broken: the old replica serves until the new one does


def test_a_replica_id_that_comes_back_fails_anew() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2, state="failed",
                          started=NOW)]),
    )  # fmt: skip
    earlier = Backoff(failures=1, until=NOW, counted=("big-1@2026-11-30T08:00:00+00:00",))
    assert reconcile(fleet, {"big": earlier}).ledger["big"].failures == 2
