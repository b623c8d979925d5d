"""Removing a host from the inventory deletes exactly its own lines (and its host_vars):
every other byte of every file is kept, YAML or INI, LF or CRLF, comments and all."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cli.errors import InputError
from cli.inventory.edit import plan_node_removal, remove_node
from cli.inventory.load import load_inventory

YAML = """\
# the lab
all:
  vars:
    ansible_user: root
  children:
    gpu:
      hosts:
        node-1:
          ansible_host: 10.0.0.1
        node-3:   # the one that goes
          ansible_host: 10.0.0.3
          labels:
            role: inference
          # still node-3's: indented under it
        node-4: {ansible_host: 10.0.0.4}

        # about node-5
        node-5:
    cpu:
      hosts:
        node-3:
        cpu-1:
          ansible_host: 10.0.0.9
"""


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def write(root: Path, name: str, data: str | bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_yaml_every_entry_of_the_host_goes_with_its_variables_and_the_comments_under_it(
    tmp_path: Path,
) -> None:
    hosts = write(tmp_path, "hosts.yml", YAML)
    hosts.chmod(0o640)
    removal = remove_node(tmp_path, "node-3")
    assert hosts.read_text() == (
        "# the lab\n"
        "all:\n"
        "  vars:\n"
        "    ansible_user: root\n"
        "  children:\n"
        "    gpu:\n"
        "      hosts:\n"
        "        node-1:\n"
        "          ansible_host: 10.0.0.1\n"
        "        node-4: {ansible_host: 10.0.0.4}\n"
        "\n"
        "        # about node-5\n"
        "        node-5:\n"
        "    cpu:\n"
        "      hosts:\n"
        "        cpu-1:\n"
        "          ansible_host: 10.0.0.9\n"
    )
    assert removal.lines == (f"{hosts}:10-14", f"{hosts}:21")
    assert stat.S_IMODE(hosts.stat().st_mode) == 0o640
    after = load_inventory(tmp_path)
    assert after.names() == ("node-1", "node-4", "node-5", "cpu-1")


def test_the_diff_is_exactly_the_hosts_lines_in_crlf_too(tmp_path: Path) -> None:
    original = YAML.replace("\n", "\r\n").encode()
    hosts = write(tmp_path, "hosts.yml", original)
    remove_node(tmp_path, "node-4")
    kept = original.replace(b"        node-4: {ansible_host: 10.0.0.4}\r\n", b"")
    assert hosts.read_bytes() == kept
    assert kept.count(b"\r\n") == original.count(b"\r\n") - 1


def test_the_only_host_of_a_group_leaves_an_empty_hosts_key(tmp_path: Path) -> None:
    hosts = write(
        tmp_path,
        "hosts.yml",
        "all:\n  hosts:\n    a:\n  children:\n    g:\n      hosts:\n        b:\n",
    )
    remove_node(tmp_path, "b")
    assert hosts.read_text() == "all:\n  hosts:\n    a:\n  children:\n    g:\n      hosts:\n"
    inventory = load_inventory(tmp_path)
    assert inventory.names() == ("a",)
    assert inventory.groups["g"] == ()


def test_its_own_host_vars_file_is_deleted_and_nothing_else(tmp_path: Path) -> None:
    write(tmp_path, "hosts.yml", YAML)
    own = write(tmp_path, "host_vars/node-3.yml", "labels: {rack: '7'}\n")
    other = write(tmp_path, "host_vars/node-1.yml", "labels: {rack: '8'}\n")
    group = write(tmp_path, "group_vars/gpu.yml", "labels: {gpu: 'yes'}\n")
    before = files(tmp_path)
    removal = remove_node(tmp_path, "node-3")
    after = files(tmp_path)
    assert not own.exists()
    assert f"{own} (deleted)" in removal.lines
    assert set(before) - set(after) == {"host_vars/node-3.yml"}
    assert [k for k in after if after[k] != before[k]] == ["hosts.yml"]
    assert other.read_text() == "labels: {rack: '8'}\n" and group.exists()


def test_a_host_vars_directory_goes_whole(tmp_path: Path) -> None:
    write(tmp_path, "hosts.yml", YAML)
    write(tmp_path, "host_vars/node-3/a.yml", "labels: {rack: '7'}\n")
    remove_node(tmp_path, "node-3")
    assert not (tmp_path / "host_vars" / "node-3").exists()
    assert (tmp_path / "host_vars").is_dir()


INI = (
    "; kubespray style\r\n"
    "[gpu]\r\n"
    "node-1 ansible_host=10.0.0.1\r\n"
    "node-3 ansible_host=10.0.0.3 labels=\"{'role': 'x'}\"   # goes\r\n"
    "hgx-[1:2]\r\n"
    "\r\n"
    "[cpu]\r\n"
    "node-3\r\n"
    "cpu-1\r\n"
    "[cpu:vars]\r\n"
    "cordoned=rack 7\r\n"
)


def test_ini_each_host_line_of_the_host_goes_and_every_other_byte_stays(tmp_path: Path) -> None:
    hosts = write(tmp_path, "hosts.ini", INI)
    removal = remove_node(tmp_path, "node-3")
    assert hosts.read_bytes() == (
        b"; kubespray style\r\n[gpu]\r\nnode-1 ansible_host=10.0.0.1\r\nhgx-[1:2]\r\n\r\n"
        b"[cpu]\r\ncpu-1\r\n[cpu:vars]\r\ncordoned=rack 7\r\n"
    )
    assert removal.lines == (f"{hosts}:4", f"{hosts}:8")
    assert load_inventory(tmp_path).names() == ("node-1", "hgx-1", "hgx-2", "cpu-1")


def test_a_host_named_through_a_range_is_refused_naming_the_line(tmp_path: Path) -> None:
    hosts = write(tmp_path, "hosts.ini", INI)
    with pytest.raises(InputError) as raised:
        remove_node(tmp_path, "hgx-2")
    assert f"{hosts}:5" in str(raised.value)
    assert "'hgx-[1:2]'" in str(raised.value)
    assert hosts.read_bytes() == INI.encode()


def test_a_yaml_range_is_refused_too_and_nothing_changes(tmp_path: Path) -> None:
    write(tmp_path, "hosts.yml", "all:\n  hosts:\n    hgx-[1:3]:\n      ansible_user: x\n")
    before = files(tmp_path)
    with pytest.raises(InputError, match="names other hosts too"):
        plan_node_removal(tmp_path, "hgx-2")
    with pytest.raises(InputError, match="names other hosts too"):
        remove_node(tmp_path, "hgx-2")
    assert files(tmp_path) == before


def test_an_anchor_other_hosts_use_is_refused(tmp_path: Path) -> None:
    text = "all:\n  hosts:\n    a: &common\n      ansible_user: x\n    b: *common\n"
    write(tmp_path, "hosts.yml", text)
    with pytest.raises(InputError, match="anchor &common"):
        remove_node(tmp_path, "a")
    assert (tmp_path / "hosts.yml").read_text() == text


def test_an_unknown_host_is_bad_input_with_the_nearest_name(tmp_path: Path) -> None:
    write(tmp_path, "hosts.yml", YAML)
    with pytest.raises(InputError, match="did you mean 'node-3'"):
        remove_node(tmp_path, "node-33")


def test_the_plan_writes_nothing(tmp_path: Path) -> None:
    write(tmp_path, "hosts.yml", YAML)
    write(tmp_path, "host_vars/node-3.yml", "labels: {rack: '7'}\n")
    before = files(tmp_path)
    removal = plan_node_removal(tmp_path, "node-3")
    assert len(removal.edits) == 2
    assert files(tmp_path) == before
