"""Each Proxmox API call `ctl provision-node` makes, as data (what --dry-run prints).

Pure: part of cli/provision/plan (its docstring: the Proxmox rules followed, and where
from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from cli.provision.plan.answers import run_marker
from cli.provision.plan.options import ProvisionOptions
from cli.provision.plan.params import desired_config, flag

DESTROY_PARAMS = (("purge", "1"), ("destroy-unreferenced-disks", "1"))
TASK_LOG_LIMIT = 500  # lines fetched from a failed task's log; the last ones are shown
Method = Literal["GET", "POST", "PUT", "DELETE"]

# Placeholders in --dry-run output, for what only Proxmox can say.
NEW_VMID = "<vmid>"
RUN_ID = "<run id>"
UPID = "<upid>"
BOOT_DISK = "<boot disk>"


@dataclass(frozen=True)
class ApiCall:
    method: Method
    path: str  # below /api2/json
    params: tuple[tuple[str, str], ...] = ()

    def param_dict(self) -> dict[str, str]:
        return dict(self.params)

    def render(self) -> str:
        text = f"{self.method:<6} {self.path}"
        if self.params:
            text += " " + " ".join(f"{key}={value}" for key, value in self.params)
        return text


@dataclass(frozen=True)
class VmRef:
    vmid: int
    node: str
    name: str | None = None


VmId = int | str  # a real vmid, or a placeholder in --dry-run output


def _vm_path(node: str, vmid: VmId) -> str:
    return f"/nodes/{node}/qemu/{vmid}"


def list_vms_call() -> ApiCall:
    return ApiCall("GET", "/cluster/resources", (("type", "vm"),))


def nextid_call() -> ApiCall:
    return ApiCall("GET", "/cluster/nextid")


def clone_call(
    options: ProvisionOptions, template_node: str, template_vmid: VmId, newid: VmId, marker: str
) -> ApiCall:
    """The full clone, named, with the run's marker as its description (see `marked`)."""
    params = [
        ("newid", str(newid)),
        ("name", options.name),
        ("full", flag(True)),
        ("description", marker),
    ]
    if options.storage is not None:
        params.append(("storage", options.storage))
    if template_node != options.node:
        params.append(("target", options.node))
    return ApiCall("POST", f"{_vm_path(template_node, template_vmid)}/clone", tuple(params))


def task_status_call(node: str, upid: str) -> ApiCall:
    return ApiCall("GET", f"/nodes/{node}/tasks/{upid}/status")


def task_log_call(node: str, upid: str) -> ApiCall:
    return ApiCall(
        "GET", f"/nodes/{node}/tasks/{upid}/log", (("start", "0"), ("limit", str(TASK_LOG_LIMIT)))
    )


def config_get_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("GET", f"{_vm_path(node, vmid)}/config")


def vm_status_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("GET", f"{_vm_path(node, vmid)}/status/current")


def config_set_call(node: str, vmid: VmId, params: Mapping[str, str]) -> ApiCall:
    """The synchronous `PUT …/config`: Proxmox's refusal comes back as the answer itself."""
    return ApiCall("PUT", f"{_vm_path(node, vmid)}/config", tuple(params.items()))


def resize_call(node: str, vmid: VmId, disk: str, size: str) -> ApiCall:
    return ApiCall("PUT", f"{_vm_path(node, vmid)}/resize", (("disk", disk), ("size", size)))


def start_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("POST", f"{_vm_path(node, vmid)}/status/start")


def stop_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("POST", f"{_vm_path(node, vmid)}/status/stop")


def destroy_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("DELETE", _vm_path(node, vmid), DESTROY_PARAMS)


def agent_interfaces_call(node: str, vmid: VmId) -> ApiCall:
    return ApiCall("GET", f"{_vm_path(node, vmid)}/agent/network-get-interfaces")


@dataclass(frozen=True)
class PlannedCall:
    call: ApiCall
    why: str


def dry_run_calls(options: ProvisionOptions) -> list[PlannedCall]:
    """The calls for a VM that does not exist yet, in order, as the executor makes them."""
    template_vmid: VmId = options.template_vmid or f"<vmid of {options.template}>"
    node = options.node
    return [
        PlannedCall(list_vms_call(), f"look for a VM named {options.name}, and the template"),
        PlannedCall(nextid_call(), "a free vmid (a new one if the clone finds it taken)"),
        PlannedCall(
            clone_call(options, node, template_vmid, NEW_VMID, run_marker(RUN_ID)),
            f"full clone; asked of the template's node, with target={node} when that is another;"
            " the description marks it as this run's",
        ),
        PlannedCall(task_status_call(node, UPID), "until stopped; OK or WARNINGS: N is success"),
        PlannedCall(config_get_call(node, NEW_VMID), "what the clone holds: the boot disk"),
        PlannedCall(config_set_call(node, NEW_VMID, desired_config(options)), "configure"),
        PlannedCall(
            resize_call(node, NEW_VMID, BOOT_DISK, options.disk.text),
            "grow the boot disk (skipped when it is as big already)",
        ),
        PlannedCall(task_status_call(node, UPID), "until the resize task stops"),
        PlannedCall(start_call(node, NEW_VMID), "boot it"),
        PlannedCall(task_status_call(node, UPID), "until the start task stops"),
        PlannedCall(
            agent_interfaces_call(node, NEW_VMID),
            "until the guest agent answers with an address",
        ),
    ]
