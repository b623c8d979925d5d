"""What a command reads before it acts: the application context, the catalog, the fleet.

Bad input exits 2 with every problem on its own line; gathering shows progress on stderr,
and names every node not reached with why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.commands.options import DEFAULT_CATALOG, DEFAULT_INVENTORY
from cli.errors import InputError
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


def require_tools(*names: str) -> None:
    """Exit 2 naming the tool (and how to install it) before a pass that would run it."""
    from cli.shards.ansible import ansible_command
    from cli.ui import console

    with console.input_errors():
        for name in names:
            ansible_command(name)


HINTS = {
    DEFAULT_CATALOG: "point ctl at a catalog with --catalog FILE or MODELFLEET_CATALOG",
    DEFAULT_INVENTORY: "point ctl at an inventory with --inventory PATH or MODELFLEET_INVENTORY",
}


@contextmanager
def default_path_hint(path: Path) -> Iterator[None]:
    """A default path that is not there: its error says how to name another one."""
    try:
        yield
    except InputError as error:
        hint = HINTS.get(path)
        if hint is None or path.exists():
            raise
        raise InputError(
            [
                replace(p, message=f"{p.message} ({hint})") if p.file == str(path) else p
                for p in error.problems
            ]
        ) from None


def read_catalog(path: Path) -> Catalog:
    from cli.catalog.load import load_catalog
    from cli.ui import console

    with console.input_errors(), default_path_hint(path):
        return load_catalog(path)


def read_fleet(
    context: typer.Context,
    inventory_path: Path,
    facts_dir: Path | None,
    say_unreached: bool = True,
) -> Fleet:
    """The inventory and its facts, from a snapshot or gathered live with progress.

    Every node not reached is named on stderr with why, unless `say_unreached` is False:
    for a command whose own output names it (a fact is said once)."""
    from cli.ops.fleet import load_fleet
    from cli.ui import console
    from cli.ui.progress import gather_progress

    options = app_context(context)
    with console.input_errors(), default_path_hint(inventory_path):
        if facts_dir is not None:
            fleet = load_fleet(options, inventory_path, facts_dir)
        else:
            from cli.inventory.load import load_inventory

            hosts = len(load_inventory(inventory_path, options.decrypt()).hosts)
            with gather_progress(hosts) as progress:
                fleet = load_fleet(options, inventory_path, None, progress)
    # A snapshot's unreached nodes come as warnings "NAME: why": the same fact.
    unreached = {f"{n}: {f.error}" for n, f in fleet.facts.items() if f.error is not None}
    for warning in fleet.warnings:
        if say_unreached or warning not in unreached:
            console.warn(warning)
    for name, reason in fleet.unreached.items() if say_unreached else ():
        console.err.print(f"unreachable: {name}: {console.rich_escape(reason)}")
    return fleet
