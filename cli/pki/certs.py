"""Certificates for the fleet: the CA's own, and each node's. Pure.

Every input is an argument: keys, names, the serial and the clock. Nothing here reads a
file, draws a random number or looks at the time, so the same arguments always give the
same certificate (ECDSA signatures aside, which carry their own randomness).

What a node certificate holds is decided here and nowhere else: the names the CA already
knows for the node (its inventory name as a DNS name, its address as an IP or DNS name),
never what the node asked for. A CSR only proves that the node holds the private key of
the public key it sends; its subject and its extensions are read by nobody.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = timedelta(days=3650)
NODE_VALIDITY = timedelta(days=90)
# A node certificate is renewed once two thirds of its lifetime have passed (30 days
# before the end of a 90-day one): kubelet's bar is 70-90%, "nobody has to remember".
RENEW_AFTER_NUMERATOR, RENEW_AFTER_DENOMINATOR = 2, 3
CA_WARN_WITHIN = timedelta(days=30)  # a CA certificate closer than this to its end: warned
BACKDATE = timedelta(minutes=5)  # notBefore this far back: a node's clock may be a bit slow
SERIAL_BITS = 159  # RFC 5280: positive, at most 20 octets; CA/B asks for 64 random bits
MIN_RSA_BITS = 2048
CA_ORGANIZATION = "modelfleet"
CA_PREFIX = "modelfleet CA "

CAPrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NODE_USAGES = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class CertificateError(ValueError):
    """A certificate cannot be made or is not acceptable; the message is one line."""


# --- names ----------------------------------------------------------------------------------


def dns_name_problem(name: str) -> str | None:
    """Why `name` cannot be a DNS name in a certificate, or None."""
    if not name or len(name) > 253:
        return "must be 1 to 253 characters"
    labels = name.lower().rstrip(".").split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return "must be a DNS name: letters, digits and '-' in dot-separated labels"
    return None


def parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class NodeNames:
    """The subject alternative names of a node certificate: exactly these, in this order."""

    dns: tuple[str, ...]
    ips: tuple[IPAddress, ...]

    @classmethod
    def of(cls, name: str, addresses: Sequence[str] = ()) -> NodeNames:
        """The node's inventory name and its addresses: IPs as IP names, the rest as DNS."""
        dns: list[str] = []
        ips: list[IPAddress] = []
        for text in (name, *addresses):
            ip = parse_ip(text)
            if ip is not None:
                if ip not in ips:
                    ips.append(ip)
                continue
            problem = dns_name_problem(text)
            if problem is not None:
                raise CertificateError(f"'{text}' {problem}")
            lowered = text.lower().rstrip(".")
            if lowered not in dns:
                dns.append(lowered)
        return cls(tuple(dns), tuple(ips))

    def general_names(self) -> list[x509.GeneralName]:
        return [x509.DNSName(n) for n in self.dns] + [x509.IPAddress(ip) for ip in self.ips]

    def same_as(self, other: NodeNames) -> bool:
        return set(self.dns) == set(other.dns) and set(self.ips) == set(other.ips)

    def entries(self) -> tuple[str, ...]:
        """`DNS:name` and `IP:address`, as OpenSSL shows subject alternative names."""
        return tuple([f"DNS:{n}" for n in self.dns] + [f"IP:{ip}" for ip in self.ips])

    def __str__(self) -> str:
        return ", ".join(self.entries())


def certificate_names(cert: x509.Certificate) -> NodeNames:
    """The subject alternative names a certificate holds (none: empty)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return NodeNames((), ())
    dns = tuple(name.lower() for name in san.get_values_for_type(x509.DNSName))
    ips = tuple(
        ip for ip in san.get_values_for_type(x509.IPAddress) if not isinstance(ip, IPNetwork)
    )
    return NodeNames(dns, ips)


# --- the CA ---------------------------------------------------------------------------------


def ca_subject(name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, CA_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, CA_PREFIX + name),
        ]
    )


def build_ca_certificate(
    key: CAPrivateKey,
    name: str,
    now: datetime,
    serial: int,
    validity: timedelta = CA_VALIDITY,
) -> x509.Certificate:
    """A self-signed CA certificate that may sign node certificates and nothing below them."""
    if not name.strip() or len(CA_PREFIX + name) > 64:
        raise CertificateError("the CA's name must be 1 to 50 characters")
    _check_serial(serial)
    subject = ca_subject(name)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    )
    return builder.sign(key, _hash_for(key))


def ca_problems(cert: x509.Certificate, key: CAPrivateKey, now: datetime) -> list[str]:
    """Why this certificate and key cannot act as the fleet's CA now (empty: they can)."""
    problems: list[str] = []
    if _public_der(cert.public_key()) != _public_der(key.public_key()):
        problems.append("the CA key is not the key of the CA certificate")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        problems.append("the CA certificate is not a CA certificate (basicConstraints CA:false)")
    if cert.not_valid_after_utc <= now:
        problems.append(f"the CA certificate expired {_day(cert.not_valid_after_utc)}: {NEW_CA}")
    return problems


NEW_CA = (
    "make a new CA (ctl ca init --ca-dir NEW_DIR) and onboard every node again with --renew"
    " from there (docs/onboarding.md, Renewal)"
)


def ca_expiry_warning(
    not_after: datetime, now: datetime, whose: str = "the CA certificate"
) -> str | None:
    """One line when a CA certificate ends within CA_WARN_WITHIN of `now` (or has ended),
    else None: node certificates it signs can last no longer than it does."""
    left = not_after - now
    if left > CA_WARN_WITHIN:
        return None
    if left <= timedelta(0):
        return f"{whose} expired {_day(not_after)}: {NEW_CA}"
    return f"{whose} expires {_day(not_after)} (in {_left(left)}): {NEW_CA}"


def _left(left: timedelta) -> str:
    if left >= timedelta(days=2):
        return f"{left.days} days"
    return f"{int(left.total_seconds() // 3600)} hours"


# --- node certificates ----------------------------------------------------------------------


def read_csr(pem: bytes) -> x509.CertificateSigningRequest:
    """A CSR whose signature holds and whose key is one we sign; raises CertificateError."""
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as error:
        raise CertificateError(f"the node's CSR is not a PEM request: {error}") from None
    if not csr.is_signature_valid:
        raise CertificateError(
            "the node's CSR has a bad signature: it was not signed by the key it carries"
        )
    problem = public_key_problem(csr.public_key())
    if problem is not None:
        raise CertificateError(f"the node's CSR carries {problem}")
    return csr


def public_key_problem(key: object) -> str | None:
    """Why a node's public key is not one we certify, or None."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name in ("secp256r1", "secp384r1", "secp521r1"):
            return None
        return f"an EC key on curve {key.curve.name} (P-256, P-384 or P-521 only)"
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size >= MIN_RSA_BITS:
            return None
        return f"a {key.key_size}-bit RSA key (at least {MIN_RSA_BITS} bits)"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return None
    return f"a {type(key).__name__} key (EC, RSA or Ed25519 only)"


def sign_node_certificate(
    ca_key: CAPrivateKey,
    ca_cert: x509.Certificate,
    csr: x509.CertificateSigningRequest,
    names: NodeNames,
    now: datetime,
    serial: int,
    validity: timedelta = NODE_VALIDITY,
) -> x509.Certificate:
    """A certificate for the CSR's key with the subject and names the CA knows for the node.

    From the CSR only its public key is taken, once its signature is checked again here.
    """
    if not csr.is_signature_valid:
        raise CertificateError("the node's CSR has a bad signature")
    public_key = csr.public_key()
    problem = public_key_problem(public_key)
    if problem is not None:
        raise CertificateError(f"the node's CSR carries {problem}")
    if not names.dns:
        raise CertificateError("a node certificate needs the node's name")
    _check_serial(serial)
    problems = ca_problems(ca_cert, ca_key, now)
    if problems:
        raise CertificateError(problems[0])
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    assert isinstance(
        public_key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
    )
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names.dns[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(
                digital_signature=True,
                key_agreement=isinstance(public_key, ec.EllipticCurvePublicKey),
                key_encipherment=isinstance(public_key, rsa.RSAPublicKey),
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(_NODE_USAGES),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names.general_names()), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
    )
    return builder.sign(ca_key, _hash_for(ca_key))


def renew_after(not_before: datetime, not_after: datetime) -> datetime:
    """When a certificate valid from `not_before` to `not_after` is due for renewal: once
    two thirds of its lifetime have passed. The one rule, for onboarding and reconcile."""
    lifetime = not_after - not_before
    return not_before + lifetime * RENEW_AFTER_NUMERATOR // RENEW_AFTER_DENOMINATOR


def lifetime_problem(not_before: datetime, not_after: datetime, now: datetime) -> str | None:
    """Why a certificate's dates ask for a new one at `now`, or None: expired, or due."""
    if not_after <= now:
        return f"expired {_day(not_after)}"
    due = renew_after(not_before, not_after)
    if now >= due:
        return f"past two thirds of its lifetime, expires {_day(not_after)}"
    return None


def certificate_problems(
    cert: x509.Certificate,
    ca_cert: x509.Certificate,
    names: NodeNames,
    now: datetime,
    public_key_der: bytes | None = None,
) -> list[str]:
    """Why a node's certificate should be replaced now (empty: it is good to keep).

    Good: issued by this CA (its signature checked), for exactly these names, valid now
    and not yet two thirds through its lifetime (renew_after), and, when `public_key_der`
    (the node key's public half, DER SubjectPublicKeyInfo) is given, for that key.
    """
    problems: list[str] = []
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        problems.append("not issued by this CA")
    got = certificate_names(cert)
    if not got.same_as(names):
        problems.append(f"names {got or '(none)'}, not {names}")
    if cert.not_valid_before_utc > now + BACKDATE:
        problems.append(f"not valid before {_day(cert.not_valid_before_utc)}")
    lifetime = lifetime_problem(cert.not_valid_before_utc, cert.not_valid_after_utc, now)
    if lifetime is not None:
        problems.append(lifetime)
    if public_key_der is not None and _public_der(cert.public_key()) != public_key_der:
        problems.append("not for the node's key")
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = x509.ExtendedKeyUsage([])
    if not set(_NODE_USAGES) <= set(usages):
        problems.append("not for serverAuth and clientAuth")
    return problems


# --- encodings ------------------------------------------------------------------------------


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def public_key_der(pem_text: bytes) -> bytes:
    """A PEM public key (`openssl pkey -pubout`) as DER SubjectPublicKeyInfo."""
    return _public_der(serialization.load_pem_public_key(pem_text))


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, as `openssl x509 -fingerprint -sha256` shows it."""
    return ":".join(f"{byte:02X}" for byte in cert.fingerprint(hashes.SHA256()))


def serial_hex(cert: x509.Certificate) -> str:
    return f"{cert.serial_number:x}"


def _public_der(key: object) -> bytes:
    encode = getattr(key, "public_bytes", None)
    if encode is None:
        return b""
    der: bytes = encode(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return der


def _check_serial(serial: int) -> None:
    if not 0 < serial < 1 << SERIAL_BITS:
        raise CertificateError(f"a serial must be positive and at most {SERIAL_BITS} bits")


def _hash_for(key: CAPrivateKey) -> hashes.SHA256 | None:
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _key_usage(
    *,
    digital_signature: bool = False,
    key_encipherment: bool = False,
    key_agreement: bool = False,
    key_cert_sign: bool = False,
    crl_sign: bool = False,
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=key_agreement,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
