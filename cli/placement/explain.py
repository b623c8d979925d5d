"""Explanations: fold every rejection of a profile into one line an operator can act on.

Kubernetes says "0/5 nodes are available: 3 Insufficient memory"; we name the nodes that
matter and the numbers that decided, and tell "not now" from "never".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cli.cluster import name_order
from cli.placement.constraints import ORDER, gb
from cli.placement.gpus import format_devices, format_indices
from cli.placement.moves import Room
from cli.placement.place import PlacementRun, ProfileAttempt, ReplicaPlacement, Verdict
from cli.placement.reasons import Blocking, Constraint, Rejection
from cli.placement.state import ShardPlacement

PLACEMENT_FORMAT = "modelfleet.placement/v1"

# Groups this small are named node by node; larger ones are counted.
NAMED_GROUP_LIMIT = 2

_SINGULAR = {"have": "has", "lack": "lacks", "are": "is"}

# Unknown is not zero: said, not taken as fitting everywhere in silence. (A node holding
# the weights complete would have told their size.)
UNKNOWN_SIZE = (
    "note: size of {source} unknown (no disk_gb, no node holds it): disk room not checked"
)

VERDICT_TEXT = {
    Verdict.NOT_NOW: "not now: it fits once capacity our replicas hold is freed",
    Verdict.BLOCKED: "blocked: it fits only once a node is repaired, reachable or uncordoned",
    Verdict.NEVER: "never: no node or fabric of this fleet could hold it",
}


def _phrase(count: int, summary: str) -> str:
    if count == 1:
        verb, _, rest = summary.partition(" ")
        summary = f"{_SINGULAR.get(verb, verb)} {rest}".strip()
    return f"{count} {summary}"


def summarize_attempt(attempt: ProfileAttempt) -> str:
    """`h100x8: 0/9 nodes fit — 5 have L40S GPUs, 3 have too few free H100 (best: …)`."""
    return f"{attempt.profile.name}: {attempt_reasons(attempt)}"


def attempt_reasons(attempt: ProfileAttempt) -> str:
    """`0/9 nodes fit — 5 have L40S GPUs, …`: the rejections folded and counted."""
    rejected = {r.node for r in attempt.rejections}
    fit = attempt.nodes_considered - len(rejected)
    head = f"{fit}/{attempt.nodes_considered} nodes fit"
    groups: dict[str, list[Rejection]] = {}
    for rejection in attempt.rejections:
        groups.setdefault(rejection.summary, []).append(rejection)
    order = list(ORDER)
    ranked = sorted(
        groups.values(), key=lambda rs: (-len(rs), order.index(rs[0].constraint), rs[0].summary)
    )
    parts = [_phrase(len(rs), rs[0].summary) + _detail(rs) for rs in ranked]
    if attempt.profile.spec.nodes > 1 and fit == 0 and attempt.fabric_shortfalls:
        parts.append(fabric_line(attempt))
    return head + (" — " + ", ".join(parts) if parts else "")


def fabric_line(attempt: ProfileAttempt) -> str:
    shortfalls = [
        f"{s.fabric}: {', '.join(s.eligible)} only" if s.eligible else f"{s.fabric}: none"
        for s in attempt.fabric_shortfalls
    ]
    need = attempt.profile.spec.nodes
    return f"no fabric joins {need} eligible nodes ({'; '.join(shortfalls)})"


def _detail(rejections: Sequence[Rejection]) -> str:
    first = rejections[0]
    if first.blocking is Blocking.CAPACITY and first.free is not None:
        best = min(rejections, key=lambda r: (-(r.free or 0), name_order(r.node)))
        return f" (best: {best.node}, {best.free} of {best.total} free)"
    if len(rejections) <= NAMED_GROUP_LIMIT:
        if first.blocking is Blocking.HARDWARE and first.constraint is not Constraint.GPUS:
            return f" ({', '.join(r.node for r in rejections)})"
        return " (" + "; ".join(f"{r.node}: {r.detail or r.message}" for r in rejections) + ")"
    return ""


def shard_text(shard: ShardPlacement) -> str:
    """`hgx-3  GPU 0-3 (one NVLink domain)  mlx5_0,mlx5_2`."""
    text = shard.node
    if shard.gpus:
        text += f"  GPU {format_indices(shard.gpus)}"
    if shard.note:
        text += f" ({shard.note})"
    if shard.hcas:
        text += "  " + format_devices(shard.hcas)
    return text


def refusal_lines(placement: ReplicaPlacement) -> list[str]:
    """One line per profile that was tried and did not fit, highest priority first."""
    return [
        f"not {a.profile.name} (priority {a.profile.spec.priority}): {attempt_reasons(a)}"
        for a in placement.attempts
        if not a.fits
    ]


def room_line(room: Room) -> str:
    """`fits on hgx-4 after moving coder-3 (hgx-4 GPU 6-7 → hgx-2 GPU 4-5)`; a copy that
    takes another profile says which (`→ a100-2 GPU 0-3 as a100x4`)."""
    where = " and ".join(shard.node for shard in room.placement.shards)
    moves = ", then ".join(
        f"{move.replica} ({_where(move.source)} → {_where(move.target)}"
        f"{f' as {move.profile.name}' if move.changes_profile else ''})"
        for move in room.moves
    )
    return f"fits on {where} after moving {moves}"


def _where(shard: ShardPlacement) -> str:
    return f"{shard.node} GPU {format_indices(shard.gpus)}" if shard.gpus else shard.node


def assumption_lines(placement: ReplicaPlacement) -> list[str]:
    """What the placement took on trust about the nodes it chose."""
    chosen = {shard.node for shard in placement.shards}
    lines = []
    for attempt in placement.attempts:
        if attempt.fits and attempt.weights_bytes is None:
            lines.append(UNKNOWN_SIZE.format(source=attempt.profile.source))
        if not attempt.fits or attempt.profile.spec.min_memory_gb is None:
            continue
        need = gb(attempt.profile.spec.min_memory_gb)
        lines += [
            f"note: {node} did not report its memory; assumed to hold {need} GB"
            for node in attempt.memory_unknown
            if node in chosen
        ]
    return lines


def placement_json(
    run: PlacementRun,
    unreached: Mapping[str, str] | None = None,
    rooms: Mapping[str, Room] | None = None,
) -> dict[str, Any]:
    """The documented, stable `--json` form (docs/json.md). `unreached`: the nodes this
    gather could not reach, with why; the answer is complete only without any (a node not
    reached may have room, or may run replicas nobody counted), as the exit code says.
    `rooms`: the moves that would admit a replica not placed (moves.py)."""
    unreached = unreached or {}
    return {
        "format": PLACEMENT_FORMAT,
        "complete": run.all_placed and not unreached,
        "unreached": dict(unreached),
        "running": {model: list(replicas) for model, replicas in run.running.items()},
        "placements": [replica_placement_json(p) for p in run.placements],
        "rooms": {replica: room_json(room) for replica, room in (rooms or {}).items()},
    }


def room_json(room: Room) -> dict[str, Any]:
    def at(shard: ShardPlacement) -> dict[str, Any]:
        return {"node": shard.node, "gpus": list(shard.gpus)}

    return {
        "moves": [
            {
                "replica": m.replica,
                "model": m.model,
                "from": at(m.source),
                "to": at(m.target),
                "profile": m.profile.name,
            }
            for m in room.moves
        ],
        "gpus_reloaded": room.gpus_reloaded,
        "profile": room.placement.profile.name if room.placement.profile else None,
        "shards": [at(shard) for shard in room.placement.shards],
    }


def replica_placement_json(placement: ReplicaPlacement) -> dict[str, Any]:
    return {
        "model": placement.model,
        "replica": placement.replica,
        "placed": placement.placed,
        "profile": placement.profile.name if placement.profile else None,
        "verdict": placement.verdict.value,
        "shards": [
            {
                "node": s.node,
                "rank": s.rank,
                "gpus": list(s.gpus),
                "hcas": list(s.hcas),
                "fabric": s.fabric,
                "note": s.note,
            }
            for s in placement.shards
        ],
        "attempts": [
            {
                "profile": a.profile.name,
                "priority": a.profile.spec.priority,
                "fits": a.fits,
                "summary": summarize_attempt(a),
                "memory_unknown": list(a.memory_unknown),
                "weights_bytes": a.weights_bytes,
            }
            for a in placement.attempts
        ],
        "rejections": [
            {
                "profile": r.profile,
                "node": r.node,
                "constraint": r.constraint.value,
                "blocking": r.blocking.value,
                "message": r.message,
            }
            for r in placement.rejections
        ],
    }
