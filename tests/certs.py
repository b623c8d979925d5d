"""Certificates for tests, made with ctl's own builders (cli/pki/certs.py): a CA, and node
certificates for any names, moment and lifetime, as `ctl onboard-node` would issue them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.pki.certs import (
    CA_VALIDITY,
    NODE_VALIDITY,
    NodeNames,
    build_ca_certificate,
    pem,
    sign_node_certificate,
)


@dataclass(frozen=True)
class LabCA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> str:
        return pem(self.cert).decode()

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def issue(
        self,
        name: str = "node-3",
        addresses: tuple[str, ...] = ("127.0.1.3",),
        now: datetime | None = None,
        validity: timedelta = NODE_VALIDITY,
        serial: int = 4242,
    ) -> x509.Certificate:
        """A node certificate signed at `now` (default: when the CA was made)."""
        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .sign(key, hashes.SHA256())
        )
        moment = now or self.cert.not_valid_before_utc + timedelta(minutes=5)
        names = NodeNames.of(name, list(addresses))
        return sign_node_certificate(self.key, self.cert, csr, names, moment, serial, validity)


def make_ca(now: datetime, name: str = "tests", validity: timedelta = CA_VALIDITY) -> LabCA:
    key = ec.generate_private_key(ec.SECP256R1())
    return LabCA(key, build_ca_certificate(key, name, now, 1234, validity))


def pem_text(cert: x509.Certificate) -> str:
    return pem(cert).decode()
