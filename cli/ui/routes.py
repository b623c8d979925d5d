"""`ctl routes` for people: one row per model and per alias, then what is missing."""

from __future__ import annotations

from rich.table import Table

from cli.routes.table import ModelRoute, RouteTable
from cli.ui.console import wrap
from cli.ui.tables import Cell, Column, fitted_table


def _ready(route: ModelRoute) -> str:
    return f"{len(route.endpoints)}/{route.replicas_min}"


def _endpoints(route: ModelRoute) -> str:
    if route.ready:
        return "\n".join(r.url or "" for r in route.endpoints)
    if route.served_by is not None:
        return f"→ {route.served_by}"
    return "-"


def routes_table(table: RouteTable, width: int | None = None) -> Table:
    """NAME (model or alias), MODEL (what an alias stands for), READY (ready replicas /
    replicas.min), ENDPOINTS (rank 0 of each ready replica, or → the fallback answering),
    FALLBACKS (the order requests fall back in); fitted to the terminal (cli/ui/tables.py)."""
    columns = [Column(c) for c in ("NAME", "MODEL", "READY")]
    columns += [Column("ENDPOINTS", keep=True), Column("FALLBACKS")]
    rows: list[list[Cell]] = []
    styles: list[str] = []
    for route in table.models:
        style = "" if route.ready else ("red" if route.served_by is None else "yellow")
        cells = [
            Cell.of(_ready(route)),
            Cell.of(_endpoints(route), separator="\n"),
            Cell(tuple(route.chain) or ("-",)),
        ]
        for name, model in ((route.model, "-"), *((alias, route.model) for alias in route.aliases)):
            rows.append([Cell.of(name), Cell.of(model), *cells])
            styles.append(style)
    return fitted_table(columns, rows, width, styles)


def route_notes(table: RouteTable) -> list[str]:
    """A line for every model without a ready replica: why, and who answers for it."""
    lines = []
    for route in table.models:
        if route.ready:
            continue
        if not route.wanted and not route.replicas:
            continue
        if route.served_by is not None:
            answer = f"{route.served_by} answers for it"
        elif route.chain:
            answer = "no fallback has a ready replica either"
        else:
            answer = "it has no fallback"
        lines += wrap(f"{route.model}: no ready replica ({route.missing}); {answer}", "  ")
    for replica in table.unrouted:
        lines += wrap(
            f"{replica.replica}: not routed: no catalog model {replica.model} (reconcile drains"
            " it)",
            "  ",
        )
    return lines
