"""`ansible_connection: local` (kolla-ansible's `localhost ansible_connection=local`, a control
host that is also a node): the facts probe runs on this machine as a local process, as
Ansible runs that host's tasks, instead of an SSH session to it. A real gather: the probe
reads this machine."""

from __future__ import annotations

import json
from pathlib import Path

from tests.ctl import ctl


def test_a_local_host_is_gathered_here_without_ssh(tmp_path: Path) -> None:
    store = tmp_path / "models"
    store.mkdir()
    inventory = tmp_path / "multinode"
    # kolla-ansible's multinode layout: the control host named with a local connection.
    inventory.write_text(
        "[control]\n"
        f"localhost ansible_connection=local modelfleet_model_store={store}\n"
        "\n[compute:children]\ncontrol\n"
    )
    known_hosts = tmp_path / "known_hosts"  # empty: an SSH session would be refused
    known_hosts.write_text("")

    shown = ctl("--known-hosts", str(known_hosts), "nodes", "--inventory", str(inventory), "--json")

    assert shown.returncode == 0, shown.stderr
    assert "ansible_connection" not in shown.stderr  # followed, not warned of
    (node,) = json.loads(shown.stdout)["nodes"]
    assert (node["name"], node["status"], node["unreachable_reason"]) == (
        "localhost",
        "Ready",
        None,
    )
    total_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert 0 < node["memory_gib"] <= total_kib / 1024 / 1024  # this machine's (or its cgroup's)
    assert node["model_store"]["path"] == str(store)  # the host's variable reached the probe
    assert node["model_store"]["present"] is True
