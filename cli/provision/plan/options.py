"""The options of `ctl provision-node`, checked: every problem at once, exit 2, nothing sent.

Pure: part of cli/provision/plan (its docstring: the Proxmox rules followed, and where
from).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cli.errors import InputError, InputProblem

VMID_MIN = 100
VMID_MAX = 999_999_999
MAX_HOSTPCI = 16  # qemu-server PVE/QemuServer/PCI.pm $MAX_HOSTPCI_DEVICES
MIN_MEMORY_MIB = 16  # qemu-server: memory minimum
DEFAULT_USER = "llm"
_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
_DNS_NAME = re.compile(rf"^({_LABEL}\.)*{_LABEL}$")
_NODE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")
_STORAGE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)
_CONFIGID = re.compile(r"^[a-z][a-z0-9_-]+$", re.IGNORECASE)
_PCI_ID = re.compile(r"^([a-f0-9]{4}:)?[a-f0-9]{2}:[a-f0-9]{2}(\.[a-f0-9])?$")
_LINUX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_SIZE = re.compile(r"^(\+)?(\d+(?:\.\d+)?)([KMGT])$")
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
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
    if not _DNS_NAME.fullmatch(name):
        return (
            f"'{name}' is not a DNS name (letters, digits and '-', not at either end; "
            "labels joined by '.'): Proxmox names VMs so, and cloud-init makes it the hostname"
        )
    if len(name) > 253 or any(len(label) > 63 for label in name.split(".")):
        return f"'{name}' is too long for a hostname (63 characters a label, 253 in all)"
    return None


def parse_disk(text: str) -> DiskSize:
    """`100G`, `1.5T`, `+20G`: a unit (K, M, G or T, powers of 1024) is required."""
    match = _SIZE.fullmatch(text.strip())
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
    if _PCI_ID.fullmatch(value.lower()):
        return Gpu(value, host=value.lower())
    if _CONFIGID.fullmatch(value):
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
    if not _NODE.fullmatch(node):
        problems.append(_problem("--node", f"'{node}' is not a Proxmox node name"))
    if template.isdigit():
        if not VMID_MIN <= int(template) <= VMID_MAX:
            problems.append(
                _problem("--template", f"vmid {template} is outside {VMID_MIN}..{VMID_MAX}")
            )
    elif not _DNS_NAME.fullmatch(template):
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
    if storage is not None and not _STORAGE.fullmatch(storage):
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
    if not _LINUX_USER.fullmatch(user):
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
