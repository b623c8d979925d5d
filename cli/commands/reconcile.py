"""`ctl reconcile` (and `ctl drain`): bring the fleet to the catalog, or show the plan."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
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
    JsonOption,
    parse_duration,
)

if TYPE_CHECKING:
    from cli.catalog.load import Catalog
    from cli.ops.controller import PassRecord
    from cli.ops.fleet import Fleet
    from cli.pki.store import CertificateAuthority
    from cli.reconcile.planner import Plan
    from cli.shards.ansible import PlaybookRun


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


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
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Carry out a pass that stops more than half of the running replicas.",
        ),
    ] = False,
    as_json: JsonOption = False,
    defragment: Annotated[
        bool,
        typer.Option(
            "--defragment",
            help="Move running replicas (at most 3 for each) to make room for one that"
            " fits nowhere; it starts in the next pass.",
        ),
    ] = False,
    ca_dir: CaDirOption = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format",
            help="With --watch: each event as a line of text, or as a JSON object"
            " (docs/controller.md).",
        ),
    ] = LogFormat.TEXT,
) -> None:
    """Start, rebuild, move and drain replicas until the fleet runs what the catalog asks.

    A pass that would stop more than half of the running replicas with nothing in their
    place (a catalog cut short, a model removed by mistake) asks first on a terminal, and
    without one refuses (exit code 1), unless --yes.

    Node certificates past two thirds of their lifetime are renewed when the CA is here
    (--ca-dir); without it, each is said, with how to renew it.

    With --watch, a pass every --interval until SIGTERM or SIGINT: the step under way
    finishes, what is left undone is said, exit code 0 (a second signal aborts at once).
    Each pass writes last-pass.json in the state directory (docs/controller.md).

    Exit code 0 when the fleet matches the catalog (with --dry-run: when the plan brings
    it there), 1 when something could not be done (a replica unplaceable or failed, a
    model waiting out its backoff, a node unreachable, another ctl still changing the same
    fleet after --lock-timeout), 2 on bad input.
    """
    from cli.ui import console

    if facts is not None and not dry_run:
        console.fail("--facts reads a snapshot: use it with --dry-run; applying needs live facts")
    if as_json and watch:
        console.fail("--json prints one document for one pass: not with --watch")
    pause = parse_duration(interval).total_seconds()
    if not watch:
        code = reconcile_pass(
            context, catalog, inventory, facts, dry_run, confirmed=yes, as_json=as_json,
            defragment=defragment, ca_dir=ca_dir,
        )  # fmt: skip
        raise SystemExit(code)

    def one_pass(record: PassRecord) -> int:
        return reconcile_pass(
            context, catalog, inventory, facts, dry_run, confirmed=yes, defragment=defragment,
            ca_dir=ca_dir, record=record,
        )  # fmt: skip

    from cli.commands.controller import run_controller

    raise SystemExit(
        run_controller(context, one_pass, pause, dry_run, str(log_format), catalog, inventory)
    )


def drain(
    context: typer.Context,
    node: Annotated[str, typer.Argument(help="The node to empty.")],
    reason: Annotated[
        str, typer.Option("--reason", "-r", help="Why, for the cordon it sets.")
    ] = "drained",
    dry_run: DryRunOption = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Drain even the replicas no replacement can be placed for: they are lost.",
        ),
    ] = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ca_dir: CaDirOption = None,
) -> None:
    """Cordon NODE, then move its replicas elsewhere, each serving before the old one drains.

    A replica for which no replacement can be placed, or whose replacement does not start,
    is left running (exit code 1) unless --force. --dry-run shows the plan drain carries
    out. The pass also does whatever else reconcile would. Exit code 0 when all of it was
    done, 1 when something could not be (as reconcile's), 2 on bad input (an unknown node)."""
    from cli.commands.inputs import app_context, require_tools
    from cli.inventory.edit import cordon_node
    from cli.inventory.load import load_inventory
    from cli.ui import console

    with console.input_errors():
        host = load_inventory(inventory, app_context(context).decrypt()).find(node)
    if not dry_run:
        require_tools("ansible-playbook")  # before the cordon is written
    evict = frozenset({node})
    if dry_run:
        code = reconcile_pass(
            context, catalog, inventory, None, dry_run, evict, force, reason, ca_dir=ca_dir
        )
        raise SystemExit(code)
    from cli.commands.locking import fleet_lock

    with fleet_lock(context, inventory):  # the cordon and the pass, as one change
        if host.vars.cordoned is None:
            with console.input_errors():
                console.out.print(
                    cordon_node(inventory, node, reason, app_context(context).decrypt()),
                    markup=False,
                )
        code = reconcile_pass(
            context, catalog, inventory, None, dry_run, evict, force, reason, ca_dir=ca_dir
        )
    raise SystemExit(code)


def reconcile_pass(
    context: typer.Context,
    catalog_path: Path,
    inventory_path: Path,
    facts_dir: Path | None,
    dry_run: bool,
    evict: frozenset[str] = frozenset(),
    force: bool = False,
    cordon: str | None = None,
    *,
    confirmed: bool = True,
    as_json: bool = False,
    defragment: bool = False,
    ca_dir: Path | None = None,
    record: PassRecord | None = None,
) -> int:
    """One pass: plan, show, and (not dry_run) carry out, holding the fleet's lock from the
    first fact gathered to the last change, so two passes never plan on the same state.
    Not `confirmed`: a plan that stops most running replicas is asked about first.
    `as_json`: the plan and what was done as one document on stdout (docs/json.md).
    `defragment`: moves that make room are planned too (cli/reconcile/planner.py).
    `ca_dir`: where the CA that renews node certificates is (default as `ctl ca init`).
    `record`: the controller's account of the pass, filled in (cli/ops/controller.py)."""
    args = (
        context, catalog_path, inventory_path, facts_dir, dry_run, evict, force, cordon,
        confirmed, as_json, defragment, ca_dir, record,
    )  # fmt: skip
    if dry_run:
        return _reconcile_pass(*args)
    from cli.commands.locking import fleet_lock

    with fleet_lock(context, inventory_path):
        return _reconcile_pass(*args)


def _reconcile_pass(
    context: typer.Context,
    catalog_path: Path,
    inventory_path: Path,
    facts_dir: Path | None,
    dry_run: bool,
    evict: frozenset[str],
    force: bool,
    cordon: str | None,
    confirmed: bool,
    as_json: bool,
    defragment: bool,
    ca_dir: Path | None,
    record: PassRecord | None,
) -> int:
    from cli.commands.inputs import app_context, read_catalog, read_fleet, require_tools
    from cli.ops.reconcile import due_certificates, plan_pass
    from cli.reconcile.planner import DRAINING
    from cli.reconcile.report import reconcile_json
    from cli.ui import console
    from cli.ui.plan import render_plan

    if not dry_run:
        require_tools("ansible-playbook")  # before anything is gathered, planned or said
    loaded = read_catalog(catalog_path)
    fleet = read_fleet(context, inventory_path, facts_dir)
    options = app_context(context)
    directory = ca_directory(ca_dir)
    ca = None
    if due_certificates(fleet) and directory.exists():  # the CA is read only when needed
        with console.input_errors():
            ca = open_ca(directory, datetime.now(UTC))
    the_plan = plan_pass(
        options, loaded, fleet, inventory_path, evict, force, cordon or DRAINING, defragment,
        ca, directory,
    )  # fmt: skip
    if not as_json:
        console.print_lines(render_plan(the_plan))
    if record is not None:
        from cli.ops.controller import note_plan

        note_plan(record, the_plan, fleet)
    if dry_run:
        incomplete = bool(the_plan.unplaced or the_plan.waits) or fleet.partial
        if as_json:
            console.print_json(reconcile_json(the_plan, dry_run=True, complete=not incomplete))
        return console.EXIT_INCOMPLETE if incomplete else console.EXIT_OK
    if not confirmed and not _mass_stop_confirmed(the_plan):
        return console.EXIT_INCOMPLETE
    return apply_plan(
        context, fleet, the_plan, inventory_path, loaded, as_json=as_json, ca=ca,
        ca_dir=directory, record=record,
    )  # fmt: skip


def _mass_stop_confirmed(the_plan: Plan) -> bool:
    """True unless the plan stops more than half of the running replicas with nothing in
    their place and the operator, asked on a terminal, says no (or there is no terminal)."""
    import sys

    from cli.reconcile.planner import retired_unreplaced
    from cli.ui import console

    lost, running = retired_unreplaced(the_plan)
    if 2 * len(lost) <= running:
        return True
    said = f"this pass stops {len(lost)} of {running} running replicas, with nothing in their place"
    if sys.stdin.isatty():
        return typer.confirm(f"{said}. Go on?", default=False, err=True)
    console.err.print(
        f"error: {said}; nothing was changed (check the catalog; --yes to go on)", markup=False
    )
    return False


def apply_plan(
    context: typer.Context,
    fleet: Fleet,
    the_plan: Plan,
    inventory_path: Path,
    catalog: Catalog | None = None,
    *,
    as_json: bool = False,
    ca: CertificateAuthority | None = None,
    ca_dir: Path | None = None,
    record: PassRecord | None = None,
) -> int:
    """Run `the_plan` on the nodes; say what happened (`as_json`: the plan and the outcome
    as one document); the exit code."""
    from cli.commands.inputs import app_context
    from cli.ops import reconcile as ops
    from cli.reconcile.report import reconcile_json
    from cli.ui import console

    applied = ops.apply_plan(
        app_context(context), fleet, the_plan, inventory_path, catalog,
        on_run=say_run, report=lambda line: console.err.print(console.rich_escape(line)),
        ca=ca, ca_dir=ca_dir,
    )  # fmt: skip
    if record is not None:
        from cli.ops.controller import note_outcome

        note_outcome(record, applied.outcome)
    if as_json:
        console.print_json(
            reconcile_json(
                the_plan, dry_run=False, complete=applied.complete, outcome=applied.outcome
            )
        )
    else:
        for line in applied.lines:  # a node's text among them: never read as markup
            console.out.print(line, markup=False, overflow="ignore", crop=False)
    return console.EXIT_OK if applied.complete else console.EXIT_INCOMPLETE


def say_run(run: PlaybookRun) -> None:
    """One line on stderr per playbook run: how it ended and where its log is."""
    from cli.ui import console

    console.err.print(
        f"  {run.playbook}: exit {run.returncode}, {run.changed} change(s),"
        f" {run.seconds:.1f} s — log {run.log}"
    )
