"""`ctl deprovision-node NAME`: offboard the node if the inventory still has it, then destroy
the VM `ctl provision-node NAME` made on Proxmox, once proved to be it (docs/provisioning.md,
Deprovisioning)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CaDirOption,
    CatalogOption,
    InventoryOption,
)
from cli.commands.proxmox import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    CaCertOption,
    ProxmoxHostOption,
    ProxmoxPortOption,
    StepTimeoutOption,
    TokenFileOption,
)


def deprovision_node(
    context: typer.Context,
    name: Annotated[str, typer.Argument(help="The node whose VM is destroyed.")],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print what would be done: the offboarding's plan, the VM found and the calls"
            " that would destroy it; change nothing (Proxmox is read, so the token is needed).",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Offboard even when replicas would be lost (as offboard-node --force)."
        ),
    ] = False,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    ca_dir: CaDirOption = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
    proxmox_host: ProxmoxHostOption = None,
    proxmox_port: ProxmoxPortOption = DEFAULT_PORT,
    ca_cert: CaCertOption = None,
    token_file: TokenFileOption = None,
    timeout: StepTimeoutOption = DEFAULT_TIMEOUT,
) -> None:
    """Destroy NAME's VM on Proxmox, and only the one ctl provision-node made under that name.

    A node still in the inventory is offboarded first (ctl offboard-node, with its refusals
    and --force). The VM is found by name and proved to be the one provisioned (its
    description holds the marker its clone was made with, the tag modelfleet, not
    protected), and proved again right before it is stopped and right before it is
    destroyed (purge, unreferenced disks too). A VM that fails the proof is never touched.
    No VM of that name: already deprovisioned. Exit code 0 when the VM is gone (with
    --dry-run: when it could be removed), 1 when it could not be (the offboarding refused, a
    VM that is not the provisioned one, Proxmox refused or did not answer), 2 on bad input
    (nothing changed).
    """
    from cli.commands.offboarding import offboard
    from cli.commands.proxmox import print_failure, proxmox_session
    from cli.edges.templating import render_template
    from cli.inventory.load import load_inventory
    from cli.ops.deprovision import Deprovisioner
    from cli.ops.provision import Limits, ProvisionError
    from cli.provision.plan import name_problem
    from cli.ui import console

    problem = name_problem(name)
    if problem is not None:
        console.fail(f"NAME: {problem}")
    if timeout <= 0:
        console.fail("--step-timeout must be above 0 seconds")
    client, reporter, secrets = proxmox_session(proxmox_host, proxmox_port, ca_cert, token_file)
    if inventory.exists():
        from cli.commands.inputs import app_context

        with console.input_errors():
            names = load_inventory(
                inventory, app_context(context).decrypt(), render=render_template
            ).names()
        if name in names:
            code = offboard(context, name, dry_run, force, inventory, ca_dir, catalog, None)
            if code != console.EXIT_OK:
                console.err.print(
                    f"{name}: not offboarded, so its VM is left as it is", markup=False
                )
                raise SystemExit(code)
    steps = Deprovisioner(client, name, "", reporter, limits=Limits(wait=timeout))
    try:
        outcome = steps.run(dry_run=dry_run)
    except ProvisionError as error:
        print_failure(error, secrets)
        raise SystemExit(error.code) from None
    if outcome.vmid is None:
        console.out.print(f"{name}: no VM of that name: already deprovisioned", markup=False)
    elif outcome.destroyed:
        console.out.print(
            f"{name}: vmid {outcome.vmid} on node {outcome.node} destroyed", markup=False
        )
    else:
        console.out.print(
            f"{name}: vmid {outcome.vmid} on node {outcome.node} would be destroyed",
            markup=False,
        )
