"""`ctl ca init`: the fleet's certificate authority, made once on the machine that onboards."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from cli.pki.store import CertificateAuthority

CaDirOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-dir",
        envvar="MODELFLEET_CA_DIR",
        help="The CA's directory (default: $XDG_CONFIG_HOME/modelfleet/ca,"
        " else ~/.config/modelfleet/ca).",
    ),
]

app = typer.Typer(
    help="The fleet's certificate authority: it signs every node's certificate.",
    no_args_is_help=True,
)


def ca_directory(ca_dir: Path | None) -> Path:
    from cli.pki.store import default_ca_dir

    return ca_dir if ca_dir is not None else default_ca_dir()


def open_ca(directory: Path, now: datetime) -> CertificateAuthority:
    """The CA in `directory`, checked (bad files: InputError, exit 2), with a warning on
    stderr when its certificate ends within 30 days: every command that loads it says so."""
    from cli.pki.certs import ca_expiry_warning
    from cli.pki.store import load_ca
    from cli.ui import console

    ca = load_ca(directory, now)
    warning = ca_expiry_warning(
        ca.cert.not_valid_after_utc, now, f"the CA certificate {ca.cert_path}"
    )
    if warning is not None:
        console.err.print(f"warning: {warning}", markup=False, emoji=False, soft_wrap=True)
    return ca


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
