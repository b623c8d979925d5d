"""The offboarding plan's refusals and what stops it after the drain: a replica of the node
left serving stops everything after the drain, unless --force."""

from __future__ import annotations

from pathlib import Path

from cli.ops.offboard import OffboardPlan, _left_on_node
from cli.ops.reconcile import Applied
from cli.reconcile.apply import Outcome
from tests.unit.reconcile.test_drain import drain_plan, fleet


def offboard_plan(**changes: object) -> OffboardPlan:
    the_plan = drain_plan(*fleet(), evict="hgx-1")
    fields: dict[str, object] = {
        "node": "hgx-1", "host": object(), "drain": the_plan, "would_lose": (), "loses": (),
        "unreachable": None, "revoke": (), "revoked": (), "removal": None,
        "known_hosts": Path("kh"), "forgotten": None,
    }  # fmt: skip
    fields.update(changes)
    return OffboardPlan(**fields)  # type: ignore[arg-type]


def test_a_replica_the_pass_left_on_the_node_is_named() -> None:
    plan = offboard_plan()
    assert plan.drain is not None
    (drain,) = plan.drain.drains
    left = Applied([], False, Outcome(undrained={drain.replica: "replacement failed"}))
    assert _left_on_node(left, plan) == [drain.replica]
    elsewhere = Applied([], False, Outcome(undrained={"embed-1": "x"}))
    assert _left_on_node(elsewhere, plan) == []
    stopped = Applied([], True, Outcome(stopped=[drain.replica]))
    assert _left_on_node(stopped, plan) == []


def test_refusals_name_what_would_be_lost_and_why_the_node_cannot_be_reached() -> None:
    assert offboard_plan().refusals == []
    lost = offboard_plan(would_lose=("chat-1", "chat-2")).refusals
    assert lost == [
        "hgx-1 runs chat-1, chat-2, which no other node can take: offboarding would lose"
        " them (--force stops them anyway)"
    ]
    (far,) = offboard_plan(unreachable="timed out after 10 s").refusals
    assert far.startswith("hgx-1 cannot be reached (timed out after 10 s): its shards cannot")
    # A node already out of the inventory is not refused for being unreachable.
    assert offboard_plan(unreachable="gone", host=None).refusals == []


def test_done_already_only_when_nothing_is_left() -> None:
    assert offboard_plan(host=None, drain=None).done_already
    assert not offboard_plan(host=None, drain=None, revoke=(object(),)).done_already
    assert not offboard_plan().done_already
