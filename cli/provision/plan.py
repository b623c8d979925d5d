"""What `ctl provision-node` asks of Proxmox, worked out from the options alone.

Pure: no I/O, no proxmoxer. The options are checked here (every problem at once, exit 2
and nothing sent), each API call is built here with its parameters encoded as Proxmox
wants them, and the answers the steps depend on are read here: UPIDs, task statuses,
drive sizes, the guest agent's interfaces. `--dry-run` prints the same calls the executor
makes (with placeholders for what only Proxmox can tell: the vmid, the UPID, the disk).

Proxmox rules followed here, with where they come from:

- booleans are `0`/`1` and nothing else (pve-common PVE/JSONSchema.pm, check_type);
- a vmid is 100..999999999 (PVE/JSONSchema.pm, standard option `pve-vmid`);
- a VM name is a DNS name (PVE/JSONSchema.pm, `pve_verify_dns_name`; clone_vm's `name`);
- `sshkeys` must itself be URL-encoded (qemu-server: format `urlencoded`, checked against
  `^[-%a-zA-Z0-9_.!~*'()]*$` by `pve_verify_urlencoded`, then `uri_unescape`d and each
  line checked by `PVE::Tools::validate_ssh_public_keys`): the value is percent-encoded
  once here and the HTTP client form-encodes it a second time;
- `ipconfig0` is `ip=dhcp` or `ip=CIDR[,gw=IP]`, the CIDR an IPv4 network with a prefix
  of 8 to 32 (qemu-server `$ipconfig_fmt`; pve-common `pve_verify_cidrv4`);
- a GPU is `hostpciN: mapping=NAME,pcie=1` with `machine: q35` (qemu-server
  PVE/QemuServer/PCI.pm `$hostpci_fmt`: `pcie` needs q35; the mapping id is a
  `pve-configid`); a raw `host=` PCI id is passed on as given, and Proxmox refuses it to
  anyone but root@pam — any API token included (PVE/API2/Qemu.pm, `check_hostpci_perm`);
- sizes are `\\+?\\d+(\\.\\d+)?[KMGT]?` in powers of 1024 (PVE/API2/Qemu.pm resize_vm;
  PVE/JSONSchema.pm `parse_size`/`format_size`);
- a task's `exitstatus` is `OK`, `WARNINGS: N` (both success) or the error text
  (pve-common PVE/UPID.pm `read_status`, `status_is_error`);
- the clone's only free-text parameter is `description` (qemu-server PVE/API2/Qemu.pm
  `clone_vm`: node, vmid, newid, name, description, pool, snapname, storage, format, full,
  target, bwlimit; no `tags`), written into the new config by the clone's own worker: so
  the run's marker, `modelfleet-run-<id>`, goes there. (It would be a valid tag too,
  pve-common PVE/JSONSchema.pm `pve-tag`: `[a-z0-9_][a-z0-9_\\-+.]*`, but a tag could only
  come with the later config update, and a VM whose clone has just ended has none.)
  Proxmox keeps the description as `#` comment lines and gives it back line for line,
  trailing blanks stripped (qemu-server PVE/QemuServer.pm `parse_vm_config`).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

from cli.errors import InputError, InputProblem

VMID_MIN = 100
VMID_MAX = 999_999_999
MAX_HOSTPCI = 16  # qemu-server PVE/QemuServer/PCI.pm $MAX_HOSTPCI_DEVICES
MIN_MEMORY_MIB = 16  # qemu-server: memory minimum
DEFAULT_USER = "llm"
TAG = "modelfleet"  # tags every VM ctl makes, so people can tell them apart in the GUI
DESTROY_PARAMS = (("purge", "1"), ("destroy-unreferenced-disks", "1"))
TASK_LOG_LIMIT = 500  # lines fetched from a failed task's log; the last ones are shown
MARKER_PREFIX = "modelfleet-run-"  # + the run id: the description line a clone is made with

Method = Literal["GET", "POST", "PUT", "DELETE"]

# Placeholders in --dry-run output, for what only Proxmox can say.
NEW_VMID = "<vmid>"
RUN_ID = "<run id>"
UPID = "<upid>"
BOOT_DISK = "<boot disk>"

_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
_DNS_NAME = re.compile(rf"^({_LABEL}\.)*{_LABEL}$")
_NODE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")
_STORAGE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)
_CONFIGID = re.compile(r"^[a-z][a-z0-9_-]+$", re.IGNORECASE)
_PCI_ID = re.compile(r"^([a-f0-9]{4}:)?[a-f0-9]{2}:[a-f0-9]{2}(\.[a-f0-9])?$")
_LINUX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_SIZE = re.compile(r"^(\+)?(\d+(?:\.\d+)?)([KMGT])$")
_PROXMOX_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT])?$")
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_UPID = re.compile(
    r"^UPID:(?P<node>[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):(?P<pid>[0-9A-Fa-f]{8}):"
    r"(?P<pstart>[0-9A-Fa-f]{8,9}):(?P<starttime>[0-9A-Fa-f]{8}):(?P<type>[^:\s/]+):"
    r"(?P<id>[^:\s/]*):(?P<user>[^:\s/]+):$"
)
_WARNINGS = re.compile(r"^WARNINGS: \d+$")
_DISK_KEY = re.compile(r"^(ide|sata|scsi|virtio)\d+$")
_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ssh-dss",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)


# --- the options --------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskSize:
    """`--disk`: `100G` (the boot disk's size) or `+20G` (that much more than the template's)."""

    text: str
    relative: bool
    bytes: int


@dataclass(frozen=True)
class Gpu:
    """One `--gpu`: a PCI resource mapping by name, or (refused to API tokens) a raw PCI id."""

    text: str
    mapping: str | None = None
    host: str | None = None

    def hostpci(self) -> str:
        if self.mapping is not None:
            return f"mapping={self.mapping},pcie=1"
        return f"host={self.host},pcie=1"


@dataclass(frozen=True)
class PublicKey:
    line: str  # `type base64 [comment]`, as read
    source: str  # file:line, for messages


@dataclass(frozen=True)
class ProvisionOptions:
    name: str
    node: str
    template: str  # a vmid or a VM name
    cores: int
    memory_mib: int
    disk: DiskSize
    storage: str | None
    ipconfig: str  # the ipconfig0 value
    ssh_keys: tuple[PublicKey, ...]
    user: str
    gpus: tuple[Gpu, ...]

    @property
    def template_vmid(self) -> int | None:
        return int(self.template) if self.template.isdigit() else None


def _problem(where: str, message: str, line: int | None = None) -> InputProblem:
    return InputProblem(where, line, (), message)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a VM's name and the node's inventory name, or None."""
    if not _DNS_NAME.match(name):
        return (
            f"'{name}' is not a DNS name (letters, digits and '-', not at either end; "
            "labels joined by '.'): Proxmox names VMs so, and cloud-init makes it the hostname"
        )
    if len(name) > 253 or any(len(label) > 63 for label in name.split(".")):
        return f"'{name}' is too long for a hostname (63 characters a label, 253 in all)"
    return None


def parse_disk(text: str) -> DiskSize:
    """`100G`, `1.5T`, `+20G`: a unit (K, M, G or T, powers of 1024) is required."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(
            f"'{text}' is not a size like 100G, 1.5T or +20G (K, M, G or T; a unit is needed)"
        )
    size = int(float(match.group(2)) * _UNITS[match.group(3)])
    if size <= 0:
        raise ValueError(f"'{text}' is not a size above zero")
    return DiskSize(text.strip(), match.group(1) == "+", size)


def ipconfig0(ip: str, gateway: str | None) -> str:
    """The `ipconfig0` value for `--ip dhcp` or `--ip CIDR [--gateway IP]`; ValueError if wrong."""
    if ip == "dhcp":
        if gateway is not None:
            raise ValueError("--gateway goes with a static --ip CIDR; DHCP hands out the gateway")
        return "ip=dhcp"
    if "/" not in ip:
        raise ValueError(f"'{ip}' is neither dhcp nor a CIDR like 10.0.0.5/24")
    try:
        interface = ipaddress.ip_interface(ip)
    except ValueError:
        raise ValueError(f"'{ip}' is neither dhcp nor a CIDR like 10.0.0.5/24") from None
    if not isinstance(interface, ipaddress.IPv4Interface):
        raise ValueError(f"'{ip}' is IPv6: ipconfig0's ip= takes IPv4 (dhcp or a CIDR)")
    network = interface.network
    if not 8 <= network.prefixlen <= 32:
        raise ValueError(f"'{ip}': Proxmox takes a prefix of 8 to 32")
    if network.prefixlen < 31 and interface.ip in (
        network.network_address,
        network.broadcast_address,
    ):
        raise ValueError(f"'{ip}' is the network's own address, not a host's")
    value = f"ip={interface.with_prefixlen}"
    if gateway is None:
        return value
    try:
        gw = ipaddress.ip_address(gateway)
    except ValueError:
        raise ValueError(f"--gateway '{gateway}' is not an IP address") from None
    if not isinstance(gw, ipaddress.IPv4Address):
        raise ValueError(f"--gateway '{gateway}' is IPv6; ipconfig0's gw= takes IPv4")
    if gw not in network:
        raise ValueError(f"--gateway {gateway} is outside {network}, the node's own network")
    if gw == interface.ip:
        raise ValueError(f"--gateway {gateway} is the node's own address")
    return f"{value},gw={gw}"


def parse_gpu(text: str) -> Gpu:
    """A resource mapping name (`h100-sxm`), or a raw PCI id (`0000:41:00.0`)."""
    value = text.strip()
    if _PCI_ID.match(value.lower()):
        return Gpu(value, host=value.lower())
    if _CONFIGID.match(value):
        return Gpu(value, mapping=value)
    raise ValueError(
        f"'{text}' is neither a PCI resource mapping name (a letter, then letters, digits, "
        "'-' or '_') nor a PCI id like 0000:41:00.0"
    )


def parse_public_keys(source: str, text: str) -> tuple[list[PublicKey], list[InputProblem]]:
    """OpenSSH public keys, one a line; blank lines and `#` comments are skipped.

    Each key's base64 body must name the same type as its first word, as `ssh-keygen -l`
    (which Proxmox runs on every line) requires.
    """
    keys: list[PublicKey] = []
    problems: list[InputProblem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-----BEGIN"):
            problems.append(
                _problem(source, "this is a private key: pass the public one (.pub)", number)
            )
            break
        reason = _public_key_problem(line)
        if reason is not None:
            problems.append(_problem(source, reason, number))
        else:
            keys.append(PublicKey(line, f"{source}:{number}"))
    if not keys and not problems:
        problems.append(_problem(source, "holds no public key"))
    return keys, problems


def _public_key_problem(line: str) -> str | None:
    fields = line.split()
    if len(fields) < 2:
        return "not an OpenSSH public key (expected 'ssh-ed25519 AAAA… comment')"
    kind, body = fields[0], fields[1]
    base_kind = kind.removesuffix("-cert-v01@openssh.com")
    if base_kind not in _KEY_TYPES:
        return f"'{kind}' is not an OpenSSH public key type"
    try:
        blob = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return "the key's body is not base64"
    if len(blob) < 4:
        return "the key's body is too short"
    length = int.from_bytes(blob[:4], "big")
    if blob[4 : 4 + length] != kind.encode():
        return f"the key's body does not hold a {kind} key"
    return None


def build_options(
    *,
    name: str,
    node: str,
    template: str,
    cores: int,
    memory_mib: int,
    disk: str,
    storage: str | None,
    ip: str,
    gateway: str | None,
    key_files: Sequence[tuple[str, str]],
    user: str,
    gpus: Sequence[str],
) -> ProvisionOptions:
    """Check every option; raise InputError with all the problems found (exit 2)."""
    problems: list[InputProblem] = []
    if (why := name_problem(name)) is not None:
        problems.append(_problem("NAME", why))
    if not _NODE.match(node):
        problems.append(_problem("--node", f"'{node}' is not a Proxmox node name"))
    if template.isdigit():
        if not VMID_MIN <= int(template) <= VMID_MAX:
            problems.append(
                _problem("--template", f"vmid {template} is outside {VMID_MIN}..{VMID_MAX}")
            )
    elif not _DNS_NAME.match(template):
        problems.append(_problem("--template", f"'{template}' is neither a vmid nor a VM name"))
    if cores < 1:
        problems.append(_problem("--cores", "needs at least 1"))
    if memory_mib < MIN_MEMORY_MIB:
        problems.append(_problem("--memory", f"{memory_mib} MiB is below Proxmox's minimum of 16"))
    disk_size = DiskSize("0", False, 0)
    try:
        disk_size = parse_disk(disk)
    except ValueError as error:
        problems.append(_problem("--disk", str(error)))
    if storage is not None and not _STORAGE.match(storage):
        problems.append(_problem("--storage", f"'{storage}' is not a Proxmox storage id"))
    config = ""
    try:
        config = ipconfig0(ip, gateway)
    except ValueError as error:
        problems.append(_problem("--ip", str(error)))
    keys: list[PublicKey] = []
    for source, text in key_files:
        found, wrong = parse_public_keys(source, text)
        keys += found
        problems += wrong
    if not key_files:
        problems.append(
            _problem("--ssh-key", "at least one public key file: ctl onboard-node logs in with it")
        )
    if not _LINUX_USER.match(user):
        problems.append(_problem("--user", f"'{user}' is not a Linux user name"))
    parsed: list[Gpu] = []
    for text in gpus:
        try:
            parsed.append(parse_gpu(text))
        except ValueError as error:
            problems.append(_problem("--gpu", str(error)))
    seen = [gpu.mapping or gpu.host for gpu in parsed]
    for dup in sorted({s for s in seen if seen.count(s) > 1 and s is not None}):
        problems.append(_problem("--gpu", f"'{dup}' is given twice"))
    if len(parsed) > MAX_HOSTPCI:
        problems.append(_problem("--gpu", f"{len(parsed)} given; a VM has {MAX_HOSTPCI} at most"))
    if problems:
        raise InputError(problems)
    unique = tuple({key.line: key for key in keys}.values())
    return ProvisionOptions(
        name=name,
        node=node,
        template=template,
        cores=cores,
        memory_mib=memory_mib,
        disk=disk_size,
        storage=storage,
        ipconfig=config,
        ssh_keys=unique,
        user=user,
        gpus=tuple(parsed),
    )


# --- parameters ---------------------------------------------------------------------------


def flag(value: bool) -> str:
    """Proxmox's booleans: exactly `1` or `0` (`true` is refused)."""
    return "1" if value else "0"


def encode_sshkeys(lines: Iterable[str]) -> str:
    """The `sshkeys` parameter: the keys one a line, percent-encoded once (`%20`, `%0A`, `%2B`…).

    Proxmox checks that what it receives (after the form decoding) is still URL-encoded, then
    decodes it again: so the value is encoded here, and the HTTP client's form encoding of
    the request body makes the second layer (`%` → `%25`).
    """
    return quote("\n".join(lines), safe="")


def decode_sshkeys(value: str) -> list[str]:
    return [line.strip() for line in unquote(value).splitlines() if line.strip()]


def desired_config(options: ProvisionOptions) -> dict[str, str]:
    """What the VM's config must hold, as `PUT /nodes/N/qemu/VMID/config` parameters."""
    config = {
        "cores": str(options.cores),
        "memory": str(options.memory_mib),
        "ciuser": options.user,
        "sshkeys": encode_sshkeys(key.line for key in options.ssh_keys),
        "ipconfig0": options.ipconfig,
        "agent": "1",  # the guest agent reports the address ctl waits for
        "tags": TAG,
    }
    if options.gpus:
        config["machine"] = "q35"  # hostpci pcie=1 needs the q35 machine model
        for index, gpu in enumerate(options.gpus):
            config[f"hostpci{index}"] = gpu.hostpci()
    return config


def property_string(value: str, default_key: str) -> dict[str, str]:
    """`a=1,b=x` or `x,b=y` (the first bare part is the default key's) as a dict."""
    parsed: dict[str, str] = {}
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        if sep:
            parsed[key] = val
        else:
            parsed[default_key] = key
    return parsed


def _bool_text(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("1", "on", "yes", "true"):
        return True
    if lowered in ("0", "off", "no", "false"):
        return False
    return None


def _same(key: str, current: str, wanted: str) -> bool:
    if key == "sshkeys":
        return sorted(decode_sshkeys(current)) == sorted(decode_sshkeys(wanted))
    if key == "memory":
        return property_string(current, "current").get("current") == wanted
    if key == "agent":
        return _bool_text(property_string(current, "enabled").get("enabled")) is True
    if key == "machine":
        kind = property_string(current, "type").get("type", "")
        return kind == "q35" or kind.startswith("pc-q35-")
    if key == "ipconfig0":
        return property_string(current, "ip") == property_string(wanted, "ip")
    if key.startswith("hostpci"):
        have, want = property_string(current, "host"), property_string(wanted, "host")
        return (
            have.get("mapping") == want.get("mapping")
            and have.get("host") == want.get("host")
            and _bool_text(have.get("pcie")) is True
        )
    return current == wanted


def split_tags(value: str) -> list[str]:
    return [tag for tag in re.split(r"[;, ]+", value) if tag]


def config_changes(current: Mapping[str, Any], desired: Mapping[str, str]) -> dict[str, str]:
    """The parameters to send so that `current` holds `desired` (empty: nothing to do).

    Tags are added to, not replaced; `hostpciN` entries beyond the wanted ones are deleted.
    """
    changes: dict[str, str] = {}
    for key, wanted in desired.items():
        have = current.get(key)
        if key == "tags":
            tags = split_tags(str(have or ""))
            if wanted not in tags:
                changes["tags"] = ";".join([*tags, wanted])
            continue
        if have is None or not _same(key, str(have), wanted):
            changes[key] = wanted
    extra = sorted(
        (key for key in current if key.startswith("hostpci") and key not in desired),
        key=lambda key: int(key.removeprefix("hostpci") or 0),
    )
    if extra:
        changes["delete"] = ",".join(extra)
    return changes


# --- the calls ----------------------------------------------------------------------------


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


# --- reading the answers ------------------------------------------------------------------


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
    match = _UPID.match(text)
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
    return exitstatus == "OK" or bool(_WARNINGS.match(exitstatus))


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
    match = _PROXMOX_SIZE.match(text.strip())
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
        (key for key in config if _DISK_KEY.match(key)),
        key=lambda key: (("scsi", "virtio", "sata", "ide").index(re.sub(r"\d", "", key)), key),
    )
    for key in candidates:
        if _DISK_KEY.match(key) and key in config and _is_data_disk(str(config[key])):
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
