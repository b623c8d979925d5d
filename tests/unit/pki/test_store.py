"""The CA's files: modes, never overwritten, refused when others could read the key."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.errors import InputError
from cli.pki.certs import SERIAL_BITS, NodeNames, read_csr
from cli.pki.store import (
    CERT_FILE,
    KEY_FILE,
    CertificateAuthority,
    default_ca_dir,
    init_ca,
    load_ca,
)
from tests.ctl import ctl

NOW = datetime.now(UTC)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The most permissive umask: the files' modes must not depend on it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return init_ca(tmp_path / "ca", "unit", NOW)


def test_init_makes_a_private_directory_key_and_a_public_certificate(
    tmp_path: Path, loose_umask: None
) -> None:
    directory = tmp_path / "deep" / "ca"
    made = init_ca(directory, "unit", NOW)
    assert sorted(p.name for p in directory.iterdir()) == [KEY_FILE, CERT_FILE]
    assert mode(directory) == 0o700
    assert mode(directory / KEY_FILE) == 0o600
    assert mode(directory / CERT_FILE) == 0o644
    key = serialization.load_pem_private_key((directory / KEY_FILE).read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    cert = x509.load_pem_x509_certificate((directory / CERT_FILE).read_bytes())
    assert cert == made.cert
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "modelfleet CA unit"
    assert load_ca(directory, NOW).cert == cert


def test_an_existing_ca_is_never_overwritten(ca: CertificateAuthority) -> None:
    before = {p.name: p.read_bytes() for p in ca.directory.iterdir()}
    with pytest.raises(InputError, match=r"a CA is already here .*never overwrites.*mv "):
        init_ca(ca.directory, "again", NOW)
    (ca.directory / CERT_FILE).unlink()  # half a CA is still a CA's key: kept
    with pytest.raises(InputError, match=r"already here \(ca.key\)"):
        init_ca(ca.directory, "again", NOW)
    assert (ca.directory / KEY_FILE).read_bytes() == before[KEY_FILE]


@pytest.mark.parametrize("bits", [0o640, 0o604, 0o620, 0o601])
def test_a_key_others_could_read_or_write_is_refused(ca: CertificateAuthority, bits: int) -> None:
    ca.key_path.chmod(bits)
    with pytest.raises(InputError, match=rf"mode 0{bits:o}\): chmod 600"):
        load_ca(ca.directory, NOW)


def test_a_directory_others_can_enter_is_refused(ca: CertificateAuthority) -> None:
    ca.directory.chmod(0o755)
    with pytest.raises(InputError, match=r"open to group or others \(mode 0755\): chmod 700"):
        load_ca(ca.directory, NOW)


def test_a_symlinked_key_is_refused(ca: CertificateAuthority, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.key"
    ca.key_path.rename(elsewhere)
    ca.key_path.symlink_to(elsewhere)
    with pytest.raises(InputError, match="symlink"):
        load_ca(ca.directory, NOW)


def test_no_ca_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="ctl ca init"):
        load_ca(tmp_path / "none", NOW)


def test_a_key_that_is_not_the_certificates_is_refused(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    other = init_ca(tmp_path / "other", "other", NOW)
    (ca.directory / CERT_FILE).write_bytes(other.cert_path.read_bytes())
    with pytest.raises(InputError, match="not the key of the CA certificate"):
        load_ca(ca.directory, NOW)


def test_serials_are_random_positive_and_at_most_159_bits(ca: CertificateAuthority) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = read_csr(
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "n")]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    names = NodeNames.of("n", ["10.0.0.1"])
    serials = [ca.issue(csr, names, NOW, "n").serial_number for _ in range(200)]
    assert len(set(serials)) == 200
    assert all(0 < serial < 1 << SERIAL_BITS for serial in serials)
    # 159 random bits: with 200 draws, the longest is all but certainly above 150 bits
    # and the set of top bits is not constant.
    assert max(serial.bit_length() for serial in serials) > 150
    assert len({serial >> (SERIAL_BITS - 4) for serial in serials}) > 4


def test_the_default_directory_follows_xdg_config_home() -> None:
    assert default_ca_dir({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/modelfleet/ca")
    assert default_ca_dir({}) == Path.home() / ".config" / "modelfleet" / "ca"


def test_ctl_ca_init_uses_the_environment_and_refuses_a_second_time(tmp_path: Path) -> None:
    env = {"MODELFLEET_CA_DIR": str(tmp_path / "ca")}
    first = ctl("ca", "init", "--name", "lab", env=env)
    assert first.returncode == 0, first.stderr
    assert "CN=modelfleet CA lab" in first.stdout
    assert f"{tmp_path / 'ca' / KEY_FILE} (0600)" in first.stdout
    key = (tmp_path / "ca" / KEY_FILE).read_bytes()
    second = ctl("ca", "init", env=env)
    assert second.returncode == 2
    assert second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "never overwrites a CA" in lines[0]
    assert (tmp_path / "ca" / KEY_FILE).read_bytes() == key
    xdg = ctl("ca", "init", env={"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "MODELFLEET_CA_DIR": ""})
    assert xdg.returncode == 0, xdg.stderr
    assert (tmp_path / "cfg" / "modelfleet" / "ca" / KEY_FILE).exists()
