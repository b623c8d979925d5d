"""`ctl cordon` and `ctl uncordon`: set or clear a node's `cordoned` in the inventory itself."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import DEFAULT_INVENTORY, InventoryOption

NodeArgument = Annotated[str, typer.Argument(help="The node: its name in the inventory.")]
ReasonOption = Annotated[
    str,
    typer.Option("--reason", "-r", help='Why it is cordoned, e.g. "PSU fan failing".'),
]


def cordon(
    context: typer.Context,
    node: NodeArgument,
    reason: ReasonOption,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Keep new work off a node: write `cordoned: REASON` into the inventory.

    The operator's files are edited in place, comments and formatting kept: where the node's
    own variables are (its host_vars file, or inline under its entry), or in a new
    host_vars/NODE.yml when the inventory names it only through a range. Running shards are
    left alone. Another ctl changing the same fleet is waited for, up to ctl's
    --lock-timeout. Exit code 0 when written, 1 when the other ctl still holds the fleet
    then, 2 on bad input; on 1 and 2 nothing is changed.
    """
    from cli.commands.inputs import app_context
    from cli.commands.locking import fleet_lock
    from cli.inventory.edit import cordon_node
    from cli.ui import console

    with console.input_errors(), fleet_lock(context, inventory):
        said = cordon_node(inventory, node, reason, app_context(context).decrypt())
    console.out.print(said, markup=False, soft_wrap=True)


def uncordon(
    context: typer.Context,
    node: NodeArgument,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Let work onto a node again: remove its `cordoned` from the inventory.

    A cordon set for a group (or a host range) stays on the group's other nodes: this node
    gets `cordoned: false` of its own instead. Another ctl changing the same fleet is waited
    for, up to ctl's --lock-timeout. Exit code 0 when done (or it was not cordoned), 1 when
    the other ctl still holds the fleet then, 2 on bad input; on 1 and 2 nothing is changed.
    """
    from cli.commands.inputs import app_context
    from cli.commands.locking import fleet_lock
    from cli.inventory.edit import uncordon_node
    from cli.ui import console

    with console.input_errors(), fleet_lock(context, inventory):
        said = uncordon_node(inventory, node, app_context(context).decrypt())
    console.out.print(said, markup=False, soft_wrap=True)
