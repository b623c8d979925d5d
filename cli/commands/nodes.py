"""`ctl nodes`: the fleet as it is, one row per node."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import (
    DEFAULT_INVENTORY,
    FactsOption,
    InventoryOption,
    JsonOption,
)


def nodes(
    context: typer.Context,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
    as_json: JsonOption = False,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide", help="Add STORE: each node's model store, its free space and weights held."
        ),
    ] = False,
) -> None:
    """List nodes: status, free/total GPUs, memory, fabrics, labels and shards.

    Facts are gathered live over SSH unless --facts names a snapshot. Exit code 1 when a
    node could not be reached (it is listed with why), 2 on bad input.
    """
    from cli.cluster.views import nodes_json
    from cli.commands.inputs import read_fleet
    from cli.ui import console
    from cli.ui.tables import node_notes, nodes_table

    fleet = read_fleet(context, inventory, facts, say_unreached=as_json)
    if as_json:
        console.print_json(nodes_json(fleet.snapshot))
    else:
        console.print_table(nodes_table(fleet.snapshot, wide=wide))
        for note in node_notes(fleet.snapshot):
            console.out.print(console.rich_escape(note))
    # Listed Unreachable or Lost, whether this gather or the snapshot's failed to reach it.
    unreached = fleet.partial or any(n.unreachable_reason for n in fleet.snapshot.nodes)
    raise SystemExit(console.EXIT_INCOMPLETE if unreached else console.EXIT_OK)
