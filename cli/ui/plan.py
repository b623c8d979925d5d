"""A reconcile plan for people: what stops, what starts where, what waits and until when."""

from __future__ import annotations

from datetime import datetime

from cli.cluster import name_order
from cli.placement.explain import VERDICT_TEXT, refusal_lines, shard_text
from cli.reconcile.planner import Plan, Stop
from cli.ui.console import plural, wrap


def _when(moment: datetime, now: datetime) -> str:
    seconds = max(0, int((moment - now).total_seconds()))
    return f"{moment.strftime('%H:%M:%S %Z')} (in {seconds} s)"


def _stop_lines(verb: str, stop: Stop, width: int) -> list[str]:
    nodes = ", ".join(sorted({s.node for s in stop.shards}, key=name_order)) or "nowhere reachable"
    return wrap(f"{verb:<7}{stop.replica:<{width}}{stop.reason} [{nodes}]", " " * (7 + width))


def render_plan(plan: Plan) -> list[str]:
    names = [s.replica for s in (*plan.stops, *plan.drains)]
    names += [s.replica for s in plan.starts] + [w.model for w in plan.waits]
    names += [leave.replica for leave in plan.leaves]
    names += [r.node for r in (*plan.renewals, *plan.certificates_due)]
    names += [d.model for d in plan.scaling]
    width = max((len(n) for n in names), default=0) + 2
    scaling: list[str] = []
    for decision in plan.scaling:  # the autoscaler's, held or not: what the load says
        count = f"{decision.replicas}"
        if decision.change:
            count += f" → {decision.desired}"
        scaling += wrap(
            f"{'scale':<7}{decision.model:<{width}}{count}  why: {decision.why}",
            " " * (7 + width),
        )
    lines = [x for stop in plan.stops for x in _stop_lines("stop", stop, width)]
    for start in plan.starts:
        head = f"{'start':<7}{start.replica:<{width}}{start.profile.name:<10}"
        placed = start.placement.shards
        for index, (shard, files) in enumerate(zip(placed, start.files, strict=True)):
            text = f"{shard_text(shard)}  :{files.port}"
            if len(placed) > 1:
                text += f"  rank {files.rank}"
            lines.append((head if index == 0 else " " * len(head)) + text)
        why = "workers first, then rank 0; " if len(placed) > 1 else ""
        lines += wrap(" " * (7 + width) + f"why: {why}{start.reason}", " " * (12 + width))
    lines += [x for stop in plan.drains for x in _stop_lines("drain", stop, width)]
    for wait in plan.waits:
        lines.append(
            f"{'wait':<7}{wait.model:<{width}}backoff after {plural(wait.failures, 'failure')},"
            f" until {_when(wait.until, plan.now)}"
        )
    for leave in plan.leaves:
        lines += wrap(f"{'leave':<7}{leave.replica:<{width}}{leave.reason}", " " * (7 + width))
    for refused in plan.unplaced:
        verdict = VERDICT_TEXT[refused.verdict]
        lines += wrap(
            f"{'refuse':<7}{refused.replica:<{width}}NOT PLACED — {verdict}", " " * (7 + width)
        )
        for line in refusal_lines(refused):
            lines += wrap("  " + line, "    ")
    for renewal in plan.renewals:
        lines += wrap(
            f"{'renew':<7}{renewal.node:<{width}}certificate: " + "; ".join(renewal.why),
            " " * (7 + width),
        )
    for due in plan.certificates_due:
        lines += wrap(
            f"{'due':<7}{due.node:<{width}}certificate: {'; '.join(due.why)};"
            f" not renewed: {due.not_here}",
            " " * (7 + width),
        )
    if not lines:
        lines.append("nothing to do: the fleet runs what the catalog asks")
    return lines + scaling
