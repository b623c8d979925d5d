"""Pure parsers from the raw text the probe collects on a node to the facts model.

No I/O happens here: every function takes the text (or the files' contents) and returns
model objects. A parser that meets something it does not understand raises
`FactsParseError` naming the section and the line, rather than guessing.

Conventions shared by all parsers:

- Memory sizes are MiB, rounded down (a node never looks bigger than it is).
- `None` means "not reported" (nvidia-smi printed `[N/A]`, the kernel has no such line),
  never zero; an empty tuple means "looked, found none".

The bounds (rows, digits, sizes) and FactsParseError's section-and-line reporting that
make a hostile node cost a note are here, for every section; the parsers move to a module
a section in cli/facts/sections/ (store, certificate and infiniband have), which import
them from here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError

from cli.facts.model import (
    Gpu,
    GpuProcess,
    Memory,
    ShardRecord,
    ShardState,
)

__all__ = [
    "COMPUTE_APPS_FIELDS",
    "GPU_QUERY_FIELDS",
    "MAX_GPUS",
    "MAX_HCA_PORTS",
    "MAX_PROCESSES",
    "MAX_REPLICA_NODES",
    "MAX_SHARDS",
    "MAX_TOPOLOGY_COLUMNS",
    "NOT_REPORTED",
    "UNIT_STATES",
    "UNIT_UNTOLD",
    "FactsParseError",
    "apply_cgroup_limit",
    "parse_compute_apps",
    "parse_meminfo",
    "parse_mig_modes",
    "parse_query_gpu",
    "parse_shard_records",
    "parse_topology",
    "strip_ansi",
]

# The probe runs `nvidia-smi --query-gpu=<these, comma-joined> --format=csv,noheader,nounits`;
# parse_query_gpu expects exactly these columns in exactly this order.
GPU_QUERY_FIELDS: Final[tuple[str, ...]] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "ecc.errors.uncorrected.volatile.total",
)

# The probe runs `nvidia-smi --query-compute-apps=<these> --format=csv,noheader,nounits`.
COMPUTE_APPS_FIELDS: Final[tuple[str, ...]] = ("gpu_uuid", "pid", "process_name", "used_memory")

# What nvidia-smi prints in place of a value it cannot give. Each becomes None.
NOT_REPORTED: Final[frozenset[str]] = frozenset(
    {
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Unknown Error]",
        "[GPU requires reset]",
        "[GPU is lost]",
        "[Insufficient Permissions]",
        "ERR!",
    }
)

# Of those, the ones that are the GPU's error, not a field it lacks (nvidia-smi(1): ERR! for
# a value it could not read, "[GPU requires reset]", "[GPU is lost]"): the value is still
# None, and the GPU unusable (Gpu.faults).
GPU_FAULTS: Final[frozenset[str]] = frozenset({"ERR!", "[GPU requires reset]", "[GPU is lost]"})

KIB_PER_MIB: Final = 1024
BYTES_PER_MIB: Final = 1024 * 1024
# cgroup v1 reports "no limit" as a huge number (PAGE_COUNTER_MAX pages, e.g.
# 9223372036854771712 with 4 KiB pages). Anything at or above 1 EiB is read as "no limit".
CGROUP_UNLIMITED_BYTES: Final = 1 << 60

# Bounded work per node: a list longer than this is refused whole, with a note, before a row
# of it is read (a node is not believed to have 300,000 GPUs, and reading them would cost
# every other node its turn). Far above any real machine.
MAX_GPUS: Final = 1024
MAX_PROCESSES: Final = 16_384  # rows of --query-compute-apps
MAX_HCA_PORTS: Final = 1024
MAX_SHARDS: Final = 1024  # shard records on one node
MAX_TOPOLOGY_COLUMNS: Final = 2048  # GPUs and NICs in `nvidia-smi topo -m`
MAX_REPLICA_NODES: Final = 1024  # a shard record's `nodes`
MAX_PID: Final = 4_194_304  # the kernel's PID_MAX_LIMIT
MAX_PORT: Final = 65_535
MAX_IB_PORT: Final = 255  # a port number is a u8 in the verbs API
MAX_MEMORY_GIB: Final = float(1 << 30)  # 1 EiB
# Any other number: at most 18 digits (below 2**63), checked before int() is called, so a
# 5,000-digit value is a parse error, not Python's int-limit ValueError.
_MAX_DIGITS: Final = 18

SECTION_MEMINFO: Final = "/proc/meminfo"
SECTION_CGROUP: Final = "cgroup memory limit"
SECTION_QUERY_GPU: Final = "nvidia-smi --query-gpu"
SECTION_COMPUTE_APPS: Final = "nvidia-smi --query-compute-apps"
SECTION_MIG: Final = "nvidia-smi --query-gpu=index,mig.mode.current"
SECTION_TOPOLOGY: Final = "nvidia-smi topo -m"
SECTION_INFINIBAND: Final = "/sys/class/infiniband"
SECTION_SHARDS: Final = "shard records"


class FactsParseError(ValueError):
    """Probe output that does not have the shape we know: where, and what is wrong.

    `line` is 1-based; 0 means the problem is with the text as a whole (nothing to point at).
    """

    def __init__(self, section: str, line: int, message: str) -> None:
        self.section = section
        self.line = line
        self.message = message
        where = f"{section} line {line}" if line > 0 else section
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[type[FactsParseError], tuple[str, int, str]]:
        return (type(self), (self.section, self.line, self.message))


_DIGITS = re.compile(r"^[0-9]+$")  # str.isdigit() also accepts "²", which int() refuses


def _is_whole_number(text: str) -> bool:
    return _DIGITS.fullmatch(text) is not None


def _bounded_int(text: str, section: str, line: int, what: str, maximum: int) -> int:
    """`text`, already known to be digits, as an int no greater than `maximum`; the length
    is checked first so that int() never meets a huge string."""
    if len(text.lstrip("0")) > len(str(maximum)) or int(text) > maximum:
        raise FactsParseError(
            section, line, f"{what} {_quote(text)} is out of range (at most {maximum:,})"
        )
    return int(text)


_MAX_VALUE: Final = 10**_MAX_DIGITS - 1


def _count_rows(text: str, section: str, what: str, maximum: int, skip: str = "") -> None:
    """Refuse a list longer than `maximum` rows before reading any of it."""
    rows = sum(1 for raw in text.splitlines() if raw.strip() and raw.strip() != skip)
    if rows > maximum:
        raise FactsParseError(section, 0, f"reported {rows} {what}, more than {maximum:,}")


@dataclass(frozen=True)
class _Line:
    number: int  # 1-based
    text: str  # stripped


def _lines(text: str) -> Iterable[_Line]:
    """Non-blank lines, stripped, with their 1-based numbers in the original text."""
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped:
            yield _Line(number, stripped)


def _quote(value: str, limit: int = 60) -> str:
    shown = value if len(value) <= limit else value[: limit - 3] + "..."
    return repr(shown)


# --------------------------------------------------------------------------- /proc/meminfo

_MEMINFO_LINE = re.compile(r"^(?P<key>[^:\s]+):\s*(?P<value>\d+)(?:\s+(?P<unit>\S+))?$")


def _meminfo_kib(line: _Line, key: str) -> int:
    match = _MEMINFO_LINE.fullmatch(line.text)
    if match is None:
        raise FactsParseError(
            SECTION_MEMINFO, line.number, f"cannot read {key} from {_quote(line.text)}"
        )
    unit = match.group("unit")
    if unit != "kB":
        raise FactsParseError(
            SECTION_MEMINFO,
            line.number,
            f"{key} is in {_quote(unit or 'no unit')}, expected kB",
        )
    return _bounded_int(match.group("value"), SECTION_MEMINFO, line.number, key, _MAX_VALUE)


def parse_meminfo(text: str) -> Memory | None:
    """MemTotal and MemAvailable (kB) → Memory in MiB; None when there is no MemTotal.

    Kernels before 3.14 have no MemAvailable line: `available_mib` is then None, not 0.
    Other lines are only checked for the `Key: value [kB]` shape, so an error message in
    place of the file is not taken for a file without MemTotal.
    """
    values: dict[str, int] = {}
    for line in _lines(text):
        key = line.text.partition(":")[0]
        if key not in ("MemTotal", "MemAvailable"):
            if _MEMINFO_LINE.fullmatch(line.text) is None:
                raise FactsParseError(
                    SECTION_MEMINFO,
                    line.number,
                    f"expected 'Key: value kB', got {_quote(line.text)}",
                )
            continue
        if key in values:
            raise FactsParseError(SECTION_MEMINFO, line.number, f"{key} appears twice")
        values[key] = _meminfo_kib(line, key)
    if "MemTotal" not in values:
        return None
    available = values.get("MemAvailable")
    return Memory(
        total_mib=values["MemTotal"] // KIB_PER_MIB,
        available_mib=None if available is None else available // KIB_PER_MIB,
    )


# --------------------------------------------------------------------------- cgroup limit


def apply_cgroup_limit(memory: Memory | None, limit_text: str) -> Memory | None:
    """Cap `memory` by a container's memory limit; the smaller of the two wins.

    `limit_text` is the content of cgroup v2 `memory.max` (`max` or a number of bytes) or of
    cgroup v1 `memory.limit_in_bytes` (bytes; "no limit" is a huge number). With no limit the
    memory is returned unchanged. When the host memory is unknown (None), a finite limit is
    the best bound we have and becomes the total; available stays unknown.
    """
    lines = list(_lines(limit_text))
    if len(lines) != 1:
        problem = "is empty" if not lines else f"has {len(lines)} lines, expected 1"
        raise FactsParseError(SECTION_CGROUP, 0, problem)
    line = lines[0]
    if line.text == "max":
        return memory
    if not _is_whole_number(line.text):
        raise FactsParseError(
            SECTION_CGROUP,
            line.number,
            f"expected 'max' or a number of bytes, got {_quote(line.text)}",
        )
    limit_bytes = _bounded_int(line.text, SECTION_CGROUP, line.number, "limit", (1 << 64) - 1)
    if limit_bytes >= CGROUP_UNLIMITED_BYTES:
        return memory
    limit_mib = limit_bytes // BYTES_PER_MIB
    if memory is None:
        return Memory(total_mib=limit_mib)
    available = memory.available_mib
    return Memory(
        total_mib=min(memory.total_mib, limit_mib),
        available_mib=None if available is None else min(available, limit_mib),
    )


# --------------------------------------------------------------------------- nvidia-smi CSV

_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_WITH_UNIT = re.compile(r"^\d+(?:\.\d+)? \S+$")
_NO_DEVICES = "No devices were found"
_NO_PROCESSES = "No running processes found"


def _fields(line: _Line, section: str, expected: int) -> list[str]:
    fields = [field.strip() for field in line.text.split(",")]
    if len(fields) != expected:
        raise FactsParseError(
            section, line.number, f"expected {expected} fields, got {len(fields)}"
        )
    return fields


def _required_int(value: str, section: str, line: int, what: str, maximum: int = _MAX_VALUE) -> int:
    if not _is_whole_number(value):
        raise FactsParseError(section, line, f"{what} {_quote(value)} is not a whole number")
    return _bounded_int(value, section, line, what, maximum)


def _optional_int(value: str, section: str, line: int, what: str) -> int | None:
    if value in NOT_REPORTED:
        return None
    if not _is_whole_number(value):
        hint = (
            " (the probe must use --format=csv,noheader,nounits)"
            if _WITH_UNIT.fullmatch(value)
            else ""
        )
        raise FactsParseError(section, line, f"{what} {_quote(value)} is not a whole number{hint}")
    return _bounded_int(value, section, line, what, _MAX_VALUE)


def _required_text(value: str, section: str, line: int, what: str) -> str:
    if not value or value in NOT_REPORTED:
        raise FactsParseError(section, line, f"{what} is missing ({_quote(value)})")
    return value


def parse_query_gpu(text: str) -> tuple[Gpu, ...]:
    """Rows of `nvidia-smi --query-gpu=GPU_QUERY_FIELDS --format=csv,noheader,nounits`.

    Values nvidia-smi cannot give (`[N/A]`, `[Not Supported]`, `ERR!`...) become None for the
    numeric fields and the bus id; index, uuid and name are required. GPU names contain
    spaces but never commas. `No devices were found` means no GPUs: an empty tuple.
    """
    _count_rows(text, SECTION_QUERY_GPU, "GPUs", MAX_GPUS, skip=_NO_DEVICES)
    gpus: list[Gpu] = []
    seen: dict[int, int] = {}
    for line in _lines(text):
        if line.text == _NO_DEVICES:
            continue
        fields = _fields(line, SECTION_QUERY_GPU, len(GPU_QUERY_FIELDS))
        index_text, uuid, name, bus_id, total, used, ecc = fields
        if index_text == "index":
            raise FactsParseError(
                SECTION_QUERY_GPU, line.number, "found a header line; the probe must use noheader"
            )
        index = _required_int(index_text, SECTION_QUERY_GPU, line.number, "index", MAX_GPUS - 1)
        if index in seen:
            raise FactsParseError(
                SECTION_QUERY_GPU,
                line.number,
                f"GPU index {index} already given on line {seen[index]}",
            )
        seen[index] = line.number
        faults = tuple(
            f"{field}: {value}"
            for field, value in zip(GPU_QUERY_FIELDS[3:], fields[3:], strict=True)
            if value in GPU_FAULTS
        )
        pci_bus_id: str | None = None
        if bus_id not in NOT_REPORTED:
            if not _PCI_BUS_ID.fullmatch(bus_id):
                raise FactsParseError(
                    SECTION_QUERY_GPU,
                    line.number,
                    f"pci.bus_id {_quote(bus_id)} is not a PCI address "
                    "(are the fields in GPU_QUERY_FIELDS order?)",
                )
            pci_bus_id = bus_id
        gpus.append(
            Gpu(
                index=index,
                uuid=_required_text(uuid, SECTION_QUERY_GPU, line.number, "uuid"),
                name=_required_text(name, SECTION_QUERY_GPU, line.number, "name"),
                pci_bus_id=pci_bus_id,
                memory_total_mib=_optional_int(
                    total, SECTION_QUERY_GPU, line.number, "memory.total"
                ),
                memory_used_mib=_optional_int(used, SECTION_QUERY_GPU, line.number, "memory.used"),
                ecc_uncorrected=_optional_int(
                    ecc, SECTION_QUERY_GPU, line.number, "ecc.errors.uncorrected.volatile.total"
                ),
                faults=faults,
            )
        )
    return tuple(gpus)


# mig.mode.current, as `nvidia-smi --help-query-gpu` describes it: "Enabled" or "Disabled";
# [N/A] on a GPU without MIG (anything before Ampere, the GeForce and L40S lines).
_MIG_MODES: Final[dict[str, bool]] = {"Enabled": True, "Disabled": False}


def parse_mig_modes(text: str, faults: dict[int, str] | None = None) -> dict[int, bool | None]:
    """Rows of `nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader,nounits`:
    GPU index → MIG mode enabled (None: the GPU has no MIG mode, or could not say: then
    `faults`, when given, gets the GPU's answer)."""
    _count_rows(text, SECTION_MIG, "GPUs", MAX_GPUS, skip=_NO_DEVICES)
    modes: dict[int, bool | None] = {}
    for line in _lines(text):
        if line.text == _NO_DEVICES:
            continue
        index_text, mode = _fields(line, SECTION_MIG, 2)
        index = _required_int(index_text, SECTION_MIG, line.number, "index", MAX_GPUS - 1)
        if index in modes:
            raise FactsParseError(SECTION_MIG, line.number, f"GPU index {index} given twice")
        if mode in NOT_REPORTED:
            modes[index] = None
            if faults is not None and mode in GPU_FAULTS:
                faults[index] = f"mig.mode.current: {mode}"
        elif mode in _MIG_MODES:
            modes[index] = _MIG_MODES[mode]
        else:
            raise FactsParseError(
                SECTION_MIG, line.number, f"MIG mode {_quote(mode)} is not Enabled or Disabled"
            )
    return modes


def parse_compute_apps(text: str) -> tuple[GpuProcess, ...]:
    """Rows of `nvidia-smi --query-compute-apps=COMPUTE_APPS_FIELDS --format=csv,noheader,nounits`.

    Empty output and `No running processes found` mean none. A process name may contain
    commas (it is a path); the uuid, pid and memory around it never do.
    """
    _count_rows(text, SECTION_COMPUTE_APPS, "processes", MAX_PROCESSES, skip=_NO_PROCESSES)
    processes: list[GpuProcess] = []
    for line in _lines(text):
        if line.text == _NO_PROCESSES:
            continue
        fields = [field.strip() for field in line.text.split(",")]
        if len(fields) < len(COMPUTE_APPS_FIELDS):
            raise FactsParseError(
                SECTION_COMPUTE_APPS,
                line.number,
                f"expected {len(COMPUTE_APPS_FIELDS)} fields, got {len(fields)}",
            )
        uuid, pid_text, *name_parts, memory = fields
        if uuid == "gpu_uuid":
            raise FactsParseError(
                SECTION_COMPUTE_APPS,
                line.number,
                "found a header line; the probe must use noheader",
            )
        processes.append(
            GpuProcess(
                gpu_uuid=_required_text(uuid, SECTION_COMPUTE_APPS, line.number, "gpu_uuid"),
                pid=_required_int(pid_text, SECTION_COMPUTE_APPS, line.number, "pid", MAX_PID),
                process_name=", ".join(name_parts),
                used_memory_mib=_optional_int(
                    memory, SECTION_COMPUTE_APPS, line.number, "used_memory"
                ),
            )
        )
    return tuple(processes)


# --------------------------------------------------------------------------- nvidia-smi topo -m

# CSI sequences (colour, underline, ...) and the rarer two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d{1,4})$")
# A matrix cell: X for self, NV# for NVLink, or an upper-case path kind (SYS, NODE, PHB, PXB,
# PIX, and SOC from old drivers). Anything else (a CPU list, a number) means a shifted row.
_CELL = re.compile(r"^(X|NV\d{1,4}|[A-Z]{2,5})$")
# Header words after the device columns: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID".
_HEADER_TAIL = frozenset({"CPU", "NUMA", "GPU", "Affinity", "ID"})


def strip_ansi(text: str) -> str:
    """Remove terminal escape codes (some drivers underline the topology header)."""
    return _ANSI.sub("", text)


def _gpu_number(digits: str, line: int, label: str) -> int:
    if len(digits) > len(str(MAX_GPUS)) or int(digits) >= MAX_GPUS:
        raise FactsParseError(
            SECTION_TOPOLOGY, line, f"{_quote(label)}: a GPU number of {MAX_GPUS:,} or more"
        )
    return int(digits)


def parse_topology(text: str) -> tuple[tuple[int, ...], ...]:
    """NVLink domains from `nvidia-smi topo -m`: groups of GPUs every pair of which is
    NVLink-connected (NV#; `_cliques` says how they are drawn).

    Only the GPU rows and GPU columns count; NIC rows and columns (NIC0..., mlx5_0...), the
    affinity columns and the legends are ignored. A GPU with no NV# link is a domain of its
    own. Domains are sorted, and so are the GPUs in each.
    """
    lines = strip_ansi(text).splitlines()
    # The header starts with GPU0; so does GPU0's row, whose next cell is X.
    header_at = next(
        (
            i
            for i, raw in enumerate(lines)
            if raw.split()[:1] == ["GPU0"] and raw.split()[1:2] != ["X"]
        ),
        None,
    )
    if header_at is None:
        raise FactsParseError(SECTION_TOPOLOGY, 0, "no header line starting with GPU0")
    columns: list[str] = []
    for token in lines[header_at].split():
        if token in _HEADER_TAIL:
            break
        columns.append(token)
    if len(columns) > MAX_TOPOLOGY_COLUMNS:
        raise FactsParseError(
            SECTION_TOPOLOGY,
            header_at + 1,
            f"reported {len(columns)} columns, more than {MAX_TOPOLOGY_COLUMNS:,}",
        )
    gpu_columns: dict[int, int] = {}  # column position → GPU number
    seen_gpus: set[int] = set()
    for position, label in enumerate(columns):
        match = _GPU_LABEL.fullmatch(label)
        if match is not None:
            gpu = _gpu_number(match.group(1), header_at + 1, label)
            if gpu in seen_gpus:
                raise FactsParseError(
                    SECTION_TOPOLOGY, header_at + 1, f"column {label} appears twice"
                )
            gpu_columns[position] = gpu
            seen_gpus.add(gpu)

    links: dict[int, dict[int, str]] = {}
    row_lines: dict[int, int] = {}
    for offset, raw in enumerate(lines[header_at + 1 :], start=header_at + 2):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0] == "Legend:":
            break
        match = _GPU_LABEL.fullmatch(tokens[0])
        if match is None:
            continue  # a NIC row
        gpu = _gpu_number(match.group(1), offset, tokens[0])
        if gpu not in seen_gpus:
            raise FactsParseError(SECTION_TOPOLOGY, offset, f"row {tokens[0]} has no column")
        if gpu in links:
            raise FactsParseError(
                SECTION_TOPOLOGY, offset, f"row {tokens[0]} already given on line {row_lines[gpu]}"
            )
        cells = tokens[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            raise FactsParseError(
                SECTION_TOPOLOGY,
                offset,
                f"row {tokens[0]} has {len(cells)} cells, the header has {len(columns)} columns",
            )
        for position, cell in enumerate(cells):
            if not _CELL.fullmatch(cell):
                raise FactsParseError(
                    SECTION_TOPOLOGY,
                    offset,
                    f"row {tokens[0]}, column {columns[position]}: {_quote(cell)} is not a link",
                )
        own = [columns[p] for p, cell in enumerate(cells) if cell == "X"]
        if own != [tokens[0]]:
            raise FactsParseError(
                SECTION_TOPOLOGY,
                offset,
                f"row {tokens[0]} should have X in its own column only, has it in {own or 'none'}",
            )
        links[gpu] = {gpu_columns[p]: cells[p] for p in gpu_columns}
        row_lines[gpu] = offset

    missing = sorted(set(gpu_columns.values()) - links.keys())
    if missing:
        raise FactsParseError(
            SECTION_TOPOLOGY,
            header_at + 1,
            "no row for " + ", ".join(f"GPU{gpu}" for gpu in missing),
        )

    for gpu, row in links.items():
        for other, cell in row.items():
            reverse = links[other][gpu]
            if other != gpu and (_NVLINK.fullmatch(cell) is None) != (
                _NVLINK.fullmatch(reverse) is None
            ):
                raise FactsParseError(
                    SECTION_TOPOLOGY,
                    row_lines[gpu],
                    f"GPU{gpu}→GPU{other} is {cell} but GPU{other}→GPU{gpu} is {reverse}",
                )
    linked = {
        gpu: {other for other, cell in row.items() if other != gpu and _nvlinks(cell) > 0}
        for gpu, row in links.items()
    }
    return tuple(sorted(_cliques(sorted(links), linked)))


def _nvlinks(cell: str) -> int:
    match = _NVLINK.fullmatch(cell)
    return int(match.group(1)) if match is not None else 0


def _cliques(gpus: list[int], linked: Mapping[int, set[int]]) -> list[tuple[int, ...]]:
    """`gpus` as groups in which every pair is NVLink-connected, lowest GPU first, each
    group taking, in index order, every GPU linked to all it holds.

    On an NVSwitch board or a bridged pair that is each connected set of GPUs as it is. A
    DGX-1's hybrid cube mesh links each GPU to four of seven: connected, all eight, but a
    tensor-parallel group across it would cross the CPUs' interconnect; here it is {0-3}
    and {4-7}. (GPUs of two unlinked sets never share a group, so no separate search for
    connected components is needed.)"""
    left = list(gpus)
    groups: list[tuple[int, ...]] = []
    while left:
        group = [left[0]]
        for gpu in left[1:]:
            if all(gpu in linked[member] for member in group):
                group.append(gpu)
        groups.append(tuple(group))
        left = [gpu for gpu in left if gpu not in group]
    return groups


# --------------------------------------------------------------------------- shard records


def _first_error(error: ValidationError) -> str:
    detail = error.errors()[0]
    location = ".".join(str(part) for part in detail["loc"])
    return f"{location}: {detail['msg']}" if location else str(detail["msg"])


# `systemctl is-active` words → what the shard is while its record exists. `ctl` removes
# a shard's record when it stops it, so a unit that is not running while its record is
# there was stopped by something else — the node restarting (our units are not enabled),
# the engine exiting, an operator — and has failed. A failed unit's processes are gone,
# and with them their hold on the GPUs. ("stopped" is a record's own word, from a node
# without systemd: nothing runs, and the shard is not counted at all.)
# The words are ActiveState's, every one systemd documents (org.freedesktop.systemd1(5)):
# "refreshing" (a unit's mount namespace being refreshed, systemd 254) and "maintenance"
# (its resources being cleaned, `systemctl clean`) among them.
UNIT_STATES: Final[dict[str, ShardState]] = {
    "active": "running",
    "reloading": "running",
    "refreshing": "running",
    "activating": "starting",
    "failed": "failed",
    "deactivating": "failed",  # on its way out, and not by our hand: the pass stops it whole
    "maintenance": "failed",
    "inactive": "failed",  # e.g. after the node restarted
}
# No systemctl on the node ("unknown"), or no systemd running ("offline"): the record
# alone has to do.
UNIT_UNTOLD: Final = frozenset({"", "unknown", "offline"})


def parse_shard_records(text: str) -> tuple[ShardRecord, ...]:
    """One shard a line: its JSON record, then optionally a tab and its unit's
    `systemctl is-active` word; blank lines are skipped."""
    _count_rows(text, SECTION_SHARDS, "shard records", MAX_SHARDS)
    records: list[ShardRecord] = []
    for line in _lines(text):
        body, _, unit_state = line.text.partition("\t")
        try:
            data = json.loads(body, parse_constant=_no_constant)
        except json.JSONDecodeError as error:
            raise FactsParseError(
                SECTION_SHARDS, line.number, f"not JSON: {error.msg} at column {error.colno}"
            ) from None
        except (ValueError, RecursionError) as error:  # a 4301-digit number; 10**5 '['; NaN
            raise FactsParseError(SECTION_SHARDS, line.number, f"not JSON: {error}") from None
        if not isinstance(data, dict):
            raise FactsParseError(
                SECTION_SHARDS, line.number, f"expected a JSON object, got {type(data).__name__}"
            )
        unit_state = unit_state.strip()
        if unit_state not in UNIT_UNTOLD:
            if unit_state not in UNIT_STATES:
                raise FactsParseError(
                    SECTION_SHARDS, line.number, f"unknown unit state {_quote(unit_state)}"
                )
            data["state"] = UNIT_STATES[unit_state]
        try:
            record = ShardRecord.model_validate(data)
        except ValidationError as error:
            raise FactsParseError(SECTION_SHARDS, line.number, _first_error(error)) from None
        problem = _out_of_range(record)
        if problem is not None:
            raise FactsParseError(SECTION_SHARDS, line.number, problem)
        records.append(record)
    return tuple(records)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a record may hold")


def _out_of_range(record: ShardRecord) -> str | None:
    """What in a record no real shard has: checked here, at parse, so that nothing after
    (the planner, reconcile --dry-run, routes) does work per claimed node or GPU. Whether
    the record fits the catalog and the node is judged later (cli/cluster)."""
    if record.nodes > MAX_REPLICA_NODES:
        return f"nodes {record.nodes} is more than {MAX_REPLICA_NODES:,}"
    if record.rank >= MAX_REPLICA_NODES:
        return f"rank {record.rank} is more than {MAX_REPLICA_NODES - 1:,}"
    if len(record.gpus) > MAX_GPUS:
        return f"claims {len(record.gpus)} GPUs, more than {MAX_GPUS:,}"
    bad_gpu = next((gpu for gpu in record.gpus if not 0 <= gpu < MAX_GPUS), None)
    if bad_gpu is not None:
        return f"GPU {bad_gpu} is out of range (0 to {MAX_GPUS - 1:,})"
    if len(set(record.gpus)) != len(record.gpus):
        return "claims a GPU twice"
    if len(record.hcas) > MAX_HCA_PORTS:
        return f"claims {len(record.hcas)} HCAs, more than {MAX_HCA_PORTS:,}"
    if record.port is not None and not 1 <= record.port <= MAX_PORT:
        return f"port {record.port} is out of range (1 to {MAX_PORT:,})"
    memory = record.memory_gib
    if memory is not None and not (math.isfinite(memory) and 0 <= memory <= MAX_MEMORY_GIB):
        return f"memory_gib {memory} is not a size (0 to {MAX_MEMORY_GIB:g} GiB)"
    return None


SECTION_LISTENING: Final = "/proc/net/tcp"
_TCP_LISTEN = "0A"
_HEX_PORT = re.compile(r"^[0-9A-Fa-f]{1,4}$")  # 16 bits: the kernel prints 4 hex digits


def parse_listening_ports(text: str) -> tuple[int, ...]:
    """Local ports in LISTEN state, from /proc/net/tcp and /proc/net/tcp6 (header lines
    skipped); sorted, each once."""
    ports: set[int] = set()
    for line in _lines(text):
        fields = line.text.split()
        if fields[0] == "sl":
            continue
        if len(fields) < 4 or ":" not in fields[1]:
            raise FactsParseError(SECTION_LISTENING, line.number, "not a /proc/net/tcp row")
        if fields[3] != _TCP_LISTEN:
            continue
        port_hex = fields[1].rsplit(":", 1)[1]
        if not _HEX_PORT.fullmatch(port_hex):
            raise FactsParseError(
                SECTION_LISTENING, line.number, f"bad local address {_quote(fields[1])}"
            )
        ports.add(int(port_hex, 16))
    return tuple(sorted(ports))
