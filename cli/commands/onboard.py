"""`ctl onboard-node NAME --host ADDRESS`: trust a node's host key, give it a certificate,
add it to the inventory and show its first facts (docs/onboarding.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.options import DEFAULT_INVENTORY, CaDirOption, InventoryOption

if TYPE_CHECKING:
    from cli.inventory.schema import Inventory
    from cli.ops.context import AppContext


def onboard_node(
    context: typer.Context,
    name: Annotated[
        str,
        typer.Argument(help="The node's name: its inventory host and its certificate's DNS name."),
    ],
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Its address, an IP or a DNS name (ansible_host); needed unless the"
            " inventory has the node.",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Its SSH port (default 22)."),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="Who to log in as (default: the inventory's, else root)."),
    ] = None,
    identity: Annotated[
        Path | None,
        typer.Option(
            "--identity",
            help="The SSH private key to log in with (written as ansible_ssh_private_key_file)"
            "; default: the inventory's, the ssh agent, ~/.ssh/id_*.",
        ),
    ] = None,
    expect_host_key: Annotated[
        str | None,
        typer.Option(
            "--expect-host-key",
            help="The node's host key fingerprint, SHA256:… as ssh-keygen -lf prints it;"
            " without it, ctl shows the key and asks.",
        ),
    ] = None,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    group: Annotated[
        str | None,
        typer.Option("--group", help="The inventory group to add it to (default: all)."),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option(
            "--labels",
            help="Its labels, KEY=VALUE, comma-separated or repeated: --labels role=coding.",
        ),
    ] = None,
    renew: Annotated[
        bool, typer.Option("--renew", help="A new key and certificate even if the current is good.")
    ] = False,
    ca_dir: CaDirOption = None,
) -> None:
    """Onboard a node: pin its host key, give it a certificate, add it to the inventory.

    The host key is fetched before logging in and must match --expect-host-key, the fleet's
    known_hosts, or be confirmed at the prompt; it is then written to the fleet's
    known_hosts. The node makes its own key and CSR; only the CSR and the certificates
    travel. Rerunning is safe: a good certificate is kept unless --renew, and a host the
    inventory has (its cordon included) is left as it is. Exit code 2 on bad input or a
    refused host key (nothing changed), 1 when the node cannot be reached or a step fails.
    """
    import sys
    from datetime import UTC, datetime

    from cli.commands.inputs import app_context, read_ca
    from cli.edges.ssh import NodeError
    from cli.ops.onboard import Request, onboard
    from cli.ui import console

    options = app_context(context)
    now = datetime.now(UTC)

    def say(line: str) -> None:
        console.err.print(line, markup=False, emoji=False)

    def confirm(where: str, key: str) -> bool | None:
        if not sys.stdin.isatty():
            return None
        console.err.print(
            f"{where} offers the host key\n  {key}\nCompare it with the node's own, on its"
            " console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub",
            markup=False,
            emoji=False,
        )
        return typer.confirm("Trust this key?", default=False, err=True)

    with console.input_errors():
        parsed = parse_labels(labels or [])
        ca = read_ca(ca_dir, now)
        request = Request(
            name=name,
            inventory=inventory,
            known_hosts=options.known_hosts(inventory),
            address=host,
            port=port,
            user=user,
            identity=identity,
            expect_host_key=expect_host_key,
            group=group,
            labels=parsed,
            renew=renew,
            connect_timeout=options.connect_timeout,
            command_timeout=options.command_timeout,
        )
        try:
            outcome = onboard(request, ca, now, confirm, say)
        except NodeError as error:
            console.fail(f"{name}: {error}", 1)  # printed as text: no markup is read
    raise SystemExit(_first_facts(outcome.inventory, outcome.host.name, inventory, options))


def parse_labels(items: list[str]) -> dict[str, str]:
    from cli.errors import InputError

    labels: dict[str, str] = {}
    for item in items:
        for pair in item.split(","):
            key, equals, value = pair.partition("=")
            if not equals or not key.strip():
                raise InputError.single(
                    "--labels", None, (), f"'{pair}' is not KEY=VALUE (role=coding)"
                )
            labels[key.strip()] = value.strip()
    return labels


def _first_facts(
    inventory_model: Inventory, name: str, inventory: Path, options: AppContext
) -> int:
    """Gather the node's first facts (this node only) and print its `ctl nodes` row."""
    from cli.inventory.schema import Inventory
    from cli.ops.fleet import gather_fleet
    from cli.ui import console
    from cli.ui.tables import node_notes, nodes_table

    host = inventory_model.host(name)
    alone = Inventory(
        source=inventory_model.source,
        hosts=(host,),
        groups=dict.fromkeys(host.groups, (name,)),
    )
    fleet = gather_fleet(alone, inventory, options)
    for warning in fleet.warnings:
        console.err.print(f"warning: {console.rich_escape(warning)}")
    console.print_table(nodes_table(fleet.snapshot))
    for note in node_notes(fleet.snapshot):
        console.out.print(console.rich_escape(note))
    if fleet.partial:
        reason = fleet.unreached.get(name, "not reached")
        console.err.print(
            f"{console.rich_escape(name)}: onboarded, but its first facts were not gathered:"
            f" {console.rich_escape(reason)}"
        )
        return console.EXIT_INCOMPLETE
    return console.EXIT_OK
