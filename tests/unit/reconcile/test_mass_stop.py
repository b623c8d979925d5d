"""A pass that stops most of the fleet with nothing in its place is caught before it runs.

Issue 16: an empty catalog (a file truncated mid-save) had reconcile drain every replica.
An empty catalog is now refused at load; this is the second guard, for a catalog that
loads but leaves out most of what runs (a model deleted by mistake).
"""

from __future__ import annotations

from datetime import UTC, datetime

from cli.reconcile.planner import Plan, Stop, retired_unreplaced

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def retire(replica: str, replacement: str | None = None) -> Stop:
    model = replica.rsplit("-", 1)[0]
    return Stop(replica, model, (), "not in the catalog", drain=True, replacement=replacement)


def test_retired_replicas_without_a_replacement_are_counted_against_all_running() -> None:
    plan = Plan(
        NOW,
        drains=(retire("chat-1"), retire("chat-2"), retire("embed-1", replacement="embed-2")),
        running={"embed": ("embed-1",), "coder": ("coder-1", "coder-2")},
    )

    assert retired_unreplaced(plan) == (("chat-1", "chat-2"), 5)


def test_a_broken_replica_stopped_is_not_a_retirement() -> None:
    broken = Stop("chat-1", "chat", (), "rank 1 missing", drain=False)
    plan = Plan(NOW, stops=(broken,), running={"chat": ("chat-2",)})

    assert retired_unreplaced(plan) == ((), 1)


def test_a_plan_that_retires_nothing_has_nothing_lost() -> None:
    assert retired_unreplaced(Plan(NOW)) == ((), 0)
