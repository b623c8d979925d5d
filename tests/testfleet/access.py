"""How ctl and ssh reach the nodes: the client key, each node's host key, known_hosts, and
the Ansible inventory (hosts.yml, group_vars/all.yml) in the state directory."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.testfleet.router import GROUP, router_group_vars
from tests.testfleet.specs import Dumper, node_spec_to_dict
from tests.testfleet.state import Fleet, node_dir, write_text


def _keygen(path: Path, comment: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + ".pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    path.chmod(0o600)


def ensure_key(path: Path, comment: str) -> None:
    if not (path.exists() and path.with_name(path.name + ".pub").exists()):
        _keygen(path, comment)


def host_key_path(state: Path, name: str) -> Path:
    return node_dir(state, name) / "ssh_host_ed25519_key"


def host_public_key(state: Path, name: str) -> str:
    """`ssh-ed25519 AAAA...` of a node (without the comment)."""
    text = host_key_path(state, name).with_name("ssh_host_ed25519_key.pub").read_text()
    return " ".join(text.split()[:2])


class _InventoryDumper(Dumper):
    pass


def write_access_files(fleet: Fleet, router: str | None = None) -> None:
    """known_hosts (in the state directory, and as .known_hosts in the inventory directory,
    ctl's default) and the inventory: hosts.yml and group_vars/all.yml; with a `router`,
    the group `routers` and group_vars/routers.yml (tests/testfleet/router.py)."""
    state = fleet.state_dir
    known = "".join(f"{node.address} {host_public_key(state, node.name)}\n" for node in fleet.nodes)
    write_text(fleet.known_hosts, known)
    write_text(fleet.inventory_known_hosts, known)
    hosts: dict[str, Any] = {}
    for node in fleet.nodes:
        host: dict[str, Any] = {
            "ansible_host": node.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(fleet.client_key),
            # The nodes share the host's network: a shard must listen on its node's own
            # address, not on every address, or two nodes' shards would take one port.
            "listen_address": node.address,
        }
        spec = node_spec_to_dict(node.spec)  # labels and fabrics as a spec file has them
        host |= {key: spec[key] for key in ("labels", "fabrics") if key in spec}
        hosts[node.name] = host
    children = {
        group: {"hosts": dict.fromkeys(members)}
        for group, members in (
            ("gpu", [node.name for node in fleet.nodes if node.spec.gpus is not None]),
            ("cpu", [node.name for node in fleet.nodes if node.spec.gpus is None]),
        )
        if members
    }
    if router is not None:
        children[GROUP] = {"hosts": {router: None}}
    header = (
        "# The local test fleet (scripts/testfleet): systemd-nspawn nodes on 127.0.1.N.\n"
        "# Written by `testfleet up`, rewritten each time: edit the specs, not this file.\n"
    )
    write_text(
        fleet.inventory,
        header
        + yaml.dump(
            {"all": {"hosts": hosts, "children": children}},
            Dumper=_InventoryDumper,
            sort_keys=False,
            width=100,
        ),
    )
    common_args = f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes"
    write_text(
        fleet.inventory_dir / "group_vars" / "all.yml",
        header
        + yaml.dump(
            {
                "ansible_ssh_common_args": common_args,
                "ansible_python_interpreter": "/usr/bin/python3",
                # The nodes reach no hub: the stand-ins are given the source and fetch
                # nothing. tests/integration/test_fleet_stage.py turns staging on, with a
                # fake hub on loopback.
                "modelfleet_stage_weights": False,
            },
            Dumper=_InventoryDumper,
            sort_keys=False,
            width=200,
        ),
    )
    routers_vars = fleet.inventory_dir / "group_vars" / f"{GROUP}.yml"
    settings = router_group_vars() if router is not None else {}
    if settings:
        write_text(
            routers_vars,
            header + yaml.dump(settings, Dumper=_InventoryDumper, sort_keys=False, width=200),
        )
    else:
        routers_vars.unlink(missing_ok=True)
