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
    fleet = read_fleet(context, inventory, facts)
    # The nodes' shard records, believed as far as the catalog bears them out, as the
    # reconcile planner believes them (cli/cluster/trust.py).
    snapshot = checked(fleet.snapshot, loaded)
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
        from cli.commands.reconcile import apply_plan
        from cli.ops.fleet import model_stores, rank_networks, serving_addresses
        from cli.placement.place import running_replicas
        from cli.reconcile.planner import plan_manual
        from cli.ui.plan import render_plan

        # Above replicas.max, the next reconcile would drain it again: refuse it now.
        running = running_replicas(snapshot)
        for name in wanted:
            have, most = len(running.get(name, ())), loaded.models[name].replicas_max
            if have >= most:
                console.fail(
                    f"{name} runs {have} replica(s), its replicas.max is {most}: raise it in"
                    f" {catalog} to run another; nothing was started",
                    console.EXIT_INCOMPLETE,
                )
        addresses, listen = serving_addresses(fleet.inventory)
        networks = rank_networks(fleet.inventory)
        stores = model_stores(fleet.inventory)
        the_plan = plan_manual(loaded, fleet.snapshot, wanted, addresses, listen, networks, stores)
        console.print_lines(render_plan(the_plan))
        raise SystemExit(apply_plan(context, fleet, the_plan, inventory))
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
