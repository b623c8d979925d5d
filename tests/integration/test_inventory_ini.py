"""INI inventories, and directories mixing INI and YAML, read as `ansible-inventory --list`.

The samples are the files kubespray, DeepOps and Ansible's own docs publish, copied byte
for byte (tests/integration/inventories/ini/SOURCES.md says from where); kubespray's and
DeepOps' have every host commented out, so each is also read with its example hosts
uncommented, as their instructions tell an operator to do. ini-mixed/ is ours: an INI
hosts file with every one of ctl's keys written the INI way, beside a YAML file and YAML
group_vars/host_vars.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli.edges.tools import ansible_command
from cli.errors import InputError
from cli.inventory.ini import IniError, ini_value
from cli.inventory.load import load_inventory
from tests.integration.test_inventory_matches_ansible import ansible_list, compare

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "inventories" / "ini"

INVENTORIES = [
    SAMPLES / "kubespray" / "inventory.ini",
    SAMPLES / "deepops",
    SAMPLES / "ansible-docs" / "environments",
    *sorted(
        path
        for path in (SAMPLES / "ansible-docs").glob("*.ini")
        if path.name != "children-undeclared.ini"
    ),
    HERE / "inventories" / "ini-mixed",
]

# The samples' example hosts uncommented: `# node1 ansible_host=...` (kubespray) and
# `#mgmt01     ansible_host=...`, `#[nfs-clients:children]` (DeepOps); prose stays a comment.
UNCOMMENT = {
    "kubespray": (SAMPLES / "kubespray" / "inventory.ini", re.compile(r"^# (?!#)", re.M)),
    "deepops": (SAMPLES / "deepops", re.compile(r"^#(?=[\w\[])", re.M)),
}


@pytest.mark.parametrize(
    "inventory", INVENTORIES, ids=[str(path.relative_to(HERE)) for path in INVENTORIES]
)
def test_an_ini_inventory_reads_as_ansible_inventory_reads_it(
    inventory: Path, tmp_path: Path
) -> None:
    compare(load_inventory(inventory), ansible_list(inventory, tmp_path))


@pytest.mark.parametrize("sample", sorted(UNCOMMENT))
def test_a_published_sample_with_its_hosts_uncommented_reads_as_ansible_reads_it(
    sample: str, tmp_path: Path
) -> None:
    source, commented = UNCOMMENT[sample]
    copy = tmp_path / "inventory" / source.name
    if source.is_dir():
        shutil.copytree(source, copy)
        hosts = copy / "inventory"
    else:
        copy.parent.mkdir()
        shutil.copy(source, copy)
        hosts = copy
    text = hosts.read_text()
    hosts.write_text(commented.sub("", text))
    ours = load_inventory(copy)
    compare(ours, ansible_list(copy, tmp_path))
    assert len(ours.hosts) == (7 if sample == "kubespray" else 6)  # the example hosts, all read
    if sample == "deepops":  # an [all:vars] value in shell and Python quotes, and a child group
        # uncommented after its parent's section
        assert ours.host("gpu01").user == "ubuntu"
        assert ours.groups["nfs-clients"] == ("gpu01", "gpu02")


def test_the_mixed_inventory_exercises_what_it_claims_to() -> None:
    """Guard the fixture: if it stopped being tricky, the comparison above proves less."""
    ours = load_inventory(HERE / "inventories" / "ini-mixed")
    assert ours.host("hgx-05").port == 2201  # host:port on the host line beats [gpu:vars]
    assert ours.host("hgx-05").vars.cordoned == "PSU fan failing"  # "'...'" quoted twice
    assert ours.host("hgx-05").vars.labels == {"rack": "b", "gpus": "8"}  # a Python dict
    assert ours.host("node-b").vars.cordoned is not None  # True, the Python literal
    assert ours.host("l40s-1").vars.fabrics[0].hcas == ("mlx5_0",)
    # a :vars value that is not a literal is the text, its `# comment` included
    assert ours.host("cpu1.example").vars.cordoned == (
        "rack 7 rewiring   # not a literal: all of it is the reason, this comment too"
    )
    assert ours.host("hgx-02").vars.cordoned == "IB cable loose"  # host_vars/ (YAML)
    assert "cpu2.example" in ours.groups["dc1"]  # a child declared after its parent's section
    assert ours.host("hgx-06").groups[-1] == "gpu"  # a YAML file adds to an INI group
    assert ours.host("hgx-01").vars.gpu_classes == {"NVIDIA H100 80GB HBM3": "H100"}
    assert ours.host("hgx-01").origin("labels") == (
        str(HERE / "inventories" / "ini-mixed" / "10-hosts"),
        17,
    )


def test_a_child_group_never_declared_is_refused_as_ansible_refuses_it(tmp_path: Path) -> None:
    # Ansible's docs show [usa:children] naming groups they never declare; ansible-inventory
    # fails on it (with unparsed sources treated as failures, as our comparison runs it).
    inventory = SAMPLES / "ansible-docs" / "children-undeclared.ini"
    env_run = subprocess.run(
        [ansible_command("ansible-inventory"), "-i", str(inventory), "--list"],
        env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert env_run.returncode != 0
    assert "includes undefined group 'northeast'" in env_run.stderr
    with pytest.raises(InputError) as caught:
        load_inventory(inventory)
    assert str(caught.value) == (
        f"{inventory}:21: section [usa:children] names group 'northeast', never declared"
    )


# What ini.py's _parse_value makes of a value; each case here is also run through
# ansible-core's own function below, so a case we read differently fails.
VALUES: list[tuple[str, Any]] = [
    ("22", 22),
    ("-1", -1),
    ("0x1F", 31),
    ("1_000", 1000),
    ("1.5", 1.5),
    ("True", True),
    ("true", "true"),
    ("yes", "yes"),
    ("None", None),
    ("'22'", "22"),
    ('"text with # hash"', "text with # hash"),
    ("8080 # all members", 8080),
    ("coding # the role", "coding # the role"),
    ("[1, 'a', (2, 3)]", [1, "a", [2, 3]]),
    ("(1, 2)", [1, 2]),
    ("{'role': 'coding', 'gpus': 8}", {"role": "coding", "gpus": 8}),
    ("{1}", [1]),
    ("...", "..."),
    ("1+2j", "(1+2j)"),
    ("b'bytes'", "bytes"),
    ("{{ templated }}", "{{ templated }}"),
    ("", ""),
    ("=", "="),
    ("9" * 5000, "9" * 5000),  # past Python's int digit limit: the text
    ("[" * 300 + "]" * 300, "[" * 300 + "]" * 300),  # nested past the parser's limit
]


@pytest.mark.parametrize(("written", "value"), VALUES, ids=[case[0][:30] for case in VALUES])
def test_a_value_is_typed_as_ansibles_ini_plugin_types_it(written: str, value: Any) -> None:
    from ansible._internal._datatag._tags import Origin  # type: ignore[import-untyped]
    from ansible.plugins.inventory.ini import InventoryModule  # type: ignore[import-untyped]

    plugin = InventoryModule()
    plugin._origin = Origin(path="/inventory.ini", line_num=1)
    theirs = plugin._parse_value(written)
    ours = ini_value(written, 1)
    assert (ours, kinds(ours)) == (value, kinds(value))
    assert (theirs, kinds(theirs)) == (value, kinds(value))


def kinds(value: Any) -> Any:
    """The native types in `value` (Ansible tags its values with subclasses of them)."""
    from ansible.module_utils._internal._datatag import AnsibleTagHelper  # type: ignore[import-untyped]

    if isinstance(value, list):
        return [kinds(item) for item in value]
    if isinstance(value, dict):
        return {key: kinds(item) for key, item in value.items()}
    return AnsibleTagHelper.base_type(value).__name__


def test_a_literal_python_cannot_build_is_an_error_as_in_ansible() -> None:
    from ansible.plugins.inventory.ini import InventoryModule

    with pytest.raises(TypeError):
        InventoryModule()._parse_value("{[1]: 2}")
    with pytest.raises(IniError, match="cannot be read"):
        ini_value("{[1]: 2}", 3)
