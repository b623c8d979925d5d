"""A host whose inventory gives Ansible an SSH password: ctl's own SSH logs in with keys
only, so it does not try the host at all, and says why in one line naming the host's
variable and its file and line, never the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.facts.gather import Target, gather
from cli.inventory.forms import SourceText
from cli.inventory.load import inventory_from_texts
from cli.ops.fleet import node_targets
from tests.ctl import ctl

SECRET = "hunter2-do-not-print"


@pytest.mark.parametrize("key", ["ansible_password", "ansible_ssh_pass", "ansible_ssh_password"])
def test_a_host_with_an_ssh_password_is_refused_for_ctls_ssh_naming_where(key: str) -> None:
    inventory = inventory_from_texts(
        "inv",
        [
            SourceText(
                "hosts.yml", f"all:\n  hosts:\n    gpu01:\n      {key}: {SECRET}\n    gpu02:\n"
            )
        ],
    )

    refused = inventory.host("gpu01").ssh_refusal
    assert refused == (
        f"{key} (hosts.yml:4) is an SSH password, which ctl's own SSH never uses (keys only):"
        " not reached; give it a key (ansible_ssh_private_key_file, or one in ssh-agent)"
    )
    assert inventory.host("gpu02").ssh_refusal is None
    assert SECRET not in inventory.model_dump_json()


def test_a_vaulted_password_is_refused_the_same_and_a_local_host_needs_none() -> None:
    text = (
        "all:\n  hosts:\n    gpu01:\n      ansible_password: !vault |\n"
        "        $ANSIBLE_VAULT;1.1;AES256\n        3132\n"
        "    here:\n      ansible_connection: local\n      ansible_password: unused\n"
    )
    inventory = inventory_from_texts("inv", [SourceText("hosts.yml", text)])

    assert inventory.host("gpu01").ssh_refusal is not None
    assert "(hosts.yml:4)" in (inventory.host("gpu01").ssh_refusal or "")
    assert inventory.host("here").ssh_refusal is None  # Ansible's local connection: no SSH


def test_gather_never_connects_to_a_refused_host(tmp_path: Path) -> None:
    inventory = inventory_from_texts(
        "inv",
        [SourceText("hosts.yml", f"all:\n  hosts:\n    gpu01:\n      ansible_ssh_pass: {SECRET}\n"
                    "      ansible_host: 192.0.2.1\n")],
    )  # fmt: skip
    (target,) = node_targets(inventory)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")

    (attempt,) = gather([target], known_hosts, connect_timeout=30)

    assert isinstance(target, Target)
    assert attempt.output is None
    assert attempt.error == inventory.host("gpu01").ssh_refusal
    assert attempt.seconds < 1  # 192.0.2.1 (TEST-NET) would have taken the 30 s timeout


def test_ctl_nodes_says_why_in_one_line_and_never_the_password(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(f"[gpu]\ngpu01 ansible_host=192.0.2.1 ansible_ssh_pass={SECRET}\n")

    shown = ctl("--timeout", "30", "nodes", "--inventory", str(hosts))  # the 30 s never waited

    assert shown.returncode == 1
    said = " ".join((shown.stdout + shown.stderr).split())
    assert (
        f"gpu01: unreachable: ansible_ssh_pass ({hosts}:2) is an SSH password, which ctl's own"
        " SSH never uses (keys only)"
    ) in said
    assert SECRET not in shown.stdout + shown.stderr
