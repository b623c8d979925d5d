#!/usr/bin/python3 -IS
"""A fake `nvidia-smi` for the nodes of the local test fleet (scripts/testfleet).

It prints what the real tool prints, byte for byte where we have real output to compare
with (tests/unit/samples/), for the invocations the facts probe makes:

    nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --query-remapped-rows=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi topo -m              (also: topo --matrix)
    nvidia-smi -L                   (also: --list-gpus)

FIELDS is any subset, in any order, of the fields in GPU_FIELDS / APP_FIELDS / REMAP_FIELDS (with
nvidia-smi's aliases). Anything else fails the way the real tool fails: an unknown field
(`Field "x" is not a valid field to query.`, exit 2), an unknown option (exit 2), a bad
combination (exit 2), no driver (exit 9). Invocations the real tool accepts but this fake
does not implement (the summary table, `-q`...) exit 2 with a message on stderr that says
so, rather than printing something made up.

The GPUs come from a JSON file (FakeData below): /etc/modelfleet-fake/gpus.json on a node,
or the file named by $MODELFLEET_FAKE_GPUS. scripts/testfleet writes it from the node's
spec. Standard library only: it runs under the node's own /usr/bin/python3, isolated
(-I) and without site (-S), and imports little, so that a call costs about 30 ms.

That is still four Python start-ups per facts probe, most of the probe's CPU time when
many nodes share a few CPUs. So on a node /usr/bin/nvidia-smi is not this file but the
small sh script `fast_path_script()` makes: it answers the probe's command lines
(PROBE_INVOCATIONS) from outputs this fake computed when the node was set up
(`precomputed()`), and runs this fake, installed beside the data, for anything else.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NotRequired, TextIO, TypedDict, cast

DATA_ENV: Final = "MODELFLEET_FAKE_GPUS"
DATA_PATH: Final = "/etc/modelfleet-fake/gpus.json"

# Exit codes of the real tool (nvidia-smi(1), RETURN VALUE).
EXIT_OK: Final = 0
EXIT_INVALID_ARGUMENT: Final = 2
EXIT_NO_DEVICES: Final = 6
EXIT_NO_DRIVER: Final = 9

NO_DRIVER: Final = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
BAD_COMBINATION: Final = (
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
)
NO_DEVICES: Final = "No devices were found\n"
NOT_AVAILABLE: Final = "[N/A]"


class GpuData(TypedDict):
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mib: int
    memory_used_mib: int
    ecc_uncorrected: int | None  # None: ECC off or not supported; printed as [N/A]
    numa_node: int | None  # None: not NUMA-local to anything (SYS to everyone)
    cpu_affinity: str  # "0-47,96-143"
    pcie_switch: int | None  # devices on one switch are PIX to each other
    # mig.mode.current: "Enabled" or "Disabled" on a GPU with MIG (A100, A30, H100...);
    # None, printed [N/A], on one without. Absent from older data files: None.
    mig_mode: NotRequired[str | None]
    # Memory repairs pending (retired_pages.pending before Ampere; remapped_rows.pending and
    # .failure from Ampere on, whose other feature prints [N/A]): True "Yes", False "No",
    # None or absent "[N/A]". NVML: nvmlDeviceGetRetiredPagesPendingStatus,
    # nvmlDeviceGetRemappedRows.
    retired_pages_pending: NotRequired[bool | None]
    remapped_rows_pending: NotRequired[bool | None]
    remapped_rows_failure: NotRequired[bool | None]
    # Fields the GPU answers with an error instead of a value, by field name: "ERR!",
    # "[GPU requires reset]" (nvidia-smi(1)); printed as they are, with or without nounits.
    faults: NotRequired[dict[str, str]]


class NicData(TypedDict):
    name: str  # mlx5_0
    numa_node: int | None
    pcie_switch: int | None


class ProcessData(TypedDict):
    gpu_uuid: str
    pid: int
    process_name: str
    used_memory_mib: int


class FakeData(TypedDict):
    driver: str  # "ok" | "broken" (every invocation fails as with no driver loaded)
    driver_version: str
    gpus: list[GpuData]
    nics: list[NicData]
    nvlinks: list[list[int]]  # [gpu_a, gpu_b, number of bonded links]
    processes: list[ProcessData]
    underline_topo_header: bool  # newer drivers underline the topo -m header


def load_data(path: str | None = None) -> FakeData | None:
    """The node's GPUs, or None when there is no data file (as if no driver were loaded)."""
    where = path or os.environ.get(DATA_ENV) or DATA_PATH
    try:
        # open(), not pathlib: pathlib's imports would double the start-up time.
        with open(where, encoding="utf-8") as file:  # noqa: PTH123
            return cast(FakeData, json.load(file))
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------- query fields


class _Field:
    def __init__(self, header: str, unit: str | None, value: Callable[[FakeData, int], str]):
        self.header = header
        self.unit = unit
        self.value = value

    def heading(self) -> str:
        # The header keeps its unit even with nounits; only the values lose theirs.
        return f"{self.header} [{self.unit}]" if self.unit else self.header

    def render(self, data: FakeData, row: int, units: bool, fault: str | None = None) -> str:
        if fault is not None:
            return fault
        text = self.value(data, row)
        if self.unit and units and text != NOT_AVAILABLE:
            return f"{text} {self.unit}"
        return text


def _gpu(data: FakeData, row: int) -> GpuData:
    return data["gpus"][row]


def _ecc(data: FakeData, row: int) -> str:
    errors = _gpu(data, row)["ecc_uncorrected"]
    return NOT_AVAILABLE if errors is None else str(errors)


def _mig_mode(data: FakeData, row: int) -> str:
    return _gpu(data, row).get("mig_mode") or NOT_AVAILABLE


def _yes_no(value: bool | None) -> str:
    return NOT_AVAILABLE if value is None else ("Yes" if value else "No")


def _flag(name: str) -> Callable[[FakeData, int], str]:
    def value(data: FakeData, row: int) -> str:
        return _yes_no(cast(bool | None, _gpu(data, row).get(name)))

    return value


def _remap_count(data: FakeData, row: int) -> str:
    # Rows remapped so far: none in this fake; [N/A] where the GPU remaps no rows.
    return NOT_AVAILABLE if _gpu(data, row).get("remapped_rows_pending") is None else "0"


def _free(data: FakeData, row: int) -> str:
    gpu = _gpu(data, row)
    return str(gpu["memory_total_mib"] - gpu["memory_used_mib"])


GPU_FIELDS: Final[dict[str, _Field]] = {
    "index": _Field("index", None, lambda d, r: str(_gpu(d, r)["index"])),
    "uuid": _Field("uuid", None, lambda d, r: _gpu(d, r)["uuid"]),
    "name": _Field("name", None, lambda d, r: _gpu(d, r)["name"]),
    "pci.bus_id": _Field("pci.bus_id", None, lambda d, r: _gpu(d, r)["pci_bus_id"]),
    "memory.total": _Field("memory.total", "MiB", lambda d, r: str(_gpu(d, r)["memory_total_mib"])),
    "memory.used": _Field("memory.used", "MiB", lambda d, r: str(_gpu(d, r)["memory_used_mib"])),
    "memory.free": _Field("memory.free", "MiB", _free),
    "ecc.errors.uncorrected.volatile.total": _Field(
        "ecc.errors.uncorrected.volatile.total", None, _ecc
    ),
    "mig.mode.current": _Field("mig.mode.current", None, _mig_mode),
    "retired_pages.pending": _Field("retired_pages.pending", None, _flag("retired_pages_pending")),
    "count": _Field("count", None, lambda d, r: str(len(d["gpus"]))),
    "driver_version": _Field("driver_version", None, lambda d, r: d["driver_version"]),
}
GPU_ALIASES: Final[dict[str, str]] = {
    "gpu_uuid": "uuid",
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
}


# --query-remapped-rows (nvidia-smi --help-query-remapped-rows), one row per GPU.
REMAP_FIELDS: Final[dict[str, _Field]] = {
    "gpu_uuid": _Field("gpu_uuid", None, lambda d, r: _gpu(d, r)["uuid"]),
    "gpu_bus_id": _Field("gpu_bus_id", None, lambda d, r: _gpu(d, r)["pci_bus_id"]),
    "remapped_rows.correctable": _Field("remapped_rows.correctable", None, _remap_count),
    "remapped_rows.uncorrectable": _Field("remapped_rows.uncorrectable", None, _remap_count),
    "remapped_rows.pending": _Field("remapped_rows.pending", None, _flag("remapped_rows_pending")),
    "remapped_rows.failure": _Field("remapped_rows.failure", None, _flag("remapped_rows_failure")),
}


def _process(data: FakeData, row: int) -> ProcessData:
    return data["processes"][row]


def _process_bus_id(data: FakeData, row: int) -> str:
    uuid = _process(data, row)["gpu_uuid"]
    return next((gpu["pci_bus_id"] for gpu in data["gpus"] if gpu["uuid"] == uuid), NOT_AVAILABLE)


def _process_gpu_name(data: FakeData, row: int) -> str:
    uuid = _process(data, row)["gpu_uuid"]
    return next((gpu["name"] for gpu in data["gpus"] if gpu["uuid"] == uuid), NOT_AVAILABLE)


APP_FIELDS: Final[dict[str, _Field]] = {
    "gpu_uuid": _Field("gpu_uuid", None, lambda d, r: _process(d, r)["gpu_uuid"]),
    "gpu_bus_id": _Field("gpu_bus_id", None, _process_bus_id),
    "gpu_name": _Field("gpu_name", None, _process_gpu_name),
    "pid": _Field("pid", None, lambda d, r: str(_process(d, r)["pid"])),
    "process_name": _Field("process_name", None, lambda d, r: _process(d, r)["process_name"]),
    "used_memory": _Field(
        "used_gpu_memory", "MiB", lambda d, r: str(_process(d, r)["used_memory_mib"])
    ),
}
APP_ALIASES: Final[dict[str, str]] = {"name": "process_name", "used_gpu_memory": "used_memory"}


def _query(
    data: FakeData,
    fields_text: str,
    format_text: str,
    table: dict[str, _Field],
    aliases: dict[str, str],
    rows: int,
    out: TextIO,
    faults: Callable[[int], Mapping[str, str]] = lambda _row: {},
) -> int:
    fields: list[_Field] = []
    for name in fields_text.split(","):
        field = table.get(aliases.get(name, name))
        if field is None:
            out.write(f'Field "{name}" is not a valid field to query.\n\n')
            return EXIT_INVALID_ARGUMENT
        fields.append(field)
    options = format_text.split(",")
    if "csv" not in options or not set(options) <= {"csv", "noheader", "nounits"}:
        out.write(BAD_COMBINATION)
        return EXIT_INVALID_ARGUMENT
    if "noheader" not in options:
        out.write(", ".join(field.heading() for field in fields) + "\n")
    units = "nounits" not in options
    for row in range(rows):
        errors = faults(row)
        rendered = (field.render(data, row, units, errors.get(field.header)) for field in fields)
        out.write(", ".join(rendered) + "\n")
    return EXIT_OK


# --------------------------------------------------------------------------- topo -m

LEGEND: Final = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501 (nvidia-smi's own line lengths)
UNDERLINE: Final = "\x1b[4m"
RESET: Final = "\x1b[0m"


class _Device:
    def __init__(self, label: str, numa: int | None, switch: int | None, gpu: int | None):
        self.label = label
        self.numa = numa
        self.switch = switch
        self.gpu = gpu


def _pcie_path(a: _Device, b: _Device) -> str:
    if a.switch is not None and a.switch == b.switch:
        return "PIX"
    if a.numa is not None and a.numa == b.numa:
        return "NODE"
    return "SYS"


def topology(data: FakeData) -> str:
    """`nvidia-smi topo -m`: the matrix, the affinity columns, the legends."""
    gpus = data["gpus"]
    devices = [
        _Device(f"GPU{gpu['index']}", gpu["numa_node"], gpu["pcie_switch"], gpu["index"])
        for gpu in gpus
    ] + [
        _Device(f"NIC{number}", nic["numa_node"], nic["pcie_switch"], None)
        for number, nic in enumerate(data["nics"])
    ]
    links: dict[tuple[int, int], int] = {}
    for a, b, width in data["nvlinks"]:
        links[(a, b)] = links[(b, a)] = width

    def cell(row: _Device, column: _Device) -> str:
        if row is column:
            return " X "
        if row.gpu is not None and column.gpu is not None and (row.gpu, column.gpu) in links:
            return f"NV{links[(row.gpu, column.gpu)]}"
        return _pcie_path(row, column)

    header = "\t".join(
        [device.label for device in devices] + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    )
    if data["underline_topo_header"]:
        header = UNDERLINE + header + RESET
    lines = ["\t" + header]
    for device in devices:
        cells = [cell(device, column) for column in devices]
        if device.gpu is not None:
            gpu = gpus[device.gpu]
            numa = "N/A" if gpu["numa_node"] is None else str(gpu["numa_node"])
            tail = [gpu["cpu_affinity"], numa, "", "N/A"]
        else:
            tail = ["", "", "", ""]
        lines.append("\t".join([device.label, *cells, *tail]))
    text = "\n".join(lines) + "\n\n" + LEGEND
    if data["nics"]:
        text += "\nNIC Legend:\n\n"
        text += "".join(f"  NIC{n}: {nic['name']}\n" for n, nic in enumerate(data["nics"]))
        text += "\n"
    return text


# --------------------------------------------------------------------------- command line

USAGE: Final = """\
nvidia-smi (modelfleet test fleet fake): prints a fake node's GPUs in nvidia-smi's formats.

    nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi topo -m
    nvidia-smi -L

Other invocations of the real tool are not implemented here.
"""


def _not_implemented(argv: Sequence[str], err: TextIO) -> int:
    shown = " ".join(argv) if argv else "(no arguments: the summary table)"
    err.write(
        f"nvidia-smi: {shown}: not implemented by the modelfleet test fleet's fake "
        "(see nvidia-smi -h)\n"
    )
    return EXIT_INVALID_ARGUMENT


def _unknown_option(option: str, out: TextIO) -> int:
    out.write(f"ERROR: Option {option} is not recognized. Please run 'nvidia-smi -h' for help.\n")
    return EXIT_INVALID_ARGUMENT


_VALUED: Final = ("--query-gpu", "--query-compute-apps", "--query-remapped-rows", "--format")
_QUERIES: Final = ("--query-gpu", "--query-compute-apps", "--query-remapped-rows")
_KNOWN_UNIMPLEMENTED: Final = frozenset(
    {"-q", "--query", "-i", "--id", "-l", "--loop", "-f", "--filename", "-x", "--xml-format"}
)


def main(
    argv: Sequence[str],
    out: TextIO | None = None,
    err: TextIO | None = None,
    data: FakeData | None = None,
) -> int:
    """Run the fake with `argv` (without the program name); returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    if list(argv[:1]) in (["-h"], ["--help"]):
        out.write(USAGE)
        return EXIT_OK
    if data is None:
        data = load_data()
    if data is None or data["driver"] != "ok":
        out.write(NO_DRIVER)
        return EXIT_NO_DRIVER

    if list(argv[:1]) == ["topo"]:
        if list(argv[1:]) in (["-m"], ["--matrix"]):
            if not data["gpus"]:
                out.write(NO_DEVICES)
                return EXIT_NO_DEVICES
            out.write(topology(data))
            return EXIT_OK
        return _not_implemented(argv, err)

    values: dict[str, str] = {}
    list_gpus = False
    position = 0
    while position < len(argv):
        argument = argv[position]
        name, equals, value = argument.partition("=")
        if name in _VALUED:
            if not equals:  # "--format csv" works as well as "--format=csv"
                if position + 1 >= len(argv):
                    out.write(BAD_COMBINATION)
                    return EXIT_INVALID_ARGUMENT
                position += 1
                value = argv[position]
            values[name] = value
        elif argument in ("-L", "--list-gpus"):
            list_gpus = True
        elif name in _KNOWN_UNIMPLEMENTED:
            return _not_implemented(argv, err)
        else:
            return _unknown_option(argument, out)
        position += 1

    queries = [name for name in _QUERIES if name in values]
    if list_gpus:
        if values:
            out.write(BAD_COMBINATION)
            return EXIT_INVALID_ARGUMENT
        if not data["gpus"]:
            out.write(NO_DEVICES)
            return EXIT_NO_DEVICES
        for gpu in data["gpus"]:
            out.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        return EXIT_OK
    if not values:
        return _not_implemented(argv, err)
    if len(queries) != 1 or "--format" not in values:
        out.write(BAD_COMBINATION)
        return EXIT_INVALID_ARGUMENT
    if not data["gpus"]:
        out.write(NO_DEVICES)
        return EXIT_NO_DEVICES

    def gpu_faults(row: int) -> Mapping[str, str]:
        return data["gpus"][row].get("faults") or {}

    if queries == ["--query-gpu"]:
        return _query(
            data,
            values["--query-gpu"],
            values["--format"],
            GPU_FIELDS,
            GPU_ALIASES,
            len(data["gpus"]),
            out,
            gpu_faults,
        )
    if queries == ["--query-remapped-rows"]:
        return _query(
            data,
            values["--query-remapped-rows"],
            values["--format"],
            REMAP_FIELDS,
            {},
            len(data["gpus"]),
            out,
            gpu_faults,
        )
    return _query(
        data,
        values["--query-compute-apps"],
        values["--format"],
        APP_FIELDS,
        APP_ALIASES,
        len(data["processes"]),
        out,
    )


# --------------------------------------------------------------------------- fast path

# The facts probe's nvidia-smi command lines, verbatim from cli/facts/probe.sh (a unit test
# holds them equal to the probe's), by the name of their precomputed outputs.
PROBE_INVOCATIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "gpus": (
        "--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,"
        "ecc.errors.uncorrected.volatile.total,mig.mode.current,retired_pages.pending",
        "--format=csv,noheader,nounits",
    ),
    "query-gpu": (
        "--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,"
        "ecc.errors.uncorrected.volatile.total",
        "--format=csv,noheader,nounits",
    ),
    "mig": ("--query-gpu=index,mig.mode.current", "--format=csv,noheader,nounits"),
    "retired-pages": ("--query-gpu=index,retired_pages.pending", "--format=csv,noheader,nounits"),
    "remapped-rows": (
        "--query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure",
        "--format=csv,noheader,nounits",
    ),
    "compute-apps": (
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    ),
    "topo": ("topo", "-m"),
}


def precomputed(data: FakeData) -> dict[str, str]:
    """What `main()` answers each probe invocation with this data, as the fast path's files:
    NAME.out (stdout), NAME.err (stderr) and NAME.status (the exit status)."""
    files: dict[str, str] = {}
    for name, argv in PROBE_INVOCATIONS.items():
        out, err = io.StringIO(), io.StringIO()
        status = main(argv, out, err, data=data)
        files |= {f"{name}.out": out.getvalue(), f"{name}.err": err.getvalue()}
        files[f"{name}.status"] = f"{status}\n"
    return files


def fast_path_script(directory: str, fallback: Sequence[str]) -> str:
    """/usr/bin/nvidia-smi of a node: POSIX sh, no Python for the probe's invocations.

    Exactly the arguments of a PROBE_INVOCATIONS entry print that entry's precomputed
    stderr and stdout from `directory` and exit with its status (stderr first, as this fake,
    whose stdout is flushed at exit, would; none of them writes both). Anything else, or a
    missing file, execs `fallback` (this fake) with the arguments.
    """
    import shlex  # here: it imports `re`, which every call of the fake would pay for

    lines = [
        "#!/bin/sh",
        "# nvidia-smi of a modelfleet test fleet node (scripts/testfleet): answers the facts",
        "# probe's command lines from outputs tests/fakes/nvidia_smi.py computed when the",
        "# node was set up, without starting Python; runs that fake for anything else.",
        f"dir={shlex.quote(directory)}",
        "answer=",
    ]
    keyword = "if"
    for name, argv in PROBE_INVOCATIONS.items():
        tests = [f'[ "$#" -eq {len(argv)} ]']
        tests += [f'[ "${number}" = {shlex.quote(arg)} ]' for number, arg in enumerate(argv, 1)]
        lines.append(f"{keyword} {' && '.join(tests)}; then")
        lines.append(f"  answer={name}")
        keyword = "elif"
    lines += [
        "fi",
        'if [ -n "$answer" ] && [ -r "$dir/$answer.status" ]; then',
        '  [ -s "$dir/$answer.err" ] && cat "$dir/$answer.err" >&2',
        '  [ -s "$dir/$answer.out" ] && cat "$dir/$answer.out"',
        '  read -r status < "$dir/$answer.status"',
        '  exit "$status"',
        "fi",
        f'exec {" ".join(shlex.quote(arg) for arg in fallback)} "$@"',
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
