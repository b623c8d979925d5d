"""Revocation: the CA's list of revoked serials, its CRL (verified by openssl), and the
record of issued certificates that lets a node be revoked without asking it."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.errors import InputError
from cli.pki.certs import NodeNames, serial_hex
from cli.pki.revocation import (
    CertRecord,
    NodeCertificates,
    RevocationFileError,
    is_revoked,
    issued_to,
    normal_serial,
    parse_records,
    render_records,
    serials_of,
)
from cli.pki.store import (
    REVOKED_FILE,
    CertificateAuthority,
    crl_path,
    init_ca,
    issued_records,
    published_crl,
    read_crl,
    revoked_serials,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return init_ca(tmp_path / "ca", "unit", datetime.now(UTC))


def issue(ca: CertificateAuthority, name: str) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    return ca.issue(csr, NodeNames.of(name, ["127.0.1.3"]), datetime.now(UTC), name)


def test_serials_are_compared_as_serial_hex_writes_them() -> None:
    records = [CertRecord("2c7c4dc08aae", "node-3", NOW)]
    assert is_revoked("2C:7C:4D:C0:8A:AE", records)
    assert is_revoked("002c7c4dc08aae", records)
    assert not is_revoked("2c7c4dc08aaf", records)
    assert not is_revoked("not hex", records)
    with pytest.raises(ValueError):
        normal_serial("0")


def test_the_list_reads_back_as_written_sorted_one_entry_a_line() -> None:
    records = (CertRecord("b", "node-2", NOW), CertRecord("a", "node-1", NOW))
    text = render_records(records, "revoked")
    assert text.splitlines()[3].lstrip().startswith('{"at": "2026-12-04T12:00:00+00:00"')
    assert '"serial": "a"' in text.splitlines()[3]
    assert parse_records(text, "revoked") == tuple(sorted(records))
    assert render_records((), "revoked") == '{\n  "version": 1,\n  "revoked": []\n}\n'
    assert serials_of("node-2", records) == ("b",)


def test_issuing_records_the_serial_and_the_node(ca: CertificateAuthority) -> None:
    cert = issue(ca, "node-3")
    (record,) = issued_records(ca.directory)
    assert (record.serial, record.node) == (serial_hex(cert), "node-3")
    assert record.at == cert.not_valid_after_utc
    assert record.names == ("DNS:node-3", "IP:127.0.1.3")


def _csr() -> x509.CertificateSigningRequest:
    key = ec.generate_private_key(ec.SECP256R1())
    return (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")]))
        .sign(key, hashes.SHA256())
    )


def test_the_record_keeps_the_inventory_name_exactly_beside_the_names_issued(
    ca: CertificateAuthority,
) -> None:
    """Issue 25 item 3: `Node-A` and a host named by an IP whose address is a DNS name are
    recorded under their inventory names, not the certificate's first DNS name."""
    upper = ca.issue(_csr(), NodeNames.of("Node-A", ["127.0.1.5"]), NOW, "Node-A")
    by_ip = ca.issue(_csr(), NodeNames.of("10.9.8.7", ["gpu-9.lab.example"]), NOW, "10.9.8.7")
    records = {r.serial: r for r in issued_records(ca.directory)}
    assert records[serial_hex(upper)].node == "Node-A"
    assert records[serial_hex(upper)].names == ("DNS:node-a", "IP:127.0.1.5")
    assert records[serial_hex(by_ip)].node == "10.9.8.7"
    assert records[serial_hex(by_ip)].names == ("DNS:gpu-9.lab.example", "IP:10.9.8.7")
    text = (ca.directory / "issued.json").read_text()
    assert '"names": ["DNS:gpu-9.lab.example", "IP:10.9.8.7"], "node": "10.9.8.7"' in text


def test_a_nodes_certificates_are_those_issued_to_its_inventory_name_exactly() -> None:
    names = ("DNS:x",)
    upper = CertRecord("a1", "Node-A", NOW, names)
    lower = CertRecord("b2", "node-a", NOW, names)
    by_ip = CertRecord("c3", "10.9.8.7", NOW, names)
    records = [upper, lower, by_ip]
    hosts = ["Node-A", "node-a", "10.9.8.7"]
    assert issued_to("Node-A", records, hosts) == NodeCertificates((upper,), ())
    assert issued_to("node-a", records, hosts) == NodeCertificates((lower,), ())
    assert issued_to("10.9.8.7", records, hosts, "gpu-9.lab.example") == NodeCertificates(
        (by_ip,), ()
    )
    assert issued_to("node-A", records, hosts) == NodeCertificates((), ())


def test_a_legacy_entry_counts_only_when_it_is_the_name_exactly_and_unshared() -> None:
    """Entries written before the identity was kept (no names) hold the first DNS name,
    lowercased: they count only where that is the inventory name exactly and no other host
    differs from it in case alone; otherwise they are said, never revoked."""
    plain = CertRecord("a1", "node-3", NOW)
    shared = CertRecord("b2", "node-a", NOW)
    by_address = CertRecord("c3", "gpu-9.lab.example", NOW)
    records = [plain, shared, by_address]
    assert issued_to("node-3", records, ["node-3"]) == NodeCertificates((plain,), ())
    assert issued_to("Node-3", records, ["Node-3"]) == NodeCertificates((), (plain,))
    twins = ["Node-A", "node-a"]
    assert issued_to("node-a", records, twins) == NodeCertificates((), (shared,))
    assert issued_to("Node-A", records, twins) == NodeCertificates((), (shared,))
    assert issued_to("10.9.8.7", records, ["10.9.8.7"], "gpu-9.lab.example") == (
        NodeCertificates((), (by_address,))
    )


def test_an_issued_list_with_names_that_are_not_a_list_is_refused() -> None:
    text = '{"version": 1, "issued": [{"serial": "a", "node": "n", "at": "%s", "names": "x"}]}'
    with pytest.raises(RevocationFileError, match="'names' is not a list of names"):
        parse_records(text % NOW.isoformat(), "issued")


def test_revoking_writes_the_list_and_a_crl_openssl_verifies(ca: CertificateAuthority) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl")
    cert = issue(ca, "node-3")
    other = issue(ca, "node-4")
    new = ca.revoke([CertRecord(serial_hex(cert), "node-3", NOW)], NOW)
    assert [r.serial for r in new] == [serial_hex(cert)]
    assert revoked_serials(ca.directory) == frozenset({serial_hex(cert)})
    for name in (REVOKED_FILE, "crl.pem"):
        assert stat.S_IMODE((ca.directory / name).stat().st_mode) == 0o644
    crl = read_crl(ca.directory)
    assert crl is not None
    assert crl.next_update_utc == ca.cert.not_valid_after_utc  # pushed, never fetched
    assert crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 1
    assert crl.get_revoked_certificate_by_serial_number(cert.serial_number) is not None
    assert crl.get_revoked_certificate_by_serial_number(other.serial_number) is None
    verified = subprocess.run(
        ["openssl", "crl", "-in", str(crl_path(ca.directory)), "-CAfile", str(ca.cert_path),
         "-noout", "-verify", "-text"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    assert "verify OK" in verified.stderr + verified.stdout
    listed = re.findall(r"Serial Number: ([0-9A-F]+)", verified.stdout)
    assert [int(serial, 16) for serial in listed] == [cert.serial_number]
    # A certificate openssl checks against the CRL is refused; the other is not.
    for pem, expect in ((cert, 2), (other, 0)):
        path = ca.directory.parent / "leaf.pem"
        path.write_bytes(pem.public_bytes(serialization.Encoding.PEM))
        checked = subprocess.run(
            ["openssl", "verify", "-crl_check", "-CAfile", str(ca.cert_path),
             "-CRLfile", str(crl_path(ca.directory)), str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert checked.returncode == expect, checked.stdout + checked.stderr
        assert ("certificate revoked" in checked.stdout + checked.stderr) == (expect == 2)


def test_revoking_again_changes_nothing_and_a_new_serial_bumps_the_crl_number(
    ca: CertificateAuthority,
) -> None:
    first = CertRecord("abc", "node-3", NOW)
    ca.revoke([first], NOW)
    before = {p.name: p.read_bytes() for p in ca.directory.iterdir()}
    assert ca.revoke([first], NOW + timedelta(days=1)) == ()
    assert {p.name: p.read_bytes() for p in ca.directory.iterdir()} == before
    ca.revoke([CertRecord("def", "node-4", NOW)], NOW + timedelta(days=1))
    crl = read_crl(ca.directory)
    assert crl is not None
    assert crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 2
    assert {f"{r.serial_number:x}" for r in crl} == {"abc", "def"}


def test_a_crl_missing_its_serials_is_signed_again(ca: CertificateAuthority) -> None:
    ca.revoke([CertRecord("abc", "node-3", NOW)], NOW)
    crl_path(ca.directory).unlink()  # interrupted between the two files
    assert ca.revoke([CertRecord("abc", "node-3", NOW)], NOW) == ()
    crl = read_crl(ca.directory)
    assert crl is not None and {f"{r.serial_number:x}" for r in crl} == {"abc"}


def test_a_list_file_that_does_not_read_is_bad_input_naming_it(ca: CertificateAuthority) -> None:
    (ca.directory / REVOKED_FILE).write_text('{"version": 1, "revoked": [{"serial": "zz"}]}')
    with pytest.raises(InputError) as raised:
        revoked_serials(ca.directory)
    assert str(ca.directory / REVOKED_FILE) in str(raised.value)
    assert revoked_serials(ca.directory.parent / "nowhere") == frozenset()


def test_the_routers_get_the_crl_only_when_the_cas_certificate_signed_it(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    assert published_crl(ca.directory) == ""  # nothing revoked yet: routers drop any list
    assert published_crl(tmp_path / "no-ca-here") is None
    cert = issue(ca, "node-3")
    ca.revoke([CertRecord(serial_hex(cert), "node-3", NOW)], NOW)
    text = published_crl(ca.directory)
    assert text is not None and text == (ca.directory / "crl.pem").read_text()
    # Another CA's CRL in its place: bad input, never handed to the routers.
    other = init_ca(tmp_path / "other", "other", datetime.now(UTC))
    other.revoke([CertRecord("abc", "x", NOW)], NOW)
    (ca.directory / "crl.pem").write_bytes((other.directory / "crl.pem").read_bytes())
    with pytest.raises(InputError, match="is not signed by the CA certificate beside it"):
        published_crl(ca.directory)
    (ca.directory / "crl.pem").write_text("not a CRL\n")
    with pytest.raises(InputError, match="is not a PEM CRL"):
        published_crl(ca.directory)
