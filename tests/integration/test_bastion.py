"""Nodes behind a bastion, as Ansible reaches them: a ProxyJump or ProxyCommand in
`ansible_ssh_common_args` / `ansible_ssh_extra_args` (pi-cluster's VPS tunnel, the
`-o ProxyCommand="ssh -W %h:%p -q bastion"` of Ansible's network guides) is honoured as
OpenSSH honours it. Two real sshds on loopback: the bastion and the node. The node's key is
the one checked for the node, and the bastion's own key is checked too (ProxyJump); a jump
host is logged in to with the operator's keys (here ~/.ssh/id_ed25519 in a HOME of the
test's), never the node's -i key, as `ssh -J` does."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.edges import ssh
from cli.facts.gather import Target, gather
from cli.inventory.load import load_inventory
from cli.ops.fleet import node_targets
from tests.ctl import ctl
from tests.sshd import Sshd, missing_reason, running_sshd

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


@pytest.fixture
def bastion(tmp_path: Path) -> Iterator[Sshd]:
    with running_sshd(tmp_path / "bastion") as server:
        yield server


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Sshd]:
    with running_sshd(tmp_path / "node") as server:
        yield server


@pytest.fixture
def operator_home(tmp_path: Path, bastion: Sshd, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose default key is the one the bastion takes, and no ssh-agent."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(bastion.client_key, home / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


def inventory(tmp_path: Path, node: Sshd, args: str) -> Path:
    hosts = tmp_path / "inventory" / "hosts.yml"
    hosts.parent.mkdir()
    hosts.write_text(
        f"all:\n  hosts:\n    behind:\n      ansible_host: {node.address}\n"
        f"      ansible_port: {node.port}\n      ansible_user: root\n"
        f"      ansible_ssh_private_key_file: {node.client_key}\n"
        f"      ansible_ssh_common_args: '{args}'\n"
    )
    return hosts.parent


def known_hosts(tmp_path: Path, *servers: Sshd) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(server.known_hosts_line() for server in servers))
    return path


def gathered(tmp_path: Path, node: Sshd, args: str, *trusted: Sshd) -> tuple[str | None, str]:
    (target,) = node_targets(load_inventory(inventory(tmp_path, node, args)))
    (attempt,) = gather([target], known_hosts(tmp_path, *trusted), connect_timeout=10)
    return attempt.error, attempt.output or ""


def test_a_proxyjump_reaches_the_node_through_the_bastion(
    tmp_path: Path, bastion: Sshd, node: Sshd, operator_home: Path
) -> None:
    error, output = gathered(
        tmp_path, node, f"-o ProxyJump=root@{bastion.address}:{bastion.port}", bastion, node
    )

    assert error is None
    assert "@@modelfleet begin meminfo" in output


def test_the_bastions_own_key_is_checked(
    tmp_path: Path, bastion: Sshd, node: Sshd, operator_home: Path
) -> None:
    error, _ = gathered(tmp_path, node, f"-J root@{bastion.address}:{bastion.port}", node)

    assert error is not None
    assert error.startswith(
        f"through jump host [{bastion.address}]:{bastion.port}: host key not in"
    )


def test_the_key_checked_for_the_node_is_the_nodes(
    tmp_path: Path, bastion: Sshd, node: Sshd, operator_home: Path
) -> None:
    error, _ = gathered(tmp_path, node, f"-J root@{bastion.address}:{bastion.port}", bastion)

    assert error is not None
    assert error.startswith("host key not in")  # the node's, not through the jump host


def test_the_jump_host_is_not_logged_in_to_with_the_nodes_key(
    tmp_path: Path, bastion: Sshd, node: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))  # no keys of the operator's
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    # The node's key (ansible_ssh_private_key_file) would open the bastion too: not used.
    (bastion.directory / "authorized_keys").write_text(
        node.client_key.with_suffix(".pub").read_text()
    )

    error, _ = gathered(tmp_path, node, f"-J root@{bastion.address}:{bastion.port}", bastion, node)

    assert error == (
        f"through jump host [{bastion.address}]:{bastion.port}: no key to log in as the local"
        " user with (none given, none in ssh-agent or ~/.ssh)"
    )


def test_a_proxycommand_runs_as_openssh_runs_it(tmp_path: Path, bastion: Sshd, node: Sshd) -> None:
    openssh = tmp_path / "openssh"
    openssh.mkdir()
    bastion_hosts = known_hosts(openssh, bastion)  # OpenSSH's own check of the bastion
    proxy = (
        f'-o ProxyCommand="ssh -W %h:%p -q -i {bastion.client_key} -p {bastion.port}'
        f" -o UserKnownHostsFile={bastion_hosts} -o StrictHostKeyChecking=yes"
        f' root@{bastion.address}"'
    )

    error, output = gathered(tmp_path, node, proxy, node)

    assert error is None
    assert "@@modelfleet begin meminfo" in output


def test_ctl_nodes_gathers_a_node_behind_a_bastion(
    tmp_path: Path, bastion: Sshd, node: Sshd, operator_home: Path
) -> None:
    hosts = inventory(tmp_path, node, f"-o ProxyJump=root@{bastion.address}:{bastion.port}")
    trusted = known_hosts(tmp_path, bastion, node)

    shown = ctl(
        "--known-hosts", str(trusted), "nodes", "--inventory", str(hosts), "--json",
        env={"HOME": str(operator_home), "SSH_AUTH_SOCK": ""},
    )  # fmt: skip

    assert shown.returncode == 0, shown.stderr
    (listed,) = json.loads(shown.stdout)["nodes"]
    assert (listed["name"], listed["status"]) == ("behind", "Ready")


@pytest.mark.parametrize(
    ("args", "jump", "command"),
    [
        ("-o ProxyJump=admin@vps.example:2222", "admin@vps.example:2222", None),
        ("-J b1,b2 -o ProxyCommand=x", "b1,b2", None),  # the first one given wins
        ('-o "ProxyCommand ssh -W %h:%p bastion" -J b1', None, "ssh -W %h:%p bastion"),
        ("-oProxyJump=none -J b1", None, None),
        ("-C -o ControlMaster=auto -o ControlPersist=60s", None, None),
    ],
)
def test_the_proxy_is_read_as_ssh_reads_its_command_line(
    tmp_path: Path, args: str, jump: str | None, command: str | None
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(f"n1 ansible_ssh_extra_args='{args}'\n")

    host = load_inventory(hosts).host("n1")

    assert (host.proxy_jump, host.proxy_command) == (jump, command)


def test_a_proxyjump_ssh_cannot_read_is_the_nodes_reason(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("n1 ansible_ssh_common_args='-J root@host:99999'\n")

    (target,) = node_targets(load_inventory(hosts))

    assert isinstance(target, Target) and target.proxy is None
    assert (
        target.refused == "ProxyJump 'root@host:99999': 'root@host:99999' is not [user@]host[:port]"
    )
    assert ssh.parse_proxy_jump("a@b:2,[::1]:3") == (ssh.Hop("b", 2, "a"), ssh.Hop("::1", 3))
