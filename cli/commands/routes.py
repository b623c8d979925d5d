"""`ctl routes`: which replicas answer each model and alias, and the router that says so."""

from __future__ import annotations

import contextlib
import sys
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


def routes(
    context: typer.Context,
    as_json: JsonOption = False,
    litellm: Annotated[
        bool,
        typer.Option("--litellm", help="Print the table as a LiteLLM proxy config.yaml."),
    ] = False,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Point the inventory group `routers` at this table: install, configure, reload.",
        ),
    ] = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
) -> None:
    """The routing table: for each model and alias, the rank-0 endpoint of every ready
    replica, its fallbacks in order, and what is missing (docs/routing.md).

    Exit code 0 when every model that wants replicas has a ready one, 1 when one has
    none (or a router could not be updated, or --apply waited past ctl's --lock-timeout for
    another ctl changing the same fleet), 2 on bad input.
    """
    from cli.commands.inputs import read_catalog, read_fleet, require_tools
    from cli.commands.locking import fleet_lock
    from cli.commands.routers import push_routes
    from cli.routes.litellm import render
    from cli.routes.table import route_table, routes_json
    from cli.ui import console
    from cli.ui.routes import route_notes, routes_table

    if as_json and litellm:
        console.fail("--json and --litellm are two forms of the same table: choose one")
    if apply and facts is not None:
        console.fail("--facts reads a snapshot: routers are pointed at live facts only")
    if apply:
        require_tools("ansible-playbook")
    # Applying: the fleet's lock from the facts read to the routers' update, so that no
    # reconcile pass changes the replicas in between (cli/edges/lock.py).
    with fleet_lock(context, inventory) if apply else contextlib.nullcontext():
        loaded = read_catalog(catalog)
        fleet = read_fleet(context, inventory, facts)
        addresses, _ = fleet.serving
        table = route_table(loaded, fleet.snapshot, addresses)
        if as_json:
            console.print_json(routes_json(table))
        elif litellm:
            sys.stdout.write(render(table))
        else:
            console.print_table(routes_table(table))
            console.print_lines(route_notes(table))
        code = console.EXIT_OK if table.complete else console.EXIT_INCOMPLETE
        if apply:
            code = max(code, push_routes(context, fleet, inventory, table))
    raise SystemExit(code)
