"""The sample inventory an operator starts from (inventory/): what its comments say, read by
ctl as by Ansible, and `ctl nodes` on it, with the command its header gives."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cli.inventory.load import load_inventory
from tests.ctl import ROOT, ctl
from tests.integration.test_inventory_matches_ansible import ansible_list, compare

SAMPLE = ROOT / "inventory"
NODES = ("hgx-1", "hgx-2", "l40s-1", "cpu-small", "cpu-big")


def test_the_sample_is_the_fleet_its_comments_describe() -> None:
    inventory = load_inventory(SAMPLE)
    assert set(inventory.names()) == set(NODES)
    assert set(inventory.groups["ib_east"]) == {"hgx-1", "hgx-2"}
    assert set(inventory.groups["gpu"]) == {"hgx-1", "hgx-2", "l40s-1"}
    assert inventory.groups["routers"] == ("cpu-small",)
    labels = {host.name: host.vars.labels for host in inventory.hosts}
    assert labels == {
        "hgx-1": {"role": "inference"},
        "hgx-2": {"role": "inference"},
        "l40s-1": {"role": "inference"},
        "cpu-small": {"role": "general"},
        "cpu-big": {"role": "coding"},
    }
    for name in NODES:
        host = inventory.host(name)
        assert host.address == f"{name}.fleet.example"
        assert (host.user, host.port) == ("llm", 22)
        assert host.private_key_file == "~/.ssh/fleet_ed25519"
        assert host.vars.cordoned is None  # the cordon is shown commented out
        assert host.vars.listen_address is None
        fabrics = [(f.name, f.hcas, f.rate_gbps) for f in host.vars.fabrics]
        on_ib = name in ("hgx-1", "hgx-2")
        hcas = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
        assert fabrics == ([("ib-east", hcas, 400)] if on_ib else []), name


def test_ansible_reads_the_sample_as_ctl_does(tmp_path: Path) -> None:
    listed = ansible_list(SAMPLE, tmp_path)
    assert set(listed["_meta"]["hostvars"]) == set(NODES)
    compare(load_inventory(SAMPLE), listed)


def test_every_setting_the_sample_shows_commented_out_is_one_the_playbooks_read() -> None:
    """A misspelt name in the sample would be copied into fleets and silently ignored."""
    shown = {
        name
        for path in SAMPLE.rglob("*.yml")
        for name in re.findall(r"^# (\w+):", path.read_text(), re.MULTILINE)
    }
    assert shown >= {"modelfleet_router_port", "modelfleet_health_timeout", "modelfleet_become"}
    playbooks = "".join(path.read_text() for path in (ROOT / "playbooks").glob("*.yml"))
    # Ansible's own, and one only ctl reads (docs/inventory.md):
    for name in shown - {"ansible_port", "gpu_classes"}:
        assert re.search(rf"\b{name}\b", playbooks), name


def test_the_sample_shows_every_setting_the_playbooks_read_from_the_inventory() -> None:
    playbooks = "".join(path.read_text() for path in (ROOT / "playbooks").glob("*.yml"))
    read = set(re.findall(r"\b(modelfleet_(?:become|health_\w+|router_\w+))\b", playbooks))
    passed_by_ctl = {
        "modelfleet_router_config",
        "modelfleet_router_deployments",
        "modelfleet_router_tested_version",
        "modelfleet_router_tested_constraints",
        "modelfleet_router_tls",
        "modelfleet_router_crl",
        "modelfleet_router_crl_clear",
        "modelfleet_router_relays",
        "modelfleet_router_relay_port",
        "modelfleet_router_served",
        "modelfleet_router_keys",
    }
    assert len(read - passed_by_ctl) == 18  # become, 2 health, 15 router settings
    sample = "".join(path.read_text() for path in SAMPLE.rglob("*.yml"))
    for name in read - passed_by_ctl:
        assert re.search(rf"^# {name}: ", sample, re.MULTILINE), name


def test_nodes_on_the_sample_with_a_snapshot_of_its_nodes(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    for name in NODES:
        shutil.copy(ROOT / "examples" / "facts" / f"{name}.json", facts)
    result = ctl("nodes", "--inventory", "inventory", "--facts", str(facts))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "NAME       STATUS  CERT   GPUS       MEM  FABRICS      LABELS          SHARDS\n"
        "cpu-big    Ready   plain  -           63  -            role=coding     -\n"
        "cpu-small  Ready   plain  -          7.8  -            role=general    -\n"
        "hgx-1      Ready   70d    8/8 H100  2015  ib-east 4/4  role=inference  -\n"
        "hgx-2      Ready   70d    6/8 H100  2015  ib-east 4/4  role=inference  llama-3.1-8b-1/0\n"
        "l40s-1     Ready   24d    4/4 L40S   504  -            role=inference  -\n"
        "cpu-big: no NVIDIA device on the PCI bus\n"
        "cpu-small: no NVIDIA device on the PCI bus\n"
        "hgx-2: GPU 5: pid 4121 python3\n"
        "l40s-1: certificate: due for renewal, expires 2026-12-24 16:30 UTC\n"
    )


def test_the_command_the_sample_header_gives_runs() -> None:
    header = (SAMPLE / "hosts.yml").read_text()
    (command,) = re.findall(r"^#   (ctl .*)$", header, re.MULTILINE)
    assert command == "ctl nodes --inventory inventory --facts examples/facts"
    result = ctl(*command.split()[1:])
    # The snapshot's l40s-2 timed out: a node unreachable is exit code 1, as `ctl nodes
    # --help` says, and the table is still whole.
    assert result.returncode == 1, result.stderr
    assert "l40s-2: unreachable: timed out after 10 s" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "role=coding" in rows["cpu-big"] and "ib-east 4/4" in rows["hgx-2"]
    assert "hgx-3: what-if node: in the facts snapshot, not in the inventory" in result.stdout
