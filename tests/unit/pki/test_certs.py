"""The pure certificate building: what a CA and a node certificate hold, and what they refuse."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cli.pki.certs import (
    CertificateError,
    NodeNames,
    build_ca_certificate,
    ca_expiry_warning,
    ca_problems,
    certificate_names,
    certificate_problems,
    lifetime_problem,
    pem,
    read_csr,
    renew_after,
    sign_node_certificate,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
# docs/onboarding.md: every certificate is valid from 5 minutes ago; the CA's for 10 years
# (3650 days: until 2036-11-29, as the docs' example says), a node's for 90 days.
FIVE_MINUTES_AGO = datetime(2026, 12, 2, 11, 55, tzinfo=UTC)
CA_END = datetime(2036, 11, 29, 12, 0, tzinfo=UTC)
NODE_END = datetime(2027, 3, 2, 12, 0, tzinfo=UTC)
NAMES = NodeNames.of("node-3", ["127.0.1.3"])
E = TypeVar("E", bound=x509.ExtensionType)


@pytest.fixture(scope="module")
def ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, build_ca_certificate(key, "test", NOW, 1234567)


def make_csr(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | None = None,
    subject: str = "node-3",
    sans: list[x509.GeneralName] | None = None,
    ask_for_ca: bool = False,
) -> bytes:
    key = key or ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, subject),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Evil Corp"),
            ]
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ask_for_ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def sign(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    csr_pem: bytes | None = None,
    names: NodeNames = NAMES,
    now: datetime = NOW,
    serial: int = 42,
) -> x509.Certificate:
    key, cert = ca
    return sign_node_certificate(key, cert, read_csr(csr_pem or make_csr()), names, now, serial)


def extension(cert: x509.Certificate, kind: type[E]) -> x509.Extension[E]:
    return cert.extensions.get_extension_for_class(kind)


# --- the CA ---------------------------------------------------------------------------------


def test_the_ca_certificate_may_sign_node_certificates_and_nothing_below_them(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    key, cert = ca
    constraints = extension(cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = extension(cert, x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature and not usage.value.key_encipherment
    ski = extension(cert, x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "modelfleet CA test"
    cert.verify_directly_issued_by(cert)  # self-signed, and the signature holds
    assert cert.not_valid_before_utc == FIVE_MINUTES_AGO
    assert cert.not_valid_after_utc == CA_END == NOW + timedelta(days=3650)
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)


def test_an_ed25519_ca_signs_too() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    ca_cert = build_ca_certificate(key, "ed", NOW, 7)
    cert = sign_node_certificate(key, ca_cert, read_csr(make_csr()), NAMES, NOW, 8)
    cert.verify_directly_issued_by(ca_cert)


# --- what a node certificate holds -----------------------------------------------------------


def test_only_the_names_the_ca_knows_are_signed_never_the_csrs(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    csr = make_csr(
        subject="bank.example",
        sans=[
            x509.DNSName("evil.example"),
            x509.DNSName("*.example"),
            x509.IPAddress(ipaddress.ip_address("10.6.6.6")),
        ],
        ask_for_ca=True,
    )
    cert = sign(ca, csr)
    assert certificate_names(cert) == NAMES
    san = extension(cert, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["node-3"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.1.3")]
    assert cert.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-3")])
    assert extension(cert, x509.BasicConstraints).value.ca is False
    assert extension(cert, x509.BasicConstraints).critical
    # Nothing else of the CSR's: only the extensions the CA writes.
    kinds = {type(ext.value) for ext in cert.extensions}
    assert kinds == {
        x509.BasicConstraints,
        x509.KeyUsage,
        x509.ExtendedKeyUsage,
        x509.SubjectAlternativeName,
        x509.SubjectKeyIdentifier,
        x509.AuthorityKeyIdentifier,
    }


def test_a_dns_address_is_a_dns_name_and_duplicates_are_dropped() -> None:
    assert NodeNames.of("Node-3", ["node-3.Lab.example", "node-3"]) == NodeNames(
        ("node-3", "node-3.lab.example"), ()
    )
    assert str(NodeNames.of("n", ["::1", "::1"])) == "DNS:n, IP:::1"
    with pytest.raises(CertificateError, match="DNS name"):
        NodeNames.of("node_3")
    with pytest.raises(CertificateError, match="DNS name"):
        NodeNames.of("n", ["bad host"])


def test_key_usages_are_those_of_a_tls_server_and_client(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    ca_cert = ca[1]
    node_key = ec.generate_private_key(ec.SECP256R1())
    cert = sign(ca, make_csr(node_key))
    usage = extension(cert, x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature and usage.value.key_agreement
    assert not usage.value.key_cert_sign and not usage.value.crl_sign
    assert not usage.value.key_encipherment
    assert list(extension(cert, x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    ]
    ski = extension(cert, x509.SubjectKeyIdentifier).value
    assert ski.digest == x509.SubjectKeyIdentifier.from_public_key(node_key.public_key()).digest
    aki = extension(cert, x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == extension(ca_cert, x509.SubjectKeyIdentifier).value.digest
    assert cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_usage = extension(sign(ca, make_csr(rsa_key)), x509.KeyUsage).value
    assert rsa_usage.key_encipherment and not rsa_usage.key_agreement


def test_validity_is_bounded_and_never_outlives_the_ca(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    cert = sign(ca)
    assert cert.not_valid_before_utc == FIVE_MINUTES_AGO
    assert cert.not_valid_after_utc == NODE_END == NOW + timedelta(days=90)
    # 40 days before the CA's end a node gets those 40 days, not 90; 10 days before, 10
    # (the CA is warned about, not refused: cli/commands/ca.py open_ca); once it has
    # ended, nothing.
    assert sign(ca, now=CA_END - timedelta(days=40)).not_valid_after_utc == CA_END
    assert sign(ca, now=CA_END - timedelta(days=10)).not_valid_after_utc == CA_END
    with pytest.raises(CertificateError, match="expired 2036-11-29 12:00 UTC: make a new CA"):
        sign(ca, now=CA_END)


def test_a_serial_is_positive_and_at_most_159_bits(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    largest = 2**159 - 1
    assert sign(ca, serial=largest).serial_number == largest
    assert sign(ca, serial=1).serial_number == 1
    for bad in (0, -1, 2**159):
        with pytest.raises(CertificateError, match="serial"):
            sign(ca, serial=bad)


# --- what a CSR must be -----------------------------------------------------------------------


def test_a_tampered_csr_is_refused(ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    csr = x509.load_pem_x509_csr(make_csr(subject="node-3"))
    der = csr.public_bytes(serialization.Encoding.DER)
    assert der.count(b"node-3") == 1
    tampered = x509.load_der_x509_csr(der.replace(b"node-3", b"node-4"))
    tampered_pem = tampered.public_bytes(serialization.Encoding.PEM)
    with pytest.raises(CertificateError, match="bad signature"):
        read_csr(tampered_pem)
    with pytest.raises(CertificateError, match="bad signature"):
        sign_node_certificate(ca[0], ca[1], tampered, NAMES, NOW, 5)


def test_a_csr_for_a_weak_key_or_garbage_is_refused() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(CertificateError, match="1024-bit RSA"):
        read_csr(make_csr(weak))
    with pytest.raises(CertificateError, match="not a PEM request"):
        read_csr(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")


# --- whether a certificate is good to keep --------------------------------------------------


def test_a_good_certificate_has_no_problems_until_two_thirds_of_its_lifetime(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    node_key = ec.generate_private_key(ec.SECP256R1())
    cert = sign(ca, make_csr(node_key))
    key_der = node_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert certificate_problems(cert, ca[1], NAMES, NOW, key_der) == []
    # Valid 90 days and 5 minutes from 11:55: two thirds is 60 days 3 min 20 s later.
    due = FIVE_MINUTES_AGO + timedelta(days=60, minutes=3, seconds=20)
    assert renew_after(cert.not_valid_before_utc, cert.not_valid_after_utc) == due
    just_before = due - timedelta(seconds=1)
    assert certificate_problems(cert, ca[1], NAMES, just_before) == []
    late = certificate_problems(cert, ca[1], NAMES, due)
    assert late == ["past two thirds of its lifetime, expires 2027-03-02 12:00 UTC"]
    gone = certificate_problems(cert, ca[1], NAMES, NOW + timedelta(days=90))
    assert gone == ["expired 2027-03-02 12:00 UTC"]


def test_another_ca_other_names_or_another_key_each_mean_a_new_certificate(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    cert = sign(ca)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = build_ca_certificate(other_key, "test", NOW, 99)  # same subject, other key
    assert certificate_problems(cert, other_ca, NAMES, NOW) == ["not issued by this CA"]
    moved = NodeNames.of("node-3", ["127.0.1.4"])
    assert certificate_problems(cert, ca[1], moved, NOW) == [
        "names DNS:node-3, IP:127.0.1.3, not DNS:node-3, IP:127.0.1.4"
    ]
    stranger = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = stranger.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert certificate_problems(cert, ca[1], NAMES, NOW, der) == ["not for the node's key"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command here")
def test_openssl_verifies_the_chain_for_tls_server_and_client_use(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = build_ca_certificate(key, "openssl", now, 77)
    cert = sign_node_certificate(key, ca_cert, read_csr(make_csr()), NAMES, now, 78)
    (tmp_path / "ca.pem").write_bytes(pem(ca_cert))
    (tmp_path / "node.pem").write_bytes(pem(cert))
    for purpose in ("sslserver", "sslclient"):
        result = subprocess.run(
            ["openssl", "verify", "-purpose", purpose, "-x509_strict", "-CAfile", "ca.pem",
             "-verify_hostname", "node-3", "-verify_ip", "127.0.1.3", "node.pem"],
            cwd=tmp_path, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == "node.pem: OK"
    wrong = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.pem", "-verify_hostname", "evil.example", "node.pem"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert wrong.returncode != 0


# --- renewal: one rule, and the CA's end warned about ---------------------------------------


def test_renewal_is_due_exactly_at_two_thirds_of_the_lifetime() -> None:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    end = start + timedelta(days=90)
    due = start + timedelta(days=60)
    assert renew_after(start, end) == due
    assert lifetime_problem(start, end, due - timedelta(seconds=1)) is None
    assert lifetime_problem(start, end, due) == (
        "past two thirds of its lifetime, expires 2027-04-01 00:00 UTC"
    )
    assert lifetime_problem(start, end, end - timedelta(seconds=1)) is not None
    assert lifetime_problem(start, end, end) == "expired 2027-04-01 00:00 UTC"
    # Any lifetime, to the microsecond: 3 s → due after 2 s.
    assert renew_after(start, start + timedelta(seconds=3)) == start + timedelta(seconds=2)


def test_a_ca_is_warned_about_30_days_before_its_end_and_refused_after_it(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    end = ca[1].not_valid_after_utc
    assert ca_expiry_warning(end, end - timedelta(days=30, seconds=1)) is None
    assert ca_expiry_warning(end, end - timedelta(days=30)) == (
        "the CA certificate expires 2036-11-29 12:00 UTC (in 30 days): make a new CA"
        " (ctl ca init --ca-dir NEW_DIR) and onboard every node again with --renew from there"
        " (docs/onboarding.md, Renewal)"
    )
    soon = ca_expiry_warning(end, end - timedelta(hours=5), "the CA on 3 nodes")
    assert soon is not None and soon.startswith(
        "the CA on 3 nodes expires 2036-11-29 12:00 UTC (in 5 hours)"
    )
    gone = ca_expiry_warning(end, end)
    assert gone is not None and gone.startswith("the CA certificate expired 2036-11-29")
    assert ca_problems(ca[1], ca[0], end - timedelta(days=1)) == []
    assert ca_problems(ca[1], ca[0], end) == [
        "the CA certificate expired 2036-11-29 12:00 UTC: make a new CA (ctl ca init --ca-dir"
        " NEW_DIR) and onboard every node again with --renew from there (docs/onboarding.md,"
        " Renewal)"
    ]
