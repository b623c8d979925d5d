"""`ctl nodes`: the fleet as it is, one row per node."""

from __future__ import annotations

from cli.commands.options import (
    DEFAULT_INVENTORY,
    FactsOption,
    InventoryOption,
    JsonOption,
)


def nodes(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
    as_json: JsonOption = False,
) -> None:
    """List nodes: status, free/total GPUs, memory, fabrics, labels and shards."""
    from cli.cluster.views import nodes_json
    from cli.commands.fleet import load_fleet
    from cli.ui import console
    from cli.ui.tables import node_notes, nodes_table

    with console.input_errors():
        fleet = load_fleet(inventory, facts)
    if as_json:
        console.print_json(nodes_json(fleet.snapshot))
        return
    console.print_table(nodes_table(fleet.snapshot))
    for note in node_notes(fleet.snapshot):
        console.out.print(console.rich_escape(note))
