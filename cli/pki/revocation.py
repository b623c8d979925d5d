"""Revoked node certificates: the CA's list of them and the CRL it signs (pure).

The CA directory keeps `revoked.json`, one entry per revoked certificate (its serial as
`serial_hex` writes it, the node it was issued to, when it was revoked), and `crl.pem`, an
X.509 v2 CRL of exactly those serials signed by the CA's key: what a router or any TLS
peer loads to refuse them. `issued.json` records each certificate the CA signs (serial,
node, end of validity, the names it was issued for), so that a node's certificates can be
revoked when the node itself cannot be asked which one it holds.

A node's identity in the CA is its inventory name, compared exactly (`issued_to`): the
`node` of an issued entry is the inventory name it was issued to, as written, and `names`
beside it the certificate's subject alternative names. Only serials recorded as issued to
that identity are ever revoked for it, never one a node merely shows. Entries written
before ctl kept the identity (no `names`: their `node` is the certificate's first DNS name,
lowercased) count only where that equals the inventory name exactly and no other host of
the inventory differs from it in case alone; others that may be the node's (its name in
another case, its address) are reported and not revoked.

Everything here is a function of its arguments, the clock included; cli/pki/store.py reads
and writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed25519

from cli.pki.certs import CAPrivateKey

FORMAT_VERSION = 1


class RevocationFileError(ValueError):
    """A list file of the CA directory that does not read as ctl writes it."""


@dataclass(frozen=True, order=True)
class CertRecord:
    """One certificate the CA issued or revoked: its serial (lowercase hex), its node, when,
    and (issued entries since identities are kept) the names it was issued for."""

    serial: str
    node: str  # the inventory name it was issued to, exactly (legacy issued entries: see above)
    at: datetime  # issued: notAfter; revoked: the revocation time
    names: tuple[str, ...] = ()  # `DNS:…`, `IP:…`; empty: a revoked entry, or a legacy one

    @property
    def legacy(self) -> bool:
        """An issued entry written before ctl recorded the identity beside the serial."""
        return not self.names


@dataclass(frozen=True)
class NodeCertificates:
    """What issued.json holds of one node: `issued`, proved to be its; `unproven`, legacy
    entries that may be its (its name in another case, its address), never revoked."""

    issued: tuple[CertRecord, ...]
    unproven: tuple[CertRecord, ...]


def issued_to(
    node: str, records: Iterable[CertRecord], hosts: Iterable[str] = (), address: str | None = None
) -> NodeCertificates:
    """The entries of issued.json that belong to the inventory name `node`, compared exactly
    (`hosts`: every name of the inventory, to tell a legacy entry shared by names that
    differ in case alone; `address`: the node's, under which a legacy entry of a host named
    by an IP address was recorded)."""
    twins = any(other != node and other.lower() == node.lower() for other in hosts)
    maybe = {node.lower().rstrip(".")}
    if address is not None:
        maybe.add(address.lower().rstrip("."))
    issued: list[CertRecord] = []
    unproven: list[CertRecord] = []
    for record in records:
        if record.node == node and not (record.legacy and twins):
            issued.append(record)
        elif record.legacy and record.node in maybe:
            unproven.append(record)
    return NodeCertificates(tuple(issued), tuple(unproven))


def normal_serial(text: str) -> str:
    """A serial as `serial_hex` writes it: lowercase hex, no leading zeros, no colons."""
    digits = text.replace(":", "").strip().lower()
    value = int(digits, 16)  # ValueError on anything else
    if value <= 0:
        raise ValueError("a serial is positive")
    return f"{value:x}"


def parse_records(text: str, what: str) -> tuple[CertRecord, ...]:
    """The entries of `issued.json` or `revoked.json` (`what`: which list, for errors)."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            raise RevocationFileError(f"not a version {FORMAT_VERSION} {what} list")
        entries = document[what]
        if not isinstance(entries, list):
            raise RevocationFileError(f"'{what}' is not a list")
        return tuple(
            CertRecord(
                normal_serial(str(entry["serial"])),
                str(entry["node"]),
                datetime.fromisoformat(str(entry["at"])),
                _names(entry.get("names", [])),
            )
            for entry in entries
        )
    except RevocationFileError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise RevocationFileError(f"does not read as a {what} list: {error}") from None


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise RevocationFileError("'names' is not a list of names")
    return tuple(value)


def render_records(records: Iterable[CertRecord], what: str) -> str:
    """The list file's text: sorted, one entry a line, so a diff shows what changed."""
    lines = [
        json.dumps(
            {"serial": r.serial, "node": r.node, "at": r.at.isoformat()}
            | ({"names": list(r.names)} if r.names else {}),
            sort_keys=True,
        )
        for r in sorted(set(records))
    ]
    body = ",\n    ".join(lines)
    inner = f"\n    {body}\n  " if lines else ""
    return f'{{\n  "version": {FORMAT_VERSION},\n  "{what}": [{inner}]\n}}\n'


def is_revoked(serial: str, revoked: Iterable[CertRecord]) -> bool:
    """Whether the certificate with `serial` (any case, colons or not) is revoked."""
    try:
        wanted = normal_serial(serial)
    except ValueError:
        return False
    return any(record.serial == wanted for record in revoked)


def serials_of(node: str, records: Iterable[CertRecord]) -> tuple[str, ...]:
    """The serials recorded for `node`, in the list's order, once each."""
    return tuple(dict.fromkeys(r.serial for r in records if r.node == node))


def build_crl(
    key: CAPrivateKey,
    ca_cert: x509.Certificate,
    revoked: Sequence[CertRecord],
    now: datetime,
    number: int,
) -> x509.CertificateRevocationList:
    """A v2 CRL signed by the CA: every revoked serial with its revocation date, thisUpdate
    `now`, nextUpdate the CA's own notAfter, CRL number `number`, the CA's key identifier.

    nextUpdate is the CA's end, not a short time: the routers check engines against this
    CRL (playbooks/files/modelfleet_router_tls.py), and OpenSSL refuses every certificate
    once the CRL it checks is past its nextUpdate. ctl pushes a new CRL to the routers at
    each revocation; nobody fetches it, so a freshness deadline would only be an outage."""
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now)
        .next_update(ca_cert.not_valid_after_utc)
        .add_extension(x509.CRLNumber(number), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    for record in sorted(set(revoked)):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(int(record.serial, 16))
            .revocation_date(record.at)
            .add_extension(x509.CRLReason(x509.ReasonFlags.cessation_of_operation), critical=False)
            .build()
        )
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm)


def crl_number(crl: x509.CertificateRevocationList | None) -> int:
    """The CRL number after `crl`'s (1 for the first CRL)."""
    if crl is None:
        return 1
    try:
        return int(crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number) + 1
    except x509.ExtensionNotFound:
        return 1
