"""`plan(..., defragment=True)`: moves that make room, planned as a node drain's evictions
are (the new copy started, the old drained once it serves) and applied through the fake
fleet; the replica they made room for is placed by the next pass."""

from __future__ import annotations

import random

from cli.reconcile.apply import apply
from cli.reconcile.planner import plan
from tests.builders import NOW, catalog, hgx, snapshot
from tests.fakes.executor import FakeFleet

SMALL = """\
    models:
      small:
        source: hf://org/small
        replicas: {min: 2}
        profiles:
          - {name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
"""
WITH_BIG = (
    SMALL
    + """\
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}
"""
)
FLEET = snapshot(hgx("hgx-1"), hgx("hgx-2"))
ADDRESSES = {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2"}


def spread_smalls() -> FakeFleet:
    """small-1 on hgx-1, small-2 on hgx-2 (a spread limit of 1): no node free for big."""
    fake = FakeFleet()
    apply(plan(catalog(SMALL), FLEET, {}, ADDRESSES, None), fake, NOW, random.Random(1))
    assert {r.replica: node for (node, _), r in fake.records.items()} == {
        "small-1": "hgx-1",
        "small-2": "hgx-2",
    }
    return fake


def test_without_defragment_the_big_replica_waits() -> None:
    fake = spread_smalls()
    the_plan = plan(catalog(WITH_BIG), fake.snapshot(FLEET), {}, ADDRESSES, None)
    assert not the_plan.starts and not the_plan.drains
    assert [p.replica for p in the_plan.unplaced] == ["big-1"]


def test_defragment_moves_a_replica_make_before_break_and_the_next_pass_places_the_big_one() -> (
    None
):
    fake = spread_smalls()
    models = catalog(WITH_BIG)
    first = plan(models, fake.snapshot(FLEET), {}, ADDRESSES, None, defragment=True)
    assert [(s.replica, s.placement.shards[0].node) for s in first.starts] == [("small-3", "hgx-2")]
    (drain,) = first.drains
    assert (drain.replica, drain.drain, drain.replacement) == ("small-1", True, "small-3")
    assert drain.reason == "moved to small-3 on hgx-2: room for big-1"
    assert first.starts[0].reason == "moves small-1 off hgx-1: room for big-1"
    assert [p.replica for p in first.unplaced] == ["big-1"]  # placed by the next pass
    calls = len(fake.calls)
    apply(first, fake, NOW, random.Random(1))
    # The copy starts (and serves) before the old replica stops.
    verbs = [(verb, shards) for verb, shards in fake.calls[calls:] if verb in ("start", "stop")]
    assert verbs == [("start", ("small-3/0",)), ("stop", ("small-1",))]
    assert fake.running() == {"small-2", "small-3"}
    second = plan(models, fake.snapshot(FLEET), {}, ADDRESSES, None, defragment=True)
    assert [(s.replica, s.placement.shards[0].node) for s in second.starts] == [("big-1", "hgx-1")]
    assert not second.drains
    apply(second, fake, NOW, random.Random(1))
    assert fake.running() == {"small-2", "small-3", "big-1"}
    assert plan(models, fake.snapshot(FLEET), {}, ADDRESSES, None, defragment=True).empty


def test_a_failed_copy_leaves_the_old_replica_serving() -> None:
    fake = spread_smalls()
    first = plan(catalog(WITH_BIG), fake.snapshot(FLEET), {}, ADDRESSES, None, defragment=True)
    fake.fail.add(("small-3", 0))
    apply(first, fake, NOW, random.Random(1))
    assert fake.running() == {"small-1", "small-2"}
