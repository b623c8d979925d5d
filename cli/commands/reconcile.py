"""`ctl reconcile` (and `ctl drain`): bring the fleet to the catalog, or show the plan."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CaDirOption,
    CatalogOption,
    FactsOption,
    InventoryOption,
    JsonOption,
    parse_duration,
)

if TYPE_CHECKING:
    from cli.ops.controller import PassRecord


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
    prometheus_sd: Annotated[
        Path | None,
        typer.Option(
            "--prometheus-sd",
            metavar="FILE",
            help="With --watch: keep FILE the scrape targets as `ctl targets` prints them,"
            " rewritten after a pass that changes them (docs/metrics.md).",
        ),
    ] = None,
    metrics_textfile: Annotated[
        Path | None,
        typer.Option(
            "--metrics-textfile",
            metavar="FILE",
            help="With --watch: write ctl's own figures to FILE after each pass, for the"
            " node exporter's textfile collector (docs/metrics.md).",
        ),
    ] = None,
) -> None:
    """Start, rebuild, move and drain replicas until the fleet runs what the catalog asks.

    A pass that would stop more than half of the running replicas with nothing in their
    place (a catalog cut short, a model removed by mistake) asks first on a terminal, and
    without one refuses (exit code 1), unless --yes.

    Node certificates past two thirds of their lifetime are renewed when the CA is here
    (--ca-dir); without it, each is said, with how to renew it.

    With --watch, a pass every --interval until SIGTERM or SIGINT: the step under way
    finishes, what is left undone is said, exit code 0 (a second signal aborts at once).
    Each pass writes last-pass.json in the state directory (docs/controller.md), and
    where asked the Prometheus targets and ctl's figures (docs/metrics.md).

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
    if (prometheus_sd or metrics_textfile) and not watch:
        console.fail(
            "--prometheus-sd and --metrics-textfile are kept by the controller: with --watch"
        )
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
    from cli.ops.metrics import Publisher

    publisher = Publisher(prometheus_sd, metrics_textfile)
    raise SystemExit(
        run_controller(
            context, one_pass, pause, dry_run, str(log_format), catalog, inventory, publisher
        )
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
    facts: FactsOption = None,
    ca_dir: CaDirOption = None,
) -> None:
    """Cordon NODE, then move its replicas elsewhere, each serving before the old one drains.

    A replica for which no replacement can be placed, or whose replacement does not start,
    is left running (exit code 1) unless --force. --dry-run shows the plan drain carries
    out; with --facts, the plan on a facts snapshot instead of the live fleet ("what if I
    drain it"). The pass also does whatever else reconcile would. Exit code 0 when all of it was
    done, 1 when something could not be (as reconcile's), 2 on bad input (an unknown node)."""
    from cli.commands.inputs import app_context, require_tools
    from cli.edges.templating import render_template
    from cli.inventory.load import load_inventory
    from cli.ui import console

    if facts is not None and not dry_run:
        console.fail("--facts reads a snapshot: use it with --dry-run; draining needs live facts")
    with console.input_errors():
        load_inventory(inventory, app_context(context).decrypt(), render=render_template).find(node)
    if not dry_run:
        require_tools("ansible-playbook")  # before the cordon is written
    code = reconcile_pass(
        context, catalog, inventory, facts, dry_run, frozenset({node}), force, reason,
        ca_dir=ca_dir, write_cordon=True,
    )  # fmt: skip
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
    write_cordon: bool = False,
    record: PassRecord | None = None,
) -> int:
    """One pass (cli/ops/reconcile.py run_pass), rendered; the exit code.
    Not `confirmed`: a plan that stops most running replicas is asked about first.
    `as_json`: the plan and what was done as one document on stdout (docs/json.md).
    `defragment`: moves that make room are planned too (cli/reconcile/planner.py).
    `ca_dir`: where the CA that renews node certificates is (default as `ctl ca init`).
    `write_cordon`: the `evict` nodes are cordoned with `cordon` first (drain).
    `record`: the controller's account of the pass, filled in (cli/ops/controller.py)."""
    from cli.commands.inputs import app_context, pass_hooks, read_catalog, require_tools
    from cli.commands.locking import lock_timeout_exits
    from cli.ops.reconcile import PassRequest, run_pass
    from cli.reconcile.planner import DRAINING
    from cli.reconcile.report import reconcile_json
    from cli.ui import console

    if not dry_run:
        require_tools("ansible-playbook")  # before anything is gathered, planned or said
    request = PassRequest(
        read_catalog(catalog_path), inventory_path, dry_run, evict, force, cordon or DRAINING,
        write_cordon, defragment, confirmed, ca_dir=ca_dir,
    )  # fmt: skip
    hooks = pass_hooks(context, inventory_path, facts_dir, as_json)
    with lock_timeout_exits(), console.input_errors():
        result = run_pass(app_context(context), request, hooks)
    assert result.plan is not None and result.fleet is not None  # a whole pass always plans
    if record is not None:
        from cli.ops.controller import note_outcome, note_plan
        from cli.ops.metrics import pass_view

        note_plan(record, result.plan, result.fleet)
        outcome = None if result.applied is None else result.applied.outcome
        if outcome is not None:
            note_outcome(record, outcome)
        record.view = pass_view(request.catalog, result.fleet, result.plan, outcome)
    if result.refused is not None:
        return console.EXIT_INCOMPLETE
    if as_json:
        outcome = None if result.applied is None else result.applied.outcome
        console.print_json(
            reconcile_json(result.plan, dry_run=dry_run, complete=result.complete, outcome=outcome)
        )
    elif result.applied is not None:
        console.print_lines(result.applied.lines)  # a node's text among them: escaped
    return console.EXIT_OK if result.complete else console.EXIT_INCOMPLETE
