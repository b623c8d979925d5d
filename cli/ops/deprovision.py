"""`ctl deprovision-node NAME`: destroy the VM `ctl provision-node NAME` made, and no other.

find the VM by name (as provisioning does, cli/ops/provision.py `ProxmoxSteps`) → prove it
is the one provisioned under that name → stop it if it runs → prove it again → destroy it
(`DELETE /nodes/N/qemu/VMID` with `purge=1` and `destroy-unreferenced-disks=1`, a
`qmdestroy` task waited for).

The proof is provisioning's rule, `marked` (cli/provision/plan/answers.py): the VM's
description holds the run marker its clone was made with. Deprovisioning learns the marker
from the VM found by name (`provisioned_marker`) and holds every later read to it
(`not_ours`: still named NAME, still that marker, the tag `modelfleet`, not a template, not
protected), read right before the stop and right before the destroy. A VM that fails it —
someone else's under that name, a vmid reused by another VM since, a protected one — is
never stopped or destroyed. No VM with the name: already deprovisioned.
"""

from __future__ import annotations

from dataclasses import dataclass

from cli.ops.provision import ProvisionError, ProxmoxSteps, explain
from cli.provision import plan
from cli.provision.api import ProxmoxError
from cli.provision.plan import VmRef


@dataclass(frozen=True)
class Deprovisioned:
    name: str
    vmid: int | None  # None: there was no VM of that name
    node: str | None
    destroyed: bool  # False: already gone, or a dry run


class Deprovisioner(ProxmoxSteps):
    def run(self, *, dry_run: bool = False) -> Deprovisioned:
        """Find, prove, stop and destroy (`dry_run`: find and prove only); ProvisionError
        (exit 1) when the VM is not the provisioned one or Proxmox refuses or is silent."""
        try:
            return self._run(dry_run)
        except KeyboardInterrupt:
            raise ProvisionError("interrupted") from None
        except ProxmoxError as problem:
            raise explain(problem) from None

    def _run(self, dry_run: bool) -> Deprovisioned:
        self.reporter.step(f"looking for a VM named {self.name} on {self.api.endpoint}")
        found = self._find(self._entries())
        if found is None:
            return Deprovisioned(self.name, None, None, destroyed=False)
        vm = VmRef(found.vmid, found.node, found.name)
        self.node = vm.node
        config = self._config_or_none(vm.node, vm.vmid) or {}
        marker = plan.provisioned_marker(config, self.name)
        self._prove(vm, config, marker)
        assert marker is not None
        self.reporter.step(
            f"vmid {vm.vmid} on node {vm.node} is the VM provisioned as {self.name} ({marker})"
        )
        if dry_run:
            calls = [plan.destroy_call(vm.node, vm.vmid)]
            if self._running(vm):
                calls.insert(0, plan.stop_call(vm.node, vm.vmid))
            for call in calls:
                self.reporter.step(f"would call {call.render()}")
            return Deprovisioned(self.name, vm.vmid, vm.node, destroyed=False)
        self._wait_unlocked(vm)
        if self._running(vm):
            self._prove(vm, self._config_or_none(vm.node, vm.vmid), marker)
            self.reporter.step(f"stopping vmid {vm.vmid}")
            self._task(self.api.call(plan.stop_call(vm.node, vm.vmid)), "the stop")
        self._prove(vm, self._config_or_none(vm.node, vm.vmid), marker)
        self.reporter.step(f"destroying vmid {vm.vmid} (purge, unreferenced disks too)")
        self._task(self.api.call(plan.destroy_call(vm.node, vm.vmid)), "the destroy")
        return Deprovisioned(self.name, vm.vmid, vm.node, destroyed=True)

    def _prove(self, vm: VmRef, config: dict[str, object] | None, marker: str | None) -> None:
        """Raise (exit 1, the VM left alone) unless `config` is still the provisioned VM."""
        if config is None:
            raise ProvisionError(
                f"vmid {vm.vmid} on node {vm.node} went away while ctl was removing it;"
                " nothing else was touched",
            )
        why = plan.not_ours(config, self.name, marker)
        if why is not None:
            raise ProvisionError(
                f"vmid {vm.vmid} on node {vm.node} is not the VM ctl provisioned as"
                f" {self.name}: {why} (found: {plan.found_text(config)}); left alone",
            )
