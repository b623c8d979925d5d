"""Properties of the reconcile planner on random fleets in the middle of their lives
(tests/property/planner_strategies.py): damaged multi-node replicas, nodes in every
status, hand-started replicas, too many replicas, backoffs running and expired.

What each property holds the planner to, decided from docs/reconcile.md and the code:

1. A fixed point: after `applied(plan)`, planning again (with the plan's ledger) stops
   and drains nothing, waits exactly as before (same model, same end, same failures)
   and leaves the same replicas alone; it starts nothing unless the first plan drained
   something (a drain frees capacity only after the starts, so the next plan may use it).
2. Nodes that do not answer are not touched: every stopped or drained shard is on a node
   that answers (Ready or Cordoned — a cordon keeps new work off, docs/inventory.md, and
   does not stop a failed replica from being stopped); shards on Unreachable or Lost
   nodes are left out of the Stop (a Lost node's are forgotten, the replica replaced).
   New shards go only to Ready, uncordoned nodes.
3. Ports: every new shard's port and its rendezvous port (port + 10000, the engines'
   `--master-port` / `--dist-init-addr`) are unique on the node against every other new
   shard and every shard that keeps running, and neither is a port the node reports
   listening; ports are 8000-8999.
4. Every replica gets its bucket: unwanted → drained where it answers; on a Lost node →
   stopped where it answers; on an Unreachable node → left alone and counted; a rank
   missing (rank 0 included) or failed → stopped whole, every shard it has.
5. Backoff: a model short of replicas.min gets a Wait exactly until its ledger entry's end
   when that end is still ahead (the input's end unless this plan counted a new
   failure), and otherwise the missing Starts, or as many as fit then one unplaced
   replica with its rejections; no Wait ever ends now or earlier.
6. Scale-down never goes below replicas.min, never touches a replica left alone, drains
   reconcile's own replicas before any hand-started one (lowest priority first), and
   keeps hand-started ones only while the model stays within replicas.max.
7. Determinism: the same input plans the same; so does the fleet with its hosts, its
   facts mapping and each node's shard records in another order.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.reconcile.planner import Plan, Stop, Wait, applied
from tests.builders import NOW
from tests.property.planner_strategies import PlannerScenario, features, planner_scenarios

# The profile (tests/conftest.py) derandomizes; this sets only how many examples.
PROPERTY_SETTINGS = settings(max_examples=250)


def stopped(result: Plan) -> dict[str, list[Stop]]:
    found: dict[str, list[Stop]] = {}
    for stop in (*result.stops, *result.drains):
        found.setdefault(stop.replica, []).append(stop)
    return found


def shards_of(stop: Stop) -> list[tuple[str, int]]:
    return [(s.node, s.record.rank) for s in stop.shards]


def record_events(scenario: PlannerScenario) -> None:
    for note in sorted(scenario.notes):
        event(note)


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_planning_again_after_the_plan_is_applied_changes_nothing(
    scenario: PlannerScenario,
) -> None:
    record_events(scenario)
    first = scenario.result
    second = scenario.plan(applied(first, scenario.snapshot), first.ledger)
    assert second.stops == () and second.drains == (), second
    assert second.waits == first.waits
    assert second.leaves == first.leaves
    if first.drains:
        event("first plan drained: the second may start on what it freed")
        return
    assert second.starts == (), second.starts
    assert [p.model for p in second.unplaced] == [p.model for p in first.unplaced]
    if first.starts or first.stops:
        event("fixed point after a plan that changed something")


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_nothing_is_stopped_or_drained_on_a_node_that_does_not_answer(
    scenario: PlannerScenario,
) -> None:
    record_events(scenario)
    result = scenario.result
    for stop in (*result.stops, *result.drains):
        for running in stop.shards:
            status = scenario.statuses[running.node]
            assert status in ("ready", "cordoned"), (stop.replica, running.node, status)
            if status == "cordoned":
                event("a shard on a Cordoned node stopped or drained")
    for start in result.starts:
        for files in start.files:
            assert scenario.statuses[files.node] == "ready", (start.replica, files.node)


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_new_ports_and_rendezvous_ports_are_free_and_unique_on_each_node(
    scenario: PlannerScenario,
) -> None:
    record_events(scenario)
    result = scenario.result
    gone = {stop.replica for stop in result.stops}
    listening = scenario.listening
    held: dict[str, set[int]] = {name: set() for name in scenario.statuses}
    for replica in scenario.replicas:
        if replica.replica in gone:
            continue  # stopped before the starts: its ports are free again
        for running in replica.present:
            held[running.node] |= {replica.port, replica.port + 10000}
    new: Counter[tuple[str, int]] = Counter()
    for start in result.starts:
        ports = {files.port for files in start.files}
        assert len(ports) == 1, (start.replica, ports)  # one port for the whole replica
        (port,) = ports
        assert 8000 <= port <= 8999, (start.replica, port)
        for files in start.files:
            node = files.node
            new[node, port] += 1
            assert port not in listening[node], (start.replica, node, port)
            assert port + 10000 not in listening[node], (start.replica, node, port + 10000)
            assert port not in held[node], (start.replica, node, port, held[node])
            assert port + 10000 not in held[node], (start.replica, node, port, held[node])
            assert f'"port": {port}' in files.record_text
            if len(start.files) > 1:
                assert str(port + 10000) in files.unit_text, (start.replica, files.rank)
        if len(start.files) > 1:
            event("a multi-node start")
    twice = [key for key, count in new.items() if count > 1]
    assert not twice, f"a port given twice on one node: {twice}"
    nodes = Counter(node for node, _ in new)
    if any(count > 1 for count in nodes.values()):
        event("two new shards on one node")


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_every_replica_is_handled_as_its_bucket_says(scenario: PlannerScenario) -> None:
    record_events(scenario)
    result = scenario.result
    stops = stopped(result)
    leaves = [leave.replica for leave in result.leaves]
    known = {replica.replica for replica in scenario.replicas}
    assert set(stops) <= known and set(leaves) <= known  # nothing made up
    assert len(leaves) == len(set(leaves))
    for replica in scenario.replicas:
        mine = stops.get(replica.replica, [])
        assert len(mine) <= 1, mine  # one bucket, one action
        bucket = replica.bucket
        event(f"bucket: {bucket}")
        if bucket == "unreachable":
            assert replica.replica in leaves and not mine, replica
            continue
        assert replica.replica not in leaves, replica
        if bucket == "counted":
            assert all(stop.drain for stop in mine)  # at most a scale-down drain
            continue
        assert mine, f"{replica.replica} ({bucket}) neither stopped nor drained"
        (stop,) = mine
        assert shards_of(stop) == list(replica.reachable), (stop, replica)
        assert stop.drain == (bucket == "unwanted"), stop
        if bucket == "failed":
            assert [s.node for s in stop.shards] == [s.node for s in replica.present]


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_a_replica_missing_any_rank_is_stopped_whole(scenario: PlannerScenario) -> None:
    record_events(scenario)
    stops = {stop.replica: stop for stop in scenario.result.stops}
    for replica in scenario.replicas:
        if not replica.missing_ranks or replica.bucket != "failed":
            continue
        event("missing rank 0" if 0 in replica.missing_ranks else "missing a rank, not 0")
        assert replica.replica in stops, f"{replica.replica} misses {replica.missing_ranks}"
        stop = stops[replica.replica]
        assert not stop.drain
        present = sorted((s.node, s.rank) for s in replica.present)
        assert sorted(shards_of(stop)) == present, (stop, present)
        listed = ", ".join(str(rank) for rank in replica.missing_ranks)
        assert stop.reason == f"rank {listed} missing"


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_a_short_model_waits_exactly_its_backoff_or_is_started_or_explained(
    scenario: PlannerScenario,
) -> None:
    record_events(scenario)
    result = scenario.result
    for wait in result.waits:
        assert wait.until > NOW, f"{wait.model} waits until {wait.until}, which is past"
    for name, model in scenario.catalog.models.items():
        missing = model.replicas_min - len(scenario.counted(name))
        starts = [start for start in result.starts if start.model == name]
        waits = [wait for wait in result.waits if wait.model == name]
        unplaced = [p for p in result.unplaced if p.model == name]
        if missing <= 0:
            assert not starts and not waits and not unplaced, (name, starts, waits)
            continue
        backoff = result.ledger.get(name)
        if backoff is not None and backoff.until is not None and backoff.until > NOW:
            assert waits == [Wait(name, backoff.until, backoff.failures)], (waits, backoff)
            assert not starts and not unplaced
            if not scenario.new_failure(name):
                assert backoff == scenario.ledger[name]  # the input's end, exactly
                event("wait: a backoff still running")
            else:
                # Each failure counted once; the wait drawn between half and all of
                # 30 s × 2ⁿ⁻¹, capped at 30 minutes (docs/reconcile.md).
                before = scenario.ledger.get(name)
                failures = (before.failures if before else 0) + len(scenario.new_failures(name))
                full = min(timedelta(seconds=30) * 2 ** (failures - 1), timedelta(minutes=30))
                assert backoff.failures == failures, (backoff, failures)
                assert NOW + full / 2 <= backoff.until <= NOW + full, (backoff, full)
                event("wait: a failure just counted")
            continue
        assert not waits, waits
        if name in scenario.ledger:
            event("an expired backoff: started or explained")
        if len(starts) == missing:
            assert not unplaced
            continue
        assert len(starts) < missing and len(unplaced) == 1, (name, missing, starts, unplaced)
        (refused,) = unplaced
        assert refused.profile is None and refused.attempts
        assert all(not attempt.fits for attempt in refused.attempts)
        assert refused.rejections, refused  # every node it was refused on, with why
        event("short model not placed, with its reasons")


@PROPERTY_SETTINGS
@given(planner_scenarios())
def test_scale_down_keeps_min_and_manual_replicas_only_up_to_max(
    scenario: PlannerScenario,
) -> None:
    record_events(scenario)
    result = scenario.result
    for name, model in scenario.catalog.models.items():
        counted = scenario.counted(name)
        ids = {replica.replica for replica in counted}
        drains = {d.replica: d for d in result.drains if d.model == name and d.replica in ids}
        if len(counted) <= model.replicas_min:
            assert not drains, (name, len(counted), model.replicas_min, drains)
            continue
        after = len(counted) - len(drains)
        assert after >= model.replicas_min, (name, after, model.replicas_min)
        by_id = {replica.replica: replica for replica in counted}
        for replica_id, drain in drains.items():
            replica = by_id[replica_id]
            assert replica.bucket == "counted", replica  # never one left alone
            assert drain.drain and drain.reason.startswith("scale down:"), drain
            assert shards_of(drain) == list(replica.reachable)
        kept = [r for r in counted if r.replica not in drains and r.bucket == "counted"]
        # Each hand-started replica is one more on top of min, up to max: scale-down never
        # undoes an operator's `ctl place` by retiring one of reconcile's own instead.
        manual = sum(1 for r in counted if r.bucket == "counted" and r.origin == "manual")
        target = min(model.replicas_max, model.replicas_min + manual)
        assert after >= target, (name, after, target)
        if after > target:
            # Reconcile's own go first, down to the target; hand-started ones stay within max.
            assert all(r.origin == "manual" for r in kept), (name, kept)
            if kept:
                assert after <= model.replicas_max, (name, after, model.replicas_max)
                event("scale-down stopped at replicas.max, manual replicas kept")
        drained_own = [by_id[i] for i in drains if by_id[i].origin == "reconcile"]
        kept_own = [r for r in kept if r.origin == "reconcile"]
        if drained_own and kept_own:
            assert max(r.priority for r in drained_own) <= min(r.priority for r in kept_own)
            event("scale-down chose by priority")
        if drains:
            event("scale-down drained")


@PROPERTY_SETTINGS
@given(planner_scenarios(), st.randoms(use_true_random=False))
def test_the_plan_is_the_same_for_the_same_fleet_in_any_order(
    scenario: PlannerScenario, order: random.Random
) -> None:
    record_events(scenario)
    assert scenario.plan() == scenario.result
    assert scenario.plan(scenario.build(order)) == scenario.result


# --- the generator reaches the hard cases --------------------------------------------------

# The share of scenarios that must hold each feature (planner_strategies.features).
RATES = {
    "multi-node replica missing a rank": 0.10,
    "multi-node replica missing rank 0": 0.05,
    "multi-node replica with every rank": 0.10,
    "failed replica missing a rank": 0.10,
    "failed replica missing rank 0": 0.05,
    "replica on an Unreachable node": 0.10,
    "replica on a Lost node": 0.10,
    "replica on a Cordoned node": 0.05,
    "unwanted replica": 0.10,
    "failed replica": 0.10,
    "manual replica": 0.10,
    "model with min == max": 0.10,
    "scale-down": 0.10,
    "scale-down with manual replicas": 0.05,
    "more than replicas.max running": 0.05,
    "active backoff": 0.10,
    "expired backoff": 0.10,
    "short model with an expired backoff": 0.05,
    "node listening on ports": 0.10,
}


def test_the_generator_reaches_every_hard_case_often_enough() -> None:
    seen: Counter[str] = Counter()
    total = 0

    @settings(max_examples=300)
    @given(planner_scenarios())
    def collect(scenario: PlannerScenario) -> None:
        nonlocal total
        total += 1
        assert features(scenario) == scenario.notes
        seen.update(scenario.notes)

    collect()
    assert total >= 250
    rates = {name: seen[name] / total for name in RATES}
    low = {name: rate for name, rate in rates.items() if rate < RATES[name]}
    assert not low, f"reached too rarely: {low}"
