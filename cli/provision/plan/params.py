"""A VM's configuration as Proxmox takes it: the parameters encoded, and what differs.

Pure: part of cli/provision/plan (its docstring: the Proxmox rules followed, and where
from).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from cli.provision.plan.options import ProvisionOptions

TAG = "modelfleet"  # tags every VM ctl makes, so people can tell them apart in the GUI


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
