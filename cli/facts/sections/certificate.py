"""The pki section: the node's certificate and CA files from /etc/modelfleet/pki, read as facts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from cli.facts.model import (
    NodeCertificate,
)
from cli.facts.parse import (
    FactsParseError,
    _quote,
)
from cli.pki.certs import certificate_names, fingerprint, serial_hex

# ------------------------------------------------------------------------- /etc/modelfleet/pki

SECTION_PKI: Final = "pki"
PKI_FILES: Final = ("node.pem", "ca.pem")
# A certificate is a kilobyte or two; the probe cuts each file one byte past this, so a
# file it cut is told apart from one that fits.
MAX_PEM_BYTES: Final = 65_536
MAX_ISSUER_CHARS: Final = 1024


@dataclass(frozen=True)
class PkiFiles:
    """What the probe's `pki` section holds: node.key's presence, the certificates' text."""

    key_present: bool
    texts: Mapping[str, str]  # node.pem, ca.pem → their text, for those that exist


def read_pki_section(text: str) -> PkiFiles:
    """`key present|absent`, then for each of node.pem and ca.pem that exists `file NAME`,
    its text, `end NAME`. A section of another shape raises FactsParseError."""
    key: bool | None = None
    texts: dict[str, str] = {}
    current: str | None = None
    body: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if current is not None:
            if raw == f"end\t{current}":
                texts[current] = "\n".join(body)
                current, body = None, []
            else:
                body.append(raw)
            continue
        kind, _, value = raw.strip().partition("\t")
        if not kind:
            continue
        if kind == "key" and key is None and value in ("present", "absent"):
            key = value == "present"
        elif kind == "file" and value in PKI_FILES and value not in texts:
            current = value
        else:
            raise FactsParseError(SECTION_PKI, number, f"unexpected line {_quote(raw)}")
    if current is not None:
        raise FactsParseError(SECTION_PKI, 0, f"{current} is cut off (no end line)")
    if key is None:
        raise FactsParseError(SECTION_PKI, 0, "no 'key' line")
    return PkiFiles(key, texts)


def parse_pki(text: str, at: datetime) -> tuple[NodeCertificate | None, list[str]]:
    """The node's certificate from the `pki` section, judged at `at` (when it was read),
    and notes. None: no node.pem (the node serves plain HTTP), or a node.pem that is no
    certificate (a note says so). A node's text never raises anything but FactsParseError.
    """
    files = read_pki_section(text)
    node_pem = files.texts.get("node.pem")
    if node_pem is None:
        return None, []
    notes: list[str] = []
    cert = _pem_certificate(node_pem, "node.pem", notes)
    if cert is None:
        return None, notes
    ca_text = files.texts.get("ca.pem")
    ca_cert = None if ca_text is None else _pem_certificate(ca_text, "ca.pem", notes)
    try:
        return _node_certificate(cert, ca_cert, ca_text is not None, files.key_present, at), notes
    except Exception as error:
        notes.append(f"{SECTION_PKI}: node.pem cannot be read ({type(error).__name__})")
        return None, notes


def _pem_certificate(text: str, name: str, notes: list[str]) -> x509.Certificate | None:
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_PEM_BYTES:
        notes.append(f"{SECTION_PKI}: {name} is larger than {MAX_PEM_BYTES // 1024} KiB: not read")
        return None
    try:
        return x509.load_pem_x509_certificate(text.encode("utf-8", "surrogateescape"))
    except Exception as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        notes.append(f"{SECTION_PKI}: {name} is not a PEM certificate: {_said_short(reason)}")
        return None


def _said_short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _node_certificate(
    cert: x509.Certificate,
    ca_cert: x509.Certificate | None,
    ca_present: bool,
    key_present: bool,
    at: datetime,
) -> NodeCertificate:
    names = certificate_names(cert)
    problems = []
    if not key_present:
        problems.append("no node.key")
    if ca_cert is None:
        problems.append("ca.pem is not a certificate" if ca_present else "no ca.pem")
    else:
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, InvalidSignature):
            problems.append("not signed by its ca.pem")
    not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
    if at < not_before:
        problems.append(f"not valid before {not_before:%Y-%m-%d %H:%M} UTC")
    if at >= not_after:
        problems.append(f"expired {not_after:%Y-%m-%d %H:%M} UTC")
    return NodeCertificate(
        serial=serial_hex(cert),
        not_before=not_before,
        not_after=not_after,
        dns_names=names.dns,
        ip_addresses=tuple(str(ip) for ip in names.ips),
        issuer=_said_short(cert.issuer.rfc4514_string(), MAX_ISSUER_CHARS),
        key_present=key_present,
        ca_fingerprint=None if ca_cert is None else fingerprint(ca_cert),
        ca_not_after=None if ca_cert is None else ca_cert.not_valid_after_utc,
        problem="; ".join(problems) or None,
    )
