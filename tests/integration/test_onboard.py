"""`ctl onboard-node` against a real test-fleet node (node-3) over its real sshd.

ctl runs as a subprocess, as an operator runs it, through a small wrapper that records
every SSH message the client sends (paramiko's Packetizer.send_message, before
encryption): so "nothing was sent before the host key was trusted" and "the CA key was
never sent" are checked on the wire, not inferred.

Every test works on temporary copies: its own CA, its own inventory (comments included)
and its own known_hosts; never the fleet's inventory. Tests that change node-3 (its
/etc/modelfleet/pki) hold `fleet_exclusive` and leave that directory removed.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import paramiko
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from cli.edges.ssh import fingerprint
from cli.inventory.load import load_inventory
from cli.pki.addhost import NewHost, commit_host, plan_new_host, read_inventory_texts
from cli.pki.certs import NodeNames, certificate_names
from cli.pki.store import CertificateAuthority, init_ca
from tests.ctl import ctl, ctl_environment
from tests.integration.conftest import LiveFleet
from tests.integration.test_inventory_matches_ansible import ansible_list, compare

TRICKY = Path(__file__).resolve().parent / "inventories" / "tricky"
NODE = "node-3"
PKI = "/etc/modelfleet/pki"
# SSH message types a client sends during key exchange, and the transport's own.
KEX_ONLY = {1, 2, 3, 4, 20, 21, *range(30, 50)}
USERAUTH_REQUEST, CHANNEL_OPEN, CHANNEL_DATA = 50, 90, 94

RECORDER = """\
import os, sys
import paramiko.packet

_log = open(os.environ["ONBOARD_TEST_SENT"], "ab")
_send = paramiko.packet.Packetizer.send_message


def send_message(self, data):
    raw = data.asbytes()
    _log.write(len(raw).to_bytes(4, "big") + raw)
    _log.flush()
    return _send(self, data)


paramiko.packet.Packetizer.send_message = send_message
sys.argv[0] = "ctl"
from cli.app import main

main()
"""

INVENTORY = """\
# The onboarding tests' own inventory: a temporary file, never the fleet's.
all:
  hosts:
    node-1:   # reached with the fleet's client key
      ansible_host: 127.0.1.1
      ansible_user: root
      ansible_ssh_private_key_file: {key}
  children:
    gpu:
      # GPU nodes go here.
      hosts:
        gpu-spare:
          ansible_host: 127.0.1.250
      vars:
        purpose: inference
"""


@dataclass(frozen=True)
class Lab:
    fleet: LiveFleet
    tmp: Path
    ca: CertificateAuthority
    inventory: Path  # a directory: hosts.yml and .known_hosts
    fingerprint: str  # node-3's host key, from the fleet's own known_hosts

    @property
    def known_hosts(self) -> Path:
        return self.inventory / ".known_hosts"

    @property
    def hosts_file(self) -> Path:
        return self.inventory / "hosts.yml"

    @property
    def sent_log(self) -> Path:
        return self.tmp / "sent.bin"

    def env(self) -> dict[str, str]:
        return ctl_environment(
            {
                "COLUMNS": "120",
                "XDG_STATE_HOME": str(self.tmp / "state"),
                "MODELFLEET_CA_DIR": str(self.ca.directory),
                "ONBOARD_TEST_SENT": str(self.sent_log),
            }
        )

    def command(self, *args: str) -> list[str]:
        recorder = self.tmp / "ctl_recorded.py"
        if not recorder.exists():
            recorder.write_text(RECORDER)
        return [sys.executable, str(recorder), *args]

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.sent_log.unlink(missing_ok=True)
        return subprocess.run(
            self.command(*args),
            capture_output=True, text=True, env=self.env(), cwd=self.tmp, check=False,
            stdin=subprocess.DEVNULL, timeout=180,
        )  # fmt: skip

    def onboard(self, *extra: str, expect: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.ctl(
            "onboard-node", NODE, "--host", self.fleet.address(NODE),
            "--identity", str(self.fleet.key), "--inventory", str(self.inventory),
            "--group", "gpu", "--labels", "role=inference",
            "--expect-host-key", expect or self.fingerprint, *extra,
        )  # fmt: skip

    def sent(self) -> list[bytes]:
        data = self.sent_log.read_bytes() if self.sent_log.exists() else b""
        messages = []
        while data:
            size = int.from_bytes(data[:4], "big")
            messages.append(data[4 : 4 + size])
            data = data[4 + size :]
        return messages

    def node_files(self, directory: str = "/etc/modelfleet") -> bytes:
        """Every file under `directory` on the node, concatenated."""
        result = subprocess.run(
            self.fleet.ssh_command(
                NODE, f"find {directory} -type f -exec cat {{}} + 2>/dev/null; true"
            ),
            capture_output=True, timeout=60, check=True,
        )  # fmt: skip
        return result.stdout

    def node(self, command: str) -> str:
        result = self.fleet.ssh(NODE, command)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def has_pki_dir(self) -> bool:
        return self.fleet.ssh(NODE, f"test -e {PKI}").returncode == 0


def host_key_fingerprint(fleet: LiveFleet, name: str) -> str:
    keys = paramiko.HostKeys(str(fleet.known_hosts)).lookup(fleet.address(name))
    assert keys, f"{name} is not in the fleet's known_hosts"
    return fingerprint(next(iter(keys.values())))


def ensure_openssl(fleet: LiveFleet, name: str) -> None:
    """The nodes are Debian minbase, without openssl unless tests/testfleet/rootfs.py includes
    it: install it once (it stays in the node's overlay, like a disk)."""
    if fleet.ssh(name, "command -v openssl").returncode == 0:
        return
    install = fleet.ssh(
        name,
        "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq"
        " && apt-get install -y -qq --no-install-recommends openssl"
        " && apt-get clean && rm -rf /var/lib/apt/lists/*",
        timeout=600,
    )
    if install.returncode != 0:
        last = (install.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(
            f"{name} has no openssl and apt-get could not install it ({last}):"
            " add openssl to PACKAGES in tests/testfleet/rootfs.py"
        )


def ca_secrets(ca: CertificateAuthority) -> list[bytes]:
    """The CA key in every form it could travel in: its file, DER, base64 lines, the scalar."""
    key = ca.key
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    pem = ca.key_path.read_bytes()
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    scalar = key.private_numbers().private_value.to_bytes(32, "big")
    lines = [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    return [pem, der, scalar, *lines]


def cordon_state(inventory: Path) -> str | None:
    return load_inventory(inventory).host(NODE).vars.cordoned


def row(stdout: str) -> str:
    rows = [line for line in stdout.splitlines() if line.startswith(NODE + " ")]
    assert len(rows) == 1, stdout
    return rows[0]


def make_lab(fleet: LiveFleet, tmp_path: Path) -> Lab:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(INVENTORY.format(key=fleet.key))
    ca = init_ca(tmp_path / "ca", "onboarding tests", _now())
    return Lab(fleet, tmp_path, ca, inventory, host_key_fingerprint(fleet, NODE))


def _now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def lab(fleet_exclusive: LiveFleet, tmp_path: Path) -> Iterator[Lab]:
    if NODE not in fleet_exclusive.names:
        pytest.skip(f"the test fleet has no {NODE}")
    ensure_openssl(fleet_exclusive, NODE)
    fleet_exclusive.ssh(NODE, f"rm -rf {PKI}")
    made = make_lab(fleet_exclusive, tmp_path)
    yield made
    fleet_exclusive.ssh(NODE, f"rm -rf {PKI}")


@pytest.mark.fleet
def test_onboarding_gives_the_node_a_certificate_openssl_verifies_for_its_known_names(
    lab: Lab,
) -> None:
    result = lab.onboard()
    assert result.returncode == 0, result.stderr
    assert re.search(r"\bReady\b", row(result.stdout)), result.stdout
    assert "role=inference" in row(result.stdout)

    # The certificate verifies against the CA, here, with openssl.
    node_pem = lab.node(f"cat {PKI}/node.pem")
    (lab.tmp / "node.pem").write_text(node_pem)
    verify = subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(lab.ca.cert_path),
         "-verify_hostname", NODE, "-verify_ip", lab.fleet.address(NODE), "node.pem"],
        cwd=lab.tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.strip() == "node.pem: OK"
    cert = x509.load_pem_x509_certificate(node_pem.encode())
    assert certificate_names(cert) == NodeNames.of(NODE, [lab.fleet.address(NODE)])
    assert lab.node(f"cat {PKI}/ca.pem").encode() == lab.ca.cert_path.read_bytes()

    # Files and modes on the node; the node's key is the certificate's.
    modes = lab.node(f"stat -c '%n %a %U' {PKI} {PKI}/node.key {PKI}/node.pem {PKI}/ca.pem")
    assert modes.split("\n")[:4] == [
        f"{PKI} 755 root",
        f"{PKI}/node.key 600 root",
        f"{PKI}/node.pem 644 root",
        f"{PKI}/ca.pem 644 root",
    ]
    node_pub = lab.node(f"openssl pkey -in {PKI}/node.key -pubout").encode()
    assert serialization.load_pem_public_key(node_pub) == cert.public_key()

    # The host key went to the inventory's known_hosts, as the fleet's own record has it.
    line = lab.known_hosts.read_text().strip()
    fleet_line = next(
        entry
        for entry in lab.fleet.known_hosts.read_text().splitlines()
        if entry.startswith(lab.fleet.address(NODE) + " ")
    )
    assert line == fleet_line.strip()

    # The inventory gained the host, and lost nothing.
    text = lab.hosts_file.read_text()
    original = INVENTORY.format(key=lab.fleet.key).splitlines()
    kept = iter(text.splitlines())
    assert all(any(line == old for line in kept) for old in original), text
    host = load_inventory(lab.inventory).host(NODE)
    assert (host.address, host.port, host.user) == (lab.fleet.address(NODE), 22, "root")
    assert host.private_key_file == str(lab.fleet.key)
    assert host.vars.labels == {"role": "inference"}
    assert "gpu" in host.groups


@pytest.mark.fleet
def test_the_ca_key_never_leaves_its_directory(lab: Lab) -> None:
    before = {path.name: path.read_bytes() for path in lab.ca.directory.iterdir()}
    assert lab.onboard().returncode == 0
    sent = lab.sent()
    kinds = {message[0] for message in sent}
    assert {USERAUTH_REQUEST, CHANNEL_OPEN, CHANNEL_DATA} <= kinds  # the recorder works
    wire = b"".join(sent)
    assert b"BEGIN CERTIFICATE REQUEST" not in wire  # the CSR came back, it was not sent
    assert lab.ca.cert_path.read_bytes().splitlines()[1] in wire  # the CA cert was sent
    on_node = lab.node_files()
    assert b"BEGIN CERTIFICATE" in on_node
    for secret in ca_secrets(lab.ca):
        assert secret not in wire
        assert secret not in on_node
    assert str(lab.ca.directory).encode() not in wire
    after = {path.name: path.read_bytes() for path in lab.ca.directory.iterdir()}
    assert {name: after[name] for name in before} == before  # the key and certificate as they were
    assert set(after) - set(before) == {"issued.json"}  # and the record of what it signed


@pytest.mark.fleet
def test_a_wrong_host_key_aborts_before_anything_is_sent(lab: Lab) -> None:
    lab.known_hosts.write_text(
        next(
            line + "\n"
            for line in lab.fleet.known_hosts.read_text().splitlines()
            if line.startswith("127.0.1.1 ")
        )
    )
    known_before = lab.known_hosts.read_bytes()
    hosts_before = lab.hosts_file.read_bytes()
    wrong = "SHA256:" + "A" * 43
    result = lab.onboard(expect=wrong)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert wrong in lines[0] and lab.fingerprint in lines[0]
    assert "nothing was sent" in lines[0]
    assert result.stdout == ""
    kinds = [message[0] for message in lab.sent()]
    assert kinds, "the key exchange itself was recorded"
    assert set(kinds) <= KEX_ONLY, kinds  # no service request, no login, no channel
    assert lab.known_hosts.read_bytes() == known_before
    assert lab.hosts_file.read_bytes() == hosts_before
    assert not lab.has_pki_dir()


@pytest.mark.fleet
def test_a_different_key_already_in_known_hosts_aborts_with_both_fingerprints(lab: Lab) -> None:
    other = next(
        line.split(" ", 1)[1]
        for line in lab.fleet.known_hosts.read_text().splitlines()
        if line.startswith("127.0.1.1 ")
    )
    lab.known_hosts.write_text(f"{lab.fleet.address(NODE)} {other}\n")
    known_before = lab.known_hosts.read_bytes()
    result = lab.onboard()
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line
    assert lab.fingerprint in line and host_key_fingerprint(lab.fleet, "node-1") in line
    assert "ssh-keygen -R" in line
    assert {message[0] for message in lab.sent()} <= KEX_ONLY
    assert lab.known_hosts.read_bytes() == known_before
    assert not lab.has_pki_dir()


@pytest.mark.fleet
def test_without_a_terminal_or_expect_host_key_onboarding_refuses(lab: Lab) -> None:
    result = lab.ctl(
        "onboard-node", NODE, "--host", lab.fleet.address(NODE),
        "--identity", str(lab.fleet.key), "--inventory", str(lab.inventory),
    )  # fmt: skip
    assert result.returncode == 2
    assert "no terminal to confirm it on" in result.stderr and lab.fingerprint in result.stderr
    assert {message[0] for message in lab.sent()} <= KEX_ONLY
    assert not lab.known_hosts.exists()
    assert not lab.has_pki_dir()


def run_in_terminal(lab: Lab, answer: str, *args: str) -> tuple[int, str, str]:
    """Run ctl with stdin and stderr on a pseudo-terminal; answer the host key prompt."""
    lab.sent_log.unlink(missing_ok=True)
    master, slave = pty.openpty()
    process = subprocess.Popen(
        lab.command(*args),
        stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=lab.env(), cwd=lab.tmp,
    )  # fmt: skip
    os.close(slave)
    seen, answered = b"", False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
            if not answered and b"Trust this key?" in seen:
                os.write(master, answer.encode() + b"\n")
                answered = True
        elif process.poll() is not None:
            break
    process.wait(timeout=60)
    assert process.stdout is not None
    stdout = process.stdout.read().decode()
    os.close(master)
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    assert answered, terminal
    return process.returncode, stdout, terminal


@pytest.mark.fleet
def test_the_operator_confirms_the_fingerprint_at_the_prompt(lab: Lab) -> None:
    args = (
        "onboard-node", NODE, "--host", lab.fleet.address(NODE),
        "--identity", str(lab.fleet.key), "--inventory", str(lab.inventory),
    )  # fmt: skip
    code, stdout, terminal = run_in_terminal(lab, "n", *args)
    assert code == 2
    assert f"ssh-ed25519 {lab.fingerprint}" in terminal
    assert "not confirmed; nothing was sent" in terminal
    assert {message[0] for message in lab.sent()} <= KEX_ONLY
    assert not lab.known_hosts.exists()
    assert not lab.has_pki_dir()

    code, stdout, terminal = run_in_terminal(lab, "y", *args)
    assert code == 0, terminal
    assert re.search(r"\bReady\b", row(stdout))
    assert lab.known_hosts.read_text().startswith(lab.fleet.address(NODE) + " ssh-ed25519 ")
    assert lab.has_pki_dir()


@pytest.mark.fleet
def test_a_rerun_keeps_the_cordon_and_the_certificate_unless_renew(lab: Lab) -> None:
    assert lab.onboard().returncode == 0
    first = lab.node(f"cat {PKI}/node.pem")
    first_key = lab.node(f"openssl pkey -in {PKI}/node.key -pubout")
    cordon = lab.ctl("cordon", NODE, "--reason", "fan noise", "--inventory", str(lab.inventory))
    assert cordon.returncode == 0, cordon.stderr
    assert cordon_state(lab.inventory) == "fan noise"

    again = lab.onboard()
    assert again.returncode == 0, again.stderr
    assert "certificate kept" in again.stderr
    assert re.search(r"\bCordoned\b", row(again.stdout)), again.stdout
    assert cordon_state(lab.inventory) == "fan noise"
    assert lab.node(f"cat {PKI}/node.pem") == first

    # Without --host: the inventory says where the node is.
    bare = lab.ctl(
        "onboard-node", NODE, "--inventory", str(lab.inventory), "--renew",
    )  # fmt: skip
    assert bare.returncode == 0, bare.stderr
    assert "certificate issued (--renew)" in bare.stderr
    renewed = lab.node(f"cat {PKI}/node.pem")
    assert renewed != first
    assert lab.node(f"openssl pkey -in {PKI}/node.key -pubout") != first_key
    assert cordon_state(lab.inventory) == "fan noise"
    (lab.tmp / "renewed.pem").write_text(renewed)
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(lab.ca.cert_path), "renewed.pem"],
        cwd=lab.tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # A rerun that would change the inventory's entry is refused, and changes nothing.
    moved = lab.onboard("--port", "2222")
    assert moved.returncode == 2
    assert "already in the inventory" in moved.stderr
    assert lab.node(f"cat {PKI}/node.pem") == renewed


@pytest.mark.fleet
def test_a_node_without_openssl_is_told_so_and_left_unchanged(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    # The test fleet's nodes all have openssl; this one loses it for the test.
    ensure_openssl(fleet_exclusive, NODE)
    openssl = fleet_exclusive.ssh(NODE, "command -v openssl").stdout.strip()
    hidden = f"{openssl}.modelfleet-test-hidden"
    moved = fleet_exclusive.ssh(NODE, f"mv {openssl} {hidden}")
    assert moved.returncode == 0, moved.stderr
    try:
        assert fleet_exclusive.ssh(NODE, "command -v openssl").returncode != 0
        lab = make_lab(fleet_exclusive, tmp_path)
        before = lab.hosts_file.read_bytes()
        had_pki = fleet_exclusive.ssh(NODE, f"test -e {PKI}").returncode == 0
        result = lab.onboard()
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert "openssl is not installed on the node" in lines[-1]
        assert lab.hosts_file.read_bytes() == before
        assert (fleet_exclusive.ssh(NODE, f"test -e {PKI}").returncode == 0) == had_pki
    finally:
        restored = fleet_exclusive.ssh(NODE, f"mv {hidden} {openssl}")
        assert restored.returncode == 0, restored.stderr


def test_an_unreachable_node_exits_1_and_changes_nothing(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts: {}\n")
    init_ca(tmp_path / "ca", "t", _now())
    result = ctl(
        "onboard-node", "ghost", "--host", "127.0.0.1", "--port", str(port),
        "--inventory", str(inventory), "--ca-dir", str(tmp_path / "ca"),
        "--expect-host-key", "SHA256:" + "B" * 43,
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: ghost: 127.0.0.1: connection refused on port {port}"
    assert (inventory / "hosts.yml").read_text() == "all:\n  hosts: {}\n"
    assert not (inventory / ".known_hosts").exists()


def test_no_ca_is_bad_input(tmp_path: Path) -> None:
    result = ctl(
        "onboard-node",
        "n1",
        "--host",
        "127.0.0.1",
        "--inventory",
        str(tmp_path / "inventory"),
        env={"MODELFLEET_CA_DIR": str(tmp_path / "none")},
    )
    assert result.returncode == 2
    assert "ctl ca init" in result.stderr
    assert not (tmp_path / "inventory").exists()


@pytest.mark.parametrize(
    "new",
    [
        NewHost("node-q", "10.0.0.9", labels={"role": "x", "on": "yes"}, group="gpu"),
        NewHost("node-r", "10.0.0.10", port=2222, user="ops", group="brand-new"),
        NewHost("node-s", "node-s.lab.example", key_file="/keys/id"),
    ],
    ids=["existing-group", "new-group", "all"],
)
def test_ansible_reads_an_added_host_as_ctl_does(new: NewHost, tmp_path: Path) -> None:
    directory = tmp_path / "tricky"
    shutil.copytree(TRICKY, directory)
    before = load_inventory(directory)
    plan = plan_new_host(read_inventory_texts(directory, new.name), new)
    after = commit_host(plan, directory, before)
    listed = ansible_list(directory, tmp_path)
    compare(after, listed)
    hostvars = listed["_meta"]["hostvars"][new.name]
    assert hostvars["ansible_host"] == new.address
    assert hostvars.get("labels", {}) | dict(new.labels) == hostvars.get("labels", {})
