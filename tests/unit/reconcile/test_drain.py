"""Draining a node is make-before-break: each replica on it is replaced elsewhere, and the
replacement serves and is routed before the old one is withdrawn and drained; a replica no
replacement can be found for serves on, unless --force. The plan is the same whether or
not the node's cordon is written yet, so `drain --dry-run` shows what `drain` does."""

from __future__ import annotations

import random
from datetime import timedelta

from cli.reconcile.apply import apply
from cli.reconcile.backoff import Backoff
from cli.reconcile.planner import Plan, plan
from cli.ui.plan import render_plan
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, singletons, snapshot
from tests.fakes.executor import FakeFleet

MODELS = catalog(
    """\
    models:
      chat:
        source: hf://org/chat
        replicas: {min: 2}
        profiles:
          - {name: h100, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      embed:
        source: hf://org/embed
        profiles:
          - {name: l40s, priority: 1, engine: vllm, gpu_class: L40S, gpus_per_node: 1}
    """
)
ADDRESSES = {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2", "l40s-1": "10.0.0.3"}


def l40s(name: str, **kwargs: object) -> NodeSpec:
    return NodeSpec(name, "L40S", 4, singletons(4), **kwargs)  # type: ignore[arg-type]


def fleet(*, cordoned: str | None = None) -> tuple[NodeSpec, ...]:
    return (
        hgx("hgx-1", cordoned=cordoned, shards=[shard("chat-1", "chat", [0], profile="h100")]),
        hgx("hgx-2", shards=[shard("chat-2", "chat", [0], profile="h100")]),
        l40s("l40s-1", shards=[shard("embed-1", "embed", [0], profile="l40s", port=8001)]),
    )


def drain_plan(
    *nodes: NodeSpec,
    evict: str = "hgx-1",
    force: bool = False,
    ledger: dict[str, Backoff] | None = None,
) -> Plan:
    return plan(
        MODELS, snapshot(*nodes), ledger or {}, ADDRESSES, random.Random(1), frozenset({evict}),
        force=force,
    )  # fmt: skip


def test_the_replacement_is_placed_off_the_node_being_drained_before_it_is_cordoned() -> None:
    # hgx-1 is not cordoned yet (a dry run writes no cordon), and has 7 GPUs free.
    result = drain_plan(*fleet())
    (start,) = result.starts
    assert [s.node for s in start.placement.shards] == ["hgx-2"]
    (drain,) = result.drains
    assert (drain.replica, drain.replacement, drain.reason) == ("chat-1", start.replica,
                                                                "node drained")  # fmt: skip
    assert start.replica == "chat-3"


def test_the_dry_run_plan_is_the_plan_of_the_pass_with_the_cordon_written() -> None:
    dry = drain_plan(*fleet())
    real = drain_plan(*fleet(cordoned="being drained"))
    assert render_plan(dry) == render_plan(real)
    assert [s.placement for s in dry.starts] == [s.placement for s in real.starts]
    assert dry.drains == real.drains


def test_a_replica_no_replacement_fits_is_left_running_and_named() -> None:
    result = drain_plan(*fleet(), evict="l40s-1")
    assert result.drains == ()
    assert result.starts == ()
    (refused,) = result.unplaced
    assert refused.replica == "embed-2"
    (kept,) = result.leaves
    assert (kept.replica, kept.undrained) == ("embed-1", True)
    assert kept.reason == (
        "on l40s-1, being drained: no replacement could be placed, so it serves on"
        " (drain --force stops it)"
    )
    assert "leave  embed-1  on l40s-1, being drained" in "\n".join(render_plan(result))


def test_force_drains_a_replica_no_replacement_fits() -> None:
    result = drain_plan(*fleet(), evict="l40s-1", force=True)
    (drain,) = result.drains
    assert (drain.replica, drain.replacement) == ("embed-1", None)
    assert drain.reason == "node drained (--force: no replacement could be placed)"
    assert result.leaves == ()
    assert [u.replica for u in result.unplaced] == ["embed-2"]


def test_a_model_above_its_minimum_without_the_replica_drains_it_unreplaced() -> None:
    nodes = (
        *fleet(),
        hgx("hgx-3", shards=[shard("chat-3", "chat", [0], profile="h100", origin="manual")]),
    )
    result = drain_plan(*nodes)
    assert result.starts == ()
    (drain,) = result.drains
    assert (drain.replica, drain.replacement, drain.reason) == ("chat-1", None, "node drained")


def test_a_model_waiting_out_a_backoff_keeps_its_replica_on_the_drained_node() -> None:
    waiting = {"embed": Backoff(failures=1, until=NOW + timedelta(seconds=20))}
    nodes = (*fleet(), l40s("l40s-2"))
    result = drain_plan(*nodes, evict="l40s-1", ledger=waiting)
    assert result.starts == () and result.drains == ()
    assert [w.model for w in result.waits] == ["embed"]
    assert [(k.replica, k.undrained) for k in result.leaves] == [("embed-1", True)]


def test_a_replacement_short_because_of_a_lost_replica_keeps_the_drained_one() -> None:
    # chat wants 2: chat-2's node is lost (replaced), chat-1 is on the node being drained,
    # and one GPU is free anywhere else: one new replica, so chat-1 must serve on.
    nodes = (
        hgx("hgx-1", shards=[shard("chat-1", "chat", [0], profile="h100")]),
        hgx("hgx-2", unreachable_for=timedelta(hours=2),
            shards=[shard("chat-2", "chat", [0], profile="h100")]),
        NodeSpec("hgx-3", "H100", 1, [[0]]),
        l40s("l40s-1", shards=[shard("embed-1", "embed", [0], profile="l40s", port=8001)]),
    )  # fmt: skip
    result = drain_plan(*nodes)
    assert [s.replica for s in result.stops] == ["chat-2"]
    assert [(s.replica, s.placement.shards[0].node) for s in result.starts] == [("chat-3", "hgx-3")]
    assert result.drains == ()
    assert [(k.replica, k.undrained) for k in result.leaves] == [("chat-1", True)]


def test_the_old_replica_is_withdrawn_and_drained_only_after_its_replacement_serves() -> None:
    nodes = fleet()
    fake = FakeFleet(routed={"chat-1", "chat-2", "embed-1"})
    fake.adopt(snapshot(*nodes))
    outcome = apply(drain_plan(*nodes), fake, NOW, random.Random(1), router=fake)
    assert [verb for verb, _ in fake.calls] == ["stage", "start", "route", "stop"]
    assert fake.calls[2] == ("route", ("+chat-3", "-chat-1"))
    assert fake.calls[3] == ("stop", ("chat-1",))
    assert fake.routed_before_serving == [] and fake.stopped_while_routed == []
    assert outcome.complete
    assert fake.running() == {"chat-2", "chat-3", "embed-1"}


def test_a_replacement_that_does_not_start_leaves_the_old_replica_serving_and_routed() -> None:
    nodes = fleet()
    fake = FakeFleet(routed={"chat-1", "chat-2", "embed-1"}, fail={("chat-3", 0)})
    fake.adopt(snapshot(*nodes))
    outcome = apply(drain_plan(*nodes), fake, NOW, random.Random(1), router=fake)
    assert "chat-1" in fake.running() and "chat-1" in fake.routed
    assert "chat-3" not in fake.running()
    assert outcome.undrained == {"chat-1": "its replacement chat-3 did not start"}
    assert ("route", ("-chat-1",)) not in fake.calls
    assert not outcome.complete
