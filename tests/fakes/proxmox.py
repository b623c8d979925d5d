"""A fake Proxmox VE API over HTTPS on 127.0.0.1, faithful where `ctl provision-node` leans on it.

It is a real HTTP server (stdlib `http.server`), because proxmoxer reads Proxmox's error text
from the HTTP reason phrase, where pveproxy puts it. Each behaviour it mimics names, in a
comment, the Proxmox source it comes from: pve-common (PVE/JSONSchema.pm, PVE/Exception.pm,
PVE/UPID.pm, PVE/Tools.pm), pve-http-server (PVE/APIServer/AnyEvent.pm,
PVE/APIServer/Formatter/Standard.pm), pve-manager (PVE/HTTPServer.pm, PVE/API2/Cluster.pm,
PVE/API2/Tasks.pm, PVE/API2Tools.pm), pve-access-control (PVE/AccessControl.pm),
pve-guest-common (PVE/AbstractConfig.pm) and qemu-server (PVE/API2/Qemu.pm,
PVE/API2/Qemu/Agent.pm, PVE/QemuServer/Agent.pm, PVE/QemuServer/PCI.pm, PVE/QemuServer.pm).

What it does not model: ACLs (a valid token may do anything a non-root user may), pending
changes of a running VM's config (applied at once), storage (sizes are bookkeeping; a
storage is shared when `Knobs.shared_storages` names it), more than the config keys listed
in `_CONFIG` (others are refused as unknown, which the real API would accept), and
clusters beyond what a clone needs: `Knobs.nodes` are the cluster's nodes, one API answers
for all of them (pveproxy relays a call for another node; the fake just serves it, unless a
`Fault` says the relay failed), and each VM's config lives on one node, as in pmxcfs.

Knobs (`Knobs`) inject what is hard to get from a real cluster on demand: a vmid race (on
the clone's node, or on another one: pmxcfs's rename race), a clone task that fails, a
start or destroy that fails, a guest agent that is slow or never comes up, and `Fault`s:
pveproxy's 595–599 or a dropped connection on chosen calls. No traffic ever goes to a guest
address: they are data (TEST-NET-1, RFC 5737).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import itertools
import json
import math
import random
import re
import socket
import ssl
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BASE = "/api2/json"
TEMPLATE_VMID = 9000
TEMPLATE_NAME = "ubuntu-2404-cloud"
DHCP_ADDRESS = "192.0.2.10/24"  # TEST-NET-1: documentation data, never contacted


# --- a throwaway CA for the fake's certificate --------------------------------------------


@dataclass(frozen=True)
class ThrowawayCA:
    """A CA made for one test run, to sign the fake's server certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "throwaway test CA") -> ThrowawayCA:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def issue(
        self,
        directory: Path,
        *,
        dns_names: tuple[str, ...] = ("localhost",),
        ips: tuple[str, ...] = ("127.0.0.1",),
    ) -> tuple[Path, Path]:
        """A server certificate for `ips` and `dns_names`: (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        sans += [x509.DNSName(name) for name in dns_names]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pve")]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file = directory / "pve-ssl.pem"
        key_file = directory / "pve-ssl.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


# --- errors as Proxmox raises them --------------------------------------------------------


class ProxmoxApiError(Exception):
    """An answer with an error status. `message` becomes the reason phrase (its first line).

    pve-http-server PVE/APIServer/AnyEvent.pm `response`: `$msg = $resp->message;
    ($msg) = $msg =~ m/^(.*)$/m;` — the status line carries the message's first line.
    """

    def __init__(
        self,
        status: int,
        message: str,
        errors: Mapping[str, str] | None = None,
        *,
        body: bool = True,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = dict(errors or {})
        self.body = body


def die(message: str) -> ProxmoxApiError:
    """A plain Perl `die` in an API handler: 500 with the text (pve-manager PVE/HTTPServer.pm
    `rest_handler`: a non-PVE::Exception error gets HTTP_INTERNAL_SERVER_ERROR, message $err)."""
    return ProxmoxApiError(500, message if message.endswith("\n") else message + "\n")


def param_error(errors: Mapping[str, str]) -> ProxmoxApiError:
    """pve-common PVE/Exception.pm `raise_param_exc`: 400 "Parameter verification failed.\\n"
    with an `errors` object, one reason per parameter."""
    return ProxmoxApiError(400, "Parameter verification failed.\n", errors)


class FormatError(Exception):
    """A format validator's `die` (its text ends with a newline, like Perl's)."""


# --- parameter checking: PVE::JSONSchema --------------------------------------------------

Validator = Callable[[str, str], object]  # (value, path) -> parsed; raises FormatError


@dataclass(frozen=True)
class Prop:
    """One property of a schema, checked as pve-common PVE/JSONSchema.pm `check_prop` does."""

    type: str = "string"
    format: Validator | None = None
    pattern: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] = ()
    max_length: int | None = None
    optional: bool = True
    default_key: bool = False
    requires: str | None = None


def _add_error(errors: dict[str, str], path: str, message: str) -> None:
    # PVE/JSONSchema.pm `add_error`: '_root' for no path; a second reason is appended.
    path = path or "_root"
    errors[path] = f"{errors[path]}\\n{message}" if path in errors else message


def check_prop(value: str | None, prop: Prop, path: str, errors: dict[str, str]) -> None:
    # PVE/JSONSchema.pm `check_prop` and `check_type`, in their order and with their words.
    if value is None:
        if not prop.optional:
            _add_error(errors, path, "property is missing and it is not optional")
        return
    if prop.type == "boolean" and value not in ("0", "1"):
        # check_type: only '1' and '0' pass (the true/yes/on variant is commented out there)
        _add_error(errors, path, f"type check ('boolean') failed - got '{value}'")
        return
    if prop.type == "integer" and not re.fullmatch(r"[+-]?\d+", value):
        _add_error(errors, path, f"type check ('integer') failed - got '{value}'")
        return
    if prop.format is not None:
        try:
            prop.format(value, path)
        except FormatError as error:
            _add_error(errors, path, f"invalid format - {error}")
            return
    if prop.pattern is not None and not re.fullmatch(prop.pattern, value):
        _add_error(errors, path, "value does not match the regex pattern")
        return
    if prop.max_length is not None and len(value) > prop.max_length:
        _add_error(errors, path, f"value may only be {prop.max_length} characters long")
        return
    if re.fullmatch(r"[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?", value):
        if prop.maximum is not None and float(value) > prop.maximum:
            _add_error(errors, path, f"value must have a maximum value of {prop.maximum}")
            return
        if prop.minimum is not None and float(value) < prop.minimum:
            _add_error(errors, path, f"value must have a minimum value of {prop.minimum}")
            return
    if prop.enum and value not in prop.enum:
        _add_error(
            errors,
            path,
            f"value '{value}' does not have a value in the enumeration '{', '.join(prop.enum)}'",
        )


@dataclass(frozen=True)
class Schema:
    props: Mapping[str, Prop]
    indexed: tuple[tuple[str, Prop], ...] = ()  # (regex, prop) for hostpci0..15 and the like

    def lookup(self, key: str) -> Prop | None:
        if key in self.props:
            return self.props[key]
        for pattern, prop in self.indexed:
            if re.fullmatch(pattern, key):
                return prop
        return None


def check_object(
    path: str, schema: Schema, values: Mapping[str, str], errors: dict[str, str]
) -> None:
    # PVE/JSONSchema.pm `check_object`: every schema key checked, then unknown keys refused
    # ("additionalProperties => 0" on every qemu-server and pve-manager method we mimic),
    # and `requires` enforced.
    for key, prop in schema.props.items():
        check_prop(values.get(key), prop, f"{path}.{key}" if path else key, errors)
    for key, value in values.items():
        newpath = f"{path}.{key}" if path else key
        found = schema.lookup(key)
        if found is None:
            _add_error(
                errors,
                newpath,
                "property is not defined in schema and the schema does not allow additional "
                "properties",
            )
            continue
        if key not in schema.props:
            check_prop(value, found, newpath, errors)
        if found.requires is not None and found.requires not in values:
            required = f"{path}.{found.requires}" if path else found.requires
            _add_error(errors, required, f"missing property - '{newpath}' requires this property")


def _parse_boolean(value: str) -> str | None:
    # PVE/JSONSchema.pm `parse_boolean`: inside property strings, yes/on/true count too.
    if re.fullmatch(r"1|on|yes|true", value, re.IGNORECASE):
        return "1"
    if re.fullmatch(r"0|off|no|false", value, re.IGNORECASE):
        return "0"
    return None


def property_string(fmt: Mapping[str, Prop]) -> Validator:
    """PVE/JSONSchema.pm `parse_property_string` as a format: `k=v,…`, a bare default key."""
    schema = Schema(fmt)

    def parse(data: str, path: str) -> dict[str, str]:
        result: dict[str, str] = {}
        default_key: str | None = None
        for part in data.split(","):
            if not part.strip():
                continue
            match = re.match(r"^([^=]+)=(.+)$", part, re.DOTALL)
            if match:
                key, value = match.group(1), match.group(2)
                if key in result:
                    raise FormatError(f"duplicate key in comma-separated list property: {key}\n")
                prop = fmt.get(key)
                if prop is None:
                    raise FormatError(f"invalid key in comma-separated list property: {key}\n")
                if prop.type == "boolean":
                    value = _parse_boolean(value) or value
                result[key] = value
            elif "=" not in part:
                if default_key is not None:
                    raise FormatError(
                        f"duplicate key in comma-separated list property: {default_key}\n"
                    )
                keys = [key for key, prop in fmt.items() if prop.default_key]
                if not keys:
                    raise FormatError(
                        "value without key, but schema does not define a default key\n"
                    )
                default_key = keys[0]
                if default_key in result:
                    raise FormatError(
                        f"duplicate key in comma-separated list property: {default_key}\n"
                    )
                result[default_key] = part
            else:
                raise FormatError("missing key in comma-separated list property\n")
        errors: dict[str, str] = {}
        check_object(path, schema, result, errors)
        if errors:
            # raise "format error\n", errors => …; PVE/Exception.pm `stringify` appends
            # "$key: $reason\n" for each.
            raise FormatError("format error\n" + "".join(f"{k}: {v}\n" for k, v in errors.items()))
        return result

    return parse


def _regex_format(pattern: str, message: str) -> Validator:
    def check(value: str, _path: str) -> str:
        if not re.fullmatch(pattern, value):
            raise FormatError(message.format(value=value) + "\n")
        return value

    return check


# pve-common PVE/JSONSchema.pm register_format validators, with their messages.
VMID_FORMAT = _regex_format(r"[1-9][0-9]{2,8}", "value does not look like a valid VM ID")
NODE_FORMAT = _regex_format(
    r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?", "value does not look like a valid node name"
)
_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
DNS_NAME_FORMAT = _regex_format(
    rf"({_LABEL}\.)*{_LABEL}", "value does not look like a valid DNS name"
)
URLENCODED_FORMAT = _regex_format(r"[-%a-zA-Z0-9_.!~*'()]*", "invalid urlencoded string: {value}")
CONFIGID_FORMAT = _regex_format(r"[a-z][a-z0-9_-]+", "invalid configuration ID '{value}'")
STORAGE_FORMAT = _regex_format(
    r"[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]", "storage ID '{value}' contains illegal characters"
)
_IPV4 = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}"
IPV4_FORMAT = _regex_format(_IPV4, "value does not look like a valid IPv4 address")


def _cidrv4(value: str) -> bool:
    # PVE/JSONSchema.pm `pve_verify_cidrv4`: prefix > 7 and <= 32.
    match = re.fullmatch(rf"({_IPV4})/(\d+)", value)
    return bool(match) and 7 < int(value.rsplit("/", 1)[1]) <= 32


def IPV4_CONFIG_FORMAT(value: str, _path: str) -> str:  # noqa: N802 (a format, named as Proxmox)
    # PVE/JSONSchema.pm `pve_verify_ipv4_config`: dhcp, manual or a CIDRv4.
    if value in ("dhcp", "manual") or _cidrv4(value):
        return value
    raise FormatError("value does not look like a valid ipv4 network configuration\n")


def IPV6_CONFIG_FORMAT(value: str, _path: str) -> str:  # noqa: N802
    if value in ("auto", "dhcp", "manual"):
        return value
    try:
        network = ipaddress.ip_interface(value)
    except ValueError:
        network = None
    if network is not None and network.version == 6 and "/" in value:
        return value
    raise FormatError("value does not look like a valid ipv6 network configuration\n")


def TAG_LIST_FORMAT(value: str, _path: str) -> list[str]:  # noqa: N802
    # PVE/JSONSchema.pm `pve_verify_tag` for each entry of a pve-tag-list.
    tags = [tag for tag in re.split(r"[;, ]+", value) if tag]
    for tag in tags:
        if not re.fullmatch(r"[a-z0-9_][a-z0-9_\-+.]*", tag, re.IGNORECASE):
            raise FormatError("invalid characters in tag\n")
    return tags


def CONFIGID_LIST_FORMAT(value: str, path: str) -> list[str]:  # noqa: N802
    return [str(CONFIGID_FORMAT(item, path)) for item in re.split(r"[;, ]+", value) if item]


_BOOL = Prop(type="boolean")
_VMID = Prop(type="integer", format=VMID_FORMAT, minimum=100, maximum=999_999_999, optional=False)
_NODE = Prop(format=NODE_FORMAT, optional=False)
_PCIRE = r"([a-f0-9]{4}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?"

# qemu-server PVE/QemuServer.pm `$ipconfig_fmt` (gw requires ip, gw6 requires ip6).
IPCONFIG_FORMAT = property_string(
    {
        "ip": Prop(format=IPV4_CONFIG_FORMAT),
        "gw": Prop(format=IPV4_FORMAT, requires="ip"),
        "ip6": Prop(format=IPV6_CONFIG_FORMAT),
        "gw6": Prop(requires="ip6"),
    }
)
# qemu-server PVE/QemuServer/PCI.pm `$hostpci_fmt`: `host` (the default key) or `mapping`.
HOSTPCI_FORMAT = property_string(
    {
        "host": Prop(pattern=rf"{_PCIRE}(;{_PCIRE})*", default_key=True),
        "mapping": Prop(format=CONFIGID_FORMAT),
        "pcie": _BOOL,
        "rombar": _BOOL,
        "romfile": Prop(pattern=r"[^,;]+"),
        "x-vga": _BOOL,
        "legacy-igd": _BOOL,
        "mdev": Prop(pattern=r"[^/.:]+"),
    }
)
# qemu-server PVE/QemuServer.pm `$agent_fmt`: `enabled` is the default key.
AGENT_FORMAT = property_string(
    {
        "enabled": Prop(type="boolean", default_key=True),
        "fstrim_cloned_disks": _BOOL,
        "freeze-fs-on-backup": _BOOL,
        "type": Prop(enum=("virtio", "isa")),
    }
)
# qemu-server (8.1+) PVE/QemuServer/Memory.pm: `[current=]<integer>`, at least 16 MiB.
MEMORY_FORMAT = property_string({"current": Prop(type="integer", minimum=16, default_key=True)})
# qemu-server PVE/QemuServer/Machine.pm: `[type=]<machine>`.
MACHINE_FORMAT = property_string(
    {
        "type": Prop(
            pattern=r"(pc|pc(-i440fx)?-\d+(\.\d+)+(\+pve\d+)?(\.pxe)?|q35|pc-q35-\d+(\.\d+)+"
            r"(\+pve\d+)?(\.pxe)?|virt(?:-\d+(\.\d+)+)?(\+pve\d+)?)",
            default_key=True,
        ),
        "viommu": Prop(enum=("intel", "virtio")),
    }
)

_DRIVES = tuple(
    [f"ide{i}" for i in range(4)]
    + [f"sata{i}" for i in range(6)]
    + [f"scsi{i}" for i in range(31)]
    + [f"virtio{i}" for i in range(16)]
    + ["efidisk0", "tpmstate0"]
)

# The config keys the fake knows (qemu-server PVE/QemuServer.pm `$confdesc`, a subset).
_CONFIG_PROPS: dict[str, Prop] = {
    "name": Prop(format=DNS_NAME_FORMAT),
    "description": Prop(max_length=8192),
    "cores": Prop(type="integer", minimum=1),
    "sockets": Prop(type="integer", minimum=1),
    "memory": Prop(format=MEMORY_FORMAT),
    "balloon": Prop(type="integer", minimum=0),
    "cpu": Prop(),
    "numa": _BOOL,
    "onboot": _BOOL,
    "protection": _BOOL,
    "template": _BOOL,
    "ostype": Prop(),
    "bios": Prop(enum=("seabios", "ovmf")),
    "boot": Prop(),
    "bootdisk": Prop(),
    "scsihw": Prop(),
    "vga": Prop(),
    "machine": Prop(format=MACHINE_FORMAT),
    "agent": Prop(format=AGENT_FORMAT),
    "tags": Prop(format=TAG_LIST_FORMAT),
    "smbios1": Prop(),
    "vmgenid": Prop(),
    "meta": Prop(),
    "ciuser": Prop(),
    "cipassword": Prop(),
    "citype": Prop(enum=("configdrive2", "nocloud", "opennebula")),
    "nameserver": Prop(),
    "searchdomain": Prop(),
    # qemu-server PVE/QemuServer.pm: sshkeys is `format => 'urlencoded'`.
    "sshkeys": Prop(format=URLENCODED_FORMAT),
}
_CONFIG_INDEXED: tuple[tuple[str, Prop], ...] = (
    (r"ipconfig([0-9]|[12][0-9]|3[01])", Prop(format=IPCONFIG_FORMAT)),
    (r"hostpci([0-9]|1[0-5])", Prop(format=HOSTPCI_FORMAT)),
    (r"net([0-9]|[12][0-9]|3[01])", Prop()),
    (r"serial[0-3]", Prop()),
    (rf"({'|'.join(_DRIVES)})", Prop()),
    (r"unused\d+", Prop()),
)


def _schema(props: Mapping[str, Prop], indexed: tuple[tuple[str, Prop], ...] = ()) -> Schema:
    return Schema(dict(props), indexed)


# One schema per API method (qemu-server PVE/API2/Qemu.pm, pve-manager PVE/API2/*.pm).
_VM_URL = {"node": _NODE, "vmid": _VMID}
_UPDATE = {
    **_VM_URL,
    "skiplock": _BOOL,
    "delete": Prop(format=CONFIGID_LIST_FORMAT),
    "revert": Prop(format=CONFIGID_LIST_FORMAT),
    "force": Prop(type="boolean", requires="delete"),
    "digest": Prop(max_length=64),
    **_CONFIG_PROPS,
}
SCHEMAS: dict[str, Schema] = {
    "nextid": _schema({"vmid": replace(_VMID, optional=True)}),
    "resources": _schema({"type": Prop(enum=("vm", "storage", "node", "sdn"))}),
    "clone": _schema(
        {
            **_VM_URL,
            "newid": _VMID,
            "name": Prop(format=DNS_NAME_FORMAT),
            "description": Prop(),
            "pool": Prop(),
            "snapname": Prop(),
            "storage": Prop(format=STORAGE_FORMAT),
            "format": Prop(enum=("raw", "qcow2", "vmdk")),
            "full": _BOOL,
            "target": Prop(format=NODE_FORMAT),
            "bwlimit": Prop(type="integer", minimum=0),
        }
    ),
    "config_get": _schema({**_VM_URL, "current": _BOOL, "snapshot": Prop()}),
    "config_put": _schema(_UPDATE, _CONFIG_INDEXED),
    "config_post": _schema(
        {**_UPDATE, "background_delay": Prop(type="integer", minimum=1, maximum=30)},
        _CONFIG_INDEXED,
    ),
    "resize": _schema(
        {
            **_VM_URL,
            "skiplock": _BOOL,
            "disk": Prop(enum=_DRIVES, optional=False),
            "size": Prop(pattern=r"\+?\d+(\.\d+)?[KMGT]?", optional=False),
            "digest": Prop(max_length=40),
        }
    ),
    "status": _schema(_VM_URL),
    "start": _schema({**_VM_URL, "skiplock": _BOOL, "timeout": Prop(type="integer", minimum=0)}),
    "stop": _schema(
        {
            **_VM_URL,
            "skiplock": _BOOL,
            "timeout": Prop(type="integer", minimum=0),
            "keepActive": _BOOL,
        }
    ),
    "destroy": _schema(
        {**_VM_URL, "skiplock": _BOOL, "purge": _BOOL, "destroy-unreferenced-disks": _BOOL}
    ),
    "agent": _schema(_VM_URL),
    "task_status": _schema({"node": _NODE, "upid": Prop(optional=False)}),
    "task_log": _schema(
        {
            "node": _NODE,
            "upid": Prop(optional=False),
            "start": Prop(type="integer", minimum=0),
            "limit": Prop(type="integer", minimum=0),
            "download": _BOOL,
        }
    ),
}


def validate(schema_name: str, params: Mapping[str, str]) -> None:
    # PVE/RESTHandler.pm `handle` → PVE::JSONSchema::validate($param, $info->{parameters}):
    # every failure at once, as a 400 "Parameter verification failed." with `errors`.
    errors: dict[str, str] = {}
    check_object("", SCHEMAS[schema_name], params, errors)
    if errors:
        raise param_error(errors)


# --- the cluster's state ------------------------------------------------------------------


@dataclass
class Fault:
    """Calls that get no real answer: pveproxy's relay error, or a connection dropped.

    pveproxy relays a call for another node (pve-http-server PVE/APIServer/AnyEvent.pm,
    `proxy_request`) with AnyEvent::HTTP, after it has authenticated it, and answers with
    the status and reason AnyEvent::HTTP gives it: for AnyEvent::HTTP's own errors a pseudo
    status 595–599 whose reason is the error text ("595 - errors during connection
    establishment, proxy handshake": the `$!` of the connect, e.g. "No route to host",
    "Connection refused"; "596 - errors during TLS negotiation, request sending and header
    processing", e.g. "Broken pipe"; 597 the body; 598 aborted; 599 other), and no body.
    `response` then closes the connection, as for every status >= 400. `status=None` drops
    the connection instead (a TCP reset, no answer at all). `after=True` carries the call
    out first and loses its answer (the node did it; the way back failed).
    """

    method: str
    path: str  # a regex, fullmatched against the path below /api2/json
    status: int | None = 595
    reason: str = "No route to host"
    times: int = 1  # how many matching calls get it; after that they are answered
    after: bool = False


@dataclass
class Knobs:
    """What to make go wrong, or slow; change them while the server runs."""

    token_id: str = "automation@pve!ctl"
    token_secret: str = "5f0c7a52-6b1e-4d2a-9d8e-0b7d1c2e3f41"
    nodes: tuple[str, ...] = ("pve",)
    clone_seconds: float = 0.6
    start_seconds: float = 0.2
    stop_seconds: float = 0.1
    destroy_seconds: float = 0.2
    resize_seconds: float = 0.1
    config_seconds: float = 0.1
    agent_delay: float = 0.8  # the guest agent answers this long after the start task ends
    agent_never: bool = False
    dhcp_address: str = DHCP_ADDRESS
    # pve-manager PVE/Service/pvestatd.pm updates the RRD data every 10 s; until then
    # /cluster/resources has no name, status or template flag for a new VM.
    rrd_interval: float = 10.0
    # pve-http-server PVE/APIServer/AnyEvent.pm: "always delay unauthorized calls by 3
    # seconds".
    auth_failure_delay: float = 3.0
    race_nextid: int = 0  # how many nextid answers another client takes before our clone
    race_in_worker: int = 0  # …or takes between the clone's early checks and its worker
    race_node: str | None = None  # where that other client's VM is made (None: nodes[0])
    template_storage: str = "local-lvm"  # where the template's disks are
    shared_storages: tuple[str, ...] = ()  # storages every node sees (a clone may `target`)
    faults: list[Fault] = field(default_factory=list)
    # Called under the fake's lock after each call is recorded: a test's hand in the
    # cluster at a chosen moment (another operator's doing).
    after_call: Callable[[FakeProxmox, Call], None] | None = None
    fail_clone: str | None = None  # the clone task fails with this
    fail_start: str | None = None
    fail_destroy: str | None = None
    resize_returns_task: bool = True  # qemu-server 8+: resize is a task; before, null


@dataclass
class FakeVm:
    vmid: int
    node: str
    config: dict[str, str]
    running: bool = False
    booted_at: float | None = None
    created_at: float = -math.inf  # monotonic; RRD data appears rrd_interval later


@dataclass
class FakeTask:
    upid: str
    node: str
    type: str
    id: str
    user: str
    pid: int
    pstart: int
    starttime: int
    ends_at: float
    log: list[str]
    finish: Callable[[], str | None]  # under the lock, at the end: an error text, or None
    exitstatus: str | None = None


@dataclass(frozen=True)
class Paged:
    """A list answer with the `total` attribute beside `data` in the envelope."""

    items: list[dict[str, Any]]
    total: int


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # below /api2/json, percent-decoded
    params: dict[str, str]
    status: int


class FakeProxmox:
    """The fake API. Use as a context manager; `port` is where it listens (127.0.0.1)."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        knobs: Knobs | None = None,
        access_log: Path | None = None,
    ) -> None:
        self.knobs = knobs or Knobs()
        self.access_log = access_log
        self.lock = threading.RLock()
        self.vms: dict[int, FakeVm] = {}
        # What `purge` removes a destroyed VM from (qemu-server PVE/API2/Qemu.pm
        # `destroy_vm`): HA resources (`vm:VMID`), replication jobs (id → guest), and
        # backup jobs (id → the vmids they name).
        self.ha_resources: set[int] = set()
        self.replication_jobs: dict[str, int] = {}
        self.backup_jobs: dict[str, set[int]] = {}
        self.tasks: dict[str, FakeTask] = {}
        self.calls: list[Call] = []
        self.connections = 0
        self.tls_failures = 0
        self.bugs: list[str] = []  # exceptions in the fake's own code
        self._pids = itertools.count(random.randint(0x1000, 0x8000))
        self._boot = time.time() - 86_400  # the node has been up a day
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert_file, key_file)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.add_template()

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> FakeProxmox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-proxmox",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    # --- state for tests -------------------------------------------------------------------

    def add_template(
        self, vmid: int = TEMPLATE_VMID, name: str = TEMPLATE_NAME, *, node: str | None = None
    ) -> None:
        store = self.knobs.template_storage
        self.add_vm(
            vmid,
            name,
            {
                "template": "1",
                "scsi0": f"{store}:base-{vmid}-disk-0,size=3584M",
                "ide2": f"{store}:vm-{vmid}-cloudinit,media=cdrom",
                "boot": "order=scsi0",
                "scsihw": "virtio-scsi-pci",
                "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
                "serial0": "socket",
                "vga": "serial0",
                "cores": "2",
                "memory": "2048",
                "ostype": "l26",
            },
            node=node,
        )

    def add_vm(
        self,
        vmid: int,
        name: str | None,
        config: Mapping[str, str] | None = None,
        *,
        node: str | None = None,
        running: bool = False,
        fresh: bool = False,
    ) -> None:
        with self.lock:
            conf = dict(config or {"scsi0": f"local-lvm:vm-{vmid}-disk-0,size=32G"})
            if name is not None:
                conf["name"] = name
            self.vms[vmid] = FakeVm(
                vmid,
                node or self.knobs.nodes[0],
                conf,
                running=running,
                booted_at=time.monotonic() - 3600 if running else None,
                created_at=time.monotonic() if fresh else -math.inf,
            )

    def vm(self, vmid: int) -> FakeVm | None:
        with self.lock:
            self._advance()
            vm = self.vms.get(vmid)
            return None if vm is None else replace(vm, config=dict(vm.config))

    def named(self, name: str) -> list[FakeVm]:
        with self.lock:
            self._advance()
            return [
                replace(v, config=dict(v.config))
                for v in self.vms.values()
                if v.config.get("name") == name
            ]

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The first `Fault` matching this call that has uses left, one use taken."""
        with self.lock:
            for fault in self.knobs.faults:
                if fault.times > 0 and fault.method == method and re.fullmatch(fault.path, path):
                    fault.times -= 1
                    return fault
        return None

    def calls_to(self, method: str, pattern: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and re.fullmatch(pattern, c.path)]

    # --- tasks -----------------------------------------------------------------------------

    def _advance(self) -> None:
        now = time.monotonic()
        # Tasks end in the order of their end times, whenever the fake looks.
        for task in sorted(self.tasks.values(), key=lambda t: t.ends_at):
            if task.exitstatus is None and task.ends_at <= now:
                failure = task.finish()
                # pve-common PVE/RESTEnvironment.pm fork_worker ends the log with "TASK OK"
                # or "TASK ERROR: …"; PVE/UPID.pm `read_status` turns that into exitstatus.
                if failure is None:
                    task.exitstatus = "OK"
                    task.log.append("TASK OK")
                elif re.fullmatch(r"WARNINGS: \d+", failure):
                    task.exitstatus = failure
                    task.log.append(f"TASK {failure}")
                else:
                    task.exitstatus = failure.strip()
                    task.log.append(f"TASK ERROR: {failure.strip()}")

    def _fork(
        self,
        node: str,
        kind: str,
        vmid: int | str,
        user: str,
        seconds: float,
        log: list[str],
        finish: Callable[[], str | None],
    ) -> str:
        # pve-common PVE/UPID.pm `encode`: "UPID:%s:%08X:%08X:%08X:%s:%s:%s:" —
        # node, pid, pstart (jiffies since boot), starttime (epoch), type, id, user.
        pid = next(self._pids)
        pstart = int((time.time() - self._boot) * 100)
        starttime = int(time.time())
        upid = f"UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{vmid}:{user}:"
        self.tasks[upid] = FakeTask(
            upid, node, kind, str(vmid), user, pid, pstart, starttime,
            time.monotonic() + seconds, list(log), finish,
        )  # fmt: skip
        return upid

    # --- the API ---------------------------------------------------------------------------

    def authenticate(self, header: str | None) -> str:
        """The token's user id, or ProxmoxApiError 401 with pveproxy's text."""
        # pve-http-server PVE/APIServer/Formatter.pm `extract_auth_value`:
        # /(?:^|\s)PVEAPIToken(?:=| )([^;]*)/, then uri_unescape.
        match = re.search(r"(?:^|\s)PVEAPIToken(?:=| )([^;]*)", header or "")
        if match is None:
            # pve-manager PVE/HTTPServer.pm `auth_handler`: die "No ticket\n"
            raise ProxmoxApiError(401, "No ticket", body=False)
        token = unquote(match.group(1))
        # pve-access-control PVE/AccessControl.pm `verify_token`: /^(.*)=(.*)$/, the user
        # and the token must exist, then "invalid token value!".
        parts = re.fullmatch(r"(.*)=(.*)", token)
        if parts is None:
            raise ProxmoxApiError(401, "no tokenid specified", body=False)
        token_id, value = parts.group(1), parts.group(2)
        user, _, name = token_id.partition("!")
        known_user, _, known_name = self.knobs.token_id.partition("!")
        if user != known_user:
            raise ProxmoxApiError(401, f"user '{user}' does not exist", body=False)
        if name != known_name:
            raise ProxmoxApiError(401, f"no such token '{name}' for user '{user}'", body=False)
        if value != self.knobs.token_secret:
            raise ProxmoxApiError(401, "invalid token value!", body=False)
        return token_id

    def handle(self, method: str, path: str, params: dict[str, str], user: str) -> Any:
        """Route one authenticated call; its `data`, or ProxmoxApiError."""
        with self.lock:
            self._advance()
            for route_method, pattern, handler in _ROUTES:
                if route_method != method:
                    continue
                match = re.fullmatch(pattern, path)
                if match is not None:
                    url = match.groupdict()
                    for key, value in url.items():
                        if key in params and params[key] != value:
                            # pve-manager PVE/HTTPServer.pm `rest_handler`
                            raise param_error(
                                {
                                    key: "duplicate parameter (already defined in URI) with "
                                    "conflicting values!"
                                }
                            )
                    return handler(self, {**params, **url}, user)
            # PVE/HTTPServer.pm rest_handler: no handler found.
            raise ProxmoxApiError(501, f"Method '{method} {path}' not implemented")

    def _load(self, node: str, vmid: int) -> FakeVm:
        # pve-guest-common PVE/AbstractConfig.pm `load_config`
        vm = self.vms.get(vmid)
        if vm is None or vm.node != node:
            raise die(f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        return vm

    @staticmethod
    def _check_lock(vm: FakeVm) -> str | None:
        # PVE/AbstractConfig.pm `check_lock`: die "VM is locked ($lock)\n"
        lock = vm.config.get("lock")
        return f"VM is locked ({lock})" if lock else None

    def _node(self, node: str) -> None:
        if node not in self.knobs.nodes:
            # pve-manager: a request for a node that is not in the cluster
            raise die(f"hostname lookup '{node}' failed - failed to get address info")

    # GET /cluster/nextid
    def nextid(self, params: dict[str, str], user: str) -> str:
        validate("nextid", params)
        # pve-manager PVE/API2/Cluster.pm `nextid`: with vmid, that one if free, else a 400
        # "VM $vmid already exists"; without, the lowest free id from 100. The schema says
        # integer, but `$i` was used as a hash key before it is returned, so Perl's JSON
        # encoder sends it as a string: {"data":"101"}. It reserves nothing.
        if "vmid" in params:
            if int(params["vmid"]) in self.vms:
                raise param_error({"vmid": f"VM {params['vmid']} already exists"})
            return params["vmid"]
        free = next(i for i in range(100, 1_000_000) if i not in self.vms)
        if self.knobs.race_nextid > 0:
            self.knobs.race_nextid -= 1
            # another client got there first (on race_node, or the first node)
            self.add_vm(free, "someone-else", node=self.knobs.race_node, fresh=True)
        return str(free)

    # GET /cluster/resources
    def resources(self, params: dict[str, str], user: str) -> list[dict[str, Any]]:
        validate("resources", params)
        if params.get("type", "vm") != "vm":
            return []
        now = time.monotonic()
        entries = []
        for vm in sorted(self.vms.values(), key=lambda v: v.vmid):
            # pve-manager PVE/API2Tools.pm `extract_vm_stats`: id, vmid, node, type and
            # status 'unknown' always; name, status, template and sizes from RRD data only.
            entry: dict[str, Any] = {
                "id": f"qemu/{vm.vmid}",
                "vmid": vm.vmid,
                "node": vm.node,
                "type": "qemu",
                "status": "unknown",
            }
            if now >= vm.created_at + self.knobs.rrd_interval:
                if "name" in vm.config:
                    entry["name"] = vm.config["name"]
                entry.update(
                    status="running" if vm.running else "stopped",
                    template=int(vm.config.get("template", "0")),
                    maxcpu=int(vm.config.get("cores", "1")),
                    maxmem=int(re.sub(r"\D.*", "", vm.config.get("memory", "512"))) * 1024**2,
                    uptime=int(now - vm.booted_at) if vm.booted_at else 0,
                )
            # PVE/API2/Cluster.pm `resources`: lock and tags come from the config itself.
            for prop in ("lock", "tags"):
                if prop in vm.config:
                    entry[prop] = vm.config[prop]
            entries.append(entry)
        return entries

    # POST /nodes/N/qemu/VMID/clone
    def clone(self, params: dict[str, str], user: str) -> str:
        validate("clone", params)
        node, vmid, newid = params["node"], int(params["vmid"]), int(params["newid"])
        self._node(node)
        storage = params.get("storage")
        target = params.get("target")
        if target in (node, "localhost"):
            target = None
        # qemu-server PVE/API2/Qemu.pm `clone_vm`, `$load_and_check` (run before forking,
        # and again in the worker), in its order:
        if target is not None and target not in self.knobs.nodes:
            raise die(f"no such cluster node '{target}'")  # PVE::Cluster check_node_exists
        if storage is not None and target is not None and storage not in self.knobs.shared_storages:
            raise die(f"can't clone to non-shared storage '{storage}'")
        source = self._load(node, vmid)
        if (locked := self._check_lock(source)) is not None:
            raise die(locked)
        is_template = source.config.get("template") == "1"
        full = params["full"] == "1" if "full" in params else not is_template
        if storage is not None and not full:
            raise die("parameter 'storage' not allowed for linked clones")
        if target is not None and not self._shared(source):
            # `$check_storage_access_clone`: shared only when every volume, the cloud-init
            # drive included, is on shared storage.
            raise die(f"can't clone VM to node '{target}' (VM uses local storage)")
        # `my $conffile = PVE::QemuConfig->config_file($newid)`: this node's file only
        # (PVE/QemuConfig.pm `cfs_config_path` defaults to the local node).
        if self._conf_on(node, newid):
            raise die(f"unable to create VM {newid}: config file already exists")
        name = params.get("name") or f"Copy-of-VM-{source.config.get('name', vmid)}"
        drives = [k for k in source.config if re.fullmatch("|".join(_DRIVES), k)]
        log = [
            f"create full clone of drive {key} ({source.config[key].split(',')[0]})"
            for key in drives
            if "media=cdrom" not in source.config[key]
        ]
        if self.knobs.race_in_worker > 0:
            # Someone creates newid between the early check and the worker's own check.
            self.knobs.race_in_worker -= 1
            self.add_vm(newid, "someone-else", node=self.knobs.race_node or node, fresh=True)
        if self._conf_on(node, newid):

            def lost() -> str | None:
                # the worker's `$load_and_check` finds this node's config file now
                return f"unable to create VM {newid}: config file already exists"

            return self._fork(node, "qmclone", vmid, user, self.knobs.clone_seconds, [], lost)
        if newid in self.vms:
            # The vmid belongs to a VM on another node. The worker writes its temporary
            # config with PVE::Tools::file_set_contents (pve-common PVE/File.pm: a temp
            # file, then rename over nodes/NODE/qemu-server/NEWID.conf), and pmxcfs refuses
            # the rename with EEXIST (pve-cluster src/pmxcfs/memdb.c `memdb_rename`:
            # `vmlist_different_vm_exists`). That happens before the worker's eval, so the
            # die is the task's error as it is, without "clone failed: ", and nothing is
            # cleaned up (nothing was made).
            def renamed() -> str | None:
                return (
                    f"close (rename) atomic file '/etc/pve/nodes/{node}/qemu-server/"
                    f"{newid}.conf' failed: File exists"
                )

            return self._fork(
                node, "qmclone", vmid, user, self.knobs.clone_seconds,
                [f"creating a clone of VM {vmid} with ID {newid}"], renamed,
            )  # fmt: skip
        # The worker writes a temporary config, "# qmclone temporary file\nlock: clone", at
        # once, on the template's node; the VM is locked 'clone' until the task ends.
        self.vms[newid] = FakeVm(newid, node, {"lock": "clone"}, created_at=time.monotonic())
        newconf = self._cloned_config(source, newid, name, storage, params.get("description"))
        failure = self.knobs.fail_clone

        def finish() -> str | None:
            if failure is not None:
                # clone_vm on error: frees the new volumes, `unlink $conffile`, then
                # die "clone failed: $err".
                self.vms.pop(newid, None)
                return f"clone failed: {failure}"
            vm = self.vms.get(newid)
            if vm is not None:
                vm.config = newconf  # `delete $newconf->{lock}; write_config`
                if target is not None:
                    # `rename($conffile, PVE::QemuConfig->config_file($newid, $target))`:
                    # the config moves to the target node's directory.
                    vm.node = target
            return None

        if failure is None:
            log += [
                f'  Logical volume "vm-{newid}-disk-0" created.',
                "transferred 3.5 GiB of 3.5 GiB (100.00%)",
            ]
        else:
            log.append(failure)
        return self._fork(node, "qmclone", vmid, user, self.knobs.clone_seconds, log, finish)

    def _conf_on(self, node: str, vmid: int) -> bool:
        vm = self.vms.get(vmid)
        return vm is not None and vm.node == node

    def _shared(self, source: FakeVm) -> bool:
        for key, value in source.config.items():
            if not re.fullmatch("|".join(_DRIVES), key):
                continue
            volume = value.split(",")[0]
            if volume in ("", "none", "cdrom") or ":" not in volume:
                continue
            if volume.split(":")[0] not in self.knobs.shared_storages:
                return False
        return True

    @staticmethod
    def _cloned_config(
        source: FakeVm, newid: int, name: str, storage: str | None, description: str | None
    ) -> dict[str, str]:
        conf: dict[str, str] = {}
        for key, value in source.config.items():
            if key in ("template", "lock") or key.startswith("unused"):
                continue
            if re.fullmatch(r"net\d+", key):
                # "always change MAC! address"
                mac = "BC:24:11:" + ":".join(f"{random.randint(0, 255):02X}" for _ in range(3))
                conf[key] = re.sub(r"=([0-9A-F]{2}:){5}[0-9A-F]{2}", f"={mac}", value)
            elif re.fullmatch("|".join(_DRIVES), key) and "media=cdrom" not in value:
                volume, _, rest = value.partition(",")
                store = storage or volume.split(":")[0]
                conf[key] = f"{store}:vm-{newid}-disk-{len(conf) % 4},{rest}"
            elif "cloudinit" in value:
                store = storage or value.split(":")[0]
                conf[key] = f"{store}:vm-{newid}-cloudinit,media=cdrom"
            else:
                conf[key] = value
        conf["smbios1"] = f"uuid={uuid.uuid4()}"
        conf["name"] = name
        if description:
            conf["description"] = description
        return conf

    # GET /nodes/N/qemu/VMID/config
    def config_get(self, params: dict[str, str], user: str) -> dict[str, Any]:
        validate("config_get", params)
        vm = self._load(params["node"], int(params["vmid"]))
        text = "".join(f"{k}: {v}\n" for k, v in sorted(vm.config.items()))
        return {**vm.config, "digest": hashlib.sha1(text.encode()).hexdigest()}

    # PUT (sync) and POST (async) /nodes/N/qemu/VMID/config
    def config_put(self, params: dict[str, str], user: str) -> None:
        validate("config_put", params)
        self._update(params, user)()

    def config_post(self, params: dict[str, str], user: str) -> str:
        validate("config_post", params)
        work = self._update(params, user)
        node, vmid = params["node"], params["vmid"]

        def finish() -> str | None:
            try:
                work()
            except ProxmoxApiError as failure:
                return failure.message
            return None

        return self._fork(node, "qmconfig", vmid, user, self.knobs.config_seconds, [], finish)

    def _update(self, params: dict[str, str], user: str) -> Callable[[], None]:
        # qemu-server PVE/API2/Qemu.pm `$update_vm_api`, in its order.
        node, vmid = params["node"], int(params["vmid"])
        values = {
            k: v
            for k, v in params.items()
            if k
            not in (
                "node",
                "vmid",
                "digest",
                "background_delay",
                "skiplock",
                "delete",
                "revert",
                "force",
            )
        }
        if "skiplock" in params and params["skiplock"] == "1":
            raise param_error({"skiplock": "Only root may use this option."})
        if "sshkeys" in values:
            # uri_unescape, then PVE::Tools::validate_ssh_public_keys runs `ssh-keygen -l`
            # on each line: any bad line is a plain die.
            for line in unquote(values["sshkeys"]).split("\n"):
                if line.strip() and not _valid_public_key(line):
                    raise die("SSH public key validation error")
        deleting = [k for k in re.split(r"[;, ]+", params.get("delete", "")) if k]
        if not values and not deleting:
            raise die("no options specified")
        for key in deleting:
            if key in values:
                raise param_error(
                    {"delete": f"you can't use '-{key}' and -delete {key}' at the same time"}
                )
        self._node(node)

        def work() -> None:
            vm = self._load(node, vmid)
            if (locked := self._check_lock(vm)) is not None:
                raise die(locked)
            for key, value in values.items():
                if re.fullmatch(r"hostpci\d+", key):
                    _check_hostpci_perm(user, key, value)
            for key in deleting:
                if re.fullmatch(r"hostpci\d+", key) and key in vm.config:
                    _check_hostpci_perm(user, key, vm.config[key])
                vm.config.pop(key, None)
            if "tags" in values:
                values["tags"] = ";".join(sorted(set(TAG_LIST_FORMAT(values["tags"], "tags"))))
            vm.config.update(values)

        return work

    # PUT /nodes/N/qemu/VMID/resize
    def resize(self, params: dict[str, str], user: str) -> str | None:
        validate("resize", params)
        node, vmid, disk, size = params["node"], int(params["vmid"]), params["disk"], params["size"]
        if params.get("skiplock") == "1":
            raise param_error({"skiplock": "Only root may use this option."})

        def work() -> str | None:
            # qemu-server PVE/API2/Qemu.pm `resize_vm`, `$updatefn`
            vm = self._load(node, vmid)
            if (locked := self._check_lock(vm)) is not None:
                return locked
            if disk not in vm.config:
                return f"disk '{disk}' does not exist"
            drive = vm.config[disk]
            if "media=cdrom" in drive:
                return "you can't resize a cdrom"
            match = re.search(r"(?:^|,)size=([^,]+)", drive)
            current = _parse_size(match.group(1)) if match else None
            if current is None:
                return f"Could not determine current size of volume '{drive.split(',')[0]}'"
            grow = re.fullmatch(r"(\+)?(\d+(?:\.\d+)?)([KMGT])?", size)
            assert grow is not None  # the schema's pattern held
            new = _parse_size(grow.group(2) + (grow.group(3) or ""))
            assert new is not None
            if grow.group(1):
                new += current
            if new < current:
                return "shrinking disks is not supported"
            if new != current:
                vm.config[disk] = re.sub(r"(^|,)size=[^,]+", rf"\1size={_format_size(new)}", drive)
            return None

        if not self.knobs.resize_returns_task:
            failure = work()
            if failure is not None:
                raise die(failure)
            return None
        # qemu-server 8+: `return $rpcenv->fork_worker('resize', $vmid, $authuser, $worker)`
        return self._fork(node, "resize", vmid, user, self.knobs.resize_seconds, [], work)

    # GET /nodes/N/qemu/VMID/status/current
    def status(self, params: dict[str, str], user: str) -> dict[str, Any]:
        validate("status", params)
        vm = self._load(params["node"], int(params["vmid"]))
        # qemu-server PVE/QemuServer.pm `vmstatus` + PVE/API2/Qemu.pm `vm_status`
        state = "running" if vm.running else "stopped"
        result: dict[str, Any] = {
            "vmid": vm.vmid,
            "status": state,
            "qmpstatus": state,
            "cpus": int(vm.config.get("cores", "1")),
            "uptime": int(time.monotonic() - vm.booted_at) if vm.booted_at else 0,
        }
        if "name" in vm.config:
            result["name"] = vm.config["name"]
        if "lock" in vm.config:
            result["lock"] = vm.config["lock"]
        if _agent_enabled(vm.config):
            result["agent"] = 1
        return result

    # POST /nodes/N/qemu/VMID/status/start
    def start_vm(self, params: dict[str, str], user: str) -> str:
        validate("start", params)
        node, vmid = params["node"], int(params["vmid"])
        self._node(node)
        if params.get("skiplock") == "1":
            raise param_error({"skiplock": "Only root may use this option."})
        failure = self.knobs.fail_start

        def finish() -> str | None:
            # qemu-server PVE/QemuServer.pm `vm_start`: load_config, check_lock, "VM $vmid
            # already running"; PVE/QemuServer/PCI.pm: pcie=1 without q35 dies.
            vm = self.vms.get(vmid)
            if vm is None or vm.node != node:
                return f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            if (locked := self._check_lock(vm)) is not None:
                return locked
            if vm.running:
                return f"VM {vmid} already running"
            pcie = any(
                re.fullmatch(r"hostpci\d+", k) and re.search(r"(^|,)pcie=(1|on|yes|true)", v)
                for k, v in vm.config.items()
            )
            if pcie and "q35" not in vm.config.get("machine", ""):
                return "q35 machine model is not enabled"
            if failure is not None:
                return f"start failed: {failure}"
            vm.running = True
            vm.booted_at = time.monotonic()
            return None

        return self._fork(node, "qmstart", vmid, user, self.knobs.start_seconds, [], finish)

    # POST /nodes/N/qemu/VMID/status/stop
    def stop_vm(self, params: dict[str, str], user: str) -> str:
        validate("stop", params)
        node, vmid = params["node"], int(params["vmid"])
        self._node(node)

        def finish() -> str | None:
            vm = self.vms.get(vmid)
            if vm is None:
                return f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            if (locked := self._check_lock(vm)) is not None:
                return locked  # vm_stop checks the lock unless skiplock
            vm.running = False  # a VM that is not running: nothing to do, task OK
            vm.booted_at = None
            return None

        return self._fork(node, "qmstop", vmid, user, self.knobs.stop_seconds, [], finish)

    # DELETE /nodes/N/qemu/VMID
    def destroy(self, params: dict[str, str], user: str) -> str:
        validate("destroy", params)
        node, vmid = params["node"], int(params["vmid"])
        purge = params.get("purge") == "1"
        # qemu-server src/PVE/API2/Qemu.pm `destroy_vm` (e6352be): skiplock only for root
        if params.get("skiplock") == "1":
            raise param_error({"skiplock": "Only root may use this option."})
        self._destroy_checks(node, vmid, purge)  # `$early_checks`, before forking
        failure = self.knobs.fail_destroy
        log = [f"destroy VM {vmid}"]

        def finish() -> str | None:
            # The worker, under the config lock: "repeat, config might have changed".
            try:
                ha_managed = self._destroy_checks(node, vmid, purge)
            except ProxmoxApiError as error:
                return error.message.rstrip("\n")
            current = self.vms[vmid]
            # src/PVE/QemuServer.pm `destroy_vm`: check_lock unless skiplock
            if (locked := self._check_lock(current)) is not None:
                return locked
            if failure is not None:
                return failure
            if purge:
                log.append(f"purging VM {vmid} from related configurations..")
                for job in [j for j, guest in self.replication_jobs.items() if guest == vmid]:
                    del self.replication_jobs[job]
                for members in self.backup_jobs.values():
                    members.discard(vmid)
                if ha_managed:
                    self.ha_resources.discard(vmid)
                    log.append(f"NOTE: removed VM {vmid} from HA resource configuration.")
            self.vms.pop(vmid, None)  # "only now remove the zombie config"
            return None

        if failure is not None:
            log.append(failure)
        return self._fork(node, "qmdestroy", vmid, user, self.knobs.destroy_seconds, log, finish)

    def _destroy_checks(self, node: str, vmid: int, purge: bool) -> bool:
        """`destroy_vm`'s `$early_checks`, in their order; whether HA manages the VM."""
        vm = self._load(node, vmid)  # "test if VM exists"
        # pve-guest-common src/PVE/AbstractConfig.pm `check_protection` (4a8f6cb)
        if vm.config.get("protection") == "1":
            raise die(f"can't remove VM {vmid} - protection mode enabled")
        ha_managed = vmid in self.ha_resources
        if not purge:
            if ha_managed:
                raise die(
                    f"unable to remove VM {vmid} - used in HA resources and purge parameter"
                    " not set."
                )
            # pve-guest-common src/PVE/ReplicationConfig.pm `check_for_existing_jobs`
            for job, guest in sorted(self.replication_jobs.items()):
                if guest == vmid:
                    raise die(
                        f"There is a replication job '{job}' for guest '{vmid}' - "
                        "Please remove that first."
                    )
        if vm.running:
            raise die(f"VM {vmid} is running - destroy failed")
        return ha_managed

    # GET /nodes/N/qemu/VMID/agent/network-get-interfaces
    def agent_interfaces(self, params: dict[str, str], user: str) -> dict[str, Any]:
        validate("agent", params)
        vmid = int(params["vmid"])
        vm = self._load(params["node"], vmid)
        # qemu-server PVE/QemuServer/Agent.pm `agent_available`, in its order:
        if "agent" not in vm.config:
            raise die("No QEMU guest agent configured")
        if not vm.running or vm.booted_at is None:
            raise die(f"VM {vmid} is not running")
        up = (
            _agent_enabled(vm.config)
            and not self.knobs.agent_never
            and time.monotonic() >= vm.booted_at + self.knobs.agent_delay
        )
        if not up:
            raise die("QEMU guest agent is not running")
        # PVE/API2/Qemu/Agent.pm: { result => mon_cmd($vmid, "guest-network-get-interfaces") }
        return {"result": _interfaces(vm, self.knobs.dhcp_address)}

    # GET /nodes/N/tasks/UPID/status and …/log
    def _task(self, params: dict[str, str]) -> FakeTask:
        upid = params["upid"]
        if not re.fullmatch(
            r"UPID:[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:"
            r"[0-9A-Fa-f]{8}:[^:\s/]+:[^:\s/]*:[^:\s/]+:",
            upid,
        ):
            # pve-manager PVE/API2/Tasks.pm: raise_param_exc({ upid => "unable to parse
            # worker upid" }) / ({ upid => "no such task" })
            raise param_error({"upid": "unable to parse worker upid"})
        task = self.tasks.get(upid)
        if task is None:
            raise param_error({"upid": "no such task"})
        return task

    def task_status(self, params: dict[str, str], user: str) -> dict[str, Any]:
        validate("task_status", params)
        task = self._task(params)
        # PVE/API2/Tasks.pm `read_task_status`: the decoded UPID, status running/stopped
        # and, once stopped, exitstatus from PVE/UPID.pm `read_status`.
        result: dict[str, Any] = {
            "upid": task.upid,
            "node": task.node,
            "pid": task.pid,
            "pstart": task.pstart,
            "starttime": task.starttime,
            "type": task.type,
            "id": task.id,
            "user": task.user,
            "status": "running" if task.exitstatus is None else "stopped",
        }
        if task.exitstatus is not None:
            result["exitstatus"] = task.exitstatus
        return result

    def task_log(self, params: dict[str, str], user: str) -> Paged:
        validate("task_log", params)
        task = self._task(params)
        # PVE/API2/Tasks.pm `read_task_log` → PVE::Tools::dump_logfile: {n, t} from
        # `start`, at most `limit` (50 when not given) lines.
        start = int(params.get("start", "0"))
        limit = int(params.get("limit", "0")) or 50
        lines = task.log[start : start + limit]
        items = [{"n": start + i + 1, "t": text} for i, text in enumerate(lines)]
        return Paged(items, len(task.log))  # `total`: set_result_attrib('total', $count)


def _check_hostpci_perm(user: str, key: str, value: str) -> None:
    # qemu-server PVE/API2/Qemu.pm `check_hostpci_perm`: only root@pam may set a raw host
    # device; an API token's user is "user@realm!name", never 'root@pam'.
    if user == "root@pam":
        return
    parsed = property_string_values(value, "host")
    if parsed.get("host"):
        raise die(f"only root can set '{key}' config for non-mapped devices")
    if not parsed.get("mapping"):
        raise die("either 'host' or 'mapping' must be set.")


def property_string_values(value: str, default_key: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if sep:
            result[key] = val
        else:
            result[default_key] = key
    return result


def _agent_enabled(config: Mapping[str, str]) -> bool:
    if "agent" not in config:
        return False
    enabled = property_string_values(config["agent"], "enabled").get("enabled", "0")
    return _parse_boolean(enabled) == "1"


def _interfaces(vm: FakeVm, dhcp: str) -> list[dict[str, Any]]:
    # The QEMU guest agent's guest-network-get-interfaces answer (qemu's qga/qapi-schema.json
    # GuestNetworkInterface): name, hardware-address, ip-addresses, statistics.
    ip = property_string_values(vm.config.get("ipconfig0", ""), "ip").get("ip", "dhcp")
    address = ipaddress.ip_interface(dhcp if ip in ("dhcp", "manual") else ip)
    mac = re.search(r"=(([0-9A-F]{2}:){5}[0-9A-F]{2})", vm.config.get("net0", ""))
    hw = mac.group(1).lower() if mac else "bc:24:11:12:34:56"
    stats = {"rx-bytes": 4096, "rx-packets": 32, "tx-bytes": 2048, "tx-packets": 16}
    return [
        {
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
            ],
            "statistics": stats,
        },
        {
            "name": "eth0",
            "hardware-address": hw,
            "ip-addresses": [
                {
                    "ip-address-type": "ipv4",
                    "ip-address": str(address.ip),
                    "prefix": address.network.prefixlen,
                },
                {
                    "ip-address-type": "ipv6",
                    "ip-address": "fe80::be24:11ff:fe12:3456",
                    "prefix": 64,
                },
            ],
            "statistics": stats,
        },
    ]


def _valid_public_key(line: str) -> bool:
    try:
        serialization.load_ssh_public_key(line.strip().encode())
    except (ValueError, TypeError, NotImplementedError):
        return False
    return True


def _parse_size(text: str) -> int | None:
    # pve-common PVE/JSONSchema.pm `parse_size`
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])?", text)
    if match is None:
        return None
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}.get(match.group(2) or "", 1)
    return int(float(match.group(1)) * scale)


def _format_size(size: int) -> str:
    # pve-common PVE/JSONSchema.pm `format_size`: the largest unit that divides evenly.
    for unit, scale in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


_VM = rf"{re.escape('/nodes/')}(?P<node>[^/]+)/qemu/(?P<vmid>[^/]+)"
_TASK = r"/nodes/(?P<node>[^/]+)/tasks/(?P<upid>[^/]+)"
_ROUTES: tuple[tuple[str, str, Callable[[FakeProxmox, dict[str, str], str], Any]], ...] = (
    ("GET", r"/cluster/nextid", FakeProxmox.nextid),
    ("GET", r"/cluster/resources", FakeProxmox.resources),
    ("POST", rf"{_VM}/clone", FakeProxmox.clone),
    ("GET", rf"{_VM}/config", FakeProxmox.config_get),
    ("PUT", rf"{_VM}/config", FakeProxmox.config_put),
    ("POST", rf"{_VM}/config", FakeProxmox.config_post),
    ("PUT", rf"{_VM}/resize", FakeProxmox.resize),
    ("GET", rf"{_VM}/status/current", FakeProxmox.status),
    ("POST", rf"{_VM}/status/start", FakeProxmox.start_vm),
    ("POST", rf"{_VM}/status/stop", FakeProxmox.stop_vm),
    ("DELETE", _VM, FakeProxmox.destroy),
    ("GET", rf"{_VM}/agent/network-get-interfaces", FakeProxmox.agent_interfaces),
    ("GET", rf"{_TASK}/status", FakeProxmox.task_status),
    ("GET", rf"{_TASK}/log", FakeProxmox.task_log),
)


# --- HTTP -----------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        fake: FakeProxmox,
    ) -> None:
        self.fake = fake
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        with self.fake.lock:
            self.fake.connections += 1
        sock.settimeout(10)
        # The TLS handshake happens in the handler's thread (setup), not in accept's.
        wrapped = self.fake._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that refuses our certificate aborts the handshake: count it, quietly.
        # Anything else is a bug in the fake: say so.
        error = sys.exc_info()[1]
        if isinstance(error, (ssl.SSLError, ConnectionError, TimeoutError)):
            with self.fake.lock:
                self.fake.tls_failures += 1
            return
        with self.fake.lock:
            self.fake.bugs.append(repr(error))
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "pve-api-daemon/3.0"  # pve-http-server sets this Server header
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        assert isinstance(self.request, ssl.SSLSocket)
        self.request.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the access log is written in `_respond`, pveproxy's way

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8") if length else ""
        user = "-"
        try:
            if not parts.path.startswith(BASE + "/"):
                raise ProxmoxApiError(501, "no such uri", body=False)
            path = unquote(parts.path[len(BASE) :])
            try:
                user = fake.authenticate(self.headers.get("Authorization"))
            except ProxmoxApiError:
                time.sleep(fake.knobs.auth_failure_delay)
                raise
            if body and method not in ("POST", "PUT"):
                # PVE/APIServer/AnyEvent.pm: "Unexpected content for method '$method'"
                raise ProxmoxApiError(501, f"Unexpected content for method '{method}'", body=False)
            # pve-manager PVE/HTTPServer.pm (`$extract_params`): the form body for POST and
            # PUT, then the query string, each decoded once (+ is a space).
            params = dict(parse_qsl(body, keep_blank_values=True))
            params.update(parse_qsl(parts.query, keep_blank_values=True))
            fault = fake.take_fault(method, path)
            if fault is not None:
                if fault.after:
                    with contextlib.suppress(ProxmoxApiError):
                        fake.handle(method, path, params, user)
                if fault.status is None:
                    self._record(method, parts, body, 0)
                    self._drop()
                    return
                # AnyEvent.pm `proxy_request`: HTTP::Response->new($code, $msg, $header,
                # undef) with AnyEvent::HTTP's Status and Reason; no body.
                raise ProxmoxApiError(fault.status, fault.reason, body=False)
            data = fake.handle(method, path, params, user)
        except ProxmoxApiError as failure:
            self._record(method, parts, body, failure.status)
            self._failure(failure, user)
            return
        self._record(method, parts, body, 200)
        # pve-http-server PVE/APIServer/Formatter/Standard.pm: {"data": …}, plus `total`
        # (the task log sets it).
        envelope: dict[str, Any] = {"data": data}
        if isinstance(data, Paged):
            envelope = {"data": data.items, "total": data.total}
        self._respond(200, "OK", json.dumps(envelope).encode(), user)

    def _drop(self) -> None:
        """Close the connection with a TCP reset (SO_LINGER 0), no answer written."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            socket.socket.close(self.request)

    def _record(self, method: str, parts: Any, body: str, status: int) -> None:
        fake = self.server.fake
        params = dict(parse_qsl(body, keep_blank_values=True))
        params.update(parse_qsl(parts.query, keep_blank_values=True))
        path = unquote(parts.path[len(BASE) :]) if parts.path.startswith(BASE) else parts.path
        with fake.lock:
            call = Call(method, path, params, status)
            fake.calls.append(call)
            if fake.knobs.after_call is not None:
                fake.knobs.after_call(fake, call)

    def _failure(self, failure: ProxmoxApiError, user: str) -> None:
        content = b""
        if failure.body:
            # Standard.pm `prepare_response_data` for format json: data (null), errors when
            # there are any, and message.
            envelope: dict[str, Any] = {"data": None, "message": failure.message}
            if failure.errors:
                envelope["errors"] = failure.errors
            content = json.dumps(envelope).encode()
        reason = failure.message.splitlines()[0] if failure.message else ""
        self._respond(failure.status, reason, content, user)

    def _respond(self, status: int, reason: str, content: bytes, user: str) -> None:
        fake = self.server.fake
        self.send_response_only(status, reason)
        self.send_header("Server", self.server_version)
        self.send_header("Date", self.date_time_string())
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.send_header("Expires", self.date_time_string())
        if content:
            self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(content)))
        if status >= 400:
            # AnyEvent.pm `response`: keep_alive = 0 if code >= 400
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Connection", "Keep-Alive")
        self.end_headers()
        self.wfile.write(content)
        if fake.access_log is not None:
            # AnyEvent.pm `log_request`: "$peerip - $userid [$timestr] \"$requestline\"
            # $code $content_length" — the user id, never a credential.
            stamp = time.strftime("%d/%m/%Y:%H:%M:%S %z")
            line = (
                f'{self.client_address[0]} - {user} [{stamp}] "{self.requestline}" '
                f"{status} {len(content) or '-'}\n"
            )
            with fake.lock, fake.access_log.open("a", encoding="utf-8") as log:
                log.write(line)


@dataclass
class Running:
    """A started fake with its CA, for tests: what `ctl --ca-cert` and the token need."""

    fake: FakeProxmox
    ca_file: Path
    access_log: Path
    tmp: Path = field(repr=False)

    @property
    def port(self) -> int:
        return self.fake.port

    @property
    def knobs(self) -> Knobs:
        return self.fake.knobs


def running_fake(tmp: Path, knobs: Knobs | None = None) -> Iterator[Running]:
    """A generator for a pytest fixture: a fake with a fresh CA, stopped afterwards."""
    ca = ThrowawayCA.create()
    ca_file = ca.write(tmp / "proxmox-ca.pem")
    cert, key = ca.issue(tmp / "server")
    access_log = tmp / "pveproxy-access.log"
    fake = FakeProxmox(cert, key, knobs=knobs, access_log=access_log)
    with fake:
        yield Running(fake, ca_file, access_log, tmp)
