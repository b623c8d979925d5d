#!/usr/bin/env python3
"""testfleet: a local fleet of Debian nodes for trying and testing `ctl` without hardware.

Each node is a `systemd-nspawn` container with systemd as PID 1 and a real sshd, booted
from one cached debootstrap root filesystem through an overlay (one upper directory per
node). The containers share the host's network; node-N's sshd listens on 127.0.1.N:22 only.
Each node gets fake hardware from its spec: a fake `nvidia-smi` (tests/fakes/nvidia_smi.py),
a /proc/meminfo bind-mounted at boot, an InfiniBand sysfs tree and NVIDIA PCI devices.

    testfleet up N [--specs FILE]   boot node-1..node-N (idempotent), write keys and inventory
    testfleet status                one line per node
    testfleet down                  power every node off
    testfleet stop NODE / start NODE
    testfleet specs N               print the default specs of N nodes (a --specs template)
    testfleet check                 can this machine run the fleet?
    testfleet ssh NODE [COMMAND]    ssh to a node with the fleet's key and known_hosts
    testfleet clean [--all]         forget nodes, keys and inventory (--all: the cached rootfs too)

Everything lives in ${MODELFLEET_TESTFLEET_DIR:-/var/tmp/modelfleet-testfleet}. Needs root,
systemd-nspawn (systemd-container) and debootstrap; works without systemd on the host.
See docs/testfleet.md. The functions here are the API the integration tests use.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TextIO, cast

import yaml

ROOT: Final = Path(__file__).resolve().parents[1]
FAKE_NVIDIA_SMI: Final = ROOT / "tests" / "fakes" / "nvidia_smi.py"

STATE_ENV: Final = "MODELFLEET_TESTFLEET_DIR"
MIRROR_ENV: Final = "MODELFLEET_TESTFLEET_MIRROR"
DEFAULT_STATE_DIR: Final = Path("/var/tmp/modelfleet-testfleet")
DEFAULT_MIRROR: Final = "http://deb.debian.org/debian"
SUITE: Final = "bookworm"
PACKAGES: Final = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "iproute2",
    "openssl",
)
# Units of the debootstrapped system that only make noise in a test node (apt downloads at
# random times would skew a benchmark).
QUIET_UNITS: Final = (
    "etc/systemd/system/timers.target.wants/apt-daily.timer",
    "etc/systemd/system/timers.target.wants/apt-daily-upgrade.timer",
    "etc/systemd/system/timers.target.wants/dpkg-db-backup.timer",
    "etc/systemd/system/timers.target.wants/e2scrub_all.timer",
    "etc/systemd/system/timers.target.wants/fstrim.timer",
    "etc/systemd/system/multi-user.target.wants/e2scrub_reap.service",
)

MAX_NODES: Final = 64
SSH_PORT: Final = 22
BOOT_TIMEOUT: Final = 60.0  # seconds for one node's sshd to answer, from its start
BOOT_TIMEOUT_PER_EXTRA_NODE: Final = 3.0  # nodes booting at once share the CPUs
STOP_TIMEOUT: Final = 30.0  # seconds for a clean poweroff before SIGKILL
CGROUP_NAME: Final = "modelfleet-testfleet"
NODE_NAME: Final = re.compile(r"^node-([1-9][0-9]*)$")
MACHINE_ID_NAMESPACE: Final = uuid.UUID("5b0f3f6e-8d0a-4c65-9a8e-7d7c2a1f0b11")

Say = Callable[[str], None]


def _print(message: str) -> None:
    print(message, flush=True)


class FleetError(Exception):
    """Something the operator can act on: the message says what and what to do."""


class SpecError(FleetError):
    """A spec file that is not what docs/testfleet.md describes."""


# =========================================================================== specs


@dataclass(frozen=True)
class HcaSpec:
    """One RDMA device with one port: /sys/class/infiniband/NAME/ports/1/."""

    name: str
    state: str = "ACTIVE"  # DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
    rate_gbps: int = 400
    link_layer: str = "InfiniBand"  # or Ethernet (RoCE)
    rate: str | None = None  # the rate file verbatim; default from rate_gbps and state


@dataclass(frozen=True)
class FabricSpec:
    """The `fabrics` host variable written into the inventory (what the operator says)."""

    name: str
    hcas: tuple[str, ...]
    rate_gbps: int | None = None


@dataclass(frozen=True)
class GpuProcessSpec:
    """A compute process on a GPU, as nvidia-smi --query-compute-apps reports it."""

    gpu: int
    pid: int
    name: str
    used_mib: int


@dataclass(frozen=True)
class GpuSpec:
    model: str  # the name nvidia-smi prints: "NVIDIA H100 80GB HBM3"
    count: int
    memory_mib: int  # memory.total of each GPU
    ecc: bool = True  # False: the ECC column prints [N/A]
    # "all": one NVLink domain (NVSwitch); "none": PCIe only; or lists of GPU indices.
    nvlink: Literal["all", "none"] | tuple[tuple[int, ...], ...] = "none"
    nvlink_width: int = 18  # the N of NV# in topo -m
    used_mib: int = 0  # memory.used of an idle GPU (processes add theirs)
    uncorrected_ecc: Mapping[int, int] = field(default_factory=dict)  # GPU index → errors
    processes: tuple[GpuProcessSpec, ...] = ()
    # ok: nvidia-smi works; broken: it fails as with no driver loaded; missing: the GPUs are
    # on the PCI bus but there is no nvidia-smi.
    driver: Literal["ok", "broken", "missing"] = "ok"
    underline_topo_header: bool = False  # as newer drivers print the topo -m header

    def nvlink_domains(self) -> tuple[tuple[int, ...], ...]:
        """The NVLink domains `nvidia-smi topo -m` shows (what parse_topology must find)."""
        if self.nvlink == "all":
            return (tuple(range(self.count)),)
        groups = () if self.nvlink == "none" else self.nvlink
        grouped = {gpu for group in groups for gpu in group}
        singles = tuple((gpu,) for gpu in range(self.count) if gpu not in grouped)
        return tuple(sorted(tuple(sorted(group)) for group in (*groups, *singles)))


@dataclass(frozen=True)
class NodeSpec:
    memory_gib: float  # MemTotal
    memory_available_gib: float | None = None  # MemAvailable; default 96% of MemTotal
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: GpuSpec | None = None  # None: a CPU-only node (no nvidia-smi, no NVIDIA device)
    hcas: tuple[HcaSpec, ...] = ()
    fabrics: tuple[FabricSpec, ...] = ()

    def summary(self) -> str:
        parts = []
        if self.gpus is not None:
            parts.append(f"{self.gpus.model.removeprefix('NVIDIA ')} x{self.gpus.count}")
        else:
            parts.append("CPU only")
        parts.append(f"{self.memory_gib:g} GiB")
        parts += [fabric.name for fabric in self.fabrics]
        return ", ".join(parts)


H100: Final = "NVIDIA H100 80GB HBM3"
H100_MIB: Final = 81559
IB_HCAS: Final = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


def _h100_node(
    fabric: str,
    down: tuple[str, ...] = (),
    processes: tuple[GpuProcessSpec, ...] = (),
    underline: bool = False,
) -> NodeSpec:
    return NodeSpec(
        memory_gib=2048,
        memory_available_gib=1990,
        labels={"role": "inference"},
        gpus=GpuSpec(
            model=H100,
            count=8,
            memory_mib=H100_MIB,
            nvlink="all",
            nvlink_width=18,
            processes=processes,
            underline_topo_header=underline,
        ),
        hcas=tuple(HcaSpec(hca, state="DOWN" if hca in down else "ACTIVE") for hca in IB_HCAS),
        fabrics=(FabricSpec(fabric, IB_HCAS, 400),),
    )


def default_spec(index: int) -> NodeSpec:
    """The spec of node-INDEX in the default fleet: seven kinds of node, then again."""
    kind = (index - 1) % 7
    if kind == 0:  # HGX H100, NVSwitch, four HCAs on ib-a
        return _h100_node("ib-a")
    if kind == 1:  # the same with one HCA down
        return _h100_node("ib-a", down=("mlx5_2",))
    if kind == 2:  # PCIe L40S, no ECC reported, no RDMA
        return NodeSpec(
            memory_gib=512,
            labels={"role": "inference"},
            gpus=GpuSpec(model="NVIDIA L40S", count=4, memory_mib=46068, ecc=False),
        )
    if kind == 3:  # A100 PCIe in NVLink-bridged pairs, GPU 3 with uncorrected ECC errors
        return NodeSpec(
            memory_gib=1024,
            labels={"role": "inference"},
            gpus=GpuSpec(
                model="NVIDIA A100 80GB PCIe",
                count=4,
                memory_mib=81920,
                nvlink=((0, 1), (2, 3)),
                nvlink_width=12,
                uncorrected_ecc={3: 2},
            ),
        )
    if kind == 4:
        return NodeSpec(memory_gib=8, labels={"role": "general"})
    if kind == 5:
        return NodeSpec(memory_gib=64, labels={"role": "coding"})
    # HGX H100 on ib-b with somebody else's process on GPU 5
    return _h100_node(
        "ib-b",
        processes=(GpuProcessSpec(gpu=5, pid=4121, name="python3", used_mib=20480),),
        underline=True,
    )


def node_name(index: int) -> str:
    return f"node-{index}"


def node_index(name: str) -> int:
    match = NODE_NAME.match(name)
    if match is None or not 1 <= int(match.group(1)) <= MAX_NODES:
        raise FleetError(f"{name!r} is not a node name (node-1 .. node-{MAX_NODES})")
    return int(match.group(1))


def node_address(index: int) -> str:
    return f"127.0.1.{index}"


# --------------------------------------------------------------------------- spec I/O


class _Reader:
    """Reads one mapping of a spec file, naming the key path in every error."""

    def __init__(self, data: object, where: str, keys: Sequence[str]):
        if not isinstance(data, dict):
            raise SpecError(f"{where}: expected a mapping, got {type(data).__name__}")
        unknown = sorted((str(key) for key in data if key not in keys), key=str)
        if unknown:
            raise SpecError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(keys)})")
        self.data: dict[str, Any] = data
        self.where = where
        self.used: set[str] = set()

    def _get(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, key: str) -> bool:
        return key in self.data

    def number(self, key: str, default: float | None = None, positive: bool = True) -> float:
        value = self._get(key)
        if value is None:
            if default is None:
                raise SpecError(f"{self.at(key)}: required")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{self.at(key)}: expected a number, got {value!r}")
        if positive and value <= 0:
            raise SpecError(f"{self.at(key)}: must be above 0, got {value!r}")
        return float(value)

    def whole(self, key: str, default: int | None = None, minimum: int = 0) -> int:
        value = self._get(key)
        if value is None:
            if default is None:
                raise SpecError(f"{self.at(key)}: required")
            return default
        return _whole(value, self.at(key), minimum)

    def text(self, key: str, default: str | None = None) -> str:
        value = self._get(key)
        if value is None:
            if default is None:
                raise SpecError(f"{self.at(key)}: required")
            return default
        if not isinstance(value, str) or not value.strip():
            raise SpecError(f"{self.at(key)}: expected text, got {value!r}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        value = self.text(key, default)
        if value not in choices:
            raise SpecError(f"{self.at(key)}: expected one of {', '.join(choices)}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"{self.at(key)}: expected true or false, got {value!r}")
        return value

    def items(self, key: str) -> list[Any]:
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise SpecError(f"{self.at(key)}: expected a list, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[Any, Any]:
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecError(f"{self.at(key)}: expected a mapping, got {value!r}")
        return value

    def raw(self, key: str) -> Any:
        return self._get(key)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used, key=str)
        if unknown:
            raise SpecError(f"{self.where}: unknown key {unknown[0]!r}")


def _whole(value: object, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: expected a whole number, got {value!r}")
    if value < minimum:
        raise SpecError(f"{where}: must be at least {minimum}, got {value}")
    return value


def _label(value: object, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise SpecError(f"{where}: a label is text, got {value!r}")


NODE_KEYS: Final = ("memory_gib", "memory_available_gib", "labels", "gpus", "hcas", "fabrics")
GPU_KEYS: Final = (
    "model",
    "count",
    "memory_mib",
    "ecc",
    "nvlink",
    "nvlink_width",
    "used_mib",
    "uncorrected_ecc",
    "processes",
    "driver",
    "underline_topo_header",
)
HCA_STATES: Final = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}


def _gpu_spec(data: object, where: str) -> GpuSpec:
    reader = _Reader(data, where, GPU_KEYS)
    count = reader.whole("count", minimum=1)
    if count > 16:
        raise SpecError(f"{reader.at('count')}: at most 16 GPUs per node, got {count}")

    def gpu_index(value: object, at: str) -> int:
        index = _whole(value, at)
        if index >= count:
            raise SpecError(f"{at}: GPU {index} does not exist (count is {count})")
        return index

    nvlink_raw = reader.raw("nvlink")
    nvlink: Literal["all", "none"] | tuple[tuple[int, ...], ...]
    if nvlink_raw is None or nvlink_raw == "none":
        nvlink = "none"
    elif nvlink_raw == "all":
        nvlink = "all"
    elif isinstance(nvlink_raw, list):
        groups: list[tuple[int, ...]] = []
        seen: set[int] = set()
        for number, group in enumerate(nvlink_raw):
            at = f"{reader.at('nvlink')}[{number}]"
            if not isinstance(group, list) or len(group) < 2:
                raise SpecError(f"{at}: expected a list of at least two GPU indices")
            members = tuple(gpu_index(gpu, at) for gpu in group)
            if seen & set(members) or len(set(members)) != len(members):
                raise SpecError(f"{at}: a GPU is in one NVLink group at most")
            seen |= set(members)
            groups.append(members)
        nvlink = tuple(groups)
    else:
        raise SpecError(
            f"{reader.at('nvlink')}: expected all, none or lists of GPU indices, got {nvlink_raw!r}"
        )
    uncorrected: dict[int, int] = {}
    for key, value in reader.mapping("uncorrected_ecc").items():
        at = f"{reader.at('uncorrected_ecc')}.{key}"
        # JSON (the fleet's own state file) has text keys only.
        index = int(key) if isinstance(key, str) and key.isdigit() else key
        uncorrected[gpu_index(index, at)] = _whole(value, at)
    processes = []
    for number, item in enumerate(reader.items("processes")):
        process = _Reader(
            item, f"{reader.at('processes')}[{number}]", ("gpu", "pid", "name", "used_mib")
        )
        processes.append(
            GpuProcessSpec(
                gpu=gpu_index(process.raw("gpu"), process.at("gpu")),
                pid=process.whole("pid", minimum=1),
                name=process.text("name"),
                used_mib=process.whole("used_mib"),
            )
        )
        process.done()
    spec = GpuSpec(
        model=reader.text("model"),
        count=count,
        memory_mib=reader.whole("memory_mib", minimum=1),
        ecc=reader.flag("ecc", True),
        nvlink=nvlink,
        nvlink_width=reader.whole("nvlink_width", 18, minimum=1),
        used_mib=reader.whole("used_mib", 0),
        uncorrected_ecc=uncorrected,
        processes=tuple(processes),
        driver=_driver(reader.choice("driver", ("ok", "broken", "missing"), "ok")),
        underline_topo_header=reader.flag("underline_topo_header", False),
    )
    reader.done()
    if uncorrected and not spec.ecc:
        raise SpecError(f"{where}: uncorrected_ecc needs ecc: true")
    return spec


def _driver(value: str) -> Literal["ok", "broken", "missing"]:
    if value == "broken":
        return "broken"
    if value == "missing":
        return "missing"
    return "ok"


def node_spec_from_dict(data: object, where: str) -> NodeSpec:
    """A node's spec as written in a spec file (docs/testfleet.md) → NodeSpec."""
    reader = _Reader(data, where, NODE_KEYS)
    total = reader.number("memory_gib")
    available = reader.raw("memory_available_gib")
    if available is not None:
        available = reader.number("memory_available_gib")
        if available > total:
            raise SpecError(f"{reader.at('memory_available_gib')}: above memory_gib")
    labels = {
        _label(key, reader.at("labels")): _label(value, f"{reader.at('labels')}.{key}")
        for key, value in reader.mapping("labels").items()
    }
    gpus = None if reader.raw("gpus") is None else _gpu_spec(reader.raw("gpus"), reader.at("gpus"))
    hcas = []
    for number, item in enumerate(reader.items("hcas")):
        hca = _Reader(
            item,
            f"{reader.at('hcas')}[{number}]",
            ("name", "state", "rate_gbps", "link_layer", "rate"),
        )
        rate = hca.raw("rate")
        hcas.append(
            HcaSpec(
                name=hca.text("name"),
                state=hca.choice("state", tuple(HCA_STATES), "ACTIVE"),
                rate_gbps=hca.whole("rate_gbps", 400, minimum=1),
                link_layer=hca.choice("link_layer", ("InfiniBand", "Ethernet"), "InfiniBand"),
                rate=None if rate is None else hca.text("rate"),
            )
        )
        hca.done()
    if len({hca.name for hca in hcas}) != len(hcas):
        raise SpecError(f"{reader.at('hcas')}: an HCA name appears twice")
    fabrics = []
    for number, item in enumerate(reader.items("fabrics")):
        fabric = _Reader(item, f"{reader.at('fabrics')}[{number}]", ("name", "hcas", "rate_gbps"))
        names = fabric.items("hcas")
        if not names or not all(isinstance(name, str) for name in names):
            raise SpecError(f"{fabric.at('hcas')}: expected a list of HCA names")
        rate_gbps = fabric.raw("rate_gbps")
        fabrics.append(
            FabricSpec(
                name=fabric.text("name"),
                hcas=tuple(names),
                rate_gbps=None if rate_gbps is None else fabric.whole("rate_gbps", minimum=1),
            )
        )
        fabric.done()
    reader.done()
    return NodeSpec(
        memory_gib=total,
        memory_available_gib=available,
        labels=labels,
        gpus=gpus,
        hcas=tuple(hcas),
        fabrics=tuple(fabrics),
    )


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def node_spec_to_dict(spec: NodeSpec) -> dict[str, Any]:
    """NodeSpec → the spec file form; keys at their default values are left out."""
    data: dict[str, Any] = {"memory_gib": _number(spec.memory_gib)}
    if spec.memory_available_gib is not None:
        data["memory_available_gib"] = _number(spec.memory_available_gib)
    if spec.labels:
        data["labels"] = dict(spec.labels)
    if spec.gpus is not None:
        gpus = spec.gpus
        default = GpuSpec(model=gpus.model, count=gpus.count, memory_mib=gpus.memory_mib)
        gpu_data: dict[str, Any] = {
            "model": gpus.model,
            "count": gpus.count,
            "memory_mib": gpus.memory_mib,
        }
        for key in ("ecc", "nvlink", "nvlink_width", "used_mib", "driver"):
            value = getattr(gpus, key)
            if value != getattr(default, key):
                if key == "nvlink" and not isinstance(value, str):
                    value = [list(group) for group in value]
                gpu_data[key] = value
        if gpus.underline_topo_header:
            gpu_data["underline_topo_header"] = True
        if gpus.uncorrected_ecc:
            gpu_data["uncorrected_ecc"] = dict(gpus.uncorrected_ecc)
        if gpus.processes:
            gpu_data["processes"] = [dataclasses.asdict(process) for process in gpus.processes]
        data["gpus"] = gpu_data
    if spec.hcas:
        hcas = []
        for hca in spec.hcas:
            item: dict[str, Any] = {"name": hca.name}
            default_hca = HcaSpec(hca.name)
            for key in ("state", "rate_gbps", "link_layer", "rate"):
                if getattr(hca, key) != getattr(default_hca, key):
                    item[key] = getattr(hca, key)
            hcas.append(item)
        data["hcas"] = hcas
    if spec.fabrics:
        data["fabrics"] = [
            {"name": fabric.name, "hcas": list(fabric.hcas)}
            | ({} if fabric.rate_gbps is None else {"rate_gbps": fabric.rate_gbps})
            for fabric in spec.fabrics
        ]
    return data


def specs_from_file(path: Path) -> dict[str, NodeSpec]:
    """A spec file: `nodes:` mapping node-K to its spec (docs/testfleet.md)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(f"{path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not YAML: {error}") from None
    top = _Reader(data, str(path), ("nodes",))
    nodes = top.mapping("nodes")
    top.done()
    specs: dict[str, NodeSpec] = {}
    for name, spec in nodes.items():
        where = f"{path}: nodes.{name}"
        try:
            node_index(str(name))
        except FleetError as error:
            raise SpecError(f"{where}: {error}") from None
        specs[str(name)] = node_spec_from_dict(spec, where)
    return specs


def specs_yaml(specs: Mapping[str, NodeSpec]) -> str:
    body = {"nodes": {name: node_spec_to_dict(spec) for name, spec in specs.items()}}
    return yaml.dump(body, Dumper=_Dumper, sort_keys=False, width=100)


class _Dumper(yaml.SafeDumper):
    """Block style, with short lists of scalars inline, and null written as nothing."""

    def represent_list(self, data: Any) -> yaml.SequenceNode:
        flow = all(isinstance(item, str | int | float) for item in data) and len(data) <= 8
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _Dumper.represent_list)
_Dumper.add_representer(
    type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "")
)


# =========================================================================== fake hardware

DRIVER_VERSION: Final = "550.54.15"
NUMA_CPUS: Final = ("0-47,96-143", "48-95,144-191")
# PCI bus numbers of the GPUs, by NUMA node (an HGX H100 board's, then more of the same kind).
BUS_NUMBERS: Final = (
    ("18", "2A", "3A", "5D", "1B", "2B", "3B", "5E"),
    ("9A", "AB", "BA", "DB", "9B", "AC", "BB", "DC"),
)
PCI_DEVICE_IDS: Final = (  # (substring of the model name, PCI device id)
    ("H100 80GB HBM3", "0x2330"),
    ("H100", "0x2331"),
    ("A100 80GB PCIe", "0x20b5"),
    ("A100", "0x20b2"),
    ("L40S", "0x26b9"),
)
RATE_NAMES: Final = {10: "SDR", 20: "DDR", 40: "QDR", 56: "FDR", 100: "EDR", 200: "HDR", 400: "NDR"}


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(MACHINE_ID_NAMESPACE, f"{node}/gpu/{index}"))


def _gpu_numa(index: int, count: int) -> int:
    return 0 if index < (count + 1) // 2 else 1


def gpu_data(node: str, spec: NodeSpec) -> dict[str, Any]:
    """The fake nvidia-smi's data file (tests/fakes/nvidia_smi.py FakeData) for a node."""
    gpus = spec.gpus
    if gpus is None:
        raise FleetError(f"{node} has no GPUs")
    count = gpus.count
    switches = len(spec.hcas) if 0 < len(spec.hcas) <= count else count
    used = dict.fromkeys(range(count), gpus.used_mib)
    for process in gpus.processes:
        used[process.gpu] += process.used_mib
    numbered: dict[int, int] = {0: 0, 1: 0}
    rows = []
    for index in range(count):
        numa = _gpu_numa(index, count)
        bus = BUS_NUMBERS[numa][numbered[numa] % len(BUS_NUMBERS[numa])]
        numbered[numa] += 1
        rows.append(
            {
                "index": index,
                "uuid": gpu_uuid(node, index),
                "name": gpus.model,
                "pci_bus_id": f"00000000:{bus}:00.0",
                "memory_total_mib": gpus.memory_mib,
                "memory_used_mib": used[index],
                "ecc_uncorrected": gpus.uncorrected_ecc.get(index, 0) if gpus.ecc else None,
                "numa_node": numa,
                "cpu_affinity": NUMA_CPUS[numa],
                "pcie_switch": index * switches // count,
            }
        )
    nics = []
    for number, hca in enumerate(spec.hcas):
        paired = [row for row in rows if row["pcie_switch"] == number]
        nics.append(
            {
                "name": hca.name,
                "numa_node": paired[0]["numa_node"] if paired else number * 2 // len(spec.hcas),
                "pcie_switch": number if paired else None,
            }
        )
    nvlinks = [
        [a, b, gpus.nvlink_width]
        for group in gpus.nvlink_domains()
        for a in group
        for b in group
        if a < b
    ]
    return {
        "driver": "broken" if gpus.driver == "broken" else "ok",
        "driver_version": DRIVER_VERSION,
        "gpus": rows,
        "nics": nics,
        "nvlinks": nvlinks,
        "processes": [
            {
                "gpu_uuid": gpu_uuid(node, process.gpu),
                "pid": process.pid,
                "process_name": process.name,
                "used_memory_mib": process.used_mib,
            }
            for process in gpus.processes
        ],
        "underline_topo_header": gpus.underline_topo_header,
    }


def _kib(gib: float) -> int:
    """GiB → kB, a whole number of 4 KiB pages."""
    return int(gib * 1024 * 1024) // 4 * 4


def meminfo(spec: NodeSpec) -> str:
    """/proc/meminfo of a node with the spec's memory, in the kernel's format (Linux 6.1)."""
    total = _kib(spec.memory_gib)
    available = _kib(
        spec.memory_available_gib
        if spec.memory_available_gib is not None
        else spec.memory_gib * 0.96
    )
    page = 4
    buffers = total // 400 // page * page
    cached = total // 25 // page * page
    free = max(available - buffers - cached * 3 // 4, available // 2) // page * page
    anon = max(total - free - buffers - cached, 0) // 2 // page * page
    slab = total // 200 // page * page
    rows: list[tuple[str, int, bool]] = [
        ("MemTotal", total, True),
        ("MemFree", free, True),
        ("MemAvailable", available, True),
        ("Buffers", buffers, True),
        ("Cached", cached, True),
        ("SwapCached", 0, True),
        ("Active", anon // 2 + cached // 2, True),
        ("Inactive", anon // 2 + cached // 2, True),
        ("Active(anon)", anon // 2, True),
        ("Inactive(anon)", anon // 2, True),
        ("Active(file)", cached // 2, True),
        ("Inactive(file)", cached // 2, True),
        ("Unevictable", 0, True),
        ("Mlocked", 0, True),
        ("SwapTotal", 0, True),
        ("SwapFree", 0, True),
        ("Zswap", 0, True),
        ("Zswapped", 0, True),
        ("Dirty", 128, True),
        ("Writeback", 0, True),
        ("AnonPages", anon, True),
        ("Mapped", cached // 8 // page * page, True),
        ("Shmem", 2048, True),
        ("KReclaimable", slab // 2, True),
        ("Slab", slab, True),
        ("SReclaimable", slab // 2, True),
        ("SUnreclaim", slab // 2, True),
        ("KernelStack", 16384, True),
        ("PageTables", 24576, True),
        ("SecPageTables", 0, True),
        ("NFS_Unstable", 0, True),
        ("Bounce", 0, True),
        ("WritebackTmp", 0, True),
        ("CommitLimit", total // 2, True),
        ("Committed_AS", anon + 65536, True),
        ("VmallocTotal", 34359738367, True),
        ("VmallocUsed", 262144, True),
        ("VmallocChunk", 0, True),
        ("Percpu", 98304, True),
        ("HardwareCorrupted", 0, True),
        ("AnonHugePages", 0, True),
        ("ShmemHugePages", 0, True),
        ("ShmemPmdMapped", 0, True),
        ("FileHugePages", 0, True),
        ("FilePmdMapped", 0, True),
        ("HugePages_Total", 0, False),
        ("HugePages_Free", 0, False),
        ("HugePages_Rsvd", 0, False),
        ("HugePages_Surp", 0, False),
        ("Hugepagesize", 2048, True),
        ("Hugetlb", 0, True),
        ("DirectMap4k", 1048576, True),
        ("DirectMap2M", total // 2 // 2048 * 2048, True),
        ("DirectMap1G", total // 2 // 1048576 * 1048576, True),
    ]
    # The kernel's show_val_kb(): the name and colon padded to 16, the value to 8, " kB".
    return "".join(f"{name + ':':<16}{value:>8}{' kB' if kb else ''}\n" for name, value, kb in rows)


def hca_rate(hca: HcaSpec) -> str:
    if hca.rate is not None:
        return hca.rate
    if hca.state != "ACTIVE":
        return "10 Gb/sec (4X)"  # what a port without a link reports
    name = RATE_NAMES.get(hca.rate_gbps)
    return f"{hca.rate_gbps} Gb/sec (4X{' ' + name if name else ''})"


def infiniband_files(spec: NodeSpec) -> dict[str, str]:
    """/sys/class/infiniband: path relative to it → file content."""
    files: dict[str, str] = {}
    for hca in spec.hcas:
        port = f"{hca.name}/ports/1"
        files[f"{hca.name}/node_type"] = "1: CA\n"
        files[f"{port}/state"] = f"{HCA_STATES[hca.state]}: {hca.state}\n"
        files[f"{port}/phys_state"] = "3: Disabled\n" if hca.state == "DOWN" else "5: LinkUp\n"
        files[f"{port}/rate"] = hca_rate(hca) + "\n"
        files[f"{port}/link_layer"] = hca.link_layer + "\n"
    return files


def pci_files(node: str, spec: NodeSpec) -> dict[str, str]:
    """/sys/bus/pci/devices entries of the node's NVIDIA GPUs: relative path → content."""
    if spec.gpus is None:
        return {}
    device_id = next((pci for model, pci in PCI_DEVICE_IDS if model in spec.gpus.model), None)
    files: dict[str, str] = {}
    for gpu in gpu_data(node, spec)["gpus"]:
        address = str(gpu["pci_bus_id"])[4:].lower()  # 00000000:18:00.0 → 0000:18:00.0
        files[f"{address}/vendor"] = "0x10de\n"
        files[f"{address}/class"] = "0x030200\n"  # 3D controller
        if device_id is not None:
            files[f"{address}/device"] = device_id + "\n"
    return files


FAKE_HW_SCRIPT: Final = r"""#!/bin/sh
# Installed by scripts/testfleet (the modelfleet test fleet). A container shares the host
# kernel's /proc and /sys, so this lays the node's fake hardware over them at boot, and
# hides the host's own RDMA devices and NVIDIA GPUs, if it has any.
set -eu
FAKE=/etc/modelfleet-fake
SAVED=/run/modelfleet-fake

mount --bind "$FAKE/meminfo" /proc/meminfo

# cover DIR SOURCE: DIR is in read-only sysfs, where nothing can be created. Mount a tmpfs
# over it holding what DIR held (directories and files bound back, symlinks copied) except
# what hidden() says, add the fake entries from SOURCE, and make it read-only again.
cover() {
  dir=$1 source=$2 saved=$SAVED$1
  mkdir -p "$saved" "$source"
  mount --bind "$dir" "$saved"
  mount --make-private "$saved"
  mount -t tmpfs -o mode=0755,nosuid,nodev,noexec modelfleet-fake "$dir"
  for entry in "$saved"/* ; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    name=${entry##*/}
    if [ -e "$source/$name" ] || hidden "$dir" "$entry"; then continue; fi
    if [ -L "$entry" ]; then
      ln -s "$(readlink "$entry")" "$dir/$name"
    elif [ -d "$entry" ]; then
      mkdir "$dir/$name" && mount --bind "$entry" "$dir/$name"
    else
      : > "$dir/$name" && mount --bind "$entry" "$dir/$name"
    fi
  done
  cp -a "$source/." "$dir/"
  mount -o remount,bind,ro "$dir"
}

hidden() {
  case "$1" in
    /sys/class) [ "${2##*/}" = infiniband ] ;;
    # Relative links (../../../devices/...): followed from where they were, not the copy.
    /sys/bus/pci/devices) [ "$(cat "$1/$(readlink "$2")/vendor" 2>/dev/null)" = 0x10de ] ;;
    *) false ;;
  esac
}

cover /sys/class "$FAKE/sys/class"
cover /sys/bus/pci/devices "$FAKE/sys/bus/pci/devices"
"""

FAKE_HW_UNIT: Final = """\
# Installed by scripts/testfleet (the modelfleet test fleet).
[Unit]
Description=Fake hardware of a test fleet node (meminfo, InfiniBand and PCI sysfs)
DefaultDependencies=no
ConditionVirtualization=container
After=local-fs.target
Before=sysinit.target ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/modelfleet-fake-hw

[Install]
WantedBy=sysinit.target
"""


def sshd_config(address: str) -> str:
    return f"""\
# Written by scripts/testfleet: this node's sshd, on its own loopback address only (the
# nodes share the host's network), with its own host key, keys only.
ListenAddress {address}:{SSH_PORT}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
# The benchmark opens a connection to every node at once, several times in a row.
MaxStartups 100:30:200
"""


def etc_hosts(name: str, address: str) -> str:
    return (
        f"127.0.0.1\tlocalhost\n{address}\t{name}\n"
        "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n"
    )


@dataclass(frozen=True)
class NodeFile:
    content: bytes
    mode: int = 0o644
    symlink: bool = False  # content is the link target


def node_files(
    name: str, spec: NodeSpec, host_key: bytes, host_key_pub: bytes, client_pub: bytes
) -> dict[str, NodeFile]:
    """Everything written into a node's upper directory before it boots: path → file."""
    index = node_index(name)
    address = node_address(index)
    files: dict[str, NodeFile] = {
        "etc/hostname": NodeFile(f"{name}\n".encode()),
        "etc/hosts": NodeFile(etc_hosts(name, address).encode()),
        "etc/machine-id": NodeFile(
            (uuid.uuid5(MACHINE_ID_NAMESPACE, name).hex + "\n").encode(), 0o444
        ),
        "etc/ssh/ssh_host_ed25519_key": NodeFile(host_key, 0o600),
        "etc/ssh/ssh_host_ed25519_key.pub": NodeFile(host_key_pub),
        "etc/ssh/sshd_config.d/modelfleet-testfleet.conf": NodeFile(sshd_config(address).encode()),
        "root/.ssh/authorized_keys": NodeFile(client_pub, 0o600),
        "etc/modelfleet-fake/spec.json": NodeFile(
            (json.dumps(node_spec_to_dict(spec), indent=2) + "\n").encode()
        ),
        "etc/modelfleet-fake/meminfo": NodeFile(meminfo(spec).encode(), 0o444),
        "usr/local/sbin/modelfleet-fake-hw": NodeFile(FAKE_HW_SCRIPT.encode(), 0o755),
        "etc/systemd/system/modelfleet-fake-hw.service": NodeFile(FAKE_HW_UNIT.encode()),
        "etc/systemd/system/sysinit.target.wants/modelfleet-fake-hw.service": NodeFile(
            b"/etc/systemd/system/modelfleet-fake-hw.service", symlink=True
        ),
    }
    for path, content in infiniband_files(spec).items():
        files[f"etc/modelfleet-fake/sys/class/infiniband/{path}"] = NodeFile(
            content.encode(), 0o444
        )
    for path, content in pci_files(name, spec).items():
        files[f"etc/modelfleet-fake/sys/bus/pci/devices/{path}"] = NodeFile(content.encode(), 0o444)
    if spec.gpus is not None and spec.gpus.driver != "missing":
        files.update(nvidia_smi_files(name, spec))
    return files


# On a GPU node: /usr/bin/nvidia-smi is a sh script serving the probe's three command lines
# from outputs precomputed here, and running the Python fake (installed beside, reading
# gpus.json) for any other (tests/fakes/nvidia_smi.py, fast_path_script).
NVIDIA_SMI_OUTPUTS: Final = "etc/modelfleet-fake/nvidia-smi"
NVIDIA_SMI_FAKE: Final = "usr/local/lib/modelfleet-fake/nvidia_smi.py"


def nvidia_smi_files(name: str, spec: NodeSpec) -> dict[str, NodeFile]:
    """The fake nvidia-smi of a GPU node: the fast path, its outputs, the Python fake."""
    # Here, not at the top: tests/fakes imports this module (when this runs as a script, the
    # package loads a second copy of it, which is harmless).
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.fakes import nvidia_smi

    data = gpu_data(name, spec)
    files = {
        "etc/modelfleet-fake/gpus.json": NodeFile((json.dumps(data, indent=2) + "\n").encode()),
        NVIDIA_SMI_FAKE: NodeFile(FAKE_NVIDIA_SMI.read_bytes(), 0o755),
        "usr/bin/nvidia-smi": NodeFile(
            nvidia_smi.fast_path_script(f"/{NVIDIA_SMI_OUTPUTS}", [f"/{NVIDIA_SMI_FAKE}"]).encode(),
            0o755,
        ),
    }
    for file_name, content in nvidia_smi.precomputed(cast(nvidia_smi.FakeData, data)).items():
        files[f"{NVIDIA_SMI_OUTPUTS}/{file_name}"] = NodeFile(content.encode(), 0o444)
    return files


# Paths of ours in an upper directory, removed before the files are written again (so a node
# whose spec lost its GPUs loses its nvidia-smi).
MANAGED_PATHS: Final = (
    "etc/modelfleet-fake",
    "usr/bin/nvidia-smi",
    "usr/local/lib/modelfleet-fake",
)


def files_digest(files: Mapping[str, NodeFile]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        item = files[path]
        digest.update(f"{path}\0{item.mode:o}\0{int(item.symlink)}\0".encode())
        digest.update(hashlib.sha256(item.content).digest())
    return digest.hexdigest()


def _make_parents(upper: Path, rootfs: Path, relative: Path) -> None:
    """Create the directories above `relative` in `upper` with the modes they have in the
    root filesystem: an overlay shows the upper directory's own mode and owner."""
    current = Path()
    for part in relative.parent.parts:
        current = current / part
        target = upper / current
        if target.is_dir() and not target.is_symlink():
            continue
        lower = rootfs / current
        if lower.is_symlink():
            raise FleetError(f"cannot write under /{current}: a symlink in the root filesystem")
        if target.exists() or target.is_symlink():
            target.unlink()  # an overlay whiteout or a stale file
        target.mkdir()
        if lower.is_dir():
            info = lower.stat()
            os.chown(target, info.st_uid, info.st_gid)
            target.chmod(info.st_mode & 0o7777)
        else:
            target.chmod(0o700 if current == Path("root/.ssh") else 0o755)


def install_node_files(upper: Path, rootfs: Path, files: Mapping[str, NodeFile]) -> None:
    for managed in MANAGED_PATHS:
        path = upper / managed
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for relative_text, item in sorted(files.items()):
        relative = Path(relative_text)
        target = upper / relative
        _make_parents(upper, rootfs, relative)
        if target.is_symlink() or target.exists():
            target.unlink()
        if item.symlink:
            target.symlink_to(item.content.decode())
            continue
        target.write_bytes(item.content)
        target.chmod(item.mode)
        os.chown(target, 0, 0)


# =========================================================================== state


@dataclass(frozen=True)
class Node:
    name: str
    spec: NodeSpec

    @property
    def index(self) -> int:
        return node_index(self.name)

    @property
    def address(self) -> str:
        return node_address(self.index)


@dataclass(frozen=True)
class Fleet:
    """A configured fleet: what `up` wrote, whether or not its nodes are running now."""

    state_dir: Path
    nodes: tuple[Node, ...]

    @property
    def inventory_dir(self) -> Path:
        return self.state_dir / "inventory"

    @property
    def inventory(self) -> Path:
        return self.inventory_dir / "hosts.yml"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def inventory_known_hosts(self) -> Path:
        """Where ctl looks by default: hidden, or Ansible and ctl would read it as an
        inventory source of the directory (cli/ops/context.py KNOWN_HOSTS_NAME)."""
        return self.inventory_dir / ".known_hosts"

    @property
    def client_key(self) -> Path:
        return self.state_dir / "client" / "id_ed25519"

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise FleetError(f"{name} is not in the fleet ({', '.join(self.names())})")

    def names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def ssh_command(self, node: str, *command: str) -> list[str]:
        """An ssh command line to a node that trusts nothing but the fleet's known_hosts."""
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            f"root@{self.node(node).address}",
            *command,
        ]


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(STATE_ENV) or DEFAULT_STATE_DIR).absolute()


def _rootfs(state: Path) -> Path:
    return state / "rootfs"


def _rootfs_marker(state: Path) -> Path:
    return state / "rootfs.complete"


def _node_dir(state: Path, name: str) -> Path:
    return state / "nodes" / name


def load_fleet(state: Path | None = None) -> Fleet | None:
    """The fleet `up` configured last, or None when there is none."""
    state = state or state_dir()
    path = state / "fleet.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Fleet(
        state_dir=state,
        nodes=tuple(
            Node(name, node_spec_from_dict(spec, f"{path}: {name}"))
            for name, spec in data["nodes"].items()
        ),
    )


def _save_fleet(fleet: Fleet) -> None:
    data = {"nodes": {node.name: node_spec_to_dict(node.spec) for node in fleet.nodes}}
    _write_text(fleet.state_dir / "fleet.json", json.dumps(data, indent=2) + "\n")
    _write_text(
        fleet.state_dir / "specs.yml",
        "# The specs of the fleet's nodes (testfleet up --specs FILE reads this format).\n"
        + specs_yaml({node.name: node.spec for node in fleet.nodes}),
    )


def _write_text(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(mode)
    temporary.replace(path)


@contextlib.contextmanager
def _locked(state: Path, say: Say) -> Iterator[None]:
    """One testfleet command at a time per state directory (parallel test workers wait)."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another testfleet command (lock {state / 'lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# =========================================================================== host checks


def apt_mirror(sources: Sequence[Path] | None = None) -> str:
    """The Debian mirror apt uses here (one-line and deb822 sources), for debootstrap."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    if sources is None:
        sources = [Path("/etc/apt/sources.list")]
        directory = Path("/etc/apt/sources.list.d")
        if directory.is_dir():
            sources += sorted(directory.iterdir())
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    key, colon, value = line.partition(":")
                    if colon and not line.startswith(("#", " ", "\t")):
                        fields[key.strip().lower()] = value.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and SUITE in fields.get("suites", "").split()
                    and fields.get("enabled", "yes").lower() != "no"
                ):
                    return fields.get("uris", DEFAULT_MIRROR).split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return DEFAULT_MIRROR


def cgroup_roots() -> list[Path]:
    """The hierarchies a container's processes are tracked in: the cgroup2 mount and, on a
    hybrid host, the name=systemd v1 one. Each node's nspawn is started in its own cgroup in
    each: with --keep-unit nspawn creates `supervisor` and `payload` in the cgroup it is
    started in, and two nodes started in one cgroup would share one payload cgroup."""
    roots: list[Path] = []
    with Path("/proc/self/mounts").open(encoding="utf-8") as mounts:
        for line in mounts:
            _, point, kind, options, *_ = line.split()
            if kind == "cgroup2" or (kind == "cgroup" and "name=systemd" in options.split(",")):
                roots.append(Path(point.replace("\\040", " ")))
    return roots


def _fleet_cgroup(root: Path, state: Path) -> Path:
    """ROOT/modelfleet-testfleet/ID, ID from the state directory: two fleets' node-1 (one
    running, one failing to start on the same address) never share a cgroup."""
    return root / CGROUP_NAME / hashlib.sha256(str(state).encode()).hexdigest()[:12]


def _node_cgroups(state: Path, name: str) -> list[Path]:
    return [_fleet_cgroup(root, state) / name for root in cgroup_roots()]


def _cgroup_pids(cgroup: Path) -> set[int]:
    pids: set[int] = set()
    if not cgroup.is_dir():
        return pids
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids |= {int(pid) for pid in procs.read_text().split()}
    return pids


def _kill_cgroup(cgroup: Path) -> None:
    kill = cgroup / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1")
    for pid in _cgroup_pids(cgroup):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_cgroup(cgroup: Path) -> None:
    if not cgroup.is_dir():
        return
    for directory in sorted(
        (path for path in cgroup.rglob("*") if path.is_dir()),
        key=lambda path: len(path.parts),
        reverse=True,
    ):
        with contextlib.suppress(OSError):
            directory.rmdir()
    # The node's cgroup, then its parents up to modelfleet-testfleet/ when they are empty.
    for directory in (cgroup, *cgroup.parents):
        try:
            directory.rmdir()
        except OSError:
            break
        if directory.name == CGROUP_NAME:
            break


def _clear_cgroups(cgroups: Sequence[Path], timeout: float = 10.0) -> None:
    """SIGKILL whatever is still in a node's cgroups, wait for it to go, remove them."""
    deadline = time.monotonic() + timeout
    while any(_cgroup_pids(cgroup) for cgroup in cgroups):
        if time.monotonic() > deadline:
            left = sorted(set().union(*(_cgroup_pids(cgroup) for cgroup in cgroups)))
            raise FleetError(f"processes {left} in {cgroups[0]} did not die on SIGKILL")
        for cgroup in cgroups:
            _kill_cgroup(cgroup)
        time.sleep(0.1)
    for cgroup in cgroups:
        _remove_cgroup(cgroup)


def _join_cgroups(cgroups: Sequence[Path]) -> Callable[[], None]:
    def join() -> None:  # runs in the child between fork and exec
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return join


def check_host() -> str | None:
    """Why this machine cannot run the fleet's containers, or None when it can."""
    if os.geteuid() != 0:
        return "not root: systemd-nspawn needs root"
    nspawn = shutil.which("systemd-nspawn")
    if nspawn is None:
        return "systemd-nspawn is missing (apt-get install systemd-container)"
    roots = cgroup_roots()
    if not roots:
        return "no cgroup2 or name=systemd cgroup hierarchy is mounted"
    for root in roots:
        if not os.access(root, os.W_OK):
            return f"cannot create cgroups under {root} (no privileges for containers here?)"
    # A quick container: an empty tree with the host's /usr bound in, running true.
    with tempfile.TemporaryDirectory(prefix="testfleet-probe-") as directory:
        tree = Path(directory)
        (tree / "usr").mkdir()
        for link in ("bin", "sbin", "lib", "lib64"):
            if Path("/", link).is_symlink():
                (tree / link).symlink_to(Path("/", link).readlink())
        cgroups = [root / CGROUP_NAME / f"probe-{os.getpid()}" for root in roots]
        try:
            for cgroup in cgroups:
                cgroup.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(
                [
                    nspawn,
                    "--quiet",
                    "--register=no",
                    "--keep-unit",
                    f"--machine=testfleet-probe-{os.getpid()}",
                    f"--directory={tree}",
                    "--bind-ro=/usr",
                    "/usr/bin/true",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                preexec_fn=_join_cgroups(cgroups),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"a test container could not be started: {error}"
        finally:
            for cgroup in cgroups:
                _remove_cgroup(cgroup)
        if result.returncode != 0:
            lines = [
                line
                for line in result.stderr.splitlines()
                if line.strip() and "we can't allow that" not in line
            ]
            return (
                f"a test container (systemd-nspawn ... /usr/bin/true) failed with exit code"
                f" {result.returncode}: {' / '.join(lines[-3:]) or 'no message'}"
            )
    return None


def _listening(address: str, port: int) -> str | None:
    """Who listens on address:port already: the address text, or None when nobody does."""
    wanted = {
        "".join(reversed([f"{int(part):02X}" for part in address.split(".")])): address,
        "00000000": "0.0.0.0",
    }
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        host, _, port_hex = local.partition(":")
        if state == "0A" and int(port_hex, 16) == port and host in wanted:
            return f"{wanted[host]}:{port}"
    return None


# =========================================================================== processes

_children: dict[int, subprocess.Popen[bytes]] = {}  # nspawn processes this process started


def _process_start(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _pid_file(state: Path, name: str) -> Path:
    return _node_dir(state, name) / "nspawn.pid"


def _running_pid(state: Path, name: str) -> int | None:
    """The node's systemd-nspawn pid while it runs (a reused pid or a zombie is not it)."""
    try:
        pid_text, start_text = _pid_file(state, name).read_text().split()
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return None
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]
        return None
    now = _process_start(pid)
    if now is None or now[1] != start or now[0] in ("Z", "X"):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if f"--machine={name}".encode() not in command:
        return None
    return pid


def _sshd_answers(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, SSH_PORT), timeout=timeout) as connection:
            connection.settimeout(timeout)
            return connection.recv(64).startswith(b"SSH-")
    except OSError:
        return False


# up: sshd answers; booting: systemd-nspawn runs, sshd does not answer yet; orphaned: the
# container runs without its systemd-nspawn (killed), start/up/down clear it; down.
NodeState = Literal["up", "booting", "orphaned", "down"]


def node_state(state: Path, name: str) -> NodeState:
    if _running_pid(state, name) is None:
        if any(_cgroup_pids(cgroup) for cgroup in _node_cgroups(state, name)):
            return "orphaned"
        return "down"
    return "up" if _sshd_answers(node_address(node_index(name))) else "booting"


def node_cpu_seconds(name: str, state: Path | None = None) -> float | None:
    """CPU time used so far by everything in a node (its sshd, the commands run over SSH,
    its systemd...), from its cgroup2 `cpu.stat`; None without a cgroup2 hierarchy or when
    the node is down. The benchmark takes differences of it."""
    state = state or state_dir()
    for cgroup in _node_cgroups(state, name):
        with contextlib.suppress(OSError):
            for line in (cgroup / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    return None


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no console log)"
    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    return "\n".join("    " + ansi.sub("", line) for line in text.splitlines()[-lines:])


def _preflight(state: Path, name: str) -> None:
    """Before a node starts: clear what is left of it, check that its address is free."""
    _clear_cgroups(_node_cgroups(state, name))  # a container whose nspawn was killed
    taken = _listening(node_address(node_index(name)), SSH_PORT)
    if taken is not None:
        raise FleetError(
            f"{name}: something already listens on {taken}, so the node's sshd could not."
            " Another test fleet (another MODELFLEET_TESTFLEET_DIR)? A host sshd on all"
            " addresses? Give it explicit ListenAddress lines without 127.0.1.x."
        )


def _launch(state: Path, name: str) -> int:
    """Start one node's systemd-nspawn in the background (after _preflight); its pid."""
    directory = _node_dir(state, name)
    rootfs = _rootfs(state)
    upper = directory / "upper"
    cgroups = _node_cgroups(state, name)
    for cgroup in cgroups:
        cgroup.mkdir(parents=True, exist_ok=True)
    command = [
        shutil.which("systemd-nspawn") or "systemd-nspawn",
        "--boot",
        "--register=no",  # no host systemd-machined to register with
        "--keep-unit",  # no host systemd to make a scope unit
        f"--machine={name}",
        f"--directory={rootfs}",
        f"--overlay={rootfs}:{upper}:/",
        "--console=read-only",
        "--link-journal=no",
    ]
    log_path = directory / "console.log"
    with log_path.open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n=== testfleet: {' '.join(command)} at {stamp}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Into the node's own cgroups before exec (see cgroup_roots); no threads here.
            preexec_fn=_join_cgroups(cgroups),  # noqa: PLW1509
        )
    _children[process.pid] = process
    started = _process_start(process.pid)
    _write_text(_pid_file(state, name), f"{process.pid} {started[1] if started else 0}\n")
    return process.pid


def _wait_for_sshd(state: Path, names: Sequence[str], timeout: float, say: Say) -> None:
    """Until every node's sshd answers; a node whose nspawn exits or that takes longer than
    `timeout` is stopped and reported."""
    began = time.monotonic()
    pending = list(names)
    failed: list[str] = []
    while pending:
        for name in list(pending):
            address = node_address(node_index(name))
            if _running_pid(state, name) is None:
                failed.append(f"{name}: systemd-nspawn exited while booting")
                pending.remove(name)
            elif _sshd_answers(address, timeout=0.5):
                say(f"{name} up at {address} ({time.monotonic() - began:.1f} s)")
                pending.remove(name)
            elif time.monotonic() - began > timeout:
                failed.append(f"{name}: sshd did not answer on {address}:22 in {timeout:.0f} s")
                pending.remove(name)
        if pending:
            time.sleep(0.2)
    if failed:
        broken = [line.partition(":")[0] for line in failed]
        _stop_nodes(state, broken, say)
        details = "\n".join(
            f"{line}\n  {_node_dir(state, name) / 'console.log'} ends with:\n"
            + _log_tail(_node_dir(state, name) / "console.log")
            for line, name in zip(failed, broken, strict=True)
        )
        raise FleetError(f"{len(failed)} node(s) did not come up:\n{details}")


def _stop_nodes(state: Path, names: Sequence[str], say: Say, timeout: float = STOP_TIMEOUT) -> None:
    """Power nodes off: SIGTERM to systemd-nspawn, which asks the container's systemd to shut
    down (SIGRTMIN+3) and waits for it; SIGKILL to whatever is left after `timeout`. Then the
    nodes' cgroups are removed. The containers' mounts live in their own mount namespaces
    and go with them."""
    began = time.monotonic()
    running = {name: pid for name in names if (pid := _running_pid(state, name)) is not None}
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    while running and time.monotonic() - began < timeout:
        for name in list(running):
            if _running_pid(state, name) is None:
                say(f"{name} down ({time.monotonic() - began:.1f} s)")
                del running[name]
        if running:
            time.sleep(0.1)
    for name, pid in running.items():
        say(f"{name} did not power off in {timeout:.0f} s: killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for name in names:
        _clear_cgroups(_node_cgroups(state, name))
        _pid_file(state, name).unlink(missing_ok=True)
    _reap_children()


def _reap_children() -> None:
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]


# =========================================================================== setup


def ensure_rootfs(state: Path, say: Say, mirror: str | None = None) -> Path:
    """The cached root filesystem, debootstrapped on first use (a marker file says it is
    complete, so an interrupted debootstrap is started again)."""
    rootfs = _rootfs(state)
    marker = _rootfs_marker(state)
    if marker.exists() and rootfs.is_dir():
        return rootfs
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise FleetError("debootstrap is missing (apt-get install debootstrap)")
    mirror = mirror or apt_mirror()
    partial = state / "rootfs.partial"
    for stale in (partial, rootfs):
        if stale.exists():
            shutil.rmtree(stale)
    log_path = state / "debootstrap.log"
    say(f"debootstrap {SUITE} from {mirror} into {rootfs} (about a minute; log: {log_path})")
    began = time.monotonic()
    with log_path.open("wb") as log:
        result = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(partial),
                mirror,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        raise FleetError(
            f"debootstrap failed with exit code {result.returncode}; {log_path} ends with:\n"
            + _log_tail(log_path)
        )
    # The debootstrapped host keys would be shared by every node: each gets its own.
    for key in (partial / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    for unit in QUIET_UNITS:
        (partial / unit).unlink(missing_ok=True)
    (partial / "etc" / "machine-id").write_text("")
    partial.rename(rootfs)
    seconds = time.monotonic() - began
    _write_text(
        marker,
        json.dumps(
            {"suite": SUITE, "mirror": mirror, "packages": PACKAGES, "seconds": round(seconds)}
        )
        + "\n",
    )
    say(f"root filesystem ready ({seconds:.0f} s)")
    return rootfs


def _keygen(path: Path, comment: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + ".pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    path.chmod(0o600)


def _ensure_key(path: Path, comment: str) -> None:
    if not (path.exists() and path.with_name(path.name + ".pub").exists()):
        _keygen(path, comment)


def _host_key(state: Path, name: str) -> Path:
    return _node_dir(state, name) / "ssh_host_ed25519_key"


def host_public_key(state: Path, name: str) -> str:
    """`ssh-ed25519 AAAA...` of a node (without the comment)."""
    text = _host_key(state, name).with_name("ssh_host_ed25519_key.pub").read_text()
    return " ".join(text.split()[:2])


class _InventoryDumper(_Dumper):
    pass


def write_access_files(fleet: Fleet) -> None:
    """known_hosts (in the state directory, and as .known_hosts in the inventory directory,
    ctl's default) and the inventory: hosts.yml and group_vars/all.yml."""
    state = fleet.state_dir
    known = "".join(f"{node.address} {host_public_key(state, node.name)}\n" for node in fleet.nodes)
    _write_text(fleet.known_hosts, known)
    _write_text(fleet.inventory_known_hosts, known)
    hosts: dict[str, Any] = {}
    for node in fleet.nodes:
        host: dict[str, Any] = {
            "ansible_host": node.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(fleet.client_key),
            # The nodes share the host's network: a shard must listen on its node's own
            # address, not on every address, or two nodes' shards would take one port.
            "listen_address": node.address,
        }
        if node.spec.labels:
            host["labels"] = dict(node.spec.labels)
        if node.spec.fabrics:
            host["fabrics"] = [
                {"name": fabric.name, "hcas": list(fabric.hcas)}
                | ({} if fabric.rate_gbps is None else {"rate_gbps": fabric.rate_gbps})
                for fabric in node.spec.fabrics
            ]
        hosts[node.name] = host
    children = {
        group: {"hosts": dict.fromkeys(members)}
        for group, members in (
            ("gpu", [node.name for node in fleet.nodes if node.spec.gpus is not None]),
            ("cpu", [node.name for node in fleet.nodes if node.spec.gpus is None]),
        )
        if members
    }
    header = (
        "# The local test fleet (scripts/testfleet): systemd-nspawn nodes on 127.0.1.N.\n"
        "# Written by `testfleet up`, rewritten each time: edit the specs, not this file.\n"
    )
    _write_text(
        fleet.inventory,
        header
        + yaml.dump(
            {"all": {"hosts": hosts, "children": children}},
            Dumper=_InventoryDumper,
            sort_keys=False,
            width=100,
        ),
    )
    common_args = f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes"
    _write_text(
        fleet.inventory_dir / "group_vars" / "all.yml",
        header
        + yaml.dump(
            {
                "ansible_ssh_common_args": common_args,
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            Dumper=_InventoryDumper,
            sort_keys=False,
            width=200,
        ),
    )


def _configure_node(state: Path, node: Node, client_pub: bytes) -> tuple[dict[str, NodeFile], str]:
    key = _host_key(state, node.name)
    _ensure_key(key, f"root@{node.name}")
    files = node_files(
        node.name,
        node.spec,
        key.read_bytes(),
        key.with_name(key.name + ".pub").read_bytes(),
        client_pub,
    )
    return files, files_digest(files)


def _applied_digest(state: Path, name: str) -> str | None:
    try:
        return (_node_dir(state, name) / "applied.sha256").read_text().strip()
    except OSError:
        return None


# =========================================================================== commands


@dataclass(frozen=True)
class UpResult:
    fleet: Fleet
    started: tuple[str, ...]  # nodes booted by this call (the others were up already)


def boot_timeout(nodes_at_once: int) -> float:
    return BOOT_TIMEOUT + BOOT_TIMEOUT_PER_EXTRA_NODE * max(nodes_at_once - 1, 0)


def up(
    count: int,
    specs: Mapping[str, NodeSpec] | None = None,
    *,
    state: Path | None = None,
    timeout: float | None = None,
    mirror: str | None = None,
    say: Say = _print,
) -> UpResult:
    """Make node-1..node-COUNT run with their specs; returns the fleet.

    A node keeps its spec from the last `up` unless `specs` names it; a node new to the
    fleet gets its default spec. Nodes that are up with an unchanged configuration stay up;
    a running node whose configuration changed is restarted; nodes beyond COUNT are stopped.
    """
    if not 1 <= count <= MAX_NODES:
        raise FleetError(f"a fleet has 1 to {MAX_NODES} nodes, not {count}")
    state = state or state_dir()
    specs = dict(specs or {})
    for name in specs:
        if node_index(name) > count:
            raise SpecError(f"the specs name {name}, beyond the {count} nodes asked for")
    problem = check_host()
    if problem is not None:
        raise FleetError(f"this machine cannot run the test fleet: {problem}")
    with _locked(state, say):
        previous = load_fleet(state)
        kept = {node.name: node.spec for node in previous.nodes} if previous else {}
        nodes = tuple(
            Node(
                name,
                specs.get(name) or kept.get(name) or default_spec(index),
            )
            for index in range(1, count + 1)
            for name in [node_name(index)]
        )
        fleet = Fleet(state, nodes)
        rootfs = ensure_rootfs(state, say, mirror)
        _ensure_key(fleet.client_key, "modelfleet-testfleet client")
        fleet.client_key.parent.chmod(0o700)
        client_pub = fleet.client_key.with_name("id_ed25519.pub").read_bytes()

        beyond = [
            path.name
            for path in sorted((state / "nodes").glob("node-*"))
            if NODE_NAME.match(path.name) and node_index(path.name) > count
        ]
        if any(_running_pid(state, name) is not None for name in beyond):
            say(f"stopping nodes beyond node-{count}")
            _stop_nodes(state, beyond, say)

        to_start: list[str] = []
        for node in nodes:
            files, digest = _configure_node(state, node, client_pub)
            running = _running_pid(state, node.name) is not None
            if running and _applied_digest(state, node.name) == digest:
                continue
            if running:
                say(f"{node.name}: its configuration changed, restarting it")
                _stop_nodes(state, [node.name], say)
            else:  # an orphaned container must not run on the upper directory we write
                _clear_cgroups(_node_cgroups(state, node.name))
            upper = _node_dir(state, node.name) / "upper"
            upper.mkdir(parents=True, exist_ok=True)
            install_node_files(upper, rootfs, files)
            _write_text(_node_dir(state, node.name) / "applied.sha256", digest + "\n")
            to_start.append(node.name)

        _save_fleet(fleet)
        write_access_files(fleet)
        if to_start:
            for name in to_start:
                _preflight(state, name)
            say(f"booting {', '.join(to_start)}")
            for name in to_start:
                _launch(state, name)
            _wait_for_sshd(
                state,
                to_start,
                timeout if timeout is not None else boot_timeout(len(to_start)),
                say,
            )
        else:
            say(f"all {count} nodes were up already")
        return UpResult(fleet, tuple(to_start))


def _fleet_or_error(state: Path) -> Fleet:
    fleet = load_fleet(state)
    if fleet is None:
        raise FleetError(f"no fleet in {state}: run `testfleet up N` first")
    return fleet


def start(
    name: str, *, state: Path | None = None, timeout: float | None = None, say: Say = _print
) -> None:
    """Boot one node of the configured fleet (as `up` left it) and wait for its sshd."""
    state = state or state_dir()
    with _locked(state, say):
        fleet = _fleet_or_error(state)
        fleet.node(name)
        if _running_pid(state, name) is not None:
            say(f"{name} is running already")
            return
        _preflight(state, name)
        _launch(state, name)
        _wait_for_sshd(state, [name], timeout if timeout is not None else BOOT_TIMEOUT, say)


def stop(name: str, *, state: Path | None = None, say: Say = _print) -> None:
    """Power one node off (the others stay up): an unreachable node for tests."""
    state = state or state_dir()
    with _locked(state, say):
        _fleet_or_error(state).node(name)
        if _running_pid(state, name) is None:
            say(f"{name} is not running")
        _stop_nodes(state, [name], say)


def down(*, state: Path | None = None, say: Say = _print) -> tuple[str, ...]:
    """Power every node off; returns the nodes that were running."""
    state = state or state_dir()
    with _locked(state, say):
        names = [
            path.name
            for path in sorted(
                (state / "nodes").glob("node-*"), key=lambda p: (len(p.name), p.name)
            )
            if NODE_NAME.match(path.name)
        ]
        names += [
            cgroup.name
            for root in cgroup_roots()
            for cgroup in sorted(_fleet_cgroup(root, state).glob("node-*"))
            if cgroup.name not in names
        ]
        running = tuple(name for name in names if _running_pid(state, name) is not None)
        _stop_nodes(state, names, say)
        if not running:
            say("no node was running")
        return running


def status(state: Path | None = None) -> list[tuple[Node, NodeState]]:
    state = state or state_dir()
    fleet = load_fleet(state)
    if fleet is None:
        return []
    return [(node, node_state(state, node.name)) for node in fleet.nodes]


def clean(*, everything: bool = False, state: Path | None = None, say: Say = _print) -> None:
    """Forget the fleet (node directories, keys, inventory); with `everything`, the cached
    root filesystem too. The nodes must be down."""
    state = state or state_dir()
    with _locked(state, say):
        fleet = load_fleet(state)
        if fleet is not None and any(_running_pid(state, name) for name in fleet.names()):
            raise FleetError("nodes are running: run `testfleet down` first")
        for path in ("nodes", "client", "inventory"):
            shutil.rmtree(state / path, ignore_errors=True)
        for path in ("fleet.json", "specs.yml", "known_hosts"):
            (state / path).unlink(missing_ok=True)
        if everything:
            _rootfs_marker(state).unlink(missing_ok=True)
            for path in ("rootfs", "rootfs.partial"):
                shutil.rmtree(state / path, ignore_errors=True)
        say(f"cleaned {state}" + (" (root filesystem included)" if everything else ""))


# =========================================================================== command line


def _print_status(state: Path, out: TextIO) -> int:
    rows = status(state)
    if not rows:
        out.write(f"no fleet in {state}\n")
        return 0
    for node, node_state_ in rows:
        out.write(f"{node.name:<8} {node.address:<12} {node_state_:<8} {node.spec.summary()}\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testfleet",
        description="A local fleet of systemd-nspawn Debian nodes with fake GPUs, memory and"
        " InfiniBand, for trying and testing ctl (docs/testfleet.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="boot node-1..node-N (idempotent)")
    up_parser.add_argument("count", type=int, metavar="N")
    up_parser.add_argument("--specs", type=Path, metavar="FILE", help="node specs (YAML)")
    up_parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="for each node's sshd to answer"
    )
    up_parser.add_argument("--mirror", help="Debian mirror for debootstrap (default: apt's)")
    commands.add_parser("status", help="one line per node")
    commands.add_parser("down", help="power every node off")
    for name, text in (("stop", "power one node off"), ("start", "boot one node")):
        node_parser = commands.add_parser(name, help=text)
        node_parser.add_argument("node", metavar="NODE")
    specs_parser = commands.add_parser("specs", help="print the default specs of N nodes")
    specs_parser.add_argument("count", type=int, metavar="N")
    commands.add_parser("check", help="can this machine run the fleet?")
    ssh_parser = commands.add_parser("ssh", help="ssh to a node as root")
    ssh_parser.add_argument("node", metavar="NODE")
    ssh_parser.add_argument("remote", nargs=argparse.REMAINDER, metavar="COMMAND")
    clean_parser = commands.add_parser("clean", help="forget nodes, keys and inventory")
    clean_parser.add_argument("--all", action="store_true", help="the cached rootfs too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    state = state_dir()
    try:
        if arguments.command == "up":
            specs = specs_from_file(arguments.specs) if arguments.specs else None
            result = up(
                arguments.count,
                specs,
                state=state,
                timeout=arguments.timeout,
                mirror=arguments.mirror,
            )
            print(f"inventory: {result.fleet.inventory}")
            print(f"key:       {result.fleet.client_key}")
            return _print_status(state, sys.stdout)
        if arguments.command == "status":
            return _print_status(state, sys.stdout)
        if arguments.command == "down":
            down(state=state)
            return 0
        if arguments.command == "stop":
            stop(arguments.node, state=state)
            return 0
        if arguments.command == "start":
            start(arguments.node, state=state)
            return 0
        if arguments.command == "specs":
            if not 1 <= arguments.count <= MAX_NODES:
                raise FleetError(f"a fleet has 1 to {MAX_NODES} nodes")
            sys.stdout.write(
                specs_yaml({node_name(i): default_spec(i) for i in range(1, arguments.count + 1)})
            )
            return 0
        if arguments.command == "check":
            problem = check_host()
            print(f"cannot run the fleet: {problem}" if problem else "ok")
            return 1 if problem else 0
        if arguments.command == "ssh":
            command = _fleet_or_error(state).ssh_command(arguments.node, *arguments.remote)
            os.execvp(command[0], command)
        if arguments.command == "clean":
            clean(everything=arguments.all, state=state)
            return 0
    except SpecError as error:
        print(f"testfleet: {error}", file=sys.stderr)
        return 2
    except FleetError as error:
        print(f"testfleet: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `testfleet status | head`
        sys.exit(1)
