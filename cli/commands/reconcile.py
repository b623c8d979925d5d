"""`ctl reconcile` (and `ctl drain`): bring the fleet to the catalog, or show the plan."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
    parse_duration,
)

if TYPE_CHECKING:
    from cli.catalog.load import Catalog
    from cli.commands.fleet import Fleet
    from cli.reconcile.planner import Plan
    from cli.routes.deploy import PlaybookRouter
    from cli.shards.ansible import PlaybookRun

DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def reconcile(
    context: typer.Context,
    dry_run: DryRunOption = False,
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
        code = reconcile_pass(context, catalog, inventory, facts, dry_run)
        if not watch:
            raise SystemExit(code)
        try:
            time.sleep(pause)
        except KeyboardInterrupt:
            raise SystemExit(code) from None


def drain(
    context: typer.Context,
    node: Annotated[str, typer.Argument(help="The node to empty.")],
    reason: Annotated[
        str, typer.Option("--reason", "-r", help="Why, for the cordon it sets.")
    ] = "drained",
    dry_run: DryRunOption = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Cordon NODE, then move its replicas elsewhere, each serving before the old one drains.

    The pass also does whatever else reconcile would."""
    from cli.inventory.edit import cordon_node
    from cli.inventory.load import load_inventory
    from cli.ui import console

    with console.input_errors():
        host = load_inventory(inventory).find(node)
    if not dry_run and host.vars.cordoned is None:
        with console.input_errors():
            console.out.print(cordon_node(inventory, node, reason), markup=False)
    raise SystemExit(reconcile_pass(context, catalog, inventory, None, dry_run, frozenset({node})))


def reconcile_pass(
    context: typer.Context,
    catalog_path: Path,
    inventory_path: Path,
    facts_dir: Path | None,
    dry_run: bool,
    evict: frozenset[str] = frozenset(),
) -> int:
    import random

    from cli.catalog.load import load_catalog
    from cli.commands.fleet import load_fleet_for, serving_addresses
    from cli.reconcile.ledger import load_ledger
    from cli.reconcile.planner import plan
    from cli.ui import console
    from cli.ui.plan import render_plan

    with console.input_errors():
        loaded = load_catalog(catalog_path)
    fleet = load_fleet_for(context, inventory_path, facts_dir)
    addresses, listen = serving_addresses(fleet.inventory)
    ledger = load_ledger(_ledger_file(context, inventory_path))
    the_plan = plan(
        loaded, fleet.snapshot, ledger, addresses, random.Random(), evict, listen=listen
    )
    console.print_lines(render_plan(the_plan))
    if dry_run:
        incomplete = bool(the_plan.unplaced) or fleet.partial
        return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK
    return apply_plan(context, fleet, the_plan, inventory_path, loaded)


def _ledger_file(context: typer.Context, inventory_path: Path) -> Path:
    from cli.commands.options import GatherOptions
    from cli.edges.files import state_dir
    from cli.reconcile.ledger import ledger_path

    options = context.obj if isinstance(context.obj, GatherOptions) else GatherOptions()
    return ledger_path(inventory_path, options.state_dir or state_dir())


def apply_plan(
    context: typer.Context,
    fleet: Fleet,
    the_plan: Plan,
    inventory_path: Path,
    catalog: Catalog | None = None,
) -> int:
    """Run `the_plan` on the nodes with the playbooks; say what happened; the exit code.

    With the `catalog` and an inventory group `routers`, the routers follow every change
    (docs/routing.md), and are brought up to date even when the plan is empty."""
    import random

    from cli.commands.fleet import fleet_known_hosts
    from cli.commands.options import GatherOptions
    from cli.edges.files import state_dir
    from cli.reconcile.apply import apply
    from cli.reconcile.ledger import save_ledger
    from cli.shards.executor import AnsibleExecutor
    from cli.ui import console

    options = context.obj if isinstance(context.obj, GatherOptions) else GatherOptions()
    ledger_file = _ledger_file(context, inventory_path)
    incomplete = bool(the_plan.unplaced) or fleet.partial
    router = None if catalog is None else _router(context, fleet, catalog, inventory_path)
    if the_plan.empty:
        save_ledger(ledger_file, the_plan.ledger)
        if router is not None:
            why = router.sync()
            if why is not None:
                console.print_lines([f"ROUTERS NOT UPDATED: {why}"])
                incomplete = True
        return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK
    executor = AnsibleExecutor(
        inventory_path,
        fleet_known_hosts(inventory_path, options),
        (options.state_dir or state_dir()) / "logs",
        on_run=_say_run,
    )
    outcome = apply(
        the_plan, executor, fleet.snapshot.now, random.Random(),
        report=lambda line: console.err.print(console.rich_escape(line)), router=router,
    )  # fmt: skip
    save_ledger(ledger_file, outcome.ledger)
    lines = [f"started {replica}" for replica in outcome.started]
    lines += [f"FAILED {r}: {why} — stopped whole" for r, why in outcome.failed.items()]
    lines += [f"NOT STOPPED {r}: {why}" for r, why in outcome.stop_failures.items()]
    lines += [f"ROUTERS NOT UPDATED: {why}" for why in outcome.route_failures]
    console.print_lines(lines)
    if not outcome.complete:
        incomplete = True
    return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK


def _say_run(run: PlaybookRun) -> None:
    from cli.ui import console

    console.err.print(
        f"  {run.playbook}: exit {run.returncode}, {run.changed} change(s),"
        f" {run.seconds:.1f} s — log {run.log}"
    )


def _router(
    context: typer.Context, fleet: Fleet, catalog: Catalog, inventory_path: Path
) -> PlaybookRouter | None:
    """The routers of the inventory group `routers`, or None when it has no host."""
    from cli.commands.fleet import fleet_known_hosts, serving_addresses
    from cli.commands.options import GatherOptions
    from cli.edges.files import state_dir
    from cli.routes.deploy import PlaybookRouter, RouterDeployer, router_hosts

    hosts = router_hosts(fleet.inventory)
    if not hosts:
        return None
    options = context.obj if isinstance(context.obj, GatherOptions) else GatherOptions()
    deployer = RouterDeployer(
        hosts,
        inventory_path,
        fleet_known_hosts(inventory_path, options),
        (options.state_dir or state_dir()) / "logs",
        on_run=_say_run,
    )
    addresses, _ = serving_addresses(fleet.inventory)
    return PlaybookRouter(catalog, fleet.snapshot, addresses, deployer)
