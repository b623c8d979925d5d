"""Inventories whose connection variables are Jinja templates, read as Ansible reads them.

`ansible-inventory --list` shows a template as written; Ansible renders it as it connects,
with the host's variables. So the comparison here is with `ansible-inventory --list`, each
connection variable replaced by what `ansible` itself renders it to for the host (the
debug module: it runs on the control host and reaches no node). khuedoan/homelab's
inventory (tests/integration/inventories/templated/SOURCES.md) sets `ansible_user:
"{{ prepare_username }}"` for every host, beside a `passwordstore` lookup ctl must not run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli.edges.templating import render_template
from cli.edges.tools import ansible_command
from cli.errors import InputError
from cli.inventory.load import load_inventory
from tests.ctl import ctl
from tests.integration.test_inventory_matches_ansible import (
    ansible_environment,
    ansible_list,
    compare,
)

HERE = Path(__file__).resolve().parent
HOMELAB = HERE / "inventories" / "templated" / "homelab"
CONNECTION_VARIABLES = (
    "ansible_host",
    "ansible_ssh_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_user",
    "ansible_ssh_user",
    "ansible_private_key_file",
    "ansible_ssh_private_key_file",
)


def ansible_rendered(inventory: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """host → each connection variable it has, as `ansible` renders it for that host."""
    env = ansible_environment(tmp_path) | {
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal",
    }
    each = ", ".join(f"'{key}': {key} | default(none)" for key in CONNECTION_VARIABLES)
    done = subprocess.run(
        [
            ansible_command("ansible"),
            "all",
            "-i",
            str(inventory),
            "-m",
            "ansible.builtin.debug",
            "-a",
            f"msg={{{{ {{{each}}} }}}}",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # minimal's lines: `HOST | SUCCESS => {` then the result's JSON, its `}` alone on a line
    results = re.findall(r"^(\S+) \| SUCCESS => (\{.*?^\})$", done.stdout, re.M | re.S)
    return {
        name: {key: value for key, value in json.loads(result)["msg"].items() if value is not None}
        for name, result in results
    }


def test_homelab_reads_as_ansible_renders_it(tmp_path: Path) -> None:
    listed = ansible_list(HOMELAB, tmp_path)
    rendered = ansible_rendered(HOMELAB, tmp_path)
    for name, hostvars in listed["_meta"]["hostvars"].items():
        assert hostvars["ansible_user"] == "{{ prepare_username }}"  # as written
        listed["_meta"]["hostvars"][name] = hostvars | rendered[name]

    ours = load_inventory(HOMELAB, render=render_template)

    compare(ours, listed)
    assert {host.user for host in ours.hosts} == {"agil"}
    assert len(ours.hosts) == 13


def test_without_templating_the_same_inventory_is_refused_at_the_template() -> None:
    with pytest.raises(InputError) as caught:
        load_inventory(HOMELAB)

    assert [str(problem) for problem in caught.value.problems] == [
        f"{HOMELAB}/group_vars/all/ssh.yml:2: ansible_user: ctl does not render Jinja"
        " templates: write the value itself"
    ]


def test_ctl_nodes_reads_the_templated_inventory(tmp_path: Path) -> None:
    snapshot = tmp_path / "facts"
    snapshot.mkdir()
    cpu = (HERE.parents[1] / "examples" / "facts" / "cpu-big.json").read_text()
    (snapshot / "grigri.json").write_text(cpu)

    shown = ctl("nodes", "--inventory", str(HOMELAB), "--facts", str(snapshot))

    assert re.search(r"^grigri +Ready", shown.stdout, re.M), shown.stderr
    assert "ansible_user" not in shown.stderr  # read, not refused


def test_cordon_and_uncordon_edit_the_templated_inventory(tmp_path: Path) -> None:
    copy = tmp_path / "homelab"
    shutil.copytree(HOMELAB, copy)

    cordoned = ctl("cordon", "grigri", "--reason", "disk", "--inventory", str(copy))
    uncordoned = ctl("uncordon", "grigri", "--inventory", str(copy))

    assert cordoned.returncode == 0, cordoned.stderr
    assert 'grigri cordoned: "disk"' in cordoned.stdout
    assert uncordoned.returncode == 0, uncordoned.stderr
    assert load_inventory(copy, render=render_template).host("grigri").vars.cordoned is None
