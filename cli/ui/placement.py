"""`ctl place` for people: one block per replica, refusals folded into summary lines."""

from __future__ import annotations

from collections.abc import Mapping

from cli.placement.explain import (
    VERDICT_TEXT,
    assumption_lines,
    refusal_lines,
    room_line,
    shard_text,
)
from cli.placement.moves import Room
from cli.placement.place import PlacementRun, ReplicaPlacement
from cli.ui.console import out, print_lines, wrap

INDENT = 2
PROFILE_COLUMN = 10


def render_run(
    run: PlacementRun, width: int = 100, rooms: Mapping[str, Room] | None = None
) -> list[str]:
    """Plain lines, at most `width` columns where words allow; under a replica that did
    not fit, the moves that would make room for it (`rooms`), if any."""
    lines: list[str] = []
    for model, count in run.wanted.items():
        replicas = run.running.get(model, ())
        if replicas:
            more = f", placing {count} more" if count else ", replicas.min reached"
            lines.append(f"{model}: {len(replicas)} running ({', '.join(replicas)}){more}")
    column = max((len(p.replica) for p in run.placements), default=0) + 2
    for placement in run.placements:
        lines += render_placement(placement, column, width)
        room = (rooms or {}).get(placement.replica)
        if room is not None:
            lines += wrap(" " * INDENT + room_line(room), " " * (INDENT * 2), width)
    return lines


def render_placement(placement: ReplicaPlacement, column: int, width: int) -> list[str]:
    lines: list[str] = []
    if placement.profile is not None:
        head = f"{placement.replica:<{column}}{placement.profile.name:<{PROFILE_COLUMN}}"
        shards = placement.shards
        texts = [shard_text(shard) for shard in shards]
        widest = max(len(text) for text in texts)
        for index, (shard, text) in enumerate(zip(shards, texts, strict=True)):
            line = text
            if len(shards) > 1:
                mark = "┐" if index == 0 else ("┘" if index == len(shards) - 1 else "┤")
                line = f"{text:<{widest}} {mark}" + (f" {shard.fabric}" if index == 0 else "")
            lines.append((head if index == 0 else " " * len(head)) + line)
    else:
        verdict = VERDICT_TEXT[placement.verdict]
        lines += wrap(f"{placement.replica:<{column}}NOT PLACED — {verdict}", " " * column, width)
    for line in assumption_lines(placement) + refusal_lines(placement):
        lines += wrap(" " * INDENT + line, " " * (INDENT * 2), width)
    return lines


def print_run(run: PlacementRun, rooms: Mapping[str, Room] | None = None) -> None:
    print_lines(render_run(run, min(out.width, 120), rooms))
