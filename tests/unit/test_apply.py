"""Applying a plan: phase order, one executor call per phase, replicas whole or stopped."""

from __future__ import annotations

import random

import pytest

from cli.reconcile.apply import apply
from cli.reconcile.planner import plan
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


def test_workers_start_before_rank_0_one_call_per_phase() -> None:
    fake = FakeFleet()
    reconcile_once(fake)
    assert [verb for verb, _ in fake.calls] == ["start", "start"]
    workers, leaders = (shards for _, shards in fake.calls)
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
    assert outcome.failed == {"big-1": "rank 1 on hgx-4: health check timed out"}
    assert "big-1" not in fake.running()  # rank 0 was never started, rank 1 removed
    assert [verb for verb, _ in fake.calls] == ["start", "start", "stop"]
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
        "stop broken replicas", "start workers", "start rank 0", "drain retired replicas"
    ]  # fmt: skip
    assert fake.calls[0] == ("stop", ("small-1",))
    assert fake.calls[-1] == ("stop", ("gone-1",))
