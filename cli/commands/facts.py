"""`ctl facts`: gather every node's facts now, and optionally save them as a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.commands.options import DEFAULT_INVENTORY, InventoryOption, JsonOption

FLEET_FACTS_FORMAT = "modelfleet.fleet-facts/v1"


def facts(
    context: typer.Context,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Write a snapshot here: one NAME.json per node (docs/facts.md).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Gather facts from every node over SSH, one probe run per node, in parallel.

    Exit code 1 when a node could not be reached (each is named with why), 2 on bad input.
    """
    from cli.cluster import name_order
    from cli.commands.inputs import read_fleet
    from cli.facts.store import save_facts
    from cli.ui import console
    from cli.ui.tables import facts_table

    fleet = read_fleet(context, inventory, None, say_unreached=as_json)
    if save is not None:
        for host in fleet.inventory.hosts:
            node_facts = fleet.facts[host.name].model_copy(update={"host_vars": host.vars})
            save_facts(save, host.name, node_facts)
    if as_json:
        names = sorted(fleet.facts, key=name_order)
        console.print_json(
            {
                "format": FLEET_FACTS_FORMAT,
                "complete": not fleet.partial,
                "unreached": {n: fleet.unreached[n] for n in names if n in fleet.unreached},
                "nodes": {n: fleet.facts[n].model_dump(mode="json") for n in names},
            }
        )
    else:
        console.print_table(facts_table(fleet.snapshot, fleet.facts))
        if save is not None:
            console.out.print(f"saved {len(fleet.facts)} nodes to {save}/")
    raise SystemExit(console.EXIT_INCOMPLETE if fleet.partial else console.EXIT_OK)
