"""`ctl offboard-node NAME`: drain the node, remove its key, revoke its certificate,
forget its host key and take it out of the inventory (docs/onboarding.md, Offboarding)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CaDirOption,
    CatalogOption,
    FactsOption,
    InventoryOption,
)


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
    from cli.commands.offboarding import offboard

    raise SystemExit(offboard(context, name, dry_run, force, inventory, ca_dir, catalog, facts))
