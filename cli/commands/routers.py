"""Pointing the routers at a routing table now: what `ctl routes --apply` and the
`--apply` of `ctl keys` both do (the keys travel with the routes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from cli.ops.fleet import Fleet
    from cli.routes.table import RouteTable


def push_routes(
    context: typer.Context, fleet: Fleet, inventory_path: Path, table: RouteTable
) -> int:
    """Push `table` (and the teams' keys) to every router; the exit code."""
    from cli.commands.inputs import app_context
    from cli.ops.reconcile import router_deployer
    from cli.routes.deploy import failure_text
    from cli.ui import console

    deployer = router_deployer(
        app_context(context), fleet, inventory_path, console.say_run, every=True
    )
    if deployer is None:
        console.fail(f"no hosts in the inventory group routers of {inventory_path}")
    failures = deployer.push(table)
    if failures:
        console.err.print(f"routers not updated: {console.rich_escape(failure_text(failures))}")
        return console.EXIT_INCOMPLETE
    console.err.print(f"routers updated: {', '.join(deployer.hosts)}")
    return console.EXIT_OK
