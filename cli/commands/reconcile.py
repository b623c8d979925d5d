"""`ctl reconcile`: bring the fleet to the catalog, or show the plan with --dry-run."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
    parse_duration,
)


def reconcile(
    context: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Repeat until interrupted.")] = False,
    interval: Annotated[
        str, typer.Option("--interval", help="Time between passes with --watch (e.g. 30s).")
    ] = "30s",
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
) -> None:
    """Start, rebuild, move and drain replicas until the fleet runs what the catalog asks.

    Exit code 0 when the fleet matches the catalog (or the plan was shown), 1 when
    something could not be done (a replica unplaceable or failed, a node unreachable),
    2 on bad input.
    """
    from cli.ui import console

    if facts is not None and not dry_run:
        console.fail("--facts reads a snapshot: use it with --dry-run; applying needs live facts")
    pause = parse_duration(interval).total_seconds()
    while True:
        code = _one_pass(context, dry_run, catalog, inventory, facts)
        if not watch:
            raise SystemExit(code)
        try:
            time.sleep(pause)
        except KeyboardInterrupt:
            raise SystemExit(code) from None


def _one_pass(
    context: typer.Context,
    dry_run: bool,
    catalog_path: object,
    inventory_path: object,
    facts_dir: object,
) -> int:
    import random
    from pathlib import Path

    from cli.catalog.load import load_catalog
    from cli.commands.fleet import fleet_known_hosts, load_fleet_for
    from cli.commands.options import GatherOptions
    from cli.facts.cache import state_dir
    from cli.reconcile.apply import apply
    from cli.reconcile.ledger import ledger_path, load_ledger, save_ledger
    from cli.reconcile.planner import plan
    from cli.shards.executor import AnsibleExecutor
    from cli.ui import console
    from cli.ui.plan import render_plan

    assert isinstance(catalog_path, Path) and isinstance(inventory_path, Path)
    assert facts_dir is None or isinstance(facts_dir, Path)
    options = context.obj if isinstance(context.obj, GatherOptions) else GatherOptions()
    with console.input_errors():
        loaded = load_catalog(catalog_path)
    fleet = load_fleet_for(context, inventory_path, facts_dir)
    root = options.state_dir or state_dir()
    ledger_file = ledger_path(inventory_path, root)
    rng = random.Random()
    addresses = {host.name: host.address for host in fleet.inventory.hosts}
    the_plan = plan(loaded, fleet.snapshot, load_ledger(ledger_file), addresses, rng)
    console.print_lines(render_plan(the_plan))
    incomplete = bool(the_plan.unplaced) or fleet.partial
    if dry_run or the_plan.empty:
        if not dry_run:
            save_ledger(ledger_file, the_plan.ledger)
        return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK
    executor = AnsibleExecutor(
        inventory_path,
        fleet_known_hosts(inventory_path, options),
        root / "logs",
        on_run=lambda run: console.err.print(
            f"  {run.playbook}: exit {run.returncode}, {run.changed} change(s),"
            f" {run.seconds:.1f} s — log {run.log}"
        ),
    )
    outcome = apply(
        the_plan, executor, fleet.snapshot.now, rng,
        report=lambda line: console.err.print(console.rich_escape(line)),
    )  # fmt: skip
    save_ledger(ledger_file, outcome.ledger)
    for replica in outcome.started:
        console.out.print(f"started {replica}")
    for replica, why in outcome.failed.items():
        console.out.print(console.rich_escape(f"FAILED  {replica}: {why} — stopped whole"))
    for replica, why in outcome.stop_failures.items():
        console.out.print(console.rich_escape(f"NOT STOPPED {replica}: {why}"))
    if not outcome.complete:
        incomplete = True
    return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK
