"""Reading what Proxmox answers: UPIDs, task statuses, the run's marker, sizes, addresses.

Pure: part of cli/provision/plan (its docstring: the Proxmox rules followed, and where
from).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from cli.provision.plan.options import _UNITS, VMID_MAX, VMID_MIN
from cli.provision.plan.params import TAG, property_string, split_tags

MARKER_PREFIX = "modelfleet-run-"  # + the run id: the description line a clone is made with

_PROXMOX_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT])?$")
_UPID = re.compile(
    r"^UPID:(?P<node>[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):(?P<pid>[0-9A-Fa-f]{8}):"
    r"(?P<pstart>[0-9A-Fa-f]{8,9}):(?P<starttime>[0-9A-Fa-f]{8}):(?P<type>[^:\s/]+):"
    r"(?P<id>[^:\s/]*):(?P<user>[^:\s/]+):$"
)
_WARNINGS = re.compile(r"^WARNINGS: \d+$")
_DISK_KEY = re.compile(r"^(ide|sata|scsi|virtio)\d+$")


@dataclass(frozen=True)
class Upid:
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str


def parse_upid(text: str) -> Upid | None:
    """`UPID:node:PID:PSTART:STARTTIME:type:id:user:` (pve-common PVE/UPID.pm `decode`)."""
    match = _UPID.fullmatch(text)
    if match is None:
        return None
    return Upid(
        node=match["node"],
        pid=int(match["pid"], 16),
        pstart=int(match["pstart"], 16),
        starttime=int(match["starttime"], 16),
        type=match["type"],
        id=match["id"],
        user=match["user"],
    )


def exit_ok(exitstatus: str) -> bool:
    """`OK` and `WARNINGS: N` are success; anything else is the error (PVE/UPID.pm)."""
    return exitstatus == "OK" or bool(_WARNINGS.fullmatch(exitstatus))


def run_marker(run_id: str) -> str:
    """The description line a run clones with, and looks for before destroying anything."""
    return f"{MARKER_PREFIX}{run_id}"


def marked(config: Mapping[str, Any], marker: str) -> bool:
    """Whether `config` is the VM made by the run whose marker this is: a line of its
    description is the marker itself, nothing more."""
    description = config.get("description")
    if not isinstance(description, str):
        return False
    return any(line.strip() == marker for line in description.splitlines())


_RUN_MARKER = re.compile(re.escape(MARKER_PREFIX) + r"[0-9a-f]{12}")
_UNMARKED = f"no {MARKER_PREFIX}… line in its description names it as made by ctl"


def provisioned_marker(config: Mapping[str, Any], name: str) -> str | None:
    """The run marker of the VM `ctl provision-node NAME` made, when `config` is it: named
    `name` and its description holds a run's marker line (`marked` is then true for that
    marker). None when it is not, or could not be proved to be."""
    if config.get("name") != name or not isinstance(config.get("description"), str):
        return None
    lines = [line.strip() for line in str(config["description"]).splitlines()]
    found = [line for line in lines if _RUN_MARKER.fullmatch(line)]
    return found[0] if len(found) == 1 and marked(config, found[0]) else None


def not_provisioned(config: Mapping[str, Any], name: str) -> str | None:
    """Why `config` is not a VM `ctl provision-node NAME` made (None: it is, its clone
    at least): the proof a rerun needs before it configures, grows or starts a VM found by
    name. A half-made VM of ours passes (its clone wrote the marker; the tag comes later)."""
    return _UNMARKED if provisioned_marker(config, name) is None else None


def not_ours(config: Mapping[str, Any], name: str, marker: str | None) -> str | None:
    """Why `config` is not (or no longer) the VM ctl provisioned as `name` with `marker`
    (None: it is, and may be stopped and destroyed): the one rule a destroy is made on,
    read right before each stop and each destroy, as provisioning's cleanup reads it."""
    if marker is None:
        marker = provisioned_marker(config, name)
        if marker is None:
            return _UNMARKED
    if config.get("name") != name:
        return f"it is no longer named {name}"
    if not marked(config, marker):
        return f"its description lacks {marker}"
    if TAG not in split_tags(str(config.get("tags") or "")):
        return f"it lacks the tag {TAG}"
    if str(config.get("template", "0")) == "1":
        return "it is a template"
    if str(config.get("protection", "0")) == "1":
        return "it is protected (protection: 1)"
    return None


def found_text(config: Mapping[str, Any]) -> str:
    """What a VM that is not ours holds, for the message that says it is left alone."""
    parts = [f"named {config['name']}" if config.get("name") else "without a name"]
    description = str(config.get("description") or "").strip()
    first = description.splitlines()[0].strip() if description else ""
    if not first:
        parts.append("no description")
    else:
        shown = first if len(first) <= 60 else first[:57] + "..."
        parts.append(f"description {shown!r}")
    if config.get("lock"):
        parts.append(f"locked ({config['lock']})")
    if config.get("tags"):
        parts.append(f"tags {config['tags']}")
    return ", ".join(parts)


def vmid_taken(text: str, vmid: int) -> bool:
    """Whether Proxmox's error says another VM has `vmid`: the id is taken, nothing was made.

    - `unable to create VM N: config file already exists`: the clone's own check of the
      node's config file, before forking and again in the worker (qemu-server
      PVE/API2/Qemu.pm `clone_vm`, `$load_and_check`);
    - `close (rename) atomic file '/etc/pve/nodes/NODE/qemu-server/N.conf' failed: File
      exists`: the worker writes its temporary config (`lock: clone`) with
      PVE::Tools::file_set_contents (pve-common PVE/File.pm `file_set_contents`: write a
      temporary file, rename it over the config), and pmxcfs refuses that rename with
      EEXIST when the vmid belongs to a VM on another node (pve-cluster
      src/pmxcfs/memdb.c `memdb_rename`, `vmlist_different_vm_exists`). The check before
      it only looks at the local node's file, so this is what a VM made on the target
      node (or any other) after /cluster/nextid gives; it dies outside the worker's
      eval, so it is the task's whole exit status, without "clone failed: ";
    - `VM N already exists` (pve-manager PVE/API2/Cluster.pm `nextid` with a vmid) and
      `VM N already exists on node 'X'` (pve-cluster PVE/Cluster.pm `check_vmid_unused`,
      for create_and_lock_config).
    """
    if f"unable to create VM {vmid}: config file already exists" in text:
        return True
    if re.search(rf"\bVM {vmid} already exists\b", text):
        return True
    return bool(
        re.search(
            rf"close \(rename\) atomic file '[^']*/qemu-server/{vmid}\.conf' failed: File exists",
            text,
        )
    )


def parse_nextid(value: object) -> int:
    """`/cluster/nextid` answers a string ("101"); check it is a vmid."""
    text = str(value).strip()
    if not text.isdigit() or not VMID_MIN <= int(text) <= VMID_MAX:
        raise ValueError(f"/cluster/nextid answered {value!r}, not a vmid")
    return int(text)


def parse_size(text: str) -> int | None:
    """Proxmox's sizes: bytes, or a number with K/M/G/T (PVE/JSONSchema.pm `parse_size`)."""
    match = _PROXMOX_SIZE.fullmatch(text.strip())
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS.get(match.group(2) or "", 1))


def human_size(size: int) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


def drive_options(drive: str) -> dict[str, str]:
    return property_string(drive, "file")


def drive_size(drive: str) -> int | None:
    size = drive_options(drive).get("size")
    return None if size is None else parse_size(size)


def _is_data_disk(drive: str) -> bool:
    options = drive_options(drive)
    volume = options.get("file", "")
    return options.get("media") != "cdrom" and "cloudinit" not in volume and volume != "none"


def boot_disk(config: Mapping[str, Any]) -> str | None:
    """The disk the VM boots from: first in `boot: order=…`, else `bootdisk`, else the first."""
    order = property_string(str(config.get("boot", "")), "legacy").get("order", "")
    candidates = [dev for dev in order.split(";") if dev]
    if config.get("bootdisk"):
        candidates.append(str(config["bootdisk"]))
    candidates += sorted(
        (key for key in config if _DISK_KEY.fullmatch(key)),
        key=lambda key: (("scsi", "virtio", "sata", "ide").index(re.sub(r"\d", "", key)), key),
    )
    for key in candidates:
        if _DISK_KEY.fullmatch(key) and key in config and _is_data_disk(str(config[key])):
            return key
    return None


def pick_address(interfaces: object) -> str | None:
    """The first global unicast IPv4 the guest agent reports, else the first such IPv6.

    Loopback, link-local, multicast and unspecified addresses are never picked; private
    ranges are (nodes live on them).
    """
    if isinstance(interfaces, Mapping):
        interfaces = interfaces.get("result")
    if not isinstance(interfaces, list):
        return None
    found: dict[int, str] = {}
    for interface in interfaces:
        if not isinstance(interface, Mapping) or interface.get("name") == "lo":
            continue
        addresses = interface.get("ip-addresses")
        if not isinstance(addresses, list):
            continue
        for entry in addresses:
            if not isinstance(entry, Mapping):
                continue
            try:
                address = ipaddress.ip_address(str(entry.get("ip-address", "")).split("%")[0])
            except ValueError:
                continue
            if (
                address.is_loopback
                or address.is_link_local
                or address.is_multicast
                or address.is_unspecified
                or (isinstance(address, ipaddress.IPv4Address) and address.is_reserved)
            ):
                continue
            found.setdefault(address.version, str(address))
    return found.get(4) or found.get(6)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret (and its URL-encoded form) replaced by `***`."""
    for secret in secrets:
        if secret:
            for form in {secret, quote(secret, safe=""), quote(quote(secret, safe=""), safe="")}:
                text = text.replace(form, "***")
    return text


def next_command(name: str, address: str) -> str:
    return f"ctl onboard-node {name} --host {address}"


def removal_commands(node: str, vmid: int) -> list[str]:
    """How an operator removes a VM ctl could not: on the node, or through the API."""
    return [
        f"remove it on node {node}: qm stop {vmid}; qm destroy {vmid} --purge",
        f"or through the API: pvesh create /nodes/{node}/qemu/{vmid}/status/stop; "
        f"pvesh delete /nodes/{node}/qemu/{vmid} --purge 1 --destroy-unreferenced-disks 1",
    ]
