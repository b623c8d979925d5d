"""`ctl reconcile` renews a node certificate two thirds through its lifetime, over a real
sshd on loopback (tests/sshd.py), as an operator runs it.

The node is this machine's sshd with MODELFLEET_PKI_DIR and MODELFLEET_SHARD_DIR set for
every session (sshd's SetEnv): what the probe reads and the renewal writes is a temporary
directory, never /etc/modelfleet. The catalog wants nothing, so the pass's only work is
the certificate. The CA is the test's own, made with `ctl ca init`'s code.
"""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.pki.certs import (
    NodeNames,
    build_ca_certificate,
    certificate_names,
    pem,
    serial_hex,
    sign_node_certificate,
)
from cli.pki.store import CertificateAuthority, init_ca
from tests.ctl import ctl
from tests.integration.test_exit_codes import NOTHING  # a catalog that wants nothing
from tests.sshd import Sshd, missing_reason, running_sshd

NODE = "node-1"


@dataclass(frozen=True)
class Node:
    tmp: Path
    sshd: Sshd
    pki: Path  # the node's /etc/modelfleet/pki
    inventory: Path
    catalog: Path

    def ctl(self, *args: str, ca_dir: Path) -> subprocess.CompletedProcess[str]:
        return ctl(
            "reconcile", "--catalog", str(self.catalog), "--inventory", str(self.inventory),
            "--ca-dir", str(ca_dir), *args,
            env={"XDG_STATE_HOME": str(self.tmp / "state"), "COLUMNS": "200"}, timeout=120,
        )  # fmt: skip

    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate((self.pki / "node.pem").read_bytes())

    def install(self, ca: CertificateAuthority, issued: datetime, validity: timedelta) -> None:
        """A key and a certificate for it, as onboarding would have left them then."""
        key = ec.generate_private_key(ec.SECP256R1())
        self.pki.mkdir(mode=0o755, exist_ok=True)
        (self.pki / "node.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (self.pki / "node.key").chmod(0o600)
        (self.pki / "node.pem").write_bytes(pem(_for_key(ca, key, issued, validity)))
        (self.pki / "ca.pem").write_bytes(pem(ca.cert))


def _for_key(
    ca: CertificateAuthority, key: ec.EllipticCurvePrivateKey, issued: datetime, life: timedelta
) -> x509.Certificate:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE)]))
        .sign(key, hashes.SHA256())
    )
    names = NodeNames.of(NODE, ["127.0.0.1"])
    return sign_node_certificate(ca.key, ca.cert, csr, names, issued, 0x1234, life)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    pki = tmp_path / "node-pki"
    shards = tmp_path / "node-shards"
    environment = {"MODELFLEET_PKI_DIR": str(pki), "MODELFLEET_SHARD_DIR": str(shards)}
    with running_sshd(tmp_path / "sshd", environment=environment) as server:
        inventory = server.inventory(tmp_path / "inventory", NODE)
        catalog = tmp_path / "catalog.yaml"
        catalog.write_text(NOTHING)
        yield Node(tmp_path, server, pki, inventory, catalog)


def test_reconcile_renews_a_certificate_two_thirds_through_its_lifetime(
    node: Node, tmp_path: Path
) -> None:
    ca = init_ca(tmp_path / "ca", "renewal tests", datetime.now(UTC))
    # Valid 3 h 5 min from 2 h 10 min ago: two thirds (2 h 3 min 20 s) are gone.
    node.install(ca, datetime.now(UTC) - timedelta(hours=2, minutes=10), timedelta(hours=3))
    old = node.cert()
    key_before = (node.pki / "node.key").read_bytes()

    planned = node.ctl("--dry-run", ca_dir=ca.directory)
    assert planned.returncode == 0, planned.stderr
    renew = [line for line in planned.stdout.splitlines() if line.startswith("renew ")]
    assert len(renew) == 1 and NODE in renew[0], planned.stdout
    assert "past two thirds of its lifetime" in renew[0]
    assert node.cert() == old  # a dry run changes nothing

    result = node.ctl("--json", ca_dir=ca.directory)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["complete"] is True
    assert document["outcome"]["renewed"] == [NODE]
    assert document["outcome"]["not_renewed"] == {}
    assert [r["node"] for r in document["plan"]["renewals"]] == [NODE]
    assert f"{NODE}: certificate issued (the old one: past two thirds" in result.stderr

    new = node.cert()
    assert new.serial_number != old.serial_number
    now = datetime.now(UTC)
    assert new.not_valid_before_utc <= now < new.not_valid_after_utc
    assert new.not_valid_after_utc - now > timedelta(days=89)  # a full 90 days again
    new.verify_directly_issued_by(ca.cert)
    assert certificate_names(new) == NodeNames.of(NODE, ["127.0.0.1"])
    key = node.pki / "node.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_uid == 0
    assert key.read_bytes() != key_before  # a new key, made on the node
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    assert private.public_key() == new.public_key()
    assert (node.pki / "ca.pem").read_bytes() == ca.cert_path.read_bytes()
    assert sorted(p.name for p in node.pki.iterdir()) == ["ca.pem", "node.key", "node.pem"]

    # The next pass has nothing to renew: the new certificate is a third of nothing old.
    again = node.ctl(ca_dir=ca.directory)
    assert again.returncode == 0, again.stderr
    assert "renewed" not in again.stdout and node.cert() == new


def test_without_the_ca_here_each_due_certificate_is_said_once_and_the_pass_goes_on(
    node: Node, tmp_path: Path
) -> None:
    ca = init_ca(tmp_path / "ca", "renewal tests", datetime.now(UTC))
    node.install(ca, datetime.now(UTC) - timedelta(days=70), timedelta(days=90))
    before = (node.pki / "node.pem").read_bytes()
    missing = tmp_path / "no-ca-here"

    result = node.ctl(ca_dir=missing)
    assert result.returncode == 0, result.stderr  # docs/onboarding.md: not a failure
    said = [line for line in result.stdout.splitlines() if NODE in line and "due" in line]
    assert len(said) == 1, result.stdout
    assert said[0].startswith("due ")
    text = " ".join(result.stdout.split())  # the plan's lines wrap
    assert f"no CA in {missing}" in text
    assert f"ctl onboard-node {NODE} --renew" in text
    assert text.count(NODE) == 2  # one entry: its name, and the command that renews it
    assert (node.pki / "node.pem").read_bytes() == before

    document = json.loads(node.ctl("--json", ca_dir=missing).stdout)
    assert document["complete"] is True
    assert document["plan"]["renewals"] == []
    (due,) = document["plan"]["certificates_due"]
    assert due["node"] == NODE and due["serial"] == "1234"
    assert due["not_here"].startswith(f"no CA in {missing}")
    assert document["outcome"]["renewed"] == []
    assert (node.pki / "node.pem").read_bytes() == before


def test_a_ca_ending_within_30_days_is_a_warning_and_still_renews(
    node: Node, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    directory = tmp_path / "short-ca"
    directory.mkdir(mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build_ca_certificate(key, "short", now - timedelta(days=1), 77, timedelta(days=21))
    (directory / "ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (directory / "ca.key").chmod(0o600)
    (directory / "ca.pem").write_bytes(pem(cert))
    ca = CertificateAuthority(directory, key, cert)
    node.install(ca, now - timedelta(days=15), timedelta(days=20))

    result = node.ctl(ca_dir=directory)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    ca_lines = [w for w in warnings if "expires" in w and str(directory / "ca.pem") in w]
    assert len(ca_lines) == 1, result.stderr
    assert "(in 19 days)" in ca_lines[0] and "make a new CA" in ca_lines[0]
    # The nodes' own ca.pem is the same CA: said once more, from the facts, as one line.
    assert len([w for w in warnings if "CA certificate on 1 node " in w]) == 1, result.stderr
    renewed = node.cert()
    assert (
        f"renewed {NODE}: certificate {serial_hex(renewed)}, valid until"
        f" {renewed.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    ) in result.stdout.splitlines()
    # A node certificate never outlives its CA.
    assert node.cert().not_valid_after_utc == cert.not_valid_after_utc
