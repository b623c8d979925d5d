"""`ctl ca init`: the fleet's certificate authority, made once on the machine that onboards."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.options import CaDirOption

app = typer.Typer(
    help="The fleet's certificate authority: it signs every node's certificate.",
    no_args_is_help=True,
)


@app.command("init")
def init(
    ca_dir: CaDirOption = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help='Names the CA in its subject, "modelfleet CA NAME" (default: this host\'s name).',
        ),
    ] = None,
) -> None:
    """Make the CA: a private key (0600) and a self-signed certificate, in a 0700 directory.

    An existing CA is never overwritten: exit code 2, and nothing is changed.
    """
    import socket
    from datetime import UTC, datetime

    from cli.ops.ca import ca_directory
    from cli.pki.certs import CA_VALIDITY, fingerprint
    from cli.pki.store import init_ca
    from cli.ui import console

    directory = ca_directory(ca_dir)
    with console.input_errors():
        ca = init_ca(directory, name or socket.gethostname(), datetime.now(UTC))
    cert = ca.cert
    lines = [
        f"CA made in {ca.directory}",
        f"  subject      {cert.subject.rfc4514_string()}",
        f"  certificate  {ca.cert_path} (0644): onboarding installs it on every node;"
        " health checks and routers check node certificates against it",
        f"  key          {ca.key_path} (0600): never leaves this directory; back it up offline",
        f"  valid until  {cert.not_valid_after_utc:%Y-%m-%d} ({CA_VALIDITY.days // 365} years)",
        f"  SHA-256      {fingerprint(cert)}",
    ]
    for line in lines:  # no markup, no emoji: `:AB:` in a fingerprint is not 🆎
        console.out.print(line, markup=False, emoji=False, soft_wrap=True)
