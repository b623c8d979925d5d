"""What a command reads before it acts: the application context, the catalog, the fleet.

Bad input exits 2 with every problem on its own line; gathering shows progress on stderr,
and names every node not reached with why.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.commands.options import DEFAULT_CATALOG, DEFAULT_INVENTORY
from cli.errors import InputError
from cli.ops.context import AppContext

if TYPE_CHECKING:
    from cli.catalog.load import Catalog
    from cli.ops.fleet import Fleet
    from cli.ops.reconcile import PassHooks
    from cli.pki.store import CertificateAuthority


def app_context(context: typer.Context) -> AppContext:
    """The context `ctl`'s own options made (cli/app.py sets it before any command)."""
    found = context.find_object(AppContext)
    if found is None:
        raise RuntimeError("ctl's root callback did not run: no application context")
    return found


def require_tools(*names: str) -> None:
    """Exit 2 naming the tool (and how to install it) before a pass that would run it."""
    from cli.edges.tools import ToolMissingError, ansible_command
    from cli.ui import console

    with console.input_errors():
        for name in names:
            try:
                ansible_command(name)
            except ToolMissingError as error:
                raise InputError.single(error.tool, None, (), error.reason) from None


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
    from cli.edges.templating import render_template
    from cli.inventory.load import load_inventory
    from cli.ops.fleet import fleet_of
    from cli.ui import console
    from cli.ui.progress import gather_progress

    options = app_context(context)
    with console.input_errors(), default_path_hint(inventory_path):
        # Read once: its hosts size the progress bar and are the ones gathered.
        inventory = load_inventory(inventory_path, options.decrypt(), render=render_template)
        if facts_dir is not None:
            fleet = fleet_of(options, inventory, inventory_path, facts_dir)
        else:
            with gather_progress(len(inventory.hosts)) as progress:
                fleet = fleet_of(options, inventory, inventory_path, None, progress)
    # A snapshot's unreached nodes come as warnings "NAME: why": the same fact.
    unreached = {f"{n}: {f.error}" for n, f in fleet.facts.items() if f.error is not None}
    for warning in fleet.warnings:
        if say_unreached or warning not in unreached:
            console.warn(warning)
    for name, reason in fleet.unreached.items() if say_unreached else ():
        console.err.print(f"unreachable: {name}: {console.rich_escape(reason)}")
    return fleet


def read_ca(ca_dir: Path | None, now: datetime) -> CertificateAuthority:
    """The CA of --ca-dir (or the default), checked; a warning on stderr when its
    certificate ends within 30 days. Bad files: InputError (the caller's exit 2)."""
    from cli.ops.ca import ca_directory, open_ca

    return open_ca(ca_directory(ca_dir), now, _warn)


def pass_hooks(
    context: typer.Context, inventory_path: Path, facts_dir: Path | None, as_json: bool = False
) -> PassHooks:
    """What a reconcile pass (cli/ops/reconcile.py run_pass) needs of the command line: the
    fleet read with progress, the lock's lines, the plan shown (not for --json), the
    mass-stop question asked on a terminal, progress and playbook runs on stderr."""
    from cli.ops.reconcile import PassHooks
    from cli.ui import console
    from cli.ui.plan import render_plan

    def confirm(said: str) -> bool:
        import sys

        if sys.stdin.isatty():
            return typer.confirm(f"{said}. Go on?", default=False, err=True)
        console.err.print(
            f"error: {said}; nothing was changed (check the catalog; --yes to go on)",
            markup=False,
        )
        return False

    return PassHooks(
        read_fleet=lambda: read_fleet(context, inventory_path, facts_dir),
        command=holder(),
        waiting=say_waiting,
        show_plan=lambda the_plan: None if as_json else console.print_lines(render_plan(the_plan)),
        confirm=confirm,
        say=lambda line: console.out.print(line, markup=False),
        warn=_warn,
        report=lambda line: console.err.print(console.rich_escape(line)),
        on_run=console.say_run,
    )


def _warn(line: str) -> None:
    from cli.ui import console

    console.err.print(f"warning: {line}", markup=False, emoji=False, soft_wrap=True)


def holder() -> str:
    """This ctl as the lock file names it to another one waiting."""
    return shlex.join(["ctl", *sys.argv[1:]])


def say_waiting(line: str) -> None:
    """A line of the lock's on stderr: the holder's command line, from the lock file, is
    text only."""
    from cli.ui import console
    from cli.ui.safe import shown

    console.err.print(shown(line), markup=False, highlight=False)
