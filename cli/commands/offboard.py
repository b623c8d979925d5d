"""`ctl offboard-node NAME`: drain the node, remove its key, revoke its certificate,
forget its host key and take it out of the inventory (docs/onboarding.md, Offboarding)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.ca import CaDirOption, ca_directory, open_ca
from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
)

if TYPE_CHECKING:
    from cli.ops.fleet import Fleet
    from cli.reconcile.planner import Plan

OFFBOARDING = "offboarding"  # the cordon the drain writes


def offboard_node(
    context: typer.Context,
    name: Annotated[str, typer.Argument(help="The node to take out of the fleet.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be done; change nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Go on even when replicas that no other node can take would be lost, or the"
            " node cannot be reached; what is lost is said.",
        ),
    ] = False,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ca_dir: CaDirOption = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
    facts: FactsOption = None,
) -> None:
    """Take NAME out of the fleet: drain it (each replica serving elsewhere before its old
    one stops, as ctl drain), remove its private key on the node, revoke its certificates
    (the CA's revoked.json and crl.pem), forget its host key and remove its lines from the
    inventory, every other byte kept.

    Refused, with nothing changed, while a replica no other node can take would be lost,
    or while the node cannot be reached (its shards cannot be stopped), unless --force.
    Running it again on an offboarded node says what is already done. Exit code 0 when the
    node is offboarded (with --dry-run: when it could be), 1 when it is refused or a step
    could not be done (a replica left serving, another ctl holding the fleet's lock), 2 on
    bad input (an unknown node, a host named through a range, no CA).
    """
    raise SystemExit(offboard(context, name, dry_run, force, inventory, ca_dir, catalog, facts))


def offboard(
    context: typer.Context,
    name: str,
    dry_run: bool,
    force: bool,
    inventory: Path,
    ca_dir: Path | None,
    catalog: Path,
    facts: Path | None,
) -> int:
    """Offboard `name` (or print the plan, `dry_run`); the exit code. `ctl deprovision-node`
    runs it first for a node still in the inventory."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from cli.commands.inputs import app_context, read_catalog, read_fleet, require_tools
    from cli.commands.reconcile import say_run
    from cli.inventory.load import load_inventory
    from cli.ops import offboard as ops
    from cli.ops.reconcile import plan_pass
    from cli.ui import console
    from cli.ui.offboard import plan_lines

    if facts is not None and not dry_run:
        console.fail(
            "--facts reads a snapshot: use it with --dry-run; offboarding needs live facts"
        )
    options = app_context(context)
    decrypt = options.decrypt()
    now = datetime.now(UTC)

    def say(line: str) -> None:
        console.err.print(line, markup=False, emoji=False, highlight=False)

    def run() -> int:
        with console.input_errors():
            ca = open_ca(ca_directory(ca_dir), now)  # a CA near its end: a warning
            model = load_inventory(inventory, decrypt)
            present = name in model.names()
            loaded = read_catalog(catalog) if present else None
            if present and not dry_run:
                require_tools("ansible-playbook")
            held: dict[str, Fleet] = {}

            def drain() -> tuple[Fleet, Plan]:
                assert loaded is not None
                fleet = read_fleet(context, inventory, facts)
                the_plan = plan_pass(
                    options, loaded, fleet, inventory, frozenset({name}), force, OFFBOARDING,
                    warn=console.warn,
                )  # fmt: skip
                # Renewing certificates is reconcile's and drain's work, not offboarding's.
                the_plan = replace(the_plan, renewals=(), certificates_due=())
                held["fleet"] = fleet
                return fleet, the_plan

            plan = ops.plan_offboard(
                options, name, inventory, model, ca, drain if present else None, now, decrypt,
                ask_node=facts is None,
            )  # fmt: skip
        for line in plan_lines(plan):
            console.out.print(line, markup=False, highlight=False, overflow="ignore", crop=False)
        if plan.done_already:
            console.out.print(f"{name} is already offboarded: nothing left to do", markup=False)
            return console.EXIT_OK
        refusals = plan.refusals
        if refusals and not force:
            for why in refusals:
                say(f"refused: {why}; nothing was changed")
            return console.EXIT_INCOMPLETE
        for why in refusals:
            say(f"--force: {why.split(' (--force')[0]}")
        if dry_run:
            return console.EXIT_OK
        if present:
            from cli.inventory.edit import cordon_node

            host = model.host(name)
            if host.vars.cordoned is None:
                with console.input_errors():
                    say(cordon_node(inventory, name, OFFBOARDING, decrypt))
        with console.input_errors():
            done = ops.carry_out(
                options, plan, held.get("fleet"), inventory, loaded, ca, now,
                on_run=say_run, say=say, decrypt=decrypt, force=force,
            )  # fmt: skip
        for line in done.lines:
            console.out.print(line, markup=False, highlight=False, overflow="ignore", crop=False)
        return console.EXIT_OK if done.complete else console.EXIT_INCOMPLETE

    if dry_run:
        return run()
    from cli.commands.locking import fleet_lock

    with fleet_lock(context, inventory):
        return run()
