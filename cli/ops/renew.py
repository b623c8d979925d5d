"""Renewing node certificates during a reconcile pass (docs/onboarding.md, "Renewal").

Each node is reached over SSH pinned to the key the fleet's known_hosts has for it (a
node not there is refused: renewal never trusts a key onboarding did not), and its
certificate goes through onboarding's own step (cli/ops/onboard.py `certify`): the node
makes a new key and CSR, only the CSR comes back, the CA signs the names the inventory
knows, and node.key and node.pem are renamed into place together. The shards keep
serving: a running engine holds the key and certificate it loaded; reloading them is the
engines' side. The CA's key stays in memory on this machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cli.edges import ssh
from cli.inventory.schema import Inventory
from cli.ops.fleet import proxy_of
from cli.ops.onboard import certify
from cli.pki.addhost import DEFAULT_USER
from cli.pki.certs import NodeNames, serial_hex
from cli.pki.store import CertificateAuthority
from cli.reconcile.renewal import Renewal


@dataclass(frozen=True)
class Renewed:
    """How one node's renewal ended."""

    node: str
    serial: str | None = None  # the new certificate's; None: not renewed
    not_after: datetime | None = None
    error: str | None = None  # why it was not renewed; None with no serial: it was kept


def renew_certificates(
    renewals: Sequence[Renewal],
    inventory: Inventory,
    ca: CertificateAuthority,
    known_hosts: Path,
    now: datetime,
    say: Callable[[str], None],
    *,
    connect_timeout: float = 10.0,
    command_timeout: float = 30.0,
    parallel: int = 32,
) -> list[Renewed]:
    """Renew each node's certificate, `parallel` nodes at a time; results in order."""
    if not renewals:
        return []

    def one(renewal: Renewal) -> Renewed:
        return _renew(
            renewal.node, inventory, ca, known_hosts, now, say, connect_timeout, command_timeout
        )

    with ThreadPoolExecutor(max(1, min(parallel, len(renewals))), "renew") as pool:
        return list(pool.map(one, renewals))


def _renew(
    name: str,
    inventory: Inventory,
    ca: CertificateAuthority,
    known_hosts: Path,
    now: datetime,
    say: Callable[[str], None],
    connect_timeout: float,
    command_timeout: float,
) -> Renewed:
    host = inventory.host(name)
    user = host.user or DEFAULT_USER
    pinned = ssh.known_keys(known_hosts, host.address, host.port)
    if not pinned:
        where = ssh.known_hosts_name(host.address, host.port)
        return Renewed(
            name,
            error=f"{known_hosts} has no host key for {where}: ctl onboard-node {name} pins it",
        )
    key_file = Path(host.private_key_file).expanduser() if host.private_key_file else None
    proxy, unusable = proxy_of(host)
    if unusable is not None:
        return Renewed(name, error=unusable)
    try:
        client = ssh.login(
            host.address, host.port, user, key_file, pinned, connect_timeout,
            proxy=proxy, known=ssh.load_known_hosts(known_hosts),
        )  # fmt: skip
    except Exception as error:  # every failure is this node's reason, never the pass's
        reason = ssh.describe_failure(
            error, host.address, host.port, user, known_hosts, connect_timeout
        )
        return Renewed(name, error=reason)
    try:
        names = NodeNames.of(name, [host.address])
        cert, issued, _ = certify(client, name, ca, names, now, say, None, command_timeout)
    except Exception as error:  # a step that failed on the node, a CSR refused, a timeout
        return Renewed(name, error=str(error) or type(error).__name__)
    finally:
        client.close()
    if not issued:
        return Renewed(name)
    return Renewed(name, serial_hex(cert), cert.not_valid_after_utc)
