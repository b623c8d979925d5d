"""What `ctl provision-node` and `ctl deprovision-node` share: the Proxmox options, the API
session, and a failure printed with the token's secret removed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from cli.ops.provision import ProvisionError, Reporter
    from cli.provision.proxmox import ProxmoxClient

DEFAULT_PORT = 8006
DEFAULT_TIMEOUT = 600.0

ProxmoxHostOption = Annotated[
    str | None,
    typer.Option("--proxmox-host", envvar="PROXMOX_HOST", help="The Proxmox API's host."),
]
ProxmoxPortOption = Annotated[int, typer.Option("--proxmox-port", help="The Proxmox API's port.")]
CaCertOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-cert",
        help="The CA that signed Proxmox's certificate (e.g. a copy of "
        "/etc/pve/pve-root-ca.pem); default: the system's CAs.",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="A file holding the API token, user@realm!name=secret "
        "(default: PROXMOX_TOKEN_ID and PROXMOX_TOKEN_SECRET).",
    ),
]
StepTimeoutOption = Annotated[
    float,
    typer.Option(
        "--step-timeout",
        help="The longest wait for each step (a task, the agent), s"
        " (ctl's own timeout is for SSH connects).",
    ),
]


def proxmox_session(
    host: str | None, port: int, ca_cert: Path | None, token_file: Path | None
) -> tuple[ProxmoxClient, Reporter, tuple[str, ...]]:
    """The API client, a reporter printing progress on stderr with the token's secret
    removed, and the secrets to remove from anything else printed; exit 2 on bad input."""
    from cli.provision.plan import redact
    from cli.provision.proxmox import ProxmoxClient, TokenError, load_token, token_file_warning
    from cli.ui import console

    if not host:
        console.fail("--proxmox-host (or PROXMOX_HOST) is needed: the Proxmox API's host")
    if not 0 < port < 65536:
        console.fail(f"--proxmox-port {port} is not a TCP port")
    if ca_cert is not None and not ca_cert.is_file():
        console.fail(f"--ca-cert {ca_cert}: no such file")
    try:
        token = load_token(os.environ, token_file)
    except TokenError as error:
        console.fail(str(error))
    if token_file is not None and (warning := token_file_warning(token_file)):
        console.err.print(f"warning: {warning}", markup=False)
    secrets = token.secrets

    class StderrReporter:  # the Reporter protocol of cli/ops/provision.py
        def step(self, text: str) -> None:
            console.err.print(redact(text, secrets), markup=False, highlight=False)

        def waiting(self, text: str, elapsed: float, limit: float) -> None:
            console.err.print(
                f"  still {redact(text, secrets)}: {elapsed:.0f} s of {limit:.0f} s",
                markup=False,
                highlight=False,
            )

        def warn(self, text: str) -> None:
            console.err.print(f"warning: {redact(text, secrets)}", markup=False, highlight=False)

    return ProxmoxClient(host, port, token, ca_cert=ca_cert), StderrReporter(), secrets


def print_failure(error: ProvisionError, secrets: tuple[str, ...]) -> None:
    from cli.provision.plan import redact
    from cli.ui import console

    def say(text: str) -> str:
        return console.rich_escape(redact(text, secrets))

    console.err.print(f"[bold red]error:[/] {say(error.message)}", markup=True, highlight=False)
    for line in error.details:
        console.err.print(f"  {say(line)}", markup=True, highlight=False)
    for hint in error.hints:
        console.err.print(f"[bold]hint:[/] {say(hint)}", markup=True, highlight=False)
    for line in error.cleanup:
        console.err.print(f"cleanup: {say(line)}", markup=True, highlight=False)
