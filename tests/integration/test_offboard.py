"""`ctl offboard-node` as an operator runs it: against a real sshd on loopback (the node,
whose /etc/modelfleet/pki is a temporary directory: a ForceCommand rewrites the path in
every script ctl sends), and on facts snapshots for the drain's refusals.

What is checked: the inventory differs from the original by exactly the node's lines, the
known_hosts by exactly its line, the CRL lists the node's serial and `openssl crl -verify`
accepts it, the node's key is gone from the node, a rerun says it is already done (exit
0), a dry run changes nothing anywhere, and the refusals' exit codes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.pki.certs import NodeNames, serial_hex
from cli.pki.store import ISSUED_FILE, init_ca, revoked_serials
from tests.ctl import ROOT, ctl
from tests.integration.test_exit_codes import CHAT, NOTHING, World
from tests.sshd import Sshd, missing_reason, running_sshd

EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("node")
    pki = directory / "pki"
    rewrite = f"sed 's#/etc/modelfleet/pki#{pki}#g' | eval \"$SSH_ORIGINAL_COMMAND\""
    with running_sshd(directory / "sshd", force_command=rewrite) as server:
        yield server


def pki_dir(node: Sshd) -> Path:
    return node.directory.parent / "pki"


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def operators(root: Path) -> dict[str, bytes]:
    """The operator's files (CA, inventory, known_hosts, catalog), not ctl's own state: the
    facts cache every gathering refreshes, dry runs included (docs/gathering.md)."""
    return {k: v for k, v in tree(root).items() if not k.startswith("state/")}


class Lab:
    def __init__(self, tmp: Path, node: Sshd) -> None:
        self.tmp, self.node = tmp, node
        self.ca = init_ca(tmp / "ca", "lab", datetime.now(UTC))
        self.inventory = tmp / "inventory"
        self.inventory.mkdir()
        self.hosts = self.inventory / "hosts.yml"
        self.original = textwrap.dedent(
            f"""\
            # the lab
            all:
              hosts:
                other:
                  ansible_host: 127.0.0.1
                  ansible_port: 1
                local:   # the node to offboard
                  ansible_host: 127.0.0.1
                  ansible_port: {node.port}
                  ansible_user: root
                  ansible_ssh_private_key_file: {node.client_key}
                  labels:
                    role: test
                last:
                  ansible_host: 127.0.0.2
            """
        )
        self.hosts.write_text(self.original)
        self.known_hosts = self.inventory / ".known_hosts"
        self.other_line = "[127.0.0.1]:1 " + " ".join(node.host_key_line.split()[:2]) + "\n"
        self.known_hosts.write_text(self.other_line + node.known_hosts_line() + "# end\n")
        self.catalog = tmp / "nothing.yaml"
        self.catalog.write_text(NOTHING)
        self.state = tmp / "state"

    def offboard(self, *extra: str, node: str = "local") -> subprocess.CompletedProcess[str]:
        return ctl(
            "--timeout", "5", "offboard-node", node, "-i", str(self.inventory),
            "--ca-dir", str(self.ca.directory), "--catalog", str(self.catalog), *extra,
            env={"XDG_STATE_HOME": str(self.state)},
        )  # fmt: skip

    def certify(
        self, name: str = "local", address: str = "127.0.0.1", *, install: bool = True
    ) -> x509.Certificate:
        """A certificate the CA issues to the inventory name `name`, installed in the
        node's PKI directory as onboarding does (`install`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "local")]))
            .sign(key, hashes.SHA256())
        )
        cert = self.ca.issue(csr, NodeNames.of(name, [address]), datetime.now(UTC), name)
        if not install:
            return cert
        pki = pki_dir(self.node)
        pki.mkdir(exist_ok=True)
        (pki / "node.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (pki / "node.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert


@pytest.fixture
def lab(tmp_path: Path, node: Sshd) -> Iterator[Lab]:
    yield Lab(tmp_path, node)
    shutil.rmtree(pki_dir(node), ignore_errors=True)


def test_offboarding_removes_exactly_the_nodes_lines_revokes_and_forgets(lab: Lab) -> None:
    cert = lab.certify()
    result = lab.offboard()
    assert result.returncode == 0, result.stdout + result.stderr
    # The inventory: exactly the node's seven lines gone, every other byte kept.
    lines = lab.original.splitlines(keepends=True)
    assert lab.hosts.read_text() == "".join(lines[:6] + lines[13:])
    # known_hosts: exactly its line gone.
    assert lab.known_hosts.read_text() == lab.other_line + "# end\n"
    # The node's key is gone; its certificate (public) stays.
    assert not (pki_dir(lab.node) / "node.key").exists()
    assert (pki_dir(lab.node) / "node.pem").exists()
    assert "local: its key /etc/modelfleet/pki/node.key removed" in result.stdout
    # Revoked: the list and a CRL openssl verifies with the CA's certificate.
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(cert)})
    crl = lab.ca.directory / "crl.pem"
    checked = subprocess.run(
        ["openssl", "crl", "-in", str(crl), "-CAfile", str(lab.ca.cert_path), "-noout",
         "-verify", "-text"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "verify OK" in checked.stdout + checked.stderr
    assert f"{cert.serial_number:X}" in checked.stdout.replace(":", "").upper()
    # A rerun: already done, exit 0, nothing changed.
    files = tree(lab.tmp)
    again = lab.offboard()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "local is already offboarded" in again.stdout
    assert f"serial {serial_hex(cert)} already revoked" in again.stdout
    assert tree(lab.tmp) == files


def test_a_dry_run_changes_nothing_anywhere_and_prints_the_plan(lab: Lab) -> None:
    cert = lab.certify()
    before, node_before = operators(lab.tmp), tree(pki_dir(lab.node))
    result = lab.offboard("--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"certificate: revoke serial {serial_hex(cert)}" in result.stdout
    assert f"inventory: remove {lab.hosts}:7-13" in result.stdout
    assert "known_hosts: forget [127.0.0.1]:" in result.stdout
    assert operators(lab.tmp) == before
    assert tree(pki_dir(lab.node)) == node_before


def test_a_rerun_after_the_inventory_step_revokes_what_is_left(lab: Lab) -> None:
    lab.hosts.write_text("all:\n  hosts:\n    other:\n")  # removed by hand, not revoked
    cert = lab.certify()
    result = lab.offboard()
    assert result.returncode == 0, result.stdout + result.stderr
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(cert)})
    assert "certificate revoked" in result.stdout


def test_an_unknown_node_is_bad_input(lab: Lab) -> None:
    lab.hosts.write_text("all:\n  hosts:\n    locale:\n")
    result = lab.offboard()
    assert result.returncode == 2
    assert "did you mean 'locale'" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_node_is_refused_unless_force(lab: Lab, tmp_path: Path) -> None:
    lab.hosts.write_text(
        "all:\n  hosts:\n    local:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
    )
    before = operators(lab.tmp)
    refused = lab.offboard()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused: local cannot be reached" in refused.stderr
    assert "its shards cannot be stopped" in refused.stderr
    assert operators(lab.tmp) == before
    forced = lab.offboard("--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "key: local cannot be reached: its key is left on it" in forced.stdout
    assert lab.hosts.read_text() == "all:\n  hosts:\n"


def snapshot_world(tmp: Path) -> tuple[str, ...]:
    """hgx-2 of the example fleet alone, running llama-3.1-8b-1: nowhere else to go."""
    world = World(tmp, None)
    init_ca(tmp / "ca", "lab", datetime.now(UTC))
    return (
        "offboard-node", "hgx-2", "--dry-run", *world.hgx2(), "--catalog",
        world.file("chat.yaml", CHAT), "--ca-dir", str(tmp / "ca"),
    )  # fmt: skip


def test_a_replica_nothing_else_can_take_is_refused_naming_it(tmp_path: Path) -> None:
    args = snapshot_world(tmp_path)
    refused = ctl(*args, env={"XDG_STATE_HOME": str(tmp_path / "s")})
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "hgx-2 runs llama-3.1-8b-1, which no other node can take" in refused.stderr
    forced = ctl(*args, "--force", env={"XDG_STATE_HOME": str(tmp_path / "s")})
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "LOST (--force): llama-3.1-8b-1" in forced.stdout


def test_facts_without_dry_run_is_bad_input(tmp_path: Path) -> None:
    args = [a for a in snapshot_world(tmp_path) if a != "--dry-run"]
    result = ctl(*args, env={"XDG_STATE_HOME": str(tmp_path / "s")})
    assert result.returncode == 2
    assert "--facts reads a snapshot" in result.stderr


def test_a_host_named_through_a_range_is_refused_with_exit_2(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    init_ca(tmp_path / "ca", "lab", datetime.now(UTC))
    before = tree(inventory)
    result = ctl(
        "offboard-node", "hgx-4", "--dry-run", "-i", str(inventory), "--ca-dir",
        str(tmp_path / "ca"), "--catalog", str(EXAMPLES / "catalog.yaml"), "--facts",
        str(EXAMPLES / "facts"), env={"XDG_STATE_HOME": str(tmp_path / "s")},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "named here through 'hgx-[3:5]'" in result.stderr
    assert tree(inventory) == before


def _normal(text: str, lab: Lab) -> set[str]:
    """Lines with what differs between a run and the docs' example made the same."""
    text = text.replace(str(lab.ca.directory), "CA").replace(str(lab.inventory), "inventory")
    text = re.sub(r"\[127\.0\.0\.1\]:\d+|127\.0\.1\.3", "ADDRESS", text)
    text = re.sub(r"\b[0-9a-f]{30,40}\b", "SERIAL", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "WHEN", text)
    text = text.replace("/home/ops/.config/modelfleet/ca", "CA")
    return {re.sub(r"\blocal\b", "node-3", line) for line in text.splitlines()}


def test_the_docs_offboarding_example_is_what_ctl_prints(lab: Lab) -> None:
    docs = (ROOT / "docs" / "onboarding.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Offboarding") :]
    block = section[
        section.index("```text\n") + 8 : section.index("\n```", section.index("```text"))
    ]
    shown = _normal(block, lab)
    commands = {line for line in shown if line.startswith("$ ") or line.startswith("...")}
    lab.certify()
    printed: set[str] = set()
    for extra in (("--dry-run",), (), ()):
        result = lab.offboard(*extra)
        assert result.returncode == 0, result.stdout + result.stderr
        printed |= _normal(result.stdout, lab)
    assert shown - commands <= printed, sorted(shown - commands - printed)
    assert commands == {
        "$ ctl offboard-node node-3 --dry-run",
        "$ ctl offboard-node node-3",
        "...the same plan, then:",
    }


def test_a_certificate_the_node_only_shows_is_never_revoked(lab: Lab) -> None:
    """Issue 25 item 3 (b): the node shows a certificate this CA issued to another host
    (`last`): offboarding `local` revokes only what the record says was issued to `local`,
    and says what the node showed."""
    own = lab.certify(install=False)
    someone_elses = lab.certify("last", "127.0.0.2")
    planned = lab.offboard("--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert f"certificate: revoke serial {serial_hex(own)}" in planned.stdout
    assert f"revoke serial {serial_hex(someone_elses)}" not in planned.stdout
    assert (
        f"certificate: local holds serial {serial_hex(someone_elses)}, which the CA's record"
        " does not list as issued to local: not revoked"
    ) in planned.stdout
    result = lab.offboard()
    assert result.returncode == 0, result.stdout + result.stderr
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(own)})


def test_a_node_with_nothing_recorded_has_nothing_revoked_whatever_it_shows(lab: Lab) -> None:
    """The record is the only proof: a node whose certificate the CA has no record of keeps
    it unrevoked, and the plan says so."""
    cert = lab.certify()
    (lab.ca.directory / ISSUED_FILE).unlink()
    planned = lab.offboard("--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert (
        "certificate: the CA's record (issued.json) has none issued to local: nothing to revoke"
    ) in planned.stdout
    assert f"local holds serial {serial_hex(cert)}" in planned.stdout
    assert "revoke serial" not in planned.stdout


def test_hosts_differing_in_case_alone_each_revoke_only_their_own(lab: Lab) -> None:
    """Issue 25 item 3 (a): `Node-A` and `node-a`: offboarding Node-A plans to revoke Node-A's
    serial only (both certificates name DNS:node-a: the record's identity tells them apart)."""
    lab.hosts.write_text(
        lab.original.replace("local:   # the node to offboard", "Node-A:").replace(
            "last:\n      ansible_host: 127.0.0.2", "node-a:\n      ansible_host: 127.0.0.2"
        )
    )
    upper = lab.certify("Node-A")
    lower = lab.certify("node-a", "127.0.0.2", install=False)
    planned = lab.offboard("--dry-run", node="Node-A")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert f"certificate: revoke serial {serial_hex(upper)}" in planned.stdout
    assert serial_hex(lower) not in planned.stdout
    result = lab.offboard(node="Node-A")
    assert result.returncode == 0, result.stdout + result.stderr
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(upper)})


def test_a_host_named_by_its_ip_address_is_revoked_under_that_name(lab: Lab) -> None:
    """Issue 25 item 3 (c): a host named `127.0.0.1` whose ansible_host is a DNS name
    (`localhost`): its certificate's first DNS name is `localhost`, yet the record keeps
    the inventory name, and offboarding revokes it (the node shows nothing)."""
    port = lab.node.port
    lab.hosts.write_text(
        "all:\n  hosts:\n    127.0.0.1:\n      ansible_host: localhost\n"
        f"      ansible_port: {port}\n      ansible_user: root\n"
        f"      ansible_ssh_private_key_file: {lab.node.client_key}\n"
    )
    key = " ".join(lab.node.host_key_line.split()[:2])
    lab.known_hosts.write_text(f"[localhost]:{port} {key}\n")
    cert = lab.certify("127.0.0.1", "localhost", install=False)
    assert "DNS:localhost" in str(NodeNames.of("127.0.0.1", ["localhost"]))
    result = lab.offboard(node="127.0.0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(cert)})
    assert lab.hosts.read_text() == "all:\n  hosts:\n"


def test_a_legacy_record_that_may_be_the_nodes_is_said_and_not_revoked(lab: Lab) -> None:
    """An issued.json entry written before the identity was kept (no names) under the
    node's address (the first DNS name of a host named by IP, then): maybe the node's, not
    proved; the plan says so and offboarding revokes only what is proved."""
    own = lab.certify(install=False)
    issued = lab.ca.directory / ISSUED_FILE
    legacy = '{"at": "2027-01-01T00:00:00+00:00", "node": "127.0.0.1", "serial": "abc123"}'
    issued.write_text(issued.read_text().replace('"issued": [', f'"issued": [\n    {legacy},'))
    planned = lab.offboard("--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert (
        "certificate: serial abc123 was recorded as issued to '127.0.0.1' before ctl recorded"
        " whom it issued to; it may be local's but is not proved to be: not revoked"
    ) in planned.stdout
    result = lab.offboard()
    assert result.returncode == 0, result.stdout + result.stderr
    assert revoked_serials(lab.ca.directory) == frozenset({serial_hex(own)})
