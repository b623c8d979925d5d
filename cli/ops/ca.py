"""The fleet's CA as the commands use it: where it is, and opening it checked.

`ctl ca init` makes it (cli/pki/store.py init_ca); reconcile, drain, onboard-node and
offboard-node open it here, each with the same warning when its certificate ends soon.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from cli.pki.certs import ca_expiry_warning
from cli.pki.store import CertificateAuthority, default_ca_dir, load_ca


def ca_directory(ca_dir: Path | None) -> Path:
    """`ca_dir` (--ca-dir, MODELFLEET_CA_DIR), else the default of `ctl ca init`."""
    return ca_dir if ca_dir is not None else default_ca_dir()


def open_ca(directory: Path, now: datetime, warn: Callable[[str], None]) -> CertificateAuthority:
    """The CA in `directory`, checked (bad files: InputError, exit 2); `warn` gets a line when
    its certificate ends within 30 days: every command that loads it says so."""
    ca = load_ca(directory, now)
    warning = ca_expiry_warning(
        ca.cert.not_valid_after_utc, now, f"the CA certificate {ca.cert_path}"
    )
    if warning is not None:
        warn(warning)
    return ca
