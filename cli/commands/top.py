"""`ctl top`: every replica's load and each model's against its target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
    JsonOption,
)

if TYPE_CHECKING:
    from cli.catalog.load import Catalog


def top(
    context: typer.Context,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
    as_json: JsonOption = False,
    once: Annotated[bool, typer.Option("--once", help="Print the tables once and exit.")] = False,
    interval: Annotated[
        float,
        typer.Option("--interval", min=1, help="Seconds between refreshes of the live table."),
    ] = 5.0,
) -> None:
    """Show each replica's load (requests running and waiting, KV-cache use) as its engine's
    /metrics says it, and each model's total against its autoscale target.

    Refreshed in place every --interval until Ctrl-C (exit 0); --once and --json print once.
    Facts are gathered live over SSH unless --facts names a snapshot (read again at each
    refresh). A figure not read is `-`, never 0. Exit code 1 when a node could not be
    reached (--once, --json), 2 on bad input.
    """
    from cli.commands.inputs import read_catalog, read_fleet
    from cli.ui import console
    from cli.ui.top import top_json, top_tables

    loaded = read_catalog(catalog)
    if not (once or as_json):
        _live(context, loaded, inventory, facts, interval)
        raise SystemExit(console.EXIT_OK)
    fleet = read_fleet(context, inventory, facts, say_unreached=as_json)
    if as_json:
        console.print_json(top_json(fleet.snapshot, loaded))
    else:
        console.print_table(top_tables(fleet.snapshot, loaded))
    unreached = fleet.partial or any(n.unreachable_reason for n in fleet.snapshot.nodes)
    raise SystemExit(console.EXIT_INCOMPLETE if unreached else console.EXIT_OK)


def _live(
    context: typer.Context, catalog: Catalog, inventory: Path, facts: Path | None, interval: float
) -> None:
    """The tables, redrawn in place at each refresh, until Ctrl-C. The nodes not reached
    are said under them (stderr would tear the table being redrawn)."""
    from cli.commands.inputs import app_context, default_path_hint
    from cli.inventory.load import load_inventory
    from cli.ops.fleet import fleet_of
    from cli.ui import console
    from cli.ui.top import Frame, live_top

    options = app_context(context)
    with console.input_errors(), default_path_hint(inventory):
        hosts = load_inventory(inventory, options.decrypt())

    def frame() -> Frame:
        fleet = fleet_of(options, hosts, inventory, facts)
        said = [f"{name}: {why}" for name, why in sorted(fleet.unreached.items())]
        said += [
            f"{node.name}: {node.unreachable_reason}"
            for node in fleet.snapshot.nodes
            if node.unreachable_reason and node.name not in fleet.unreached
        ]
        lines = [f"not reached: {console.rich_escape(line)}" for line in said]
        return Frame(fleet.snapshot, catalog, tuple(lines))

    live_top(frame, interval)
