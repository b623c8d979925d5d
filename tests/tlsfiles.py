"""A node's TLS files as onboarding leaves them, made here with ctl's own CA code: for tests
that run engines or checks over TLS on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from cli.pki.certs import NodeNames, serial_hex
from cli.pki.store import CertificateAuthority, init_ca


@dataclass(frozen=True)
class NodeTls:
    ca: CertificateAuthority
    key: Path
    cert: Path
    serial: str

    @property
    def ca_pem(self) -> Path:
        return self.ca.cert_path


def make_ca(directory: Path, name: str = "tests") -> CertificateAuthority:
    return init_ca(directory, name, datetime.now(UTC))


def issue(
    ca: CertificateAuthority,
    directory: Path,
    name: str = "node-1",
    addresses: tuple[str, ...] = ("127.0.0.1",),
    validity: timedelta | None = None,
    issued_at: datetime | None = None,
) -> NodeTls:
    """A new key and certificate for `name`, written as the node's node.key and node.pem
    are: each to a new file renamed over the old, key first (cli/pki/node.py install)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    now = issued_at or datetime.now(UTC)
    names = NodeNames.of(name, addresses)
    if validity is None and issued_at is None:
        cert = ca.issue(csr, names, now, name)
    else:
        from cli.pki.certs import sign_node_certificate
        from cli.pki.store import random_serial

        lifetime = validity or timedelta(days=90)
        cert = sign_node_certificate(ca.key, ca.cert, csr, names, now, random_serial(), lifetime)
    key_path, cert_path = directory / "node.key", directory / "node.pem"
    _replace(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        0o600,
    )
    _replace(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return NodeTls(ca, key_path, cert_path, serial_hex(cert))


def _replace(path: Path, data: bytes, mode: int) -> None:
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    new.chmod(mode)
    new.replace(path)
