"""The node's certificate as the probe reports it (docs/facts.md, NodeCertificate): read
with `cryptography` on this side, judged at the moment it was gathered, and whatever a
hostile node sends a note on that node, never a traceback and never unbounded."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.facts.model import NodeCertificate, NodeFacts
from cli.facts.parse import FactsParseError
from cli.facts.probe import facts_from_probe
from cli.facts.sections.certificate import MAX_PEM_BYTES, parse_pki, read_pki_section
from cli.pki.certs import fingerprint, serial_hex
from tests.certs import LabCA, make_ca, pem_text
from tests.ctl import ROOT
from tests.unit.facts.test_probe_output import probe_output, section

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ISSUED = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # valid 2026-11-01 11:55 to 2027-01-30 12:00


@pytest.fixture(scope="module")
def ca() -> LabCA:
    return make_ca(datetime(2026, 1, 1, tzinfo=UTC), "lab")


def pki(node: str | None, ca_pem: str | None, key: bool = True) -> str:
    text = f"key\t{'present' if key else 'absent'}\n"
    for name, body in (("node.pem", node), ("ca.pem", ca_pem)):
        if body is not None:
            text += f"file\t{name}\n{body}\nend\t{name}\n"
    return text


def test_a_good_certificate_becomes_every_field_and_serves_tls(ca: LabCA) -> None:
    cert = ca.issue("node-3", ("127.0.1.3",), ISSUED, serial=0xABC123)
    got, notes = parse_pki(pki(pem_text(cert), ca.pem), NOW)
    assert notes == []
    assert got == NodeCertificate(
        serial="abc123",
        not_before=datetime(2026, 11, 1, 11, 55, tzinfo=UTC),
        not_after=datetime(2027, 1, 30, 12, 0, tzinfo=UTC),
        dns_names=("node-3",),
        ip_addresses=("127.0.1.3",),
        issuer="CN=modelfleet CA lab,O=modelfleet",
        key_present=True,
        ca_fingerprint=fingerprint(ca.cert),
        ca_not_after=ca.cert.not_valid_after_utc,
        problem=None,
    )
    assert got.serial == serial_hex(cert)
    assert got.not_before.tzinfo is not None and got.not_before.utcoffset() == timedelta(0)
    facts = NodeFacts(gathered_at=NOW, last_reached=NOW, certificate=got)
    assert facts.certificate is not None and facts.certificate.usable(NOW)
    # Judged again at any moment: from its first second to the one before its end.
    assert got.usable(got.not_before)
    assert not got.usable(got.not_before - timedelta(seconds=1))
    assert got.usable(got.not_after - timedelta(seconds=1))
    assert not got.usable(got.not_after)


def test_an_expired_certificate_has_the_problem_and_does_not_serve(ca: LabCA) -> None:
    cert = ca.issue(now=ISSUED, validity=timedelta(days=10))
    got, notes = parse_pki(pki(pem_text(cert), ca.pem), NOW)
    assert notes == [] and got is not None
    assert got.problem == "expired 2026-11-11 12:00 UTC"
    assert not got.usable(ISSUED)  # a problem


def test_a_certificate_not_yet_valid_says_from_when(ca: LabCA) -> None:
    cert = ca.issue(now=NOW + timedelta(days=3))
    got, _ = parse_pki(pki(pem_text(cert), ca.pem), NOW)
    assert got is not None and got.problem == "not valid before 2026-12-05 11:55 UTC"


def test_a_certificate_another_ca_signed_is_not_signed_by_its_ca_pem(ca: LabCA) -> None:
    other = make_ca(datetime(2026, 1, 1, tzinfo=UTC), "lab")  # the same name, another key
    cert = other.issue(now=ISSUED)
    got, _ = parse_pki(pki(pem_text(cert), ca.pem), NOW)
    assert got is not None
    assert got.problem == "not signed by its ca.pem"
    assert got.ca_fingerprint == fingerprint(ca.cert) != fingerprint(other.cert)
    assert not got.usable(NOW)


def test_a_missing_key_or_ca_pem_is_the_problem(ca: LabCA) -> None:
    cert = pem_text(ca.issue(now=ISSUED))
    no_key, _ = parse_pki(pki(cert, ca.pem, key=False), NOW)
    assert no_key is not None and not no_key.key_present
    assert no_key.problem == "no node.key"
    no_ca, _ = parse_pki(pki(cert, None), NOW)
    assert no_ca is not None and (no_ca.ca_fingerprint, no_ca.ca_not_after) == (None, None)
    assert no_ca.problem == "no ca.pem"
    both, _ = parse_pki(pki(cert, "garbage", key=False), NOW)
    assert both is not None and both.problem == "no node.key; ca.pem is not a certificate"


def test_no_node_pem_is_plain_http_whatever_else_is_there(ca: LabCA) -> None:
    assert parse_pki(pki(None, ca.pem), NOW) == (None, [])
    assert parse_pki("key\tabsent\n", NOW) == (None, [])
    facts = NodeFacts(gathered_at=NOW, last_reached=NOW)
    assert facts.certificate is None  # plain HTTP: serving_certificates leaves it out


@pytest.mark.parametrize(
    "garbage",
    [
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
        "-----BEGIN CERTIFICATE-----\n" + "QUFB" * 100 + "\n-----END CERTIFICATE-----",
        "\x1b[31m\u202e-----BEGIN CERTIFICATE-----",
    ],
)
def test_a_node_pem_that_is_no_certificate_is_a_note_not_a_traceback(
    ca: LabCA, garbage: str
) -> None:
    got, notes = parse_pki(pki(garbage, ca.pem), NOW)
    assert got is None
    assert len(notes) == 1 and notes[0].startswith("pki: node.pem is not a PEM certificate")
    assert len(notes[0]) < 200


def test_an_oversized_file_is_not_read(ca: LabCA) -> None:
    cert = pem_text(ca.issue(now=ISSUED))
    huge = cert + "A" * (MAX_PEM_BYTES + 1 - len(cert))  # what the probe's head -c 65537 sends
    got, notes = parse_pki(pki(huge, ca.pem), NOW)
    assert got is None
    assert notes == ["pki: node.pem is larger than 64 KiB: not read"]
    # Exactly 64 KiB is read (the certificate then trailing text PEM loading skips).
    fits = cert + "\n" * (MAX_PEM_BYTES - len(cert))
    assert parse_pki(pki(fits, ca.pem), NOW)[0] is not None
    big_ca, notes = parse_pki(pki(cert, ca.pem + "A" * MAX_PEM_BYTES), NOW)
    assert big_ca is not None and big_ca.problem == "ca.pem is not a certificate"
    assert notes == ["pki: ca.pem is larger than 64 KiB: not read"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'key' line"),
        ("file\tnode.pem\nabc\n", "node.pem is cut off (no end line)"),
        ("key\tpresent\nkey\tabsent\n", "line 2: unexpected line"),
        ("key\tmaybe\n", "line 1: unexpected line"),
        ("key\tpresent\nfile\t../../etc/shadow\n", "line 2: unexpected line"),
        ("key\tpresent\nfile\tca.pem\nx\nend\tca.pem\nfile\tca.pem\n", "line 5: unexpected"),
    ],
)
def test_a_section_of_another_shape_is_refused(text: str, message: str) -> None:
    with pytest.raises(FactsParseError, match=re.escape(message)):
        read_pki_section(text)


def test_in_the_probe_output_the_section_is_read_and_a_bad_one_is_a_note(ca: LabCA) -> None:
    cert = ca.issue(now=ISSUED)
    good = facts_from_probe(probe_output(pki=section("pki", pki(pem_text(cert), ca.pem))), NOW)
    assert good.certificate is not None and good.certificate.problem is None
    bad = facts_from_probe(probe_output(pki=section("pki", "key\tplenty\n")), NOW)
    assert bad.certificate is None
    assert "pki line 1: unexpected line 'key\\tplenty'" in bad.notes
    cut = facts_from_probe(probe_output(pki=section("pki", "key\tpresent\n", None)), NOW)
    assert cut.certificate is None
    assert "pki: the probe did not finish reading /etc/modelfleet/pki" in cut.notes
    # A probe from before the section: nothing to say, no certificate known.
    old = facts_from_probe(probe_output(), NOW)
    assert old.certificate is None and not [n for n in old.notes if "pki" in n]


def test_a_cached_facts_file_without_the_field_still_loads(ca: LabCA) -> None:
    before = '{"format": "modelfleet.facts/v1", "gathered_at": "2026-11-30T09:00:00Z"}'
    assert NodeFacts.model_validate_json(before).certificate is None
    got, _ = parse_pki(pki(pem_text(ca.issue(now=ISSUED)), ca.pem), NOW)
    facts = NodeFacts(gathered_at=NOW, certificate=got)
    assert NodeFacts.model_validate_json(facts.model_dump_json()) == facts


def test_the_real_probe_reads_the_directory_and_never_the_key(ca: LabCA, tmp_path: Path) -> None:
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir()
    cert = ca.issue(now=datetime.now(UTC))
    (pki_dir / "node.pem").write_text(pem_text(cert))
    (pki_dir / "ca.pem").write_text(ca.pem)
    secret = "-----BEGIN PRIVATE KEY-----\nTHE-NODE-KEY\n-----END PRIVATE KEY-----\n"
    (pki_dir / "node.key").write_text(secret)
    (pki_dir / "node.key").chmod(0o600)
    env = {
        **os.environ,
        "MODELFLEET_PKI_DIR": str(pki_dir),
        "MODELFLEET_SHARD_DIR": str(tmp_path / "no-shards"),
        "PATH": "/usr/bin:/bin",
    }
    probe = (ROOT / "cli" / "facts" / "probe.sh").read_text()
    output = subprocess.run(
        ["sh", "-s", "--", str(tmp_path / "models")],
        input=probe, capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "THE-NODE-KEY" not in output
    facts = facts_from_probe(output, datetime.now(UTC))
    assert facts.certificate is not None, facts.notes
    assert facts.certificate.serial == serial_hex(cert)
    assert facts.certificate.key_present and facts.certificate.problem is None
    (pki_dir / "node.key").unlink()
    (pki_dir / "node.pem").write_text("x" * (2 * MAX_PEM_BYTES))
    output = subprocess.run(
        ["sh", "-s"], input=probe, capture_output=True, text=True, env=env, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    facts = facts_from_probe(output, datetime.now(UTC))
    assert facts.certificate is None
    assert "pki: node.pem is larger than 64 KiB: not read" in facts.notes
    assert len(output) < 3 * MAX_PEM_BYTES  # the probe cut it: 64 KiB and a byte


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/facts/sections/certificate.py: the
# section's exact refusals, the lines it skips, the moments a certificate starts and ends,
# and how much of a reason or an issuer is shown.


def pki_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        read_pki_section(text)
    return str(raised.value)


def test_a_section_cut_short_or_without_its_key_line_is_refused_whole() -> None:
    assert pki_error("key\tpresent\nfile\tnode.pem\nabc\n") == (
        "pki: node.pem is cut off (no end line)"
    )
    assert pki_error("file\tca.pem\nabc\nend\tca.pem\n") == "pki: no 'key' line"
    assert (
        pki_error("key\tpresent\nfile node.pem\n") == "pki line 2: unexpected line 'file node.pem'"
    )


def test_blank_lines_between_the_section_lines_are_skipped() -> None:
    files = read_pki_section("\nkey\tabsent\n\n  \nfile\tca.pem\nabc\nend\tca.pem\n\n")
    assert (files.key_present, dict(files.texts)) == (False, {"ca.pem": "abc"})


def test_a_certificate_is_valid_from_its_first_second_to_before_its_last(ca: LabCA) -> None:
    cert = ca.issue(now=ISSUED)
    text = pki(pem_text(cert), ca.pem)

    first, _ = parse_pki(text, cert.not_valid_before_utc)
    last, _ = parse_pki(text, cert.not_valid_after_utc)

    assert first is not None and first.problem is None
    assert last is not None and last.problem == "expired 2027-01-30 12:00 UTC"


def test_a_certificate_followed_by_bytes_that_are_not_utf8_is_read(ca: LabCA) -> None:
    # The probe's text is decoded with surrogateescape: a byte 0xff comes as "\udcff".
    cert = pem_text(ca.issue(now=ISSUED)) + "\udcff\udcfe"

    got, notes = parse_pki(pki(cert, ca.pem), NOW)

    assert got is not None and got.problem is None and notes == []


def test_the_reason_a_node_pem_is_no_certificate_is_the_librarys_cut_to_120(ca: LabCA) -> None:
    with pytest.raises(ValueError) as raised:
        x509.load_pem_x509_certificate(b"not a certificate")
    reason = str(raised.value).splitlines()[0]
    assert len(reason) > 120

    _, notes = parse_pki(pki("not a certificate", ca.pem), NOW)

    assert notes == [f"pki: node.pem is not a PEM certificate: {reason[:117]}..."]


def test_a_certificate_whose_extensions_cannot_be_read_is_a_note(ca: LabCA) -> None:
    # Two subjectAltName extensions: the basicConstraints OID 2.5.29.19 made 2.5.29.17.
    der = ca.issue(now=ISSUED).public_bytes(serialization.Encoding.DER)
    twice = der.replace(bytes.fromhex("0603551d13"), bytes.fromhex("0603551d11"))
    cert = x509.load_der_x509_certificate(twice)

    got, notes = parse_pki(pki(pem_text(cert), ca.pem), NOW)

    assert got is None
    assert notes == ["pki: node.pem cannot be read (DuplicateExtension)"]


def issued_by(ca: LabCA, organization: str) -> x509.Certificate:
    """A node certificate whose issuer is the CA's key under a name of that organization."""
    issuer = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)])
    key = ec.generate_private_key(ec.SECP256R1())
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-3")]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(4242)
        .not_valid_before(ISSUED)
        .not_valid_after(ISSUED + timedelta(days=90))
        .sign(ca.key, hashes.SHA256())
    )


def test_an_issuer_is_shown_whole_to_1024_characters_and_cut_past_them(ca: LabCA) -> None:
    whole, _ = parse_pki(pki(pem_text(issued_by(ca, "o" * 1022)), ca.pem), NOW)
    cut, _ = parse_pki(pki(pem_text(issued_by(ca, "o" * 1023)), ca.pem), NOW)

    assert whole is not None and whole.issuer == "O=" + "o" * 1022
    assert cut is not None and cut.issuer == "O=" + "o" * 1019 + "..."
