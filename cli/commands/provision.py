"""`ctl provision-node NAME`: a new VM on Proxmox VE from a template, up to its address."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.proxmox import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    CaCertOption,
    ProxmoxHostOption,
    ProxmoxPortOption,
    StepTimeoutOption,
    TokenFileOption,
)

if TYPE_CHECKING:
    from cli.ops.provision import Outcome
    from cli.provision.plan import ProvisionOptions

DEFAULT_CORES = 4
DEFAULT_MEMORY_MIB = 16384
DEFAULT_DISK = "64G"


def provision_node(
    name: Annotated[
        str, typer.Argument(help="The node's name: the VM's, its hostname, its inventory name.")
    ],
    node: Annotated[str, typer.Option("--node", help="The Proxmox node to create the VM on.")],
    template: Annotated[
        str, typer.Option("--template", help="The template to clone: its vmid or its name.")
    ],
    cores: Annotated[int, typer.Option("--cores", help="vCPU cores.")] = DEFAULT_CORES,
    memory: Annotated[int, typer.Option("--memory", help="Memory, MiB.")] = DEFAULT_MEMORY_MIB,
    disk: Annotated[
        str,
        typer.Option(
            "--disk",
            help="The boot disk's size (100G, 1.5T), or how much to add to the template's (+20G).",
        ),
    ] = DEFAULT_DISK,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage", help="Where the clone's disks go (default: where the template's are)."
        ),
    ] = None,
    ip: Annotated[
        str, typer.Option("--ip", help="dhcp, or the node's address as a CIDR (10.0.0.5/24).")
    ] = "dhcp",
    gateway: Annotated[
        str | None, typer.Option("--gateway", help="The default gateway, with a static --ip.")
    ] = None,
    ssh_key: Annotated[
        list[Path] | None,
        typer.Option(
            "--ssh-key",
            help="A public key file for the user (repeat for more); ctl onboard-node uses it.",
        ),
    ] = None,
    user: Annotated[str, typer.Option("--user", help="The user cloud-init creates.")] = "llm",
    gpu: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="A GPU by PCI resource mapping name (repeat for more): hostpciN mapping=NAME.",
        ),
    ] = None,
    proxmox_host: ProxmoxHostOption = None,
    proxmox_port: ProxmoxPortOption = DEFAULT_PORT,
    ca_cert: CaCertOption = None,
    token_file: TokenFileOption = None,
    timeout: StepTimeoutOption = DEFAULT_TIMEOUT,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the API calls; contact nothing, need no token.")
    ] = False,
) -> None:
    """Clone a template into a new VM, configure it, start it and wait for its address.

    Steps: find a VM with this name (when one exists and its run marker proves ctl made it,
    go on from where it stands; without the marker it is someone else's: refused, exit 1,
    nothing sent to it); a free vmid and a full clone; configure cores, memory, cloud-init
    user, SSH keys, ipconfig0, GPUs (hostpci by resource mapping, machine q35); grow the boot
    disk; start; wait for the guest agent's address; print it and the `ctl onboard-node`
    command to run next.

    The API token comes from PROXMOX_TOKEN_ID and PROXMOX_TOKEN_SECRET or --token-file,
    never from the command line. TLS is verified. A failure after the clone removes the VM
    it made, or says which vmid is left and how to remove it. Exit code 0 done, 1 not done
    (Proxmox refused, a wait timed out, interrupted, a same-named VM ctl did not make), 2 bad
    input (nothing changed).
    """
    from cli.errors import InputError, InputProblem
    from cli.provision.plan import build_options
    from cli.ui import console

    key_files: list[tuple[str, str]] = []
    unreadable: list[InputProblem] = []
    for path in ssh_key or []:
        try:
            key_files.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            why = error.strerror if isinstance(error, OSError) else "not text"
            unreadable.append(InputProblem(str(path), None, (), f"cannot be read: {why}"))
    with console.input_errors():
        try:
            options = build_options(
                name=name,
                node=node,
                template=template,
                cores=cores,
                memory_mib=memory,
                disk=disk,
                storage=storage,
                ip=ip,
                gateway=gateway,
                key_files=key_files,
                user=user,
                gpus=gpu or [],
            )
        except InputError as error:
            raise InputError([*unreadable, *error.problems]) from None
        if unreadable:
            raise InputError(unreadable)
    if timeout <= 0:
        console.fail("--step-timeout must be above 0 seconds")
    for item in options.gpus:
        if item.host is not None:
            console.err.print(
                f"warning: --gpu {item.text} is a raw PCI device: Proxmox lets only root@pam "
                "set one, never an API token; use a PCI resource mapping",
                markup=False,
            )
    if dry_run:
        _print_dry_run(options)
        return
    _provision(options, proxmox_host, proxmox_port, ca_cert, token_file, timeout)


def _print_dry_run(options: ProvisionOptions) -> None:
    from cli.provision import plan
    from cli.ui import console

    lines = [f"# --dry-run: nothing is sent. The calls for a new VM named {options.name}:"]
    for number, planned in enumerate(plan.dry_run_calls(options), start=1):
        lines.append(f"{number:>2}. {planned.call.render()}")
        lines.append(f"    # {planned.why}")
    lines.append("# On a failure after the clone, for the VM it made:")
    lines.append(f"    {plan.stop_call(options.node, plan.NEW_VMID).render()}")
    lines.append(f"    {plan.destroy_call(options.node, plan.NEW_VMID).render()}")
    console.print_lines(lines)


def _provision(
    options: ProvisionOptions,
    host: str | None,
    port: int,
    ca_cert: Path | None,
    token_file: Path | None,
    timeout: float,
) -> None:
    from cli.commands.proxmox import print_failure, proxmox_session
    from cli.ops.provision import Limits, Provisioner, ProvisionError

    client, reporter, secrets = proxmox_session(host, port, ca_cert, token_file)
    provisioner = Provisioner(client, options, reporter, limits=Limits(wait=timeout))
    try:
        outcome = provisioner.run()
    except ProvisionError as error:
        print_failure(error, secrets)
        raise SystemExit(error.code) from None
    _print_outcome(outcome)


def _print_outcome(outcome: Outcome) -> None:
    from cli.provision.plan import next_command
    from cli.ui import console

    made = "created" if outcome.created else "existed"
    console.print_lines(
        [
            f"{outcome.name}: vmid {outcome.vmid} on node {outcome.node} ({made}), "
            f"address {outcome.address}",
            f"next: {next_command(outcome.name, outcome.address)}",
        ]
    )
