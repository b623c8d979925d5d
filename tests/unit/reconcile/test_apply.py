"""Applying a plan: phase order, one executor call per phase, replicas whole or stopped."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest

from cli.reconcile.apply import apply
from cli.reconcile.planner import Plan, Stop, plan
from cli.shards.units import unit_name
from tests.builders import NOW, catalog, hgx, shard, snapshot
from tests.fakes.executor import FakeFleet

MODELS = catalog(
    """\
    models:
      small:
        source: hf://org/small
        replicas: {min: 2}
        profiles:
          - {name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      big:
        source: hf://org/big
        profiles:
          - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
    """
)
FABRIC = [("ib", ["mlx5_0"])]
FLEET = snapshot(*(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(1, 5)))
ADDRESSES = {f"hgx-{i}": f"10.0.0.{i}" for i in range(1, 5)}


def reconcile_once(fake: FakeFleet, seed: int = 1) -> None:
    current = fake.snapshot(FLEET)
    the_plan = plan(MODELS, current, {}, ADDRESSES, random.Random(seed))
    apply(the_plan, fake, NOW, random.Random(seed))


def nodes_of(fake: FakeFleet, model: str) -> set[str]:
    return {node for (node, _), record in fake.records.items() if record.model == model}


def test_workers_start_before_rank_0_one_call_per_phase() -> None:
    fake = FakeFleet()
    reconcile_once(fake)
    assert [verb for verb, _ in fake.calls] == ["stage", "start", "start"]
    staged, workers, leaders = (shards for _, shards in fake.calls)
    # one download per node and source, before anything starts: big-1's on both its nodes
    assert sorted(staged) == sorted(
        f"hf://org/{model}@{node}" for model in ("big", "small") for node in nodes_of(fake, model)
    )
    assert len(nodes_of(fake, "big")) == 2
    assert workers == ("big-1/1",)
    assert sorted(leaders) == ["big-1/0", "small-1/0", "small-2/0"]
    assert fake.running() == {"big-1", "small-1", "small-2"}


def test_after_an_apply_the_next_plan_is_empty() -> None:
    fake = FakeFleet()
    reconcile_once(fake)
    again = plan(MODELS, fake.snapshot(FLEET), {}, ADDRESSES, random.Random(2))
    assert again.empty


def test_a_rank_that_does_not_start_gets_its_replica_stopped_whole_and_backed_off() -> None:
    fake = FakeFleet(fail={("big-1", 1)})
    the_plan = plan(MODELS, FLEET, {}, ADDRESSES, random.Random(1))
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    assert outcome.failed == {"big-1": "rank 1 on hgx-4: not healthy after 600 s"}
    assert "big-1" not in fake.running()  # rank 0 was never started, rank 1 removed
    assert [verb for verb, _ in fake.calls] == ["stage", "start", "start", "stop"]
    assert "big-1/0" not in fake.calls[1][1]  # no rank 0 for a replica whose worker failed
    assert outcome.ledger["big"].failures == 1


def test_an_interrupted_apply_leaves_no_replica_half_started() -> None:
    fake = FakeFleet(interrupt_on_rank0=True)
    the_plan = plan(MODELS, FLEET, {}, ADDRESSES, random.Random(1))
    with pytest.raises(KeyboardInterrupt):
        apply(the_plan, fake, NOW, random.Random(1))
    assert fake.running() == set()
    assert fake.calls[-1] == ("stop", ("small-1", "small-2", "big-1"))


def test_broken_replicas_stop_before_anything_starts_and_drains_come_last() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("small-1", "small", [0, 1], profile="x2", state="failed"),
                    shard("gone-1", "gone", [2], port=8001)]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(2, 5)),
    )  # fmt: skip
    fake = FakeFleet()
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    assert outcome.phases == [
        "stop broken replicas", "stage weights", "start workers", "start rank 0",
        "drain retired replicas",
    ]  # fmt: skip
    assert fake.calls[0] == ("stop", ("small-1",))
    assert fake.calls[-1] == ("stop", ("gone-1",))


def test_a_retired_multi_node_replica_stops_rank_0_first_then_its_workers() -> None:
    # vLLM's --headless ranks exit at once on SIGTERM (entrypoints/cli/serve.py
    # run_headless): stopped with rank 0, they would take its workers away mid-drain.
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC, shards=[shard("old-1", "old", range(8), 0, nodes=2)]),
        hgx("hgx-2", fabrics=FABRIC, shards=[shard("old-1", "old", range(8), 1, nodes=2)]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(3, 5)),
    )  # fmt: skip
    fake = FakeFleet()
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    assert outcome.phases[-2:] == ["drain retired replicas", "stop retired replicas' workers"]
    assert fake.stop_calls == [("old-1/0",), ("old-1/1",)]
    assert outcome.stopped == ["old-1"]  # two steps, one replica: said once


class WorkersStay(FakeFleet):
    """Stops rank 0 but no worker."""

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        ranks0 = [
            replace(s, shards=tuple(x for x in s.shards if x.record.rank == 0)) for s in stops
        ]
        failures = super().stop(ranks0)
        for stop in stops:
            for x in stop.shards:
                if x.record.rank > 0:
                    unit = unit_name(stop.replica, x.record.rank)
                    failures[(x.node, unit)] = f"{unit} did not stop"
        return failures


def test_a_drained_multi_node_replica_whose_worker_stays_is_not_said_stopped() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC, shards=[shard("old-1", "old", range(8), 0, nodes=2)]),
        hgx("hgx-2", fabrics=FABRIC, shards=[shard("old-1", "old", range(8), 1, nodes=2)]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(3, 5)),
    )  # fmt: skip
    outcome = apply(plan(MODELS, fleet, {}, ADDRESSES, random.Random(1)), WorkersStay(), NOW,
                    random.Random(1))  # fmt: skip
    assert outcome.stopped == []
    assert outcome.stop_failures == {"old-1": "modelfleet-old-1-rank1.service did not stop"}
    assert not outcome.complete


def test_a_replica_wholly_on_a_lost_node_is_withdrawn_and_not_said_stopped() -> None:
    """Nothing of it can be reached: the routers drop it and its replacement starts, but no
    stop is sent and none is claimed; the pass that reaches its node again stops it."""
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC, unreachable_for=timedelta(hours=2),
            shards=[shard("small-1", "small", [0, 1], profile="x2")]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(2, 5)),
    )  # fmt: skip
    fake = FakeFleet(routed={"small-1"})
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    assert [(s.replica, s.shards) for s in the_plan.stops] == [("small-1", ())]
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake)
    assert (outcome.stopped, outcome.withdrawn_lost) == ([], ["small-1"])
    assert all(not call for call in fake.stop_calls)  # no stop sent for it
    assert "small-1" not in fake.routed
    assert len(outcome.started) == 2 and outcome.complete


def test_a_replica_with_a_rank_on_a_lost_node_is_not_said_stopped_while_that_rank_runs() -> None:
    """Rank 0 answers and is stopped; rank 1 is on a lost node and still runs: the replica
    is named with that node, never in `stopped` (which means every rank stopped)."""
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("big-1", "big", range(8), 0, nodes=2, profile="x16")]),
        hgx("hgx-2", fabrics=FABRIC, unreachable_for=timedelta(hours=2),
            shards=[shard("big-1", "big", range(8), 1, nodes=2, profile="x16")]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(3, 5)),
    )  # fmt: skip
    fake = FakeFleet(routed={"big-1"})
    fake.adopt(fleet)
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    [stop] = [s for s in the_plan.stops if s.replica == "big-1"]
    assert ([s.node for s in stop.shards], stop.out_of_reach) == (["hgx-1"], ("hgx-2",))
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake)
    assert (outcome.stopped, outcome.withdrawn_lost) == ([], [])
    assert outcome.stopped_but_lost == {"big-1": ["hgx-2"]}
    assert "big-1" not in fake.routed
    assert outcome.complete  # all that could be done was: the next pass stops rank 1


def broken_and_retired() -> tuple[FakeFleet, Plan]:
    """small-1 failed (stopped first), gone-1 wanted by nobody (drained last); both routed."""
    fleet = snapshot(
        hgx("hgx-1", fabrics=FABRIC,
            shards=[shard("small-1", "small", [0, 1], profile="x2", state="failed"),
                    shard("gone-1", "gone", [2], port=8001)]),
        *(hgx(f"hgx-{i}", fabrics=FABRIC) for i in range(2, 5)),
    )  # fmt: skip
    fake = FakeFleet(routed={"small-1", "gone-1"})
    for node in fleet.nodes:
        for record in node.shards:
            fake.records[(node.name, str(record.unit))] = record
    return fake, plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))


def test_routers_drop_a_replica_before_it_stops_and_add_one_only_once_it_serves() -> None:
    fake, the_plan = broken_and_retired()
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake)
    verbs = [verb for verb, _ in fake.calls]
    assert verbs == ["route", "stop", "stage", "start", "start", "route", "stop"]
    assert fake.calls[0] == ("route", ("-small-1",))
    assert fake.calls[5] == ("route", ("+big-1", "-gone-1"))  # small backs off after its failure
    assert fake.stopped_while_routed == []
    assert fake.routed_before_serving == []
    assert fake.routed == {"big-1"} == set(outcome.started)
    assert outcome.phases == [
        "route", "stop broken replicas", "stage weights", "start workers", "start rank 0", "route",
        "drain retired replicas",
    ]  # fmt: skip
    assert outcome.complete


def test_a_replica_that_did_not_start_is_never_routed() -> None:
    fake = FakeFleet(fail={("big-1", 1)})
    the_plan = plan(MODELS, FLEET, {}, ADDRESSES, random.Random(1))
    apply(the_plan, fake, NOW, random.Random(1), router=fake)
    routes = [changes for verb, changes in fake.calls if verb == "route"]
    assert routes == [("+small-1", "+small-2")]
    assert fake.routed == {"small-1", "small-2"}


def test_when_the_routers_cannot_be_updated_retired_replicas_keep_serving() -> None:
    fake, the_plan = broken_and_retired()
    fake.route_error = "router-1: unreachable"
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake)
    assert "gone-1" in fake.running()  # not drained: a router may still send it requests
    assert "routers could not be updated" in outcome.stop_failures["gone-1"]
    assert "router-1: unreachable" in outcome.stop_failures["gone-1"]
    assert "small-1" not in fake.running()  # broken: stopped all the same
    assert not outcome.complete
    assert outcome.route_failures == ["router-1: unreachable"] * 2


def test_without_a_router_an_apply_routes_nothing() -> None:
    fake, the_plan = broken_and_retired()
    apply(the_plan, fake, NOW, random.Random(1))
    assert "route" not in [verb for verb, _ in fake.calls]


def test_a_replica_whose_units_will_not_stop_is_reported_not_stopped() -> None:
    fake, the_plan = broken_and_retired()
    fake.fail_stop = {"gone-1"}
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake)
    assert outcome.stop_failures == {"gone-1": "modelfleet-gone-1-rank0.service did not stop"}
    assert "gone-1" not in outcome.stopped
    assert "gone-1" in fake.running()
    assert not outcome.complete


ONE_NODE = snapshot(hgx("hgx-1", fabrics=FABRIC))
TWO_SMALL = catalog(
    """\
    models:
      good:
        source: hf://org/good
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      bad:
        source: hf://org/bad
        profiles:
          - {name: x1, priority: 1, engine: llama.cpp, gpu_class: H100, gpus_per_node: 1}
    """
)


def test_a_failed_start_beside_a_working_one_fails_only_its_own_replica() -> None:
    journal = ("bad-1: error: invalid argument '--ctx-size': 'lots'", "exited with status 1")
    fake = FakeFleet(fail={("bad-1", 0)}, journal={("bad-1", 0): journal})
    the_plan = plan(TWO_SMALL, ONE_NODE, {}, ADDRESSES, random.Random(1))
    assert sorted({f.node for s in the_plan.starts for f in s.files}) == ["hgx-1"]
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    assert outcome.started == ["good-1"]
    assert outcome.failed == {"bad-1": "rank 0 on hgx-1: not healthy after 600 s"}
    (failed,) = outcome.failed_shards
    assert (failed.replica, failed.rank, failed.node) == ("bad-1", 0, "hgx-1")
    assert failed.unit == "modelfleet-bad-1-rank0.service"
    assert failed.failure.journal == journal
    assert fake.running() == {"good-1"}
    assert not outcome.complete


def test_a_worker_that_died_after_it_started_fails_its_replica_whole() -> None:
    fake = FakeFleet(die={("big-1", 1)})
    the_plan = plan(MODELS, FLEET, {}, ADDRESSES, random.Random(1))
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    # Rank 0 was started, and its worker checked once rank 0 had been waited for.
    assert fake.verified == [(), ("big-1/1",)]
    assert outcome.failed == {"big-1": "rank 1 on hgx-4: unit failed: its process exited"
                                       " with status 1"}  # fmt: skip
    assert "big-1" not in outcome.started and "big-1" not in fake.running()
    assert sorted(outcome.started) == ["small-1", "small-2"]
    assert outcome.ledger["big"].failures == 1


def test_every_failed_rank_of_a_replica_is_named() -> None:
    fake = FakeFleet(fail={("big-1", 0)}, die={("big-1", 1)})
    outcome = apply(plan(MODELS, FLEET, {}, ADDRESSES, random.Random(1)), fake, NOW,
                    random.Random(1))  # fmt: skip
    assert outcome.failed["big-1"] == (
        "rank 0 on hgx-3: not healthy after 600 s;"
        " rank 1 on hgx-4: unit failed: its process exited with status 1"
    )
    assert [(f.rank, f.node) for f in outcome.failed_shards] == [(0, "hgx-3"), (1, "hgx-4")]


def test_a_replica_whose_weights_cannot_be_staged_is_never_started_and_backs_off() -> None:
    fake = FakeFleet()
    the_plan = plan(MODELS, fake.snapshot(FLEET), {}, ADDRESSES, random.Random(1))
    (big,) = [s for s in the_plan.starts if s.model == "big"]
    rank1 = big.files[1].node
    fake.fail_stage[(rank1, "hf://org/big")] = "needs 140.0 GB more in /m, 80.0 GB free"
    outcome = apply(the_plan, fake, NOW, random.Random(1))
    assert outcome.failed == {
        "big-1": f"staging hf://org/big on {rank1} failed: needs 140.0 GB more in /m, 80.0 GB free"
    }
    assert outcome.stage_failed == ["big-1"]
    started = {shard for verb, shards in fake.calls if verb == "start" for shard in shards}
    assert not {s for s in started if s.startswith("big-1/")}  # not one rank of it
    assert ("stop", ("big-1",)) not in fake.calls  # nothing of it ran: nothing to stop
    assert fake.running() == {"small-1", "small-2"}
    assert outcome.ledger["big"].failures == 1 and "small" not in outcome.ledger
    assert not outcome.complete


def test_weights_are_staged_once_per_node_and_source_and_not_again_once_stored() -> None:
    fake = FakeFleet()
    same_node = snapshot(hgx("hgx-1", fabrics=FABRIC))
    the_plan = plan(MODELS, same_node, {}, ADDRESSES, random.Random(1))
    assert [(s.replica, len(s.stage)) for s in the_plan.starts] == [("small-1", 1), ("small-2", 1)]
    assert [p.replica for p in the_plan.unplaced] == ["big-1"]  # two nodes, and there is one
    apply(the_plan, fake, NOW, random.Random(1))
    assert fake.calls[0] == ("stage", ("hf://org/small@hgx-1",))  # one download for both
    assert fake.running() == {"small-1", "small-2"}
    emptied = plan(catalog("models: {}\n"), fake.snapshot(same_node), {}, ADDRESSES,
                   random.Random(1), force=True)  # fmt: skip
    fake.stop(emptied.drains)
    assert fake.running() == set()
    apply(plan(MODELS, fake.snapshot(same_node), {}, ADDRESSES, random.Random(1)), fake, NOW,
          random.Random(1))  # fmt: skip
    assert len(fake.running()) == 2
    assert fake.staged == [("hgx-1", "hf://org/small")]  # the second pass found it stored


def test_asked_to_stop_before_the_starts_stops_only_the_broken_and_backs_nothing_off() -> None:
    fake, the_plan = broken_and_retired()
    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake, stopping=lambda: True)
    assert [verb for verb, _ in fake.calls] == ["route", "stop"]  # the step begun first
    assert outcome.left_undone == ["start big-1", "drain gone-1"]
    assert "gone-1" in fake.running()  # not drained: nothing replaced it yet
    assert outcome.started == [] and outcome.ledger == the_plan.ledger
    assert not outcome.complete


def test_asked_to_stop_during_the_starts_finishes_them_and_leaves_routes_and_drains() -> None:
    fake, the_plan = broken_and_retired()
    asked: list[bool] = []

    def stopping() -> bool:  # asked first before the starts (no), then after them (yes)
        asked.append(bool(asked))
        return asked[-1]

    outcome = apply(the_plan, fake, NOW, random.Random(1), router=fake, stopping=stopping)
    assert outcome.started == ["big-1"] and "big-1" in fake.running()
    assert outcome.left_undone == ["route big-1", "drain gone-1"]
    assert "gone-1" in fake.running() and "gone-1" in fake.routed  # it serves on
    assert [verb for verb, _ in fake.calls] == ["route", "stop", "stage", "start", "start"]
