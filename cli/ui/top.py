"""`ctl top`: every replica's load as its engine said it, and each model's against its target.

The figures are the facts' `replica_load` (docs/facts.md): what each node's engines said
when the facts were gathered. A figure not read is `-` in the table and null in JSON,
never 0; a node not reached this time says nothing of its replicas' load now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Group
from rich.live import Live
from rich.table import Table

from cli.catalog.load import Catalog
from cli.catalog.schema import Autoscale
from cli.cluster import name_order
from cli.cluster.snapshot import Reachability, Snapshot
from cli.facts.model import ReplicaLoad
from cli.reconcile.autoscale import signal_value
from cli.ui.console import out
from cli.ui.tables import Cell, Column, fitted_table

TOP_FORMAT = "modelfleet.top/v1"


@dataclass(frozen=True)
class ReplicaRow:
    model: str
    replica: str
    node: str
    state: str  # the shard's (running, starting, failed), or the node's when not reached
    load: ReplicaLoad | None  # None: not read (node not reached, or no figure for it)


def replica_rows(snapshot: Snapshot) -> list[ReplicaRow]:
    """One row per replica, where its rank 0 runs, in model then replica order."""
    rows: list[ReplicaRow] = []
    for node in snapshot.nodes:
        reached = node.reachability is Reachability.READY
        loads = {load.replica: load for load in node.replica_load or ()} if reached else {}
        for shard in node.shards:
            if shard.rank != 0:
                continue
            state = shard.state if reached else node.status.value
            rows.append(ReplicaRow(shard.model, shard.replica, node.name, state,
                                   loads.get(shard.replica)))  # fmt: skip
    return sorted(rows, key=lambda r: (name_order(r.model), name_order(r.replica)))


def _sum(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


@dataclass(frozen=True)
class ModelRow:
    model: str
    replicas: int
    replicas_min: int | None  # None: not in the catalog
    replicas_max: int | None
    running: float | None
    waiting: float | None
    policy: Autoscale | None
    value: float | None  # the signal (its policy's, else waiting per replica)


def model_rows(rows: Sequence[ReplicaRow], catalog: Catalog) -> list[ModelRow]:
    names = list(catalog.models) + sorted({r.model for r in rows} - set(catalog.models))
    found: list[ModelRow] = []
    for name in names:
        mine = [r for r in rows if r.model == name]
        loads = [r.load for r in mine if r.load is not None]
        model = catalog.models.get(name)
        policy = model.autoscale if model is not None else None
        found.append(
            ModelRow(
                model=name,
                replicas=len(mine),
                replicas_min=model.replicas_min if model else None,
                replicas_max=model.replicas_max if model else None,
                running=_sum([load.running for load in loads]),
                waiting=_sum([load.waiting for load in loads]),
                policy=policy,
                value=signal_value(policy or Autoscale(), loads),
            )
        )
    return found


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _signal(row: ModelRow) -> str:
    if row.value is None:
        return "-"
    if row.policy is not None and row.policy.signal == "kv":
        return f"KV {row.value:.0%}"
    return f"{row.value:.1f} waiting/replica"


def _target(row: ModelRow) -> str:
    if row.policy is None:
        return "no autoscale"
    goal = row.policy.goal
    return f"KV {goal:.0%}" if row.policy.signal == "kv" else f"{goal:g} waiting/replica"


def _bounds(row: ModelRow) -> str:
    if row.replicas_min is None:
        return f"{row.replicas} (not in the catalog)"
    return f"{row.replicas} of {row.replicas_min}..{row.replicas_max}"


def top_tables(snapshot: Snapshot, catalog: Catalog, width: int | None = None) -> Group:
    rows = replica_rows(snapshot)
    right: Literal["right"] = "right"
    replica_table: Table = fitted_table(
        [Column("MODEL"), Column("REPLICA"), Column("NODE"), Column("STATE"),
         Column("RUNNING", right), Column("WAITING", right), Column("KV", right)],
        [
            [Cell.of(r.model), Cell.of(r.replica), Cell.of(r.node), Cell.of(r.state),
             Cell.of(_count(r.load.running if r.load else None)),
             Cell.of(_count(r.load.waiting if r.load else None)),
             Cell.of(_share(r.load.kv_use if r.load else None))]
            for r in rows
        ],
        width,
    )  # fmt: skip
    models = model_rows(rows, catalog)
    model_table: Table = fitted_table(
        [Column("MODEL"), Column("REPLICAS"), Column("RUNNING", right),
         Column("WAITING", right), Column("SIGNAL", right), Column("TARGET")],
        [
            [Cell.of(m.model), Cell.of(_bounds(m)), Cell.of(_count(m.running)),
             Cell.of(_count(m.waiting)), Cell.of(_signal(m)), Cell.of(_target(m))]
            for m in models
        ],
        width,
    )  # fmt: skip
    return Group(replica_table, "", model_table)


def top_json(snapshot: Snapshot, catalog: Catalog) -> dict[str, Any]:
    rows = replica_rows(snapshot)
    return {
        "format": TOP_FORMAT,
        "now": snapshot.now.isoformat(),
        "replicas": [
            {
                "model": r.model,
                "replica": r.replica,
                "node": r.node,
                "state": r.state,
                "running": r.load.running if r.load else None,
                "waiting": r.load.waiting if r.load else None,
                "kv_use": r.load.kv_use if r.load else None,
                "note": r.load.note if r.load else None,
            }
            for r in rows
        ],
        "models": [
            {
                "model": m.model,
                "replicas": m.replicas,
                "min": m.replicas_min,
                "max": m.replicas_max,
                "running": m.running,
                "waiting": m.waiting,
                "signal": None if m.policy is None else m.policy.signal,
                "value": m.value,
                "target": None if m.policy is None else m.policy.goal,
            }
            for m in model_rows(rows, catalog)
        ],
    }


@dataclass(frozen=True)
class Frame:
    """What one refresh of the live table shows: the fleet then, and lines under it."""

    snapshot: Snapshot
    catalog: Catalog
    said: tuple[str, ...] = ()  # already escaped for rich


def live_top(frame: Callable[[], Frame], interval: float) -> None:
    """Draw `frame()` every `interval` seconds in place of the last one, until Ctrl-C."""
    try:
        with Live(console=out, auto_refresh=False) as live:
            while True:
                shown = frame()
                stamp = shown.snapshot.now.strftime("%H:%M:%S %Z")
                lines = [f"as of {stamp}, every {interval:g} s (Ctrl-C to stop)", *shown.said]
                live.update(Group(top_tables(shown.snapshot, shown.catalog), "", *lines),
                            refresh=True)  # fmt: skip
                time.sleep(interval)
    except KeyboardInterrupt:
        return
