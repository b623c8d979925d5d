"""Adding an onboarded host to the inventory: only lines added, read back as planned."""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest

from cli.errors import InputError
from cli.inventory.forms import SourceText
from cli.inventory.load import inventory_from_texts, load_inventory
from cli.pki.addhost import (
    NewHost,
    commit_host,
    new_inventory_texts,
    plan_new_host,
    read_inventory_texts,
)
from cli.pki.node import parse_look

TRICKY = Path(__file__).resolve().parents[2] / "integration" / "inventories" / "tricky"

HOSTS = """\
# The lab fleet. Comments, blank lines and odd spacing stay.
all:
  vars:
    ansible_user: ops   # everyone logs in as ops

  hosts:
    login-1:    {ansible_host: 10.0.0.1}
  children:
    gpu:   # the GPU boxes
      hosts:
        hgx-1:
          ansible_host: 10.0.1.1
          cordoned: "PSU fan failing"
        hgx-2:
      vars:
        ansible_port: 2200
    cpu: {}
"""


def added_lines(before: str, after: str) -> list[str]:
    """The lines `after` adds to `before`; fails if it removes or changes any."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [line for line in diff if line.startswith("- ")], "\n".join(diff)
    return [line[2:] for line in diff if line.startswith("+ ")]


def inventory_dir(tmp_path: Path, text: str = HOSTS) -> Path:
    directory = tmp_path / "inventory"
    directory.mkdir()
    (directory / "hosts.yml").write_text(text)
    return directory


def plan(directory: Path, new: NewHost) -> tuple[str, str]:
    made = plan_new_host(read_inventory_texts(directory, new.name), new)
    assert len(made.edits) == 1
    edit = made.edits[0]
    assert edit.after is not None
    return edit.before or "", edit.after


def test_a_host_goes_under_its_group_after_the_last_host_with_only_lines_added(
    tmp_path: Path,
) -> None:
    directory = inventory_dir(tmp_path)
    new = NewHost("hgx-3", "10.0.1.3", labels={"role": "inference", "gpus": "8"}, group="gpu")
    before, after = plan(directory, new)
    assert added_lines(before, after) == [
        "        hgx-3:",
        "          ansible_host: 10.0.1.3",
        "          labels:",
        "            role: inference",
        '            gpus: "8"',
    ]
    assert after.index("hgx-3:") > after.index("hgx-2:")
    assert after.index("hgx-3:") < after.index("      vars:")


def test_ports_and_users_are_written_only_where_the_inventory_would_say_otherwise(
    tmp_path: Path,
) -> None:
    directory = inventory_dir(tmp_path)
    # The group gives port 2200 and all give user ops: a node asked on 22 as ops needs the
    # port written, not the user.
    _, after = plan(directory, NewHost("hgx-3", "10.0.1.3", port=22, user="ops", group="gpu"))
    host = inventory_from_texts("x", [SourceText("hosts.yml", after)]).host("hgx-3")
    assert (host.address, host.port, host.user) == ("10.0.1.3", 22, "ops")
    assert added_lines(HOSTS, after) == [
        "        hgx-3:",
        "          ansible_host: 10.0.1.3",
        "          ansible_port: 22",
        "          ansible_user: ops",  # asked for, so written, even though all say so
    ]
    # Nothing asked: the inventory's port and user stand.
    _, after = plan(directory, NewHost("hgx-3", "10.0.1.3", group="gpu"))
    host = inventory_from_texts("x", [SourceText("hosts.yml", after)]).host("hgx-3")
    assert (host.port, host.user) == (2200, "ops")
    assert added_lines(HOSTS, after) == ["        hgx-3:", "          ansible_host: 10.0.1.3"]


def test_without_a_group_the_host_goes_under_all_and_root_is_written_when_nobody_says(
    tmp_path: Path,
) -> None:
    text = "# minimal\nall:\n  hosts:\n    a:\n"
    directory = inventory_dir(tmp_path, text)
    _, after = plan(directory, NewHost("b", "192.0.2.7", port=2222, key_file="/keys/id"))
    assert added_lines(text, after) == [
        "    b:",
        "      ansible_host: 192.0.2.7",
        "      ansible_port: 2222",
        "      ansible_user: root",
        "      ansible_ssh_private_key_file: /keys/id",
    ]


def test_a_new_group_goes_under_all_children(tmp_path: Path) -> None:
    directory = inventory_dir(tmp_path)
    _, after = plan(directory, NewHost("tpu-1", "10.0.9.1", group="tpu"))
    host = inventory_from_texts("x", [SourceText("hosts.yml", after)]).host("tpu-1")
    assert host.groups == ("all", "tpu")
    assert added_lines(HOSTS, after) == [
        "    tpu:",
        "      hosts:",
        "        tpu-1:",
        "          ansible_host: 10.0.9.1",
    ]


def test_an_inventory_that_does_not_exist_is_made_with_a_header(tmp_path: Path) -> None:
    texts = new_inventory_texts(tmp_path / "inventory")
    made = plan_new_host(texts, NewHost("n1", "10.0.0.5", labels={"on": "yes"}))
    inventory = commit_host(made, tmp_path / "inventory", None)
    text = (tmp_path / "inventory" / "hosts.yml").read_text()
    assert text.startswith("# Written by ctl")
    assert inventory.host("n1").vars.labels == {"on": "yes"}
    assert '      "on": "yes"' in text  # YAML 1.1 would read a plain on as true


def test_a_json_source_gets_json(tmp_path: Path) -> None:
    directory = tmp_path / "inventory"
    directory.mkdir()
    (directory / "hosts.json").write_text(
        '{"all": {"hosts": {"a": {"ansible_host": "10.0.0.1"}}}}\n'
    )
    made = plan_new_host(read_inventory_texts(directory, "b"), NewHost("b", "10.0.0.2"))
    after = made.edits[0].after
    assert after is not None
    assert json.loads(after)["all"]["hosts"]["b"] == {
        "ansible_host": "10.0.0.2",
        "ansible_user": "root",
    }


def test_a_host_vars_file_that_would_outrank_the_address_is_refused(tmp_path: Path) -> None:
    directory = inventory_dir(tmp_path)
    (directory / "host_vars").mkdir()
    (directory / "host_vars" / "hgx-3.yml").write_text("ansible_host: 10.9.9.9\n")
    with pytest.raises(InputError, match=r"would have ansible_host 10\.9\.9\.9 from .*hgx-3\.yml"):
        plan_new_host(read_inventory_texts(directory, "hgx-3"), NewHost("hgx-3", "10.0.1.3"))


def test_commit_writes_reads_back_and_keeps_every_other_host(tmp_path: Path) -> None:
    directory = tmp_path / "tricky"
    shutil.copytree(TRICKY, directory)
    before = load_inventory(directory)
    made = plan_new_host(
        read_inventory_texts(directory, "node-q"),
        NewHost("node-q", "10.0.0.9", labels={"role": "x"}, group="gpu"),
    )
    after = commit_host(made, directory, before)
    host = after.host("node-q")
    assert "gpu" in host.groups and host.address == "10.0.0.9"
    assert host.vars.labels["role"] == "x"
    for old in before.hosts:
        assert after.host(old.name).model_dump(exclude={"origins"}) == old.model_dump(
            exclude={"origins"}
        )


def test_commit_refuses_a_file_changed_since_the_plan(tmp_path: Path) -> None:
    directory = inventory_dir(tmp_path)
    made = plan_new_host(read_inventory_texts(directory, "z"), NewHost("z", "10.0.0.26"))
    (directory / "hosts.yml").write_text(HOSTS + "# an edit meanwhile\n")
    with pytest.raises(InputError, match="changed while ctl was editing"):
        commit_host(made, directory, load_inventory(directory))
    assert (directory / "hosts.yml").read_text() == HOSTS + "# an edit meanwhile\n"


def test_what_the_node_says_about_its_pki_files_is_read() -> None:
    state = parse_look(
        "openssl yes\nuid 0\nmode node.key 600 0\nmode node.pem 644 0\n"
        "begin node.pem\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\n"
        "end node.pem\n"
        "begin node.pub\n-----BEGIN PUBLIC KEY-----\nBBBB\n-----END PUBLIC KEY-----\nend node.pub\n"
    )
    assert state.openssl and state.uid == 0
    assert state.modes == {"node.key": ("600", 0), "node.pem": ("644", 0)}
    assert state.node_pem == b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert state.ca_pem is None
    assert state.node_pub is not None and state.node_pub.startswith(b"-----BEGIN PUBLIC KEY")
    assert parse_look("openssl no\nuid 1000\n").openssl is False
