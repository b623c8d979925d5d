"""The probe-output parsers, on real output taken from public sources (see samples/SOURCES.md)."""

from __future__ import annotations

import pickle
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli.facts.model import (
    Gpu,
    GpuProcess,
    HcaPort,
    Memory,
    ModelStore,
    NodeFacts,
    ShardRecord,
    StoredWeights,
)
from cli.facts.parse import (
    GPU_QUERY_FIELDS,
    FactsParseError,
    apply_cgroup_limit,
    parse_compute_apps,
    parse_listening_ports,
    parse_meminfo,
    parse_query_gpu,
    parse_shard_records,
    parse_topology,
    strip_ansi,
)
from cli.facts.sections.infiniband import parse_infiniband

SAMPLES = Path(__file__).parents[1] / "samples"
DOCS = Path(__file__).parents[3] / "docs" / "facts.md"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def ibstatus_files(text: str) -> dict[str, str]:
    """`ibstatus` prints each port's sysfs state, rate and link_layer files verbatim."""
    files: dict[str, str] = {}
    port_dir = ""
    for raw in text.splitlines():
        line = raw.strip()
        header = re.fullmatch(r"Infiniband device '(\S+)' port (\d+) status:", line)
        if header is not None:
            port_dir = f"{header.group(1)}/ports/{header.group(2)}"
            continue
        key, _, value = line.partition(":")
        if key in ("state", "rate", "link_layer"):
            files[f"{port_dir}/{key}"] = value.strip() + "\n"
    return files


def tsv_files(text: str) -> dict[str, str]:
    """`PATH<TAB>CONTENT` lines, `\\n` in CONTENT standing for a newline."""
    files: dict[str, str] = {}
    for line in text.splitlines():
        path, _, content = line.partition("\t")
        files[path] = content.replace("\\n", "\n") + "\n"
    return files


# --------------------------------------------------------------------------- errors


def test_a_parse_error_names_the_section_and_line_and_is_a_value_error() -> None:
    error = FactsParseError("nvidia-smi --query-gpu", 3, "expected 7 fields, got 5")

    assert isinstance(error, ValueError)
    assert str(error) == "nvidia-smi --query-gpu line 3: expected 7 fields, got 5"
    assert (error.section, error.line, error.message) == (
        "nvidia-smi --query-gpu",
        3,
        "expected 7 fields, got 5",
    )


def test_a_parse_error_about_the_whole_text_has_no_line_number() -> None:
    assert str(FactsParseError("nvidia-smi topo -m", 0, "empty")) == "nvidia-smi topo -m: empty"


def test_a_parse_error_survives_pickling_for_parallel_probes() -> None:
    error = pickle.loads(pickle.dumps(FactsParseError("/proc/meminfo", 2, "bad")))

    assert isinstance(error, FactsParseError)
    assert str(error) == "/proc/meminfo line 2: bad"


# --------------------------------------------------------------------------- /proc/meminfo


def test_meminfo_total_and_available_kib_become_mib_rounded_down() -> None:
    memory = parse_meminfo(sample("meminfo-linux-doc-with-memavailable.txt"))

    # 16344972 kB = 15961.9 MiB, 14836172 kB = 14488.4 MiB
    assert memory == Memory(total_mib=15961, available_mib=14488)


def test_a_kernel_older_than_3_14_reports_total_but_not_available() -> None:
    memory = parse_meminfo(sample("meminfo-linux-2.6-no-memavailable.txt"))

    assert memory == Memory(total_mib=15961, available_mib=None)


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "MemFree:      13634064 kB\nBuffers:          3656 kB\n"],
    ids=["empty", "blank", "no-memtotal-line"],
)
def test_meminfo_without_memtotal_is_not_reported_rather_than_zero(text: str) -> None:
    assert parse_meminfo(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "MemTotal:     lots kB\n",
            "/proc/meminfo line 1: cannot read MemTotal from 'MemTotal:     lots kB'",
        ),
        (
            "MemFree: 1 kB\nMemTotal:     16344972 MB\n",
            "/proc/meminfo line 2: MemTotal is in 'MB', expected kB",
        ),
        (
            "MemTotal:     16344972\n",
            "/proc/meminfo line 1: MemTotal is in 'no unit', expected kB",
        ),
        (
            "MemTotal: 1 kB\nMemTotal: 2 kB\n",
            "/proc/meminfo line 2: MemTotal appears twice",
        ),
        (
            "MemTotal: 1 kB\n\ncat: /proc/meminfo: Permission denied\n",
            "/proc/meminfo line 3: expected 'Key: value kB', got "
            "'cat: /proc/meminfo: Permission denied'",
        ),
        (
            "total used free\n",
            "/proc/meminfo line 1: expected 'Key: value kB', got 'total used free'",
        ),
    ],
    ids=["not-a-number", "wrong-unit", "no-unit", "duplicate", "error-message", "free-output"],
)
def test_malformed_meminfo_is_rejected_with_its_line(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_meminfo(text)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- cgroup limit

HOST = Memory(total_mib=15961, available_mib=14488)
EIGHT_GIB = str(8 * 1024**3)


@pytest.mark.parametrize(
    ("memory", "limit", "expected"),
    [
        (HOST, "max\n", HOST),
        (HOST, "9223372036854771712\n", HOST),  # cgroup v1 "no limit", 4 KiB pages
        (HOST, "9223372036854710272\n", HOST),  # cgroup v1 "no limit", 64 KiB pages
        (HOST, EIGHT_GIB + "\n", Memory(total_mib=8192, available_mib=8192)),
        (HOST, str(64 * 1024**3), HOST),
        (
            Memory(total_mib=15961, available_mib=4000),
            EIGHT_GIB,
            Memory(total_mib=8192, available_mib=4000),
        ),
        (Memory(total_mib=15961), EIGHT_GIB, Memory(total_mib=8192, available_mib=None)),
        (None, "max", None),
        (None, "9223372036854771712", None),
        (None, EIGHT_GIB, Memory(total_mib=8192, available_mib=None)),
    ],
    ids=[
        "v2-max",
        "v1-unlimited-4k",
        "v1-unlimited-64k",
        "limit-below-host",
        "limit-above-host",
        "available-already-below-limit",
        "available-unknown-stays-unknown",
        "unknown-host-no-limit",
        "unknown-host-v1-unlimited",
        "unknown-host-limit-is-the-bound",
    ],
)
def test_the_smaller_of_host_memory_and_cgroup_limit_wins(
    memory: Memory | None, limit: str, expected: Memory | None
) -> None:
    assert apply_cgroup_limit(memory, limit) == expected


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("", "cgroup memory limit: is empty"),
        (
            "unlimited\n",
            "cgroup memory limit line 1: expected 'max' or a number of bytes, got 'unlimited'",
        ),
        ("-1\n", "cgroup memory limit line 1: expected 'max' or a number of bytes, got '-1'"),
        ("8G\n", "cgroup memory limit line 1: expected 'max' or a number of bytes, got '8G'"),
        ("max\nmax\n", "cgroup memory limit: has 2 lines, expected 1"),
    ],
)
def test_a_malformed_cgroup_limit_is_rejected(limit: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        apply_cgroup_limit(HOST, limit)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- --query-gpu


def test_the_probe_queries_the_gpu_fields_in_the_documented_order() -> None:
    assert GPU_QUERY_FIELDS == (
        "index",
        "uuid",
        "name",
        "pci.bus_id",
        "memory.total",
        "memory.used",
        "ecc.errors.uncorrected.volatile.total",
    )


# Values from public nvidia-smi output of an HGX H100 node and an RTX 6000 Ada workstation
# (see samples/SOURCES.md); the RTX 6000 Ada has ECC off, which --query-gpu reports as [N/A].
HGX_AND_ADA = """\
0, GPU-257d8671-d0e6-d1a7-dea9-952249a668fa, NVIDIA H100 80GB HBM3, 00000000:1B:00.0, 81559, 0, 0
1, GPU-cc7d93b3-73f8-5028-287a-9e617839550e, NVIDIA H100 80GB HBM3, 00000000:43:00.0, 81559, 71, 2
2, GPU-00000000-0000-0000-0000-000000000002, NVIDIA RTX 6000 Ada Generation, \
00000000:C1:00.0, 49140, 2, [N/A]
"""


def test_query_gpu_rows_become_gpus_with_mib_and_ecc_counts() -> None:
    gpus = parse_query_gpu(HGX_AND_ADA)

    assert gpus == (
        Gpu(
            index=0,
            uuid="GPU-257d8671-d0e6-d1a7-dea9-952249a668fa",
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="00000000:1B:00.0",
            memory_total_mib=81559,
            memory_used_mib=0,
            ecc_uncorrected=0,
        ),
        Gpu(
            index=1,
            uuid="GPU-cc7d93b3-73f8-5028-287a-9e617839550e",
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="00000000:43:00.0",
            memory_total_mib=81559,
            memory_used_mib=71,
            ecc_uncorrected=2,
        ),
        Gpu(
            index=2,
            uuid="GPU-00000000-0000-0000-0000-000000000002",
            name="NVIDIA RTX 6000 Ada Generation",
            pci_bus_id="00000000:C1:00.0",
            memory_total_mib=49140,
            memory_used_mib=2,
            ecc_uncorrected=None,
        ),
    )


# What nvidia-smi prints where it has no value (docs/facts.md), written out: a token dropped
# from the parser's list must fail here, not silently leave the parametrization.
@pytest.mark.parametrize(
    "token",
    [
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Unknown Error]",
        "[GPU requires reset]",
        "[GPU is lost]",
        "[Insufficient Permissions]",
        "ERR!",
    ],
)
def test_a_value_nvidia_smi_cannot_give_is_not_reported_rather_than_zero(token: str) -> None:
    (gpu,) = parse_query_gpu(f"0, GPU-x, Tesla T4, {token}, {token}, {token}, {token}\n")

    assert gpu.pci_bus_id is None
    assert gpu.memory_total_mib is None
    assert gpu.memory_used_mib is None
    assert gpu.ecc_uncorrected is None


def test_gpu_names_keep_their_spaces_and_spaces_after_commas_are_optional() -> None:
    (gpu,) = parse_query_gpu("3,GPU-y,NVIDIA GeForce RTX 4090,00000000:81:00.0,24564,1,[N/A]")

    assert (gpu.index, gpu.name, gpu.memory_total_mib) == (3, "NVIDIA GeForce RTX 4090", 24564)


@pytest.mark.parametrize("text", ["", "\n", "No devices were found\n"])
def test_no_devices_found_means_no_gpus(text: str) -> None:
    assert parse_query_gpu(text) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HGX_AND_ADA.replace(", 49140, 2, [N/A]", ""),
            "nvidia-smi --query-gpu line 3: expected 7 fields, got 4",
        ),
        (
            "0, GPU-x, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 81920, 0\n",
            "nvidia-smi --query-gpu line 1: expected 7 fields, got 6",
        ),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            "nvidia-smi --query-gpu line 1: expected 7 fields, got 1",
        ),
        (
            "index, uuid, name, pci.bus_id, memory.total [MiB], memory.used [MiB], "
            "ecc.errors.uncorrected.volatile.total\n",
            "nvidia-smi --query-gpu line 1: found a header line; the probe must use noheader",
        ),
        (
            "0, GPU-x, NVIDIA L40S, 00000000:1B:00.0, 46068 MiB, 105 MiB, 0\n",
            "nvidia-smi --query-gpu line 1: memory.total '46068 MiB' is not a whole number "
            "(the probe must use --format=csv,noheader,nounits)",
        ),
        (
            "[N/A], GPU-x, NVIDIA L4, 00000000:1B:00.0, 23034, 0, 0\n",
            "nvidia-smi --query-gpu line 1: index '[N/A]' is not a whole number",
        ),
        (
            "0, [N/A], NVIDIA L4, 00000000:1B:00.0, 23034, 0, 0\n",
            "nvidia-smi --query-gpu line 1: uuid is missing ('[N/A]')",
        ),
        (
            "0, GPU-x, , 00000000:1B:00.0, 23034, 0, 0\n",
            "nvidia-smi --query-gpu line 1: name is missing ('')",
        ),
        (
            "0, GPU-a, NVIDIA L4, 00000000:1B:00.0, 23034, 0, 0\n"
            "0, GPU-b, NVIDIA L4, 00000000:1C:00.0, 23034, 0, 0\n",
            "nvidia-smi --query-gpu line 2: GPU index 0 already given on line 1",
        ),
        (
            "0, GPU-x, NVIDIA L4, 00000000:1B:00.0, 23034, 0, [Some New Error]\n",
            "nvidia-smi --query-gpu line 1: ecc.errors.uncorrected.volatile.total "
            "'[Some New Error]' is not a whole number",
        ),
        (
            "0, GPU-x, NVIDIA L4, 00000000:1B:00.0, -1, 0, 0\n",
            "nvidia-smi --query-gpu line 1: memory.total '-1' is not a whole number",
        ),
        (
            "\u00b2, GPU-x, NVIDIA L4, 00000000:1B:00.0, 23034, 0, 0\n",
            "nvidia-smi --query-gpu line 1: index '\u00b2' is not a whole number",
        ),
    ],
    ids=[
        "short-third-line",
        "one-field-missing",
        "driver-not-loaded",
        "header",
        "units",
        "index-not-reported",
        "uuid-not-reported",
        "empty-name",
        "duplicate-index",
        "unknown-placeholder",
        "negative-memory",
        "superscript-digit",
    ],
)
def test_malformed_query_gpu_output_is_rejected_with_its_line(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_query_gpu(text)

    assert str(raised.value) == expected


def test_output_of_a_different_field_list_is_rejected_not_misread() -> None:
    # gpustat's query (index, uuid, name, temperature, utilization, memory used, total) also
    # has seven columns; the temperature where the bus id belongs gives it away.
    with pytest.raises(FactsParseError) as raised:
        parse_query_gpu(sample("query-gpu-gpustat-other-fields.csv"))

    assert str(raised.value) == (
        "nvidia-smi --query-gpu line 1: pci.bus_id '80' is not a PCI address "
        "(are the fields in GPU_QUERY_FIELDS order?)"
    )


# --------------------------------------------------------------------------- --query-compute-apps


def test_compute_apps_rows_become_processes_on_their_gpu() -> None:
    text = (
        "GPU-cc7d93b3-73f8-5028-287a-9e617839550e, 4121, python3, 61000\n"
        "GPU-cc7d93b3-73f8-5028-287a-9e617839550e, 4188, /usr/local/bin/llama-server, 5982\n"
        "GPU-257d8671-d0e6-d1a7-dea9-952249a668fa, 77, /opt/app, v2/run, [N/A]\n"
    )

    assert parse_compute_apps(text) == (
        GpuProcess(
            gpu_uuid="GPU-cc7d93b3-73f8-5028-287a-9e617839550e",
            pid=4121,
            process_name="python3",
            used_memory_mib=61000,
        ),
        GpuProcess(
            gpu_uuid="GPU-cc7d93b3-73f8-5028-287a-9e617839550e",
            pid=4188,
            process_name="/usr/local/bin/llama-server",
            used_memory_mib=5982,
        ),
        GpuProcess(
            gpu_uuid="GPU-257d8671-d0e6-d1a7-dea9-952249a668fa",
            pid=77,
            process_name="/opt/app, v2/run",
            used_memory_mib=None,
        ),
    )


@pytest.mark.parametrize("text", ["", "\n", "No running processes found\n"])
def test_no_running_processes_means_an_empty_tuple(text: str) -> None:
    assert parse_compute_apps(text) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            sample("compute-apps-gpustat-three-fields.csv"),
            "nvidia-smi --query-compute-apps line 1: expected 4 fields, got 3",
        ),
        (
            "GPU-x, 48448, python, 4000\nGPU-x, [Not Supported], python, [Not Supported]\n",
            "nvidia-smi --query-compute-apps line 2: pid '[Not Supported]' is not a whole number",
        ),
        (
            "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n",
            "nvidia-smi --query-compute-apps line 1: found a header line; "
            "the probe must use noheader",
        ),
        (
            "GPU-x, 1234, python3, 61000 MiB\n",
            "nvidia-smi --query-compute-apps line 1: used_memory '61000 MiB' is not a whole "
            "number (the probe must use --format=csv,noheader,nounits)",
        ),
    ],
    ids=["other-field-list", "pid-not-reported", "header", "units"],
)
def test_malformed_compute_apps_output_is_rejected(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_compute_apps(text)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- topo -m

EIGHT = ((0, 1, 2, 3, 4, 5, 6, 7),)


@pytest.mark.parametrize(
    ("name", "domains"),
    [
        ("topo-h100-sxm5-8gpu-dstack.txt", EIGHT),
        ("topo-h100-sxm5-8gpu-ansi-header.txt", EIGHT),
        ("topo-h20-hgx-8gpu-8nic-sglang.txt", EIGHT),
        ("topo-h100-4gpu-nv6-4nic.txt", ((0, 1, 2, 3),)),
        ("topo-a100-4gpu-nv12-pairs.txt", ((0, 1), (2, 3))),
        ("topo-rtx-a6000-3gpu-nv4-bridge.txt", ((0, 1), (2,))),
        ("topo-rtx6000ada-4gpu-pcie-4nic.txt", ((0,), (1,), (2,), (3,))),
        ("topo-rtx4090-8gpu-pcie-2nic.txt", tuple((gpu,) for gpu in range(8))),
        ("topo-v100-pcie-2gpu-node.txt", ((0,), (1,))),
        # A DGX-1's hybrid cube mesh: one NVLink component, two fully linked halves.
        ("topo-v100-sxm2-8gpu-hybrid-cube-mesh.txt", ((0, 1, 2, 3), (4, 5, 6, 7))),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_nvlink_domains_are_the_connected_components_of_nv_cells(
    name: str, domains: tuple[tuple[int, ...], ...]
) -> None:
    assert parse_topology(sample(name)) == domains


def test_a_hybrid_cube_mesh_pair_across_the_halves_is_never_one_domain() -> None:
    # GPU0 and GPU4 are linked (NV2), but 0-5, 1-4... are SYS: a pair {0, 4} is fully
    # linked, yet taking it would leave {1, 2, 3} and {5, 6, 7}; the greedy split keeps the
    # two halves, each fully linked, and no domain spans the CPUs' interconnect.
    domains = parse_topology(sample("topo-v100-sxm2-8gpu-hybrid-cube-mesh.txt"))
    for domain in domains:
        assert not ({0, 1, 2, 3} & set(domain) and {4, 5, 6, 7} & set(domain)), domain
    # A 3-GPU chain (0-1 and 1-2 linked, 0-2 not): one component, no trio.
    chain = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        "GPU0\t X \tNV4\tSYS\t0-7\n"
        "GPU1\tNV4\t X \tNV4\t0-7\n"
        "GPU2\tSYS\tNV4\t X \t0-7\n"
    )
    assert parse_topology(chain) == ((0, 1), (2,))


def test_an_h100_hgx_topology_is_one_nvlink_domain_of_eight() -> None:
    assert parse_topology(sample("topo-h100-sxm5-8gpu-dstack.txt")) == EIGHT


def test_a100s_with_nvlink_bridges_are_two_domains_of_two() -> None:
    assert parse_topology(sample("topo-a100-4gpu-nv12-pairs.txt")) == ((0, 1), (2, 3))


def test_a_pcie_only_box_has_one_singleton_domain_per_gpu_and_nics_join_nothing() -> None:
    # GPU6 reaches both NICs through one host bridge (PHB); that is not a GPU link.
    domains = parse_topology(sample("topo-rtx4090-8gpu-pcie-2nic.txt"))

    assert domains == tuple((gpu,) for gpu in range(8))


def test_an_underlined_header_parses_like_a_plain_one() -> None:
    underlined = sample("topo-h100-sxm5-8gpu-ansi-header.txt")

    assert "\x1b[4m" in underlined
    assert strip_ansi(underlined) == sample("topo-h100-sxm5-8gpu-dstack.txt")
    assert parse_topology(underlined) == parse_topology(sample("topo-h100-sxm5-8gpu-dstack.txt"))


def test_colour_codes_inside_cells_are_ignored() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t\x1b[32mNV4\x1b[0m\t0-7\nGPU1\tNV4\t X \t0-7\n"

    assert parse_topology(text) == ((0, 1),)


def test_a_single_gpu_is_a_domain_of_one() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-23\t0\t\tN/A\n"

    assert parse_topology(text) == ((0,),)


def test_gpu_rows_may_come_in_any_order_and_domains_are_still_sorted() -> None:
    lines = sample("topo-a100-4gpu-nv12-pairs.txt").splitlines()
    shuffled = "\n".join([lines[0], lines[4], lines[3], lines[2], lines[1]])

    assert parse_topology(shuffled) == ((0, 1), (2, 3))


TWO_NV4 = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"


def _without(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "nvidia-smi topo -m: no header line starting with GPU0"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            "nvidia-smi topo -m: no header line starting with GPU0",
        ),
        (
            "\n".join(sample("topo-a100-4gpu-nv12-pairs.txt").splitlines()[1:]),
            "nvidia-smi topo -m: no header line starting with GPU0",
        ),
        (
            _without(
                sample("topo-a100-4gpu-nv12-pairs.txt"),
                "GPU1\tNV12\t X \tSYS\tSYS\t",
                "GPU1\tNV12\t X \tSYS\t",
            ),
            "nvidia-smi topo -m line 3: row GPU1, column GPU3: '24-47' is not a link",
        ),
        (
            _without(
                sample("topo-a100-4gpu-nv12-pairs.txt"),
                "GPU2\tSYS\tSYS\t X \tNV12",
                "GPU2\tSYS\tNV12\t X \tNV12",
            ),
            "nvidia-smi topo -m line 3: GPU1→GPU2 is SYS but GPU2→GPU1 is NV12",
        ),
        (
            _without(
                sample("topo-a100-4gpu-nv12-pairs.txt"),
                "GPU3\tSYS\tSYS\tNV12\t X \t72-95\t3\t\tN/A\n",
                "",
            ),
            "nvidia-smi topo -m line 1: no row for GPU3",
        ),
        (
            _without(
                sample("topo-a100-4gpu-nv12-pairs.txt"), "GPU1\tNV12\t X ", "GPU1\tNV12\tNV12"
            ),
            "nvidia-smi topo -m line 3: "
            "row GPU1 should have X in its own column only, has it in none",
        ),
        (
            TWO_NV4 + "GPU0\t X \tNV4\t0-7\n",
            "nvidia-smi topo -m line 4: row GPU0 already given on line 2",
        ),
        (
            TWO_NV4 + "GPU2\tNV4\tNV4\t X\n",
            "nvidia-smi topo -m line 4: row GPU2 has no column",
        ),
    ],
    ids=[
        "empty",
        "driver-not-loaded",
        "header-cut-off",
        "row-missing-a-cell",
        "asymmetric-nvlink",
        "missing-row",
        "no-self-cell",
        "duplicate-row",
        "row-without-column",
    ],
)
def test_a_malformed_topology_is_rejected_with_its_line(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_topology(text)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- InfiniBand sysfs


def test_sysfs_ports_become_hca_ports_sorted_by_device_then_port() -> None:
    ports = parse_infiniband(tsv_files(sample("sysfs-infiniband-procfs-fixture.tsv")))

    assert ports == (
        HcaPort(hca="hfi1_0", port=1, state="ACTIVE", rate_gbps=100.0, link_layer="InfiniBand"),
        HcaPort(hca="mlx4_0", port=1, state="ACTIVE", rate_gbps=40.0, link_layer="InfiniBand"),
        HcaPort(hca="mlx4_0", port=2, state="ACTIVE", rate_gbps=40.0, link_layer="InfiniBand"),
        HcaPort(hca="mlx5_0", port=1, state="ACTIVE", rate_gbps=25.0, link_layer="InfiniBand"),
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "ibstatus-hdr-ib-one-down-nccl-489.txt",
            (
                HcaPort(
                    hca="mlx5_0", port=1, state="ACTIVE", rate_gbps=200.0, link_layer="InfiniBand"
                ),
                HcaPort(
                    hca="mlx5_1", port=1, state="DOWN", rate_gbps=10.0, link_layer="InfiniBand"
                ),
            ),
        ),
        (
            "ibstatus-roce-ndr-hdr-deepep-17.txt",
            (
                HcaPort(
                    hca="mlx5_0", port=1, state="ACTIVE", rate_gbps=200.0, link_layer="Ethernet"
                ),
                HcaPort(
                    hca="mlx5_1", port=1, state="ACTIVE", rate_gbps=400.0, link_layer="Ethernet"
                ),
                HcaPort(
                    hca="mlx5_2", port=1, state="ACTIVE", rate_gbps=400.0, link_layer="Ethernet"
                ),
            ),
        ),
        (
            "ibstatus-roce-edr-nccl-1866.txt",
            (
                HcaPort(
                    hca="mlx5_0", port=1, state="ACTIVE", rate_gbps=100.0, link_layer="Ethernet"
                ),
                HcaPort(
                    hca="mlx5_1", port=1, state="ACTIVE", rate_gbps=100.0, link_layer="Ethernet"
                ),
            ),
        ),
    ],
)
def test_ports_read_on_real_hosts_keep_state_rate_and_link_layer(
    name: str, expected: tuple[HcaPort, ...]
) -> None:
    assert parse_infiniband(ibstatus_files(sample(name))) == expected


def test_only_an_active_port_counts_as_active() -> None:
    ports = parse_infiniband(ibstatus_files(sample("ibstatus-hdr-ib-one-down-nccl-489.txt")))

    assert [port.active for port in ports] == [True, False]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("mlx4_1|1|InfiniBand|56 Gb/sec (4X FDR)|5: LinkUp|2: INIT", ("INIT", 56.0, "InfiniBand")),
        (
            "mlx5_0|1|InfiniBand|100 Gb/sec (4X EDR)|5: LinkUp|3: ARMED",
            ("ARMED", 100.0, "InfiniBand"),
        ),
        ("hfi1_0|1|OmniPath|100 Gb/sec (4X EDR)|9: <unknown>|1: DOWN", ("DOWN", 100.0, None)),
        (
            "mlx5_0|1|InfiniBand|10 Gb/sec (4X SDR)|3: Disabled|1: DOWN",
            ("DOWN", 10.0, "InfiniBand"),
        ),
        ("mlx4_0|2|InfiniBand|10 Gb/sec (4X SDR)|2: Polling|1: DOWN", ("DOWN", 10.0, "InfiniBand")),
    ],
    ids=["init", "armed", "omnipath-link-layer", "disabled", "polling"],
)
def test_ports_that_are_not_up_keep_their_kernel_state(
    row: str, expected: tuple[str, float, str | None]
) -> None:
    assert row in sample("fabric-monitor-badports.psv")
    hca, port, link_layer, rate, phys_state, state = row.split("|")
    files = {
        f"{hca}/ports/{port}/link_layer": link_layer,
        f"{hca}/ports/{port}/rate": rate,
        f"{hca}/ports/{port}/phys_state": phys_state,
        f"{hca}/ports/{port}/state": state,
    }

    (parsed,) = parse_infiniband(files)

    assert (parsed.state, parsed.rate_gbps, parsed.link_layer) == expected
    assert not parsed.active


def test_devices_sort_naturally_and_absolute_sysfs_paths_are_accepted() -> None:
    files = {
        "/sys/class/infiniband/mlx5_10/ports/1/state": "4: ACTIVE\n",
        "/sys/class/infiniband/mlx5_2/ports/1/state": "4: ACTIVE\n",
        "mlx5_2/fw_ver": "28.39.1002\n",
        "mlx5_2/ports/1/phys_state": "5: LinkUp\n",
    }

    ports = parse_infiniband(files)

    assert [(port.hca, port.rate_gbps, port.link_layer) for port in ports] == [
        ("mlx5_2", None, None),
        ("mlx5_10", None, None),
    ]


def test_an_empty_rate_file_is_not_reported() -> None:
    (port,) = parse_infiniband({"mlx5_0/ports/1/state": "1: DOWN\n", "mlx5_0/ports/1/rate": "\n"})

    assert port.rate_gbps is None


def test_no_infiniband_files_means_no_ports() -> None:
    assert parse_infiniband({}) == ()


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"mlx5_0/ports/1/state": "ACTIVE\n"},
            "/sys/class/infiniband/mlx5_0/ports/1/state line 1: expected 'N: STATE', got 'ACTIVE'",
        ),
        (
            {"mlx5_0/ports/1/state": "4: ACTIVE\n", "mlx5_0/ports/1/rate": "fast\n"},
            "/sys/class/infiniband/mlx5_0/ports/1/rate line 1: "
            "expected 'N Gb/sec (...)', got 'fast'",
        ),
        (
            {"mlx5_0/ports/1/state": "4: ACTIVE\n", "mlx5_0/ports/1/rate": "400 Gb/s\n"},
            "/sys/class/infiniband/mlx5_0/ports/1/rate line 1: "
            "expected 'N Gb/sec (...)', got '400 Gb/s'",
        ),
        (
            {"mlx5_0/ports/x/state": "4: ACTIVE\n"},
            "/sys/class/infiniband/mlx5_0/ports/x/state: port 'x' is not a port number",
        ),
        (
            {"mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n"},
            "/sys/class/infiniband/mlx5_0/ports/1: has rate or link_layer but no state",
        ),
    ],
    ids=[
        "state-without-number",
        "rate-not-a-rate",
        "rate-wrong-unit",
        "port-not-a-number",
        "no-state",
    ],
)
def test_malformed_infiniband_files_are_rejected_naming_the_file(
    files: dict[str, str], expected: str
) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_infiniband(files)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- shard records

SHARD = (
    '{"replica": "qwen2.5-coder-14b-0", "model": "qwen2.5-coder-14b", "profile": "h100x2", '
    '"rank": 0, "gpus": [0, 1], "port": 8000, "engine": "vllm", '
    '"started": "2025-01-15T10:00:00Z", "memory_gib": 24.0}'
)


def test_shard_records_are_one_json_object_per_line_and_blank_lines_are_skipped() -> None:
    worker = SHARD.replace('"rank": 0', '"rank": 1').replace('"gpus": [0, 1]', '"gpus": [2, 3]')
    records = parse_shard_records(f"{SHARD}\n\n{worker}\n")

    assert records == (
        ShardRecord(
            replica="qwen2.5-coder-14b-0",
            model="qwen2.5-coder-14b",
            profile="h100x2",
            rank=0,
            gpus=(0, 1),
            port=8000,
            engine="vllm",
            started=datetime(2025, 1, 15, 10, 0, tzinfo=UTC),
            memory_gib=24.0,
        ),
        ShardRecord(
            replica="qwen2.5-coder-14b-0",
            model="qwen2.5-coder-14b",
            profile="h100x2",
            rank=1,
            gpus=(2, 3),
            port=8000,
            engine="vllm",
            started=datetime(2025, 1, 15, 10, 0, tzinfo=UTC),
            memory_gib=24.0,
        ),
    )
    assert [r.state for r in records] == ["running", "running"]  # no unit word: the default


STARTING = SHARD.replace('"memory_gib": 24.0', '"memory_gib": 24.0, "state": "starting"')


@pytest.mark.parametrize(
    ("unit_state", "expected"),
    [
        ("active", "running"),
        ("reloading", "running"),
        ("activating", "starting"),
        ("deactivating", "failed"),
        ("inactive", "failed"),
        ("failed", "failed"),
        # systemd's other ActiveState words (org.freedesktop.systemd1(5)), which the
        # parser refused while its copy of the states lacked them.
        ("refreshing", "running"),
        ("maintenance", "failed"),
        ("unknown", "starting"),  # no systemctl on the node: the record's own word stands
        ("offline", "starting"),  # no systemd running: the record's own word stands
        ("", "starting"),
    ],
)
def test_the_units_systemctl_word_sets_the_shards_state(unit_state: str, expected: str) -> None:
    (record,) = parse_shard_records(f"{STARTING}\t{unit_state}\n")

    assert (record.replica, record.state) == ("qwen2.5-coder-14b-0", expected)


def test_an_unknown_unit_state_is_rejected_with_its_line() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(f"{SHARD}\tactive\n{SHARD}\tdead\n")

    assert str(raised.value) == "shard records line 2: unknown unit state 'dead'"


def test_no_shard_records_means_an_empty_tuple() -> None:
    assert parse_shard_records("") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            SHARD + "\n{not json\n",
            "shard records line 2: not JSON: Expecting property name enclosed in double quotes "
            "at column 2",
        ),
        ("[1, 2]\n", "shard records line 1: expected a JSON object, got list"),
        (
            SHARD.replace('"rank": 0', '"rank": -1'),
            "shard records line 1: rank: Input should be greater than or equal to 0",
        ),
        (
            SHARD.replace('"engine": "vllm", ', ""),
            "shard records line 1: engine: Field required",
        ),
        (
            SHARD.replace('"port": 8000', '"prot": 8000'),
            "shard records line 1: prot: Extra inputs are not permitted",
        ),
        (
            SHARD.replace('"memory_gib": 24.0', '"memory_gib": 24.0, "state": "crashed"'),
            "shard records line 1: state: Input should be 'running', 'starting', 'failed' "
            "or 'stopped'",
        ),
    ],
    ids=["not-json", "not-an-object", "negative-rank", "missing-engine", "typo-key", "bad-state"],
)
def test_a_malformed_shard_record_is_rejected_with_its_line(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(text)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- /proc/net/tcp

# /proc/net/tcp and tcp6 as the kernel prints them (Documentation/networking/proc_net_tcp.rst):
# local and remote address:port in hex, then the state, 0A being LISTEN.
TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout"
    " inode\n"
    "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0"
    " 31337 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   113        0"
    " 21450 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0A000001:1F40 0A000002:C350 01 00000000:00000000 02:000A7F1E 00000000     0        0"
    " 31338 2 0000000000000000 20 4 30 10 -1\n"
    "   3: 0A000001:B1E6 0A000003:1F41 01 00000000:00000000 02:00000D2A 00000000  1000        0"
    " 40123 2 0000000000000000 20 4 30 10 -1\n"
    "   4: 0A000001:1F42 0A000004:D431 06 00000000:00000000 03:00001771 00000000     0        0"
    " 0 3 0000000000000000\n"
    "  sl  local_address                         remote_address                        st tx_queue"
    " rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A"
    " 00000000:00000000 00:00000000 00000000     0        0 17771 1 0000000000000000 100 0 0 10 0\n"
)


def test_only_ports_in_listen_state_are_listening_ports() -> None:
    # 8000, 3306 (MySQL on loopback) and 22 (tcp6) listen; 45542 is an outgoing connection
    # and 8002 a closed one waiting out TIME_WAIT; 8000's accepted connection is 8000 again.
    assert parse_listening_ports(TCP) == (22, 3306, 8000)


def test_no_tcp_rows_means_no_listening_ports() -> None:
    assert parse_listening_ports(TCP.splitlines()[0] + "\n") == ()
    assert parse_listening_ports("") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("   0: 00000000:1F40\n", "/proc/net/tcp line 1: not a /proc/net/tcp row"),
        (
            "   0: 00000000:XYZ 00000000:0000 0A 00000000:00000000\n",
            "/proc/net/tcp line 1: bad local address '00000000:XYZ'",
        ),
    ],
    ids=["short-row", "bad-port"],
)
def test_a_malformed_tcp_row_is_rejected_with_its_line(text: str, expected: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_listening_ports(text)

    assert str(raised.value) == expected


# --------------------------------------------------------------------------- docs


def test_every_node_facts_field_is_described_in_the_snapshot_docs() -> None:
    docs = DOCS.read_text()
    models = (NodeFacts, Memory, Gpu, GpuProcess, HcaPort, ShardRecord, ModelStore, StoredWeights)

    missing = [
        f"{model.__name__}.{field}"
        for model in models
        for field in model.model_fields
        if f"`{field}`" not in docs
    ]

    assert missing == []
