"""A test fleet node reached only as Ansible reaches it through a bastion: node-2 behind
node-1 (`ansible_ssh_common_args: -J root@node-1`), gathered and planned for through it by
`ctl`'s own SSH, with both host keys checked against the fleet's known_hosts. The jump host
takes the operator's default key (here the fleet's client key as ~/.ssh/id_ed25519 of a
HOME of the test's), as `ssh -J` logs in to it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.ctl import ctl
from tests.integration.conftest import LiveFleet

pytestmark = pytest.mark.fleet


def behind_bastion(fleet: LiveFleet, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the fleet's inventory with node-2 behind node-1, and ctl's environment."""
    inventory = tmp_path / "inventory"
    shutil.copytree(fleet.inventory_dir, inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    bastion = fleet.address(fleet.names[0])
    hosts["all"]["hosts"][fleet.names[1]]["ansible_ssh_common_args"] = f"-J root@{bastion}"
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(fleet.key, home / ".ssh" / "id_ed25519")
    return inventory, {"HOME": str(home), "SSH_AUTH_SOCK": ""}


def test_a_node_behind_a_bastion_is_gathered_and_planned_through_it(
    testfleet: LiveFleet, tmp_path: Path
) -> None:
    inventory, environment = behind_bastion(testfleet, tmp_path)

    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("models: {}\n")

    shown = ctl("nodes", "--inventory", str(inventory), "--json", env=environment)
    planned = ctl(
        "reconcile", "--dry-run", "--catalog", str(catalog), "--inventory", str(inventory),
        env=environment,
    )  # fmt: skip

    nodes = {node["name"]: node for node in json.loads(shown.stdout)["nodes"]}
    assert nodes[testfleet.names[1]]["status"] == "Ready", shown.stderr
    assert planned.returncode == 0, planned.stderr


def test_without_the_bastions_key_the_node_behind_it_is_not_reached(
    testfleet: LiveFleet, tmp_path: Path
) -> None:
    inventory, environment = behind_bastion(testfleet, tmp_path)
    bastion = testfleet.address(testfleet.names[0])
    known = inventory / ".known_hosts"
    known.write_text(
        "".join(
            line + "\n"
            for line in known.read_text().splitlines()
            if not line.startswith(f"{bastion} ")
        )
    )

    shown = ctl("nodes", "--inventory", str(inventory), "--json", env=environment)

    nodes = {node["name"]: node for node in json.loads(shown.stdout)["nodes"]}
    reason = nodes[testfleet.names[1]]["unreachable_reason"]
    assert reason.startswith(f"through jump host {bastion}: host key not in"), reason
