"""What `ctl offboard-node` will do, a line a step (the plan of cli/ops/offboard.py)."""

from __future__ import annotations

from datetime import datetime

from cli.ops.offboard import OffboardPlan
from cli.pki.paths import NODE_KEY_PATH
from cli.ui.plan import render_plan


def plan_lines(plan: OffboardPlan) -> list[str]:
    """The plan, a line a step, for people."""
    lines = [f"offboard {plan.node}:"]
    if plan.host is None:
        lines.append(f"  inventory: {plan.node} is not in it (already removed)")
    elif plan.drain is not None:
        lines.append("  drain (as ctl drain, each replica serving elsewhere before it stops):")
        lines += [f"    {line}" for line in render_plan(plan.drain)] or ["    nothing to move"]
    lines += [f"  LOST (--force): {replica}" for replica in plan.loses]
    if plan.host is not None:
        if plan.unreachable is None:
            lines.append(f"  key: remove {NODE_KEY_PATH} on {plan.node}")
        else:
            lines.append(f"  key: {plan.node} cannot be reached: its key is left on it")
    for record in plan.revoke:
        lines.append(f"  certificate: revoke serial {record.serial}")
    for record in plan.revoked:
        lines.append(f"  certificate: serial {record.serial} already revoked ({_day(record.at)})")
    if not plan.revoke and not plan.revoked:
        lines.append(
            f"  certificate: the CA's record (issued.json) has none issued to {plan.node}:"
            " nothing to revoke"
        )
    for record in plan.unproven:
        lines.append(
            f"  certificate: serial {record.serial} was recorded as issued to '{record.node}'"
            f" before ctl recorded whom it issued to; it may be {plan.node}'s but is not"
            " proved to be: not revoked"
        )
    if plan.shown is not None:
        lines.append(
            f"  certificate: {plan.node} holds serial {plan.shown}, which the CA's record does"
            f" not list as issued to {plan.node}: not revoked (a node's word never picks what"
            " is revoked)"
        )
    if plan.forgotten is not None:
        numbers = ", ".join(str(n) for n in plan.forgotten.lines)
        lines.append(
            f"  known_hosts: forget {', '.join(plan.names)} ({plan.known_hosts} line {numbers})"
        )
    elif plan.shared_with is not None:
        lines.append(f"  known_hosts: kept: {plan.shared_with} has the same address")
    elif plan.host is not None:
        lines.append(f"  known_hosts: nothing of {plan.node} in {plan.known_hosts}")
    if plan.removal is not None:
        lines.append(f"  inventory: remove {', '.join(plan.removal.lines)}")
    return lines


def _day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
