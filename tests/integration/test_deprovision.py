"""`ctl deprovision-node` as an operator runs it, against the fake Proxmox over TLS: the VM
`ctl provision-node` made is stopped and destroyed (purged from HA, replication and backup
jobs); any other VM — one named so by hand, a vmid reused by someone else's VM in the
meantime, a protected one — is never stopped or destroyed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ctl import ROOT
from tests.fakes.proxmox import (
    Call,
    FakeProxmox,
    Knobs,
    ProxmoxApiError,
    Running,
    running_fake,
)
from tests.integration.test_exit_codes import NOTHING
from tests.integration.test_provision_cli import arguments, ctl, environment

MARKED = {
    "description": "modelfleet-run-3f9ac1d2e4b5\n",
    "tags": "modelfleet",
    "scsi0": "local-lvm:vm-131-disk-0,size=200G",
}


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[Running]:
    knobs = Knobs(auth_failure_delay=0.2, clone_seconds=0.3, agent_delay=0.3)
    yield from running_fake(tmp_path, knobs)


def deprovision(pve: Running, *extra: str, inventory: Path | None = None) -> list[str]:
    return [
        "deprovision-node", "gpu-7", "--proxmox-host", "127.0.0.1", "--proxmox-port",
        str(pve.port), "--ca-cert", str(pve.ca_file), "--step-timeout", "20",
        "-i", str(inventory or pve.tmp / "no-inventory"), *extra,
    ]  # fmt: skip


def changes(fake: FakeProxmox) -> list[Call]:
    return [c for c in fake.calls if c.method in ("POST", "PUT", "DELETE")]


def test_the_vm_provision_node_made_is_stopped_destroyed_and_purged(
    pve: Running, tmp_path: Path
) -> None:
    key = tmp_path / "ops.pub"
    key.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPC/9GoZa7DDp4N7+XqtKkpIlxUhP0baYbO0YN9ruu6c x\n"
    )
    made = ctl(arguments(pve, key), environment(pve))
    assert made.returncode == 0, made.stderr
    (vm,) = pve.fake.named("gpu-7")
    assert vm.running
    pve.fake.ha_resources.add(vm.vmid)
    pve.fake.replication_jobs.update({f"{vm.vmid}-0": vm.vmid, "500-0": 500})
    pve.fake.backup_jobs["daily"] = {vm.vmid, 500}
    pve.fake.add_vm(500, "web-3", {"description": "prod web"}, running=True)

    dry = ctl(deprovision(pve, "--dry-run"), environment(pve))
    assert dry.returncode == 0, dry.stderr
    assert f"gpu-7: vmid {vm.vmid} on node pve would be destroyed" in dry.stdout
    assert f"would call DELETE /nodes/pve/qemu/{vm.vmid} purge=1" in dry.stderr
    assert pve.fake.vm(vm.vmid) is not None and pve.fake.vm(vm.vmid).running  # type: ignore[union-attr]
    before = len(changes(pve.fake))

    result = ctl(deprovision(pve), environment(pve))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gpu-7: vmid {vm.vmid} on node pve destroyed\n"
    assert pve.fake.vm(vm.vmid) is None
    done = [(c.method, c.path, c.params) for c in changes(pve.fake)[before:]]
    assert done == [
        ("POST", f"/nodes/pve/qemu/{vm.vmid}/status/stop", {}),
        ("DELETE", f"/nodes/pve/qemu/{vm.vmid}",
         {"purge": "1", "destroy-unreferenced-disks": "1"}),
    ]  # fmt: skip
    assert pve.fake.ha_resources == set()
    assert pve.fake.replication_jobs == {"500-0": 500}
    assert pve.fake.backup_jobs == {"daily": {500}}
    assert pve.fake.vm(500) is not None
    # The token's secret is in nothing ctl printed nor in the server's log.
    secret = pve.knobs.token_secret
    for text in (result.stdout, result.stderr, dry.stderr, pve.access_log.read_text()):
        assert secret not in text

    again = ctl(deprovision(pve), environment(pve))
    assert again.returncode == 0, again.stderr
    assert again.stdout == "gpu-7: no VM of that name: already deprovisioned\n"
    # The docs' transcript is these two runs' output, but for the names of things.
    printed = _normal(result.stderr + result.stdout + again.stderr + again.stdout, vm.vmid)
    docs = (ROOT / "docs" / "provisioning.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Deprovisioning") :]
    block = section[section.index("```text\n") + 8 : section.index("\n```")]
    shown = {line for line in _normal(block, 131) if not line.startswith("$ ")}
    assert shown <= printed, sorted(shown - printed)


def _normal(text: str, vmid: int) -> set[str]:
    text = re.sub(r"https://\S+", "ENDPOINT", text)
    text = re.sub(r"UPID:\S+", "UPID", text)
    text = re.sub(r"modelfleet-run-[0-9a-f]{12}", "MARKER", text)
    return set(re.sub(rf"\b{vmid}\b", "VMID", text).splitlines())


def test_a_vm_named_so_by_hand_is_left_alone_with_exit_1(pve: Running) -> None:
    pve.fake.add_vm(
        131, "gpu-7", {"description": "made by hand", "tags": "modelfleet"}, running=True
    )
    result = ctl(deprovision(pve), environment(pve))
    assert result.returncode == 1, result.stderr
    assert "vmid 131 on node pve is not the VM ctl provisioned as gpu-7" in result.stderr
    assert "description 'made by hand'" in result.stderr
    assert changes(pve.fake) == []
    assert pve.fake.vm(131) is not None and pve.fake.vm(131).running  # type: ignore[union-attr]


def test_a_vmid_reused_by_someone_elses_vm_meanwhile_is_never_touched(pve: Running) -> None:
    pve.fake.add_vm(131, "gpu-7", MARKED, running=True)

    def reuse(fake: FakeProxmox, call: Call) -> None:
        # Right after ctl has read and proved gpu-7's config, another operator destroys
        # it and makes their own VM under the same vmid.
        if (
            call.path == "/nodes/pve/qemu/131/config"
            and fake.vms[131].config.get("name") == "gpu-7"
        ):
            fake.vms.pop(131)
            fake.add_vm(131, "web-3", {"description": "prod web", "tags": "web"}, running=True)

    pve.knobs.after_call = reuse
    result = ctl(deprovision(pve), environment(pve))
    assert result.returncode == 1, result.stderr
    assert "vmid 131 on node pve is not the VM ctl provisioned as gpu-7" in result.stderr
    assert "named web-3" in result.stderr and "left alone" in result.stderr
    # docs/provisioning.md shows this very line.
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line in (ROOT / "docs" / "provisioning.md").read_text(encoding="utf-8")
    assert changes(pve.fake) == []
    assert pve.fake.vm(131).config["name"] == "web-3"  # type: ignore[union-attr]


def test_a_protected_vm_is_never_stopped(pve: Running) -> None:
    pve.fake.add_vm(131, "gpu-7", {**MARKED, "protection": "1"}, running=True)
    result = ctl(deprovision(pve), environment(pve))
    assert result.returncode == 1, result.stderr
    assert "it is protected (protection: 1)" in result.stderr
    assert changes(pve.fake) == []


def test_the_fake_refuses_a_destroy_as_proxmox_does(pve: Running) -> None:
    """qemu-server's early checks, each a 500 with its text, nothing destroyed."""
    fake = pve.fake
    fake.add_vm(131, "a", running=True)
    fake.add_vm(132, "b", {"protection": "1"})
    fake.add_vm(133, "c")
    fake.ha_resources.add(133)
    fake.add_vm(134, "d")
    fake.replication_jobs["134-0"] = 134
    cases = {
        131: "VM 131 is running - destroy failed",
        132: "can't remove VM 132 - protection mode enabled",
        133: "unable to remove VM 133 - used in HA resources and purge parameter not set.",
        134: "There is a replication job '134-0' for guest '134' - Please remove that first.",
    }
    for vmid, text in cases.items():
        with pytest.raises(ProxmoxApiError) as raised:
            fake.handle("DELETE", f"/nodes/pve/qemu/{vmid}", {}, "automation@pve!ctl")
        assert (raised.value.status, raised.value.message) == (500, text + "\n")
        assert fake.vm(vmid) is not None
    with pytest.raises(ProxmoxApiError) as refused:
        fake.handle("DELETE", "/nodes/pve/qemu/133", {"skiplock": "1"}, "automation@pve!ctl")
    assert refused.value.errors == {"skiplock": "Only root may use this option."}


def test_a_node_still_in_the_inventory_that_cannot_be_offboarded_keeps_its_vm(
    pve: Running, tmp_path: Path
) -> None:
    pve.fake.add_vm(131, "gpu-7", MARKED, running=True)
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    gpu-7:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
    )
    (tmp_path / "nothing.yaml").write_text(NOTHING)
    ca = ctl(["ca", "init", "--ca-dir", str(tmp_path / "ca")], environment(None))
    assert ca.returncode == 0, ca.stderr
    args = deprovision(
        pve, "--ca-dir", str(tmp_path / "ca"), "--catalog", str(tmp_path / "nothing.yaml"),
        inventory=inventory,
    )  # fmt: skip
    env = {**environment(pve), "XDG_STATE_HOME": str(tmp_path / "state")}
    result = ctl(["--timeout", "3", *args], env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "refused: gpu-7 cannot be reached" in result.stderr
    assert "gpu-7: not offboarded, so its VM is left as it is" in result.stderr
    assert changes(pve.fake) == []
    assert "gpu-7:" in (inventory / "hosts.yml").read_text()


def test_no_token_is_bad_input_and_contacts_nothing(pve: Running) -> None:
    result = ctl(deprovision(pve), environment(pve, token=False))
    assert result.returncode == 2, result.stderr
    assert "PROXMOX_TOKEN" in result.stderr
    assert pve.fake.calls == []
    assert "Traceback" not in result.stderr
