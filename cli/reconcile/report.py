"""A reconcile pass for machines: its plan and what it did (`ctl reconcile --json`).

The plan in the words of the text output (stop, start, drain, wait, leave, refuse) with
every field the text shows; the outcome only as verified (cli/reconcile/apply.py: a
replica is `started` when every rank is up and rank 0 answered). docs/json.md documents
the format; keys are only ever added.
"""

from __future__ import annotations

from typing import Any, Final

from cli.placement.explain import replica_placement_json
from cli.reconcile.apply import Outcome
from cli.reconcile.planner import Plan, Stop
from cli.reconcile.renewal import Renewal

RECONCILE_FORMAT: Final = "modelfleet.reconcile/v1"


def reconcile_json(
    plan: Plan, *, dry_run: bool, complete: bool, outcome: Outcome | None = None
) -> dict[str, Any]:
    """The document: the plan, and with a pass (not `dry_run`) what it did."""
    return {
        "format": RECONCILE_FORMAT,
        "dry_run": dry_run,
        "complete": complete,
        "plan": plan_json(plan),
        "outcome": None if outcome is None else outcome_json(outcome),
    }


def _stop_json(stop: Stop) -> dict[str, Any]:
    return {
        "replica": stop.replica,
        "model": stop.model,
        "reason": stop.reason,
        "drain": stop.drain,
        "replacement": stop.replacement,
        "shards": [{"node": s.node, "rank": s.record.rank} for s in stop.shards],
        "out_of_reach": list(stop.out_of_reach),
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "now": plan.now.isoformat(),
        "stops": [_stop_json(stop) for stop in plan.stops],
        "starts": [
            {
                "replica": start.replica,
                "model": start.model,
                "profile": start.profile.name,
                "reason": start.reason,
                "shards": [
                    {
                        "node": shard.node,
                        "rank": files.rank,
                        "gpus": list(shard.gpus),
                        "hcas": list(shard.hcas),
                        "fabric": shard.fabric,
                        "port": files.port,
                    }
                    for shard, files in zip(start.placement.shards, start.files, strict=True)
                ],
            }
            for start in plan.starts
        ],
        "drains": [_stop_json(stop) for stop in plan.drains],
        "waits": [
            {"model": wait.model, "until": wait.until.isoformat(), "failures": wait.failures}
            for wait in plan.waits
        ],
        "leaves": [
            {
                "replica": leave.replica,
                "model": leave.model,
                "reason": leave.reason,
                "undrained": leave.undrained,
            }
            for leave in plan.leaves
        ],
        "unplaced": [replica_placement_json(placement) for placement in plan.unplaced],
        "running": {model: list(replicas) for model, replicas in plan.running.items()},
        "renewals": [_renewal_json(renewal) for renewal in plan.renewals],
        "certificates_due": [_renewal_json(renewal) for renewal in plan.certificates_due],
        "scaling": [
            {
                "model": d.model,
                "signal": d.signal,
                "value": d.value,
                "target": d.target,
                "replicas": d.replicas,
                "desired": d.desired,
                "why": d.why,
            }
            for d in plan.scaling
        ],
    }


def _renewal_json(renewal: Renewal) -> dict[str, Any]:
    return {
        "node": renewal.node,
        "why": list(renewal.why),
        "serial": renewal.serial,
        "not_after": renewal.not_after.isoformat(),
        "not_here": renewal.not_here,
    }


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "started": list(outcome.started),
        "failed": [
            {
                "replica": replica,
                "why": why,
                "stage": replica in outcome.stage_failed,  # its weights never arrived
                "shards": [
                    {
                        "node": shard.node,
                        "rank": shard.rank,
                        "unit": shard.unit,
                        "cause": shard.failure.cause,
                        "journal": list(shard.failure.journal),
                    }
                    for shard in outcome.failed_shards
                    if shard.replica == replica
                ],
            }
            for replica, why in outcome.failed.items()
        ],
        "stopped": list(outcome.stopped),
        "not_stopped": dict(outcome.stop_failures),
        "withdrawn_lost": list(outcome.withdrawn_lost),
        "stopped_but_lost": {r: list(nodes) for r, nodes in outcome.stopped_but_lost.items()},
        "not_drained": dict(outcome.undrained),
        "routers_not_updated": list(outcome.route_failures),
        "renewed": list(outcome.renewed),
        "not_renewed": dict(outcome.not_renewed),
    }
