"""The reconcile planner's decisions read back field by field: which replica each stop,
drain and leave names and why, the order they come in, when the backoff ledger is kept or
forgotten, which replicas a scale-down retires around manual ones, and the ports a new
replica gets when few are left.

Written against survivors of the mutation run in cli/reconcile/planner.py: the decisions
were made, but no test held a stop's model, a start's whole reason, the listen address,
or the arithmetic of replicas.max with manual replicas.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot
from cli.reconcile.backoff import Backoff
from cli.reconcile.planner import Condition, Plan, condition, plan, replicas_of
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, snapshot

ADDRESSES = {f"hgx-{i}": f"10.0.0.{i}" for i in range(1, 7)}
FABRIC = [("ib", ["mlx5_0", "mlx5_1"])]


def model_m(replicas: str) -> Catalog:
    return catalog(
        f"""\
        models:
          m:
            source: hf://org/m
            replicas: {replicas}
            profiles:
              - {{name: hi, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 2}}
              - {{name: lo, priority: 50, engine: vllm, gpu_class: H100, gpus_per_node: 1}}
        """
    )


BIG = catalog(
    """\
    models:
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
    """
)


def reconcile(
    models: Catalog,
    fleet: Snapshot,
    ledger: dict[str, Backoff] | None = None,
    *,
    evict: frozenset[str] = frozenset(),
    listen: dict[str, str] | None = None,
) -> Plan:
    rng = random.Random(1)
    return plan(models, fleet, ledger or {}, ADDRESSES, rng, evict=evict, listen=listen)


def m_replica(
    number: int,
    profile: str = "hi",
    *,
    manual: bool = False,
    unreachable: bool = False,
    minutes_ago: int = 60,
) -> NodeSpec:
    """Replica m-N alone on node hgx-N, started `minutes_ago`."""
    gpus = [0, 1] if profile == "hi" else [0]
    record = shard(
        f"m-{number}",
        "m",
        gpus,
        profile=profile,
        origin="manual" if manual else "reconcile",
        started=NOW - timedelta(minutes=minutes_ago),
    )
    return hgx(
        f"hgx-{number}",
        shards=[record],
        unreachable_for=timedelta(minutes=5) if unreachable else None,
    )


def drained(result: Plan) -> list[str]:
    return [d.replica for d in result.drains]


# --------------------------------------------------------------------------- what is stopped


def test_unwanted_replicas_are_drained_in_number_order() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("old-10", "retired", [0])]),
        hgx("hgx-2", shards=[shard("old-2", "retired", [0])]),
    )
    result = reconcile(model_m("{min: 0}"), fleet)
    assert [(d.replica, d.model, d.drain, d.reason) for d in result.drains] == [
        ("old-2", "retired", True, "no catalog model retired wants it"),
        ("old-10", "retired", True, "no catalog model retired wants it"),
    ]
    assert [r.replica for r in replicas_of(fleet)] == ["old-2", "old-10"]


def test_a_lost_replicas_stop_names_its_model() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-1", "m", [0, 1], profile="hi")],
            unreachable_for=timedelta(hours=2)),
        hgx("hgx-2"),
    )  # fmt: skip
    result = reconcile(model_m("{min: 1}"), fleet)
    assert [(s.replica, s.model, s.drain, s.reason) for s in result.stops] == [
        ("m-1", "m", False, "hgx-1 lost (timed out after 10 s)")
    ]


def test_a_failed_replica_names_every_failed_rank_and_its_failure_is_keyed_by_its_life() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, profile="x16", nodes=2, state="failed",
                          started=NOW - timedelta(hours=1))]),
        hgx("hgx-2", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 1, profile="x16", nodes=2, state="failed",
                          started=NOW - timedelta(hours=1))]),
    )  # fmt: skip
    result = reconcile(BIG, fleet)
    assert [(s.replica, s.model, s.drain, s.reason) for s in result.stops] == [
        ("big-1", "big", False, "rank 0 on hgx-1, rank 1 on hgx-2 failed")
    ]
    assert result.ledger["big"].failures == 1
    assert result.ledger["big"].counted == ("big-1@2026-11-30T08:00:00+00:00",)


def test_an_unreachable_replica_is_left_with_its_model_and_why() -> None:
    fleet = snapshot(m_replica(1, unreachable=True))
    result = reconcile(model_m("{min: 1}"), fleet)
    assert [(leave.replica, leave.model, leave.reason) for leave in result.leaves] == [
        ("m-1", "m", "hgx-1 unreachable; left alone")
    ]


def test_a_replica_on_a_node_being_drained_is_drained_naming_its_model() -> None:
    fleet = snapshot(m_replica(1), hgx("hgx-2"))
    result = reconcile(model_m("{min: 1}"), fleet, evict=frozenset({"hgx-1"}))
    (drain,) = result.drains
    assert (drain.replica, drain.model, drain.reason, drain.drain) == (
        "m-1",
        "m",
        "node drained",
        True,
    )
    assert [(s.node, s.record.replica) for s in drain.shards] == [("hgx-1", "m-1")]
    (start,) = result.starts
    assert start.reason == "0 of 1 running; moves m-1 off a drained node"


# --------------------------------------------------------------------------- conditions


def test_a_replica_still_starting_is_starting_and_a_running_one_healthy() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-1", "m", [0, 1], profile="hi", state="starting")]),
        hgx("hgx-2", shards=[shard("m-2", "m", [0, 1], profile="hi")]),
    )
    nodes = {node.name: node for node in fleet.nodes}
    found = {r.replica: condition(r, model_m("{min: 2}"), nodes) for r in replicas_of(fleet)}
    assert found == {
        "m-1": (Condition.STARTING, "starting"),
        "m-2": (Condition.HEALTHY, "healthy"),
    }


# --------------------------------------------------------------------------- the ledger


def test_failures_are_kept_while_a_replica_is_still_starting() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-1", "m", [0, 1], profile="hi", state="starting")]),
        hgx("hgx-2", shards=[shard("m-2", "m", [0, 1], profile="hi")]),
    )
    ledger = {"m": Backoff(failures=2, until=NOW - timedelta(minutes=1), counted=("m-0@?",))}
    result = reconcile(model_m("{min: 2}"), fleet, ledger)
    assert result.ledger == ledger
    assert result.empty


def test_failures_are_kept_while_the_model_is_still_short() -> None:
    fleet = snapshot(m_replica(1), hgx("hgx-2"))
    ledger = {"m": Backoff(failures=2, until=NOW - timedelta(minutes=1), counted=("m-0@?",))}
    result = reconcile(model_m("{min: 2}"), fleet, ledger)
    assert [s.replica for s in result.starts] == ["m-2"]
    assert result.ledger == ledger


def test_failures_are_forgotten_once_every_wanted_replica_is_healthy() -> None:
    fleet = snapshot(m_replica(1), m_replica(2))
    ledger = {"m": Backoff(failures=2, until=NOW - timedelta(minutes=1), counted=("m-0@?",))}
    result = reconcile(model_m("{min: 2}"), fleet, ledger)
    assert result.ledger == {}


# --------------------------------------------------------------------------- a start


def test_a_starts_reason_counts_what_runs_and_lists_every_replica_it_replaces() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-1", "m", [0, 1], profile="hi")],
            unreachable_for=timedelta(hours=2)),
        hgx("hgx-2", shards=[shard("m-2", "m", [0, 1], profile="hi")],
            unreachable_for=timedelta(hours=3)),
        hgx("hgx-3"),
    )  # fmt: skip
    result = reconcile(model_m("{min: 2}"), fleet)
    assert [s.reason for s in result.starts] == [
        "0 of 2 running; replaces m-1 (hgx-1 lost (timed out after 10 s));"
        " replaces m-2 (hgx-2 lost (timed out after 10 s))"
    ] * 2
    assert result.now == NOW


def test_new_shards_serve_on_the_listen_address_given_for_their_node() -> None:
    fleet = snapshot(hgx("hgx-1"))
    result = reconcile(model_m("{min: 1}"), fleet, listen={"hgx-1": "10.9.0.1"})
    (start,) = result.starts
    assert '"--host" "10.9.0.1"' in start.leader.unit_text
    assert '"--host" "0.0.0.0"' not in start.leader.unit_text


def test_a_replica_that_fits_nowhere_is_unplaced() -> None:
    fleet = snapshot(NodeSpec("cpu-1"))
    result = reconcile(model_m("{min: 1}"), fleet)
    assert result.starts == ()
    assert [(p.replica, p.model, p.profile) for p in result.unplaced] == [("m-1", "m", None)]


# --------------------------------------------------------------------------- scale-down


def test_above_replicas_max_reconciles_own_replica_goes_before_a_manual_one() -> None:
    # min 1, max 1: the manual replica (lower priority) stays; reconcile's own goes.
    fleet = snapshot(m_replica(1, "hi"), m_replica(2, "lo", manual=True))
    result = reconcile(model_m("{min: 1, max: 1}"), fleet)
    assert [(d.replica, d.reason) for d in result.drains] == [
        ("m-1", "scale down: 2 running, replicas.min 1")
    ]


def test_each_manual_replica_is_one_more_on_top_of_replicas_min() -> None:
    # min 1, max 3, one manual: the model keeps 2; the newest of reconcile's own goes.
    fleet = snapshot(
        m_replica(1, minutes_ago=90), m_replica(2, minutes_ago=30), m_replica(3, manual=True)
    )
    assert drained(reconcile(model_m("{min: 1, max: 3}"), fleet)) == ["m-2"]


def test_a_manual_replica_within_replicas_max_is_kept_even_when_the_rest_cannot_go() -> None:
    # 4 running, min 1, max 3, one manual: the model would keep 2, but two of reconcile's
    # are unreachable; m-1 goes, and then 3 run, within max: the manual m-4 stays.
    fleet = snapshot(
        m_replica(1),
        m_replica(2, unreachable=True),
        m_replica(3, unreachable=True),
        m_replica(4, manual=True),
    )
    assert drained(reconcile(model_m("{min: 1, max: 3}"), fleet)) == ["m-1"]


def test_manual_replicas_go_too_while_the_model_is_above_replicas_max() -> None:
    # 4 running, min 1, max 2, two manual: keep 2. m-1 goes; 3 still run, above max, so
    # the newest manual one goes as well; m-2 is unreachable and left alone.
    fleet = snapshot(
        m_replica(1),
        m_replica(2, unreachable=True),
        m_replica(3, manual=True, minutes_ago=90),
        m_replica(4, manual=True, minutes_ago=30),
    )
    assert drained(reconcile(model_m("{min: 1, max: 2}"), fleet)) == ["m-1", "m-4"]


# --------------------------------------------------------------------------- ports


def test_a_stopped_replicas_port_is_free_for_this_plans_starts() -> None:
    models = catalog(
        """\
        models:
          m:
            source: hf://org/m
            replicas: {min: 0}
            profiles:
              - {name: p, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
          other:
            source: hf://org/other
            profiles:
              - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
        """
    )
    # m-1 failed and is stopped first: its port is free. old-1 is only drained, after the
    # starts: it keeps 8001 until then.
    fleet = snapshot(hgx("hgx-1", shards=[shard("m-1", "m", [0], port=8000, state="failed"),
                                          shard("old-1", "x", [1], port=8001)]))  # fmt: skip
    result = reconcile(models, fleet)
    assert ([s.replica for s in result.stops], drained(result)) == (["m-1"], ["old-1"])
    (start,) = result.starts
    assert (start.replica, start.leader.port) == ("other-1", 8000)


def test_the_last_port_8999_is_used_when_every_other_is_taken() -> None:
    fleet = snapshot(hgx("hgx-1", listening=range(8000, 8999)))
    (start,) = reconcile(model_m("{min: 1}"), fleet).starts
    assert start.leader.port == 8999


def test_no_free_port_on_the_nodes_of_a_replica_is_an_error_naming_them() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC, listening=range(8000, 9000)),
        hgx("hgx-2", fabrics=FABRIC),
    )
    with pytest.raises(RuntimeError) as raised:
        reconcile(BIG, fleet)
    assert str(raised.value) == "no free port in 8000-8999 on hgx-1, hgx-2"
