"""What a command reads before it acts: the application context, the catalog, the fleet.

Bad input exits 2 with every problem on its own line; gathering shows progress on stderr,
and names every node not reached with why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.ops.context import AppContext

if TYPE_CHECKING:
    from cli.catalog.load import Catalog
    from cli.ops.fleet import Fleet


def app_context(context: typer.Context) -> AppContext:
    """The context `ctl`'s own options made (cli/app.py sets it before any command)."""
    found = context.find_object(AppContext)
    if found is None:
        raise RuntimeError("ctl's root callback did not run: no application context")
    return found


def read_catalog(path: Path) -> Catalog:
    from cli.catalog.load import load_catalog
    from cli.ui import console

    with console.input_errors():
        return load_catalog(path)


def read_fleet(context: typer.Context, inventory_path: Path, facts_dir: Path | None) -> Fleet:
    """The inventory and its facts, from a snapshot or gathered live with progress."""
    from cli.ops.fleet import load_fleet
    from cli.ui import console
    from cli.ui.progress import gather_progress

    options = app_context(context)
    with console.input_errors():
        if facts_dir is not None:
            fleet = load_fleet(options, inventory_path, facts_dir)
        else:
            from cli.inventory.load import load_inventory

            hosts = len(load_inventory(inventory_path).hosts)
            with gather_progress(hosts) as progress:
                fleet = load_fleet(options, inventory_path, None, progress)
    for warning in fleet.warnings:
        console.err.print(f"warning: {console.rich_escape(warning)}")
    for name, reason in fleet.unreached.items():
        console.err.print(f"unreachable: {name}: {console.rich_escape(reason)}")
    return fleet
