"""Lost is seen, not inferred (issue 28): a node is Lost only once ctl has watched it fail for
the whole lost-after, counted from the first failed contact since it was last reached
(kept in its facts by cli/facts/probe.py `unreached`), never from the age of last_reached.

Each pass is what a watching controller does: one gather attempt per node, its facts
carried from the pass before, a snapshot at that moment, a plan on it.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from cli.cluster.snapshot import Reachability, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import NodeFacts
from cli.facts.probe import facts_from_attempt
from cli.reconcile.planner import plan
from tests.builders import NOW, catalog, facts, hgx, host, shard

LOST_AFTER = timedelta(hours=1)
MODELS = catalog(
    """\
    models:
      small:
        source: hf://org/small
        replicas: {min: 1}
        profiles:
          - {name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
    """
)
NODES = [hgx("hgx-1", shards=[shard("small-1", "small", [0, 1], profile="x2")]), hgx("hgx-2")]
ADDRESSES = {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2"}


def seen(previous: NodeFacts, now: datetime, answered: bool) -> NodeFacts:
    """The node's facts after one attempt at `now`: it answers with what it had (its
    shards running) or times out."""
    if answered:
        return previous.model_copy(
            update={"gathered_at": now, "last_reached": now, "error": None,
                    "unreachable_since": None}
        )  # fmt: skip
    return facts_from_attempt(None, "timed out after 3 s", previous, now)


def pass_at(now: datetime, node_1: NodeFacts) -> tuple[Reachability, list[str]]:
    """hgx-1's reachability at `now`, and the replicas the pass would stop."""
    fleet = build_snapshot(
        [host(spec) for spec in NODES],
        {"hgx-1": node_1, "hgx-2": facts(NODES[1]).model_copy(update={"gathered_at": now})},
        now,
        gpu_class,
        LOST_AFTER,
    )
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    stopped = [s.replica for s in (*the_plan.stops, *the_plan.drains)]
    return fleet.node("hgx-1").reachability, stopped


def test_a_blip_after_a_quiet_spell_is_unreachable_and_its_replicas_are_left_alone() -> None:
    # Last reached three days ago (a weekend without a pass), then one failed attempt.
    days_ago = NOW - timedelta(days=3)
    cached = facts(NODES[0]).model_copy(update={"gathered_at": days_ago, "last_reached": days_ago})
    after = seen(cached, NOW, answered=False)
    assert after.unreachable_since == NOW
    assert after.last_reached == NOW - timedelta(days=3)
    assert pass_at(NOW, after) == (Reachability.UNREACHABLE, [])


def test_only_lost_after_of_watched_failure_makes_the_node_lost() -> None:
    node = facts(NODES[0])
    first = NOW + timedelta(minutes=1)
    node = seen(node, first, answered=False)
    for minutes in range(2, 61):  # every minute, failing each time
        node = seen(node, NOW + timedelta(minutes=minutes), answered=False)
        state, stopped = pass_at(NOW + timedelta(minutes=minutes), node)
        assert (state, stopped) == (Reachability.UNREACHABLE, []), minutes
    assert node.unreachable_since == first  # the first failure, not the latest
    node = seen(node, first + LOST_AFTER, answered=False)
    state, stopped = pass_at(first + LOST_AFTER, node)
    assert (state, stopped) == (Reachability.LOST, ["small-1"])


def test_a_node_that_answers_every_other_pass_is_never_lost() -> None:
    node = facts(NODES[0])
    for step in range(1, 200):  # ten-minute passes: 33 hours of flapping
        now = NOW + timedelta(minutes=10 * step)
        node = seen(node, now, answered=step % 2 == 0)
        state, stopped = pass_at(now, node)
        assert state is not Reachability.LOST and stopped == [], step
        if step % 2:
            assert node.unreachable_since == now  # counted afresh after each answer


def test_cached_facts_from_before_the_count_start_it_at_the_first_failure_seen() -> None:
    # A cache written by an older ctl: unreached, but with no unreachable_since.
    update = {"error": "timed out", "unreachable_since": None,
              "last_reached": NOW - timedelta(days=2)}  # fmt: skip
    old = facts(NODES[0]).model_copy(update=update)
    assert pass_at(NOW, old)[0] is Reachability.UNREACHABLE
    assert seen(old, NOW, answered=False).unreachable_since == NOW
