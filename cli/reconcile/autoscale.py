"""How load moves a model's replica count between replicas.min and replicas.max. Pure.

Each pass reads the signal from the replicas' load (the facts' `replica_load`, from the
engines' own /metrics) and compares it with the catalog's target. A signal held above the
target for the up window adds one replica, and only one a pass, and none while the last
one added is still starting. One fewer is decided only once the replicas that would
remain have been under the target for the down window (hysteresis: no scale-down that the
next pass would undo); the planner then drains it, new requests going elsewhere first.
"Held for" needs memory across passes: `Memory`, one per model, kept by the pass in the
state directory (cli/reconcile/ledger.py). A load that cannot be read holds the count and
restarts both windows: no decision is made on figures nobody saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from cli.catalog.schema import Autoscale
from cli.facts.model import ReplicaLoad


@dataclass(frozen=True)
class Memory:
    """Since when, seen pass after pass without a break, the signal was above the target
    (`above_since`), and the replicas but one would have been at or under it
    (`below_since`); None: not so at the last pass."""

    above_since: datetime | None = None
    below_since: datetime | None = None


@dataclass(frozen=True)
class Decision:
    model: str
    signal: str  # "queue" or "kv"
    value: float | None  # the signal now; None: unknown
    target: float
    replicas: int  # counted now (healthy, starting, unreachable)
    desired: int  # what the planner brings it to
    why: str
    memory: Memory  # what the next pass starts from

    @property
    def change(self) -> int:
        return self.desired - self.replicas


def signal_value(policy: Autoscale, loads: Sequence[ReplicaLoad]) -> float | None:
    """Waiting requests per replica, or the mean KV use, over the replicas whose figure is
    known; None when none is."""
    if policy.signal == "queue":
        known = [load.waiting for load in loads if load.waiting is not None]
    else:
        known = [load.kv_use for load in loads if load.kv_use is not None]
    return sum(known) / len(known) if known else None


def _text(policy: Autoscale, value: float) -> str:
    if policy.signal == "queue":
        return f"{value:.1f} waiting per replica"
    return f"KV use {value:.0%}"


def _figure(policy: Autoscale, value: float) -> str:
    return f"{value:.1f}" if policy.signal == "queue" else f"{value:.0%}"


def _goal(policy: Autoscale) -> str:
    return f"{policy.goal:g}" if policy.signal == "queue" else f"{policy.goal:.0%}"


def _held(since: datetime, now: datetime) -> float:
    return max(0.0, (now - since).total_seconds())


def decide(
    model: str,
    policy: Autoscale,
    replicas_min: int,
    replicas_max: int,
    replicas: int,
    starting: int,
    loads: Sequence[ReplicaLoad],
    memory: Memory | None,
    now: datetime,
) -> Decision:
    """The count `model` should have after this pass, and why.

    `replicas`: counted now; `starting`: of those, not yet serving; `loads`: the figures
    of those serving whose load was read (from a node reached this pass)."""
    memory = memory or Memory()
    target = policy.goal

    def hold(why: str, kept: Memory | None = None, desired: int | None = None) -> Decision:
        count = replicas if desired is None else desired
        return Decision(model, policy.signal, value, target, replicas, count, why, kept or Memory())

    value = signal_value(policy, loads)
    if replicas < replicas_min:
        return hold(f"{replicas} of replicas.min {replicas_min} running", desired=replicas_min)
    if replicas > replicas_max:
        return hold(f"{replicas} running, above replicas.max {replicas_max}", desired=replicas_max)
    if value is None:
        return hold(f"load unknown (no replica's /metrics read): holding at {replicas}")
    shown = _text(policy, value)
    if value > target:
        since = memory.above_since or now
        held = _held(since, now)
        above = Memory(above_since=since)
        over = f"{shown} > {_goal(policy)} for {held:.0f} s"
        if replicas >= replicas_max:
            return hold(f"{over}; at replicas.max {replicas_max}", above)
        if starting:
            return hold(f"{over}; waiting for {starting} starting", above)
        if held < policy.up_seconds:
            return hold(f"{over} of {policy.up_seconds} s", above)
        return hold(over, desired=replicas + 1)
    # The replicas that would remain carry the same load between them.
    fewer = value * replicas / (replicas - 1) if replicas > 1 else None
    if replicas <= replicas_min or fewer is None or fewer > target:
        under = f"{shown} ≤ {_goal(policy)}"
        if replicas > replicas_min and fewer is not None:
            under += f", {_figure(policy, fewer)} with one fewer"
        return hold(under)
    since = memory.below_since or now
    held = _held(since, now)
    below = Memory(below_since=since)
    why = f"{shown}, {_figure(policy, fewer)} with one fewer ≤ {_goal(policy)} for {held:.0f} s"
    if held < policy.down_seconds:
        return hold(f"{why} of {policy.down_seconds} s", below)
    return hold(why, desired=replicas - 1)
