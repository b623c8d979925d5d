"""`ctl place`: where would these models go, and if nowhere, why not."""

from __future__ import annotations

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


def place(
    context: typer.Context,
    models: Annotated[
        list[str] | None, typer.Argument(help="Models or aliases: place one more replica of each.")
    ] = None,
    all_models: Annotated[
        bool, typer.Option("--all", help="Every catalog model, up to its replicas.min.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Compute and explain; change nothing.")
    ] = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Place models on the fleet and explain every node that was refused, with numbers.

    With --dry-run nothing changes. Without it, one more replica of each named model is
    started now; reconcile keeps it while the model stays within replicas.max. Exit code
    0 when everything asked for was placed, 1 when something was not, 2 on bad input.
    """
    from cli.cluster.snapshot import checked
    from cli.commands.inputs import read_catalog, read_fleet
    from cli.errors import near_miss
    from cli.placement.explain import placement_json
    from cli.placement.place import place as place_models
    from cli.ui import console
    from cli.ui.placement import print_run

    if bool(models) == all_models:
        console.fail("name the models to place, or pass --all (not both)")
    if not dry_run and all_models:
        console.fail("--all only with --dry-run: `ctl reconcile` starts what the catalog asks")
    if not dry_run and facts is not None:
        console.fail("--facts reads a snapshot: use it with --dry-run; starting needs live facts")
    loaded = read_catalog(catalog)
    wanted: list[str] | None = None
    if models:
        wanted = []
        for name in models:
            resolved = loaded.resolve(name)
            if resolved is None:
                console.fail(
                    f"{catalog}: no model or alias '{name}'{near_miss(name, loaded.names())}"
                )
            wanted.append(resolved)
    if not dry_run and wanted:
        # One more replica of each, planned and started in one pass under the fleet's lock.
        from cli.commands.inputs import app_context, pass_hooks, require_tools
        from cli.commands.locking import lock_timeout_exits
        from cli.ops.reconcile import PassRequest, run_pass

        require_tools("ansible-playbook")
        request = PassRequest(loaded, inventory, dry_run=False, models=tuple(wanted))
        with lock_timeout_exits(), console.input_errors():
            result = run_pass(app_context(context), request, pass_hooks(context, inventory, None))
        if result.refused is not None:
            console.fail(result.refused, console.EXIT_INCOMPLETE)
        assert result.applied is not None
        console.print_lines(result.applied.lines)
        raise SystemExit(console.EXIT_OK if result.complete else console.EXIT_INCOMPLETE)
    fleet = read_fleet(context, inventory, facts)
    # The nodes' shard records, believed as far as the catalog bears them out, as the
    # reconcile planner believes them (cli/cluster/trust.py).
    snapshot = checked(fleet.snapshot, loaded)
    waits: list[str] = []
    waiting: dict[str, dict[str, object]] = {}
    if wanted is None:
        # --all: exactly what `ctl reconcile` would start, from the same plan on the same
        # inputs (backoff ledger included), so the two previews agree to the GPU.
        from cli.commands.inputs import app_context
        from cli.ops.reconcile import plan_pass
        from cli.reconcile.planner import placement_run

        the_plan = plan_pass(app_context(context), loaded, fleet, inventory, warn=console.warn)
        run = placement_run(the_plan, loaded)
        for wait in the_plan.waits:
            waiting[wait.model] = {"failures": wait.failures, "until": wait.until.isoformat()}
            seconds = max(0, int((wait.until - the_plan.now).total_seconds()))
            waits.append(
                f"{wait.model}: waits out its backoff after {wait.failures} failure(s),"
                f" until {wait.until.strftime('%H:%M:%S %Z')} (in {seconds} s); nothing placed"
            )
        rooms = {}
    else:
        from cli.placement.moves import rooms_for

        run = place_models(loaded, snapshot, wanted)
        # Named models only: --all previews reconcile, which does not move replicas.
        rooms = rooms_for(run, loaded, snapshot)
    if as_json:
        document = placement_json(run, fleet.unreached, rooms)
        if wanted is None:
            document["waiting"] = waiting
        console.print_json(document)
    else:
        console.print_lines(waits)
        print_run(run, rooms)
    complete = run.all_placed and not waits and not fleet.partial
    raise SystemExit(console.EXIT_OK if complete else console.EXIT_INCOMPLETE)
