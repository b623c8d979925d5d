"""Growing the fleet in two commands: `ctl provision-node`, then the `ctl onboard-node` it
prints, to a row in `ctl nodes`.

The VM comes from the fake Proxmox, whose guest agent reports a documentation address
(192.0.2.10) that is never contacted; the machine onboarded is a real test-fleet node
standing in for that VM, so the printed command is run with the node's address in place
of the fake VM's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.proxmox import DHCP_ADDRESS, Knobs, running_fake
from tests.integration.conftest import LiveFleet
from tests.integration.test_onboard import NODE, PKI, ensure_openssl, make_lab
from tests.integration.test_provision_cli import arguments, ctl, environment

pytestmark = pytest.mark.fleet


def test_a_new_vm_becomes_a_node_in_two_commands(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    if NODE not in fleet.names:
        pytest.skip(f"the test fleet has no {NODE}")
    ensure_openssl(fleet, NODE)
    fleet.ssh(NODE, f"rm -rf {PKI}")
    lab = make_lab(fleet, tmp_path)
    key_file = tmp_path / "ops.pub"
    key_file.write_text(fleet.key.with_suffix(".pub").read_text())
    knobs = Knobs(auth_failure_delay=0.2, clone_seconds=0.3, agent_delay=0.3)
    (tmp_path / "pve").mkdir()
    for pve in running_fake(tmp_path / "pve", knobs):
        provisioned = ctl(arguments(pve, key_file), environment(pve))
        assert provisioned.returncode == 0, provisioned.stderr
    printed = re.search(r"ctl onboard-node \S+ --host \S+", provisioned.stdout)
    assert printed, provisioned.stdout
    vm_address = DHCP_ADDRESS.split("/")[0]
    assert f"--host {vm_address}" in printed.group(0)
    # The real node stands in for the fake VM: its name and address in the same command.
    command = shlex.split(printed.group(0))[1:]
    command[1], command[3] = NODE, fleet.address(NODE)
    onboarded = lab.ctl(
        *command, "--identity", str(fleet.key), "--inventory", str(lab.inventory),
        "--expect-host-key", lab.fingerprint,
    )  # fmt: skip
    assert onboarded.returncode == 0, onboarded.stdout + onboarded.stderr
    nodes = subprocess.run(
        [sys.executable, "-m", "cli", "nodes", "--inventory", str(lab.inventory)],
        capture_output=True, text=True, env=lab.env(), check=False, timeout=120,
    )  # fmt: skip
    rows = [line for line in nodes.stdout.splitlines() if line.startswith(NODE + " ")]
    assert len(rows) == 1 and " Ready " in rows[0], nodes.stdout + nodes.stderr
    fleet.ssh(NODE, f"rm -rf {PKI}")
