"""The fake hardware of a test fleet node, as files laid into its tree before it boots.

A container shares the host's kernel, so a node's GPUs, memory and HCAs are files: a fake
`nvidia-smi` (tests/fakes/nvidia_smi.py behind a `sh` fast path, reading gpus.json), a
/proc/meminfo and sysfs entries (InfiniBand ports, NVIDIA PCI devices) that a oneshot unit,
modelfleet-fake-hw.service, mounts over the host's at boot. docs/testfleet.md says what is
real and what is fake.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from tests.fakes import nvidia_smi
from tests.testfleet.specs import HCA_STATES, FleetError, HcaSpec, NodeSpec

ROOT: Final = Path(__file__).resolve().parents[2]
FAKE_NVIDIA_SMI: Final = ROOT / "tests" / "fakes" / "nvidia_smi.py"
MACHINE_ID_NAMESPACE: Final = uuid.UUID("5b0f3f6e-8d0a-4c65-9a8e-7d7c2a1f0b11")

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
                "mig_mode": (
                    ("Enabled" if index in gpus.mig_enabled else "Disabled")
                    if gpus.has_mig()
                    else None
                ),
                "retired_pages_pending": (
                    index in gpus.repair_pending if gpus.retires_pages() else None
                ),
                "remapped_rows_pending": (
                    None if gpus.retires_pages() else index in gpus.repair_pending
                ),
                "remapped_rows_failure": None if gpus.retires_pages() else False,
                "faults": (
                    dict.fromkeys(
                        ("memory.used", "ecc.errors.uncorrected.volatile.total"),
                        "[GPU requires reset]",
                    )
                    if index in gpus.requires_reset
                    else {}
                ),
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


@dataclass(frozen=True)
class NodeFile:
    content: bytes
    mode: int = 0o644
    symlink: bool = False  # content is the link target


# On a GPU node: /usr/bin/nvidia-smi is a sh script serving the probe's command lines
# from outputs precomputed here, and running the Python fake (installed beside, reading
# gpus.json) for any other (tests/fakes/nvidia_smi.py, fast_path_script).
NVIDIA_SMI_OUTPUTS: Final = "etc/modelfleet-fake/nvidia-smi"
NVIDIA_SMI_FAKE: Final = "usr/local/lib/modelfleet-fake/nvidia_smi.py"


def nvidia_smi_files(name: str, spec: NodeSpec) -> dict[str, NodeFile]:
    """The fake nvidia-smi of a GPU node: the fast path, its outputs, the Python fake."""
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


def hardware_files(name: str, spec: NodeSpec) -> dict[str, NodeFile]:
    """Everything of the node's fake hardware: meminfo, sysfs, nvidia-smi, the unit."""
    files: dict[str, NodeFile] = {
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
