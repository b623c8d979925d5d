"""`ctl top`: every replica's load and each model's against its target."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
    JsonOption,
)


def top(
    context: typer.Context,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
    as_json: JsonOption = False,
    once: Annotated[bool, typer.Option("--once", help="Print the tables once and exit.")] = False,
) -> None:
    """Show each replica's load (requests running and waiting, KV-cache use) as its engine's
    /metrics says it, and each model's total against its autoscale target.

    Facts are gathered live over SSH unless --facts names a snapshot. A figure not read is
    `-`, never 0. Exit code 1 when a node could not be reached, 2 on bad input.
    """
    from cli.commands.inputs import read_catalog, read_fleet
    from cli.ui import console
    from cli.ui.top import top_json, top_tables

    if not (once or as_json):
        console.fail("the live table is not there yet: use --once or --json")
    loaded = read_catalog(catalog)
    fleet = read_fleet(context, inventory, facts, say_unreached=as_json)
    if as_json:
        console.print_json(top_json(fleet.snapshot, loaded))
    else:
        console.print_table(top_tables(fleet.snapshot, loaded))
    unreached = fleet.partial or any(n.unreachable_reason for n in fleet.snapshot.nodes)
    raise SystemExit(console.EXIT_INCOMPLETE if unreached else console.EXIT_OK)
