"""Properties of the fact parsers (cli/facts/parse.py) and of the probe output they read.

1. Any text in, a result or a FactsParseError out (the probe turns it into a note, or
   fails the node's shard records), never another exception: random text, and the real
   formats (tests/unit/samples, the fake nvidia-smi's output for random GPUs) corrupted
   by cutting, splicing and swapping in tokens the formats use. A FactsParseError names
   the parser's section and a line of the text (0: the text as a whole).
2. The same for a whole probe output: `facts_from_attempt` always gives facts.
3. Round trips: what the fake nvidia-smi prints for random GPUs, processes and NVLinks
   is parsed back to exactly those; generated meminfo, cgroup limits, sysfs ports, shard
   records with every systemctl word (`offline` and `unknown` included) and
   /proc/net/tcp rows (only LISTEN rows are listening ports) likewise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cli.facts.model import (
    Gpu,
    GpuProcess,
    HcaPort,
    Memory,
    NodeFacts,
    ShardRecord,
    store_directory,
)
from cli.facts.parse import (
    FactsParseError,
    apply_cgroup_limit,
    parse_compute_apps,
    parse_listening_ports,
    parse_meminfo,
    parse_query_gpu,
    parse_shard_records,
    parse_topology,
)
from cli.facts.probe import facts_from_attempt
from cli.facts.sections.infiniband import parse_infiniband
from cli.facts.sections.store import parse_model_store
from tests.builders import NOW
from tests.fakes.nvidia_smi import FakeData, GpuData, precomputed, topology

PROPERTY_SETTINGS = settings(max_examples=150)
HEAVY_SETTINGS = settings(max_examples=80)  # a fake nvidia-smi run or a whole probe each
SAMPLES = Path(__file__).parent.parent / "unit" / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


# --- the real formats -----------------------------------------------------------------------

GPU_NAMES = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA L40S",
    "Tesla V100-PCIE-32GB",
    "NVIDIA GeForce RTX 4090",
)


@st.composite
def fake_data(draw: st.DrawFn) -> FakeData:
    """A node's GPUs as the fake nvidia-smi (tests/fakes/nvidia_smi.py) takes them."""
    count = draw(st.integers(0, 8))
    gpus: list[GpuData] = []
    for index in range(count):
        total = draw(st.sampled_from((81559, 46068, 24564, 32768)))
        gpus.append(
            {
                "index": index,
                "uuid": f"GPU-{draw(st.uuids())}",
                "name": draw(st.sampled_from(GPU_NAMES)),
                "pci_bus_id": f"00000000:{draw(st.integers(0, 255)):02X}:00.0",
                "memory_total_mib": total,
                "memory_used_mib": draw(st.integers(0, total)),
                "ecc_uncorrected": draw(st.none() | st.integers(0, 5)),
                "numa_node": draw(st.none() | st.integers(0, 1)),
                "cpu_affinity": draw(st.sampled_from(("0-47", "0-47,96-143", "N/A"))),
                "pcie_switch": draw(st.none() | st.integers(0, 3)),
            }
        )
    nvlinks: list[list[int]] = []
    for a in range(count):
        for b in range(a + 1, count):
            if draw(st.booleans()):
                nvlinks.append([a, b, draw(st.integers(1, 18))])
    names = st.sampled_from(("python3", "/usr/bin/python3", "vllm, serve", "/opt/a, b/llama"))
    processes = [
        {
            "gpu_uuid": gpus[draw(st.integers(0, count - 1))]["uuid"],
            "pid": draw(st.integers(1, 4_194_304)),
            "process_name": draw(names),
            "used_memory_mib": draw(st.integers(0, 81559)),
        }
        for _ in range(draw(st.integers(0, 4)) if count else 0)
    ]
    return {
        "driver": "ok",
        "driver_version": "550.54.15",
        "gpus": gpus,
        "nics": [
            {
                "name": f"mlx5_{n}",
                "numa_node": draw(st.none() | st.integers(0, 1)),
                "pcie_switch": draw(st.none() | st.integers(0, 3)),
            }
            for n in range(draw(st.integers(0, 2)))
        ],
        "nvlinks": nvlinks,
        "processes": processes,  # type: ignore[typeddict-item]
        "underline_topo_header": draw(st.booleans()),
    }


def meminfo_text(total_kib: int | None, available_kib: int | None, others: int) -> str:
    lines = [f"Buffers:        {3656 + i} kB" for i in range(others)]
    if total_kib is not None:
        lines.insert(0, f"MemTotal:       {total_kib} kB")
    if available_kib is not None:
        lines.append(f"MemAvailable:   {available_kib} kB")
    lines.append("HugePages_Total:       0")  # no unit: allowed on the other lines
    return "\n".join(lines) + "\n"


TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout"
    " inode"
)
TCP6_HEADER = (
    "  sl  local_address                         remote_address                        st"
    " tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
)
TCP_STATES = ("0A", "01", "06", "08", "0A", "02")  # LISTEN, ESTABLISHED, TIME_WAIT, ...


def tcp_row(number: int, port: int, state: str, six: bool) -> str:
    address = "0" * 32 if six else "0100007F"
    return (
        f"   {number}: {address}:{port:04X} {address}:0000 {state} 00000000:00000000"
        " 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0"
    )


SHARD = (
    '{"engine": "vllm", "gpus": [0, 1], "memory_gib": 24.0, "model": "qwen", "nodes": 2,'
    ' "origin": "reconcile", "port": 8000, "profile": "h100x2", "rank": 1,'
    ' "replica": "qwen-1", "started": "2026-11-30T09:00:00+00:00", "state": "starting"}'
)
UNIT_WORDS = {  # systemctl is-active → the shard's state; None: the record's own stands
    "active": "running",
    "reloading": "running",
    "activating": "starting",
    "deactivating": "failed",
    "inactive": "failed",
    "failed": "failed",
    "unknown": None,  # no systemctl on the node
    "offline": None,  # no systemd running
    "": None,
}

SYSFS = (
    "mlx5_0/ports/1/state\t4: ACTIVE\nmlx5_0/ports/1/rate\t400 Gb/sec (4X NDR)\n"
    "mlx5_0/ports/1/link_layer\tInfiniBand\nmlx5_1/ports/1/state\t1: DOWN\n"
)


def sysfs_files(text: str) -> dict[str, str]:
    """The probe's infiniband section → the files parse_infiniband takes (as probe.py)."""
    files = {}
    for line in text.splitlines():
        path, _, value = line.partition("\t")
        if path:
            files[path] = value
    return files


# --- corruption ----------------------------------------------------------------------------

# Pieces of the formats, and the awkward characters around them.
TOKENS = (
    "", ",", ", ", "\t", "\n", " ", ":", "[N/A]", "N/A", "[Not Supported]", "ERR!", "-1", "0",
    "²", "٣", "1e3", "0x1F", "99999999999999999999", "X", " X ", "NV0", "NV12", "GPU0", "GPU7",
    "NIC0", "SYS", "kB", "MiB", "MemTotal:", "max", "0A", "sl", "4: ACTIVE", "Gb/sec",
    "/ports/", "{", "}", "[", '"', "null", '"rank": -1', "\x1b[4m", "\x1b[0m", "\u2028", "\x85",
    "\r", "\x00", "Legend:", "No devices were found", "No running processes found",
    "@@modelfleet end shards 0", "@@modelfleet begin meminfo", "@@modelfleet end meminfo 0",
    "@@modelfleet end query-gpu 2",
)  # fmt: skip
NUMBER = re.compile(r"\d+")


@st.composite
def corrupted(draw: st.DrawFn, base: str) -> str:
    """`base` with one to four cuts, splices or swaps."""
    text = base
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("insert", "delete", "truncate", "line", "number", "swap")))
        at = draw(st.integers(0, len(text)))
        if kind == "insert":
            piece = draw(st.sampled_from(TOKENS) | st.text(max_size=4))
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 12)) :]
        elif kind == "truncate":
            text = text[:at]
        elif kind == "line":
            lines = text.splitlines(keepends=True)
            if lines:
                index = draw(st.integers(0, len(lines) - 1))
                copy = draw(st.booleans())
                lines[index:index] = [lines[index]] if copy else []
                if not copy:
                    del lines[index]
                text = "".join(lines)
        elif kind == "number":
            numbers = list(NUMBER.finditer(text))
            if numbers:
                match = numbers[draw(st.integers(0, len(numbers) - 1))]
                piece = draw(st.sampled_from(TOKENS))
                text = text[: match.start()] + piece + text[match.end() :]
        else:
            fields = re.split(r"(,|\t| +)", text)
            if len(fields) > 1:
                i, j = draw(st.integers(0, len(fields) - 1)), draw(st.integers(0, len(fields) - 1))
                fields[i], fields[j] = fields[j], fields[i]
                text = "".join(fields)
    return text


def texts_like(*bases: str) -> st.SearchStrategy[str]:
    return st.text() | st.sampled_from(bases).flatmap(corrupted)


def fake_output(name: str) -> st.SearchStrategy[str]:
    return fake_data().map(lambda data: precomputed(data)[f"{name}.out"])


# A model store as probe.sh prints it: two markers (one of a source whose directory is not
# its own), and statfs's figures.
STORE = (
    "store\t/var/lib/modelfleet/models\tpresent\n"
    f"complete\t{store_directory('hf://org/a')}\t"
    '{"source": "hf://org/a", "bytes": 140000000000}\n'
    'complete\telsewhere\t{"source": "hf://org/b", "bytes": 7}\n'
    "filesystem\t4096\t244140625\t19531250\n"
)


# --- any text in ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Parser:
    section: str
    run: Callable[[str], object]
    texts: st.SearchStrategy[str]


def _cgroup(text: str) -> object:
    return apply_cgroup_limit(Memory(total_mib=64299, available_mib=59798), text)


PARSERS = {
    "meminfo": Parser(
        "/proc/meminfo",
        parse_meminfo,
        texts_like(
            sample("meminfo-linux-doc-with-memavailable.txt"),
            sample("meminfo-linux-2.6-no-memavailable.txt"),
        ),
    ),
    "cgroup": Parser(
        "cgroup memory limit", _cgroup, texts_like("max\n", "68719476736\n", "9223372036854771712")
    ),
    "query-gpu": Parser(
        "nvidia-smi --query-gpu",
        parse_query_gpu,
        texts_like(sample("query-gpu-gpustat-other-fields.csv"))
        | fake_output("query-gpu").flatmap(corrupted),
    ),
    "compute-apps": Parser(
        "nvidia-smi --query-compute-apps",
        parse_compute_apps,
        texts_like(sample("compute-apps-gpustat-three-fields.csv"))
        | fake_output("compute-apps").flatmap(corrupted),
    ),
    "topology": Parser(
        "nvidia-smi topo -m",
        parse_topology,
        texts_like(*(sample(p.name) for p in sorted(SAMPLES.glob("topo-*.txt"))))
        | fake_data().map(topology).flatmap(corrupted),
    ),
    "infiniband": Parser(
        "/sys/class/infiniband/",
        lambda text: parse_infiniband(sysfs_files(text)),
        texts_like(sample("sysfs-infiniband-procfs-fixture.tsv"), SYSFS),
    ),
    "listening": Parser(
        "/proc/net/tcp",
        parse_listening_ports,
        texts_like(
            "\n".join(
                [
                    TCP_HEADER,
                    tcp_row(0, 8000, "0A", False),
                    tcp_row(1, 22, "01", False),
                    TCP6_HEADER,
                    tcp_row(0, 22, "0A", True),
                ]
            )
        ),
    ),
    # Bad marker lines are notes; only a section without its store or filesystem is refused.
    "model-store": Parser(
        "model store",
        parse_model_store,
        texts_like(STORE, "store\t/srv/models\tabsent\t/srv\nfilesystem\t512\t100\t0\n"),
    ),
    "shards": Parser(
        "shard records",
        parse_shard_records,
        texts_like(f"{SHARD}\tactive\n{SHARD}\toffline\n", f"{SHARD}\n\n{SHARD}\tfailed\n"),
    ),
}


@pytest.mark.parametrize("name", list(PARSERS))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_any_text_gives_a_result_or_a_parse_error_naming_its_section_and_line(
    name: str, data: st.DataObject
) -> None:
    parser = PARSERS[name]
    text = data.draw(parser.texts, label="text")
    try:
        parser.run(text)
    except FactsParseError as error:
        event(f"{name}: refused")
        assert error.section.startswith(parser.section), (error.section, parser.section)
        if name != "infiniband":  # its lines are of one file's content, not of the text
            assert 0 <= error.line <= len(text.splitlines()), (error.line, text)
        assert error.message and str(error).startswith(error.section)
    else:
        event(f"{name}: read")


@PROPERTY_SETTINGS
@given(st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=6))
@example({"²/ports/1/state": "4: ACTIVE"})  # int("²"): a digit to isdigit(), not to int()
def test_any_sysfs_files_give_ports_or_a_parse_error(files: dict[str, str]) -> None:
    try:
        parse_infiniband(files)
    except FactsParseError as error:
        assert error.section.startswith("/sys/class/infiniband/") and error.message


def probe_output(data: FakeData, shards: str) -> str:
    outputs = precomputed(data)
    sections = {
        "version": ("1", "0"),
        "meminfo": (sample("meminfo-linux-doc-with-memavailable.txt"), "0"),
        "pci-nvidia": ("", "0"),
        **{
            section: (outputs[f"{name}.out"], outputs[f"{name}.status"].strip())
            for section, name in (
                ("query-gpu", "query-gpu"), ("mig", "mig"), ("compute-apps", "compute-apps"),
                ("topology", "topo"),
            )
        },
        "infiniband": (SYSFS, "0"),
        "listening": ("\n".join([TCP_HEADER, tcp_row(0, 8000, "0A", False)]), "0"),
        "model-store": (STORE, "0"),
        "shards": (shards, "0"),
    }  # fmt: skip
    return "".join(
        f"@@modelfleet begin {name}\n{body}\n@@modelfleet end {name} {status}\n"
        for name, (body, status) in sections.items()
    )


@PROPERTY_SETTINGS
@given(
    st.builds(probe_output, fake_data(), st.sampled_from(("", f"{SHARD}\tactive")))
    .flatmap(corrupted)
    .filter(lambda text: len(text) < 20000)
    | st.text()
)
def test_any_probe_output_gives_facts_with_notes_never_an_exception(output: str) -> None:
    facts = facts_from_attempt(output, None, None, NOW)
    assert isinstance(facts, NodeFacts)
    if facts.error is None:
        event("probe output: facts")
        assert facts.last_reached == NOW
    else:
        event("probe output: node failed, with its reason")
        assert facts.error.startswith("unusable probe output: ")


@HEAVY_SETTINGS
@given(fake_data(), st.sampled_from(list(UNIT_WORDS)))
def test_a_whole_probe_output_is_read_back_to_its_facts(data: FakeData, word: str) -> None:
    line = SHARD + (f"\t{word}" if word else "")
    facts = facts_from_attempt(probe_output(data, line), None, None, NOW)
    assert facts.error is None and facts.last_reached == NOW
    # With no GPU, nvidia-smi says "No devices were found" and exits 6; with nothing NVIDIA
    # on the PCI bus either (this output's pci-nvidia is empty), the node has no GPUs.
    assert facts.gpus == (gpus_of(data) if data["gpus"] else ())
    assert facts.nvlink_domains == (nvlink_domains_by_search(data) if data["gpus"] else None)
    assert facts.listening_ports == (8000,)
    assert facts.memory == Memory(total_mib=15961, available_mib=14488)  # 16344972 kB
    assert [(s.replica, s.rank, s.state) for s in facts.shards] == [
        ("qwen-1", 1, UNIT_WORDS[word] or "starting")
    ]


# --- round trips ----------------------------------------------------------------------------


def gpus_of(data: FakeData) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            index=gpu["index"],
            uuid=gpu["uuid"],
            name=gpu["name"],
            pci_bus_id=gpu["pci_bus_id"],
            memory_total_mib=gpu["memory_total_mib"],
            memory_used_mib=gpu["memory_used_mib"],
            ecc_uncorrected=gpu["ecc_uncorrected"],
        )
        for gpu in data["gpus"]
    )


def nvlink_domains_by_search(data: FakeData) -> tuple[tuple[int, ...], ...]:
    """NVLink domains by a plain search (not the parser's): the connected components over
    the NVLinks, each split into fully linked groups."""
    neighbours: dict[int, set[int]] = {gpu["index"]: set() for gpu in data["gpus"]}
    for a, b, _ in data["nvlinks"]:
        neighbours[a].add(b)
        neighbours[b].add(a)
    seen: set[int] = set()
    components = []
    for start in sorted(neighbours):
        if start in seen:
            continue
        component, todo = set(), [start]
        while todo:
            gpu = todo.pop()
            if gpu not in component:
                component.add(gpu)
                todo.extend(neighbours[gpu])
        seen |= component
        components.append(tuple(sorted(component)))
    # Then docs/facts.md's split of a component that is not fully linked: lowest GPU first,
    # a group takes each GPU (in index order) that is linked to every GPU it holds.
    domains = []
    for members in components:
        rest = list(members)
        while rest:
            group = {rest[0]}
            for gpu in rest[1:]:
                if group <= neighbours[gpu]:
                    group.add(gpu)
            domains.append(tuple(sorted(group)))
            rest = [gpu for gpu in rest if gpu not in group]
    return tuple(sorted(domains))


@HEAVY_SETTINGS
@given(fake_data())
def test_what_the_fake_nvidia_smi_prints_is_read_back_exactly(data: FakeData) -> None:
    outputs = precomputed(data)
    assert parse_query_gpu(outputs["query-gpu.out"]) == gpus_of(data)
    processes = tuple(
        GpuProcess(
            gpu_uuid=p["gpu_uuid"],
            pid=p["pid"],
            process_name=p["process_name"],
            used_memory_mib=p["used_memory_mib"],
        )
        for p in data["processes"]
    )
    if data["gpus"]:  # with none, the fake (as nvidia-smi) exits 6 on these two
        assert parse_compute_apps(outputs["compute-apps.out"]) == processes
        assert parse_topology(outputs["topo.out"]) == nvlink_domains_by_search(data)
        event(f"{len(nvlink_domains_by_search(data))} NVLink domain(s)")


NOT_REPORTED = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "ERR!")
OPTIONAL_GPU_FIELDS = (
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "ecc.errors.uncorrected.volatile.total",
)
GPU_NAME = st.text(
    st.characters(categories=("L", "N"), include_characters=" -_()"), min_size=1, max_size=20
).filter(lambda name: name.strip() == name and name not in NOT_REPORTED)


@st.composite
def gpu_rows(draw: st.DrawFn) -> tuple[tuple[Gpu, ...], str]:
    gpus, lines = [], []
    indices = draw(st.lists(st.integers(0, 64), unique=True, max_size=8))
    for index in indices:
        optional = st.none() | st.integers(0, 10**12)
        gpu = Gpu(
            index=index,
            uuid=f"GPU-{draw(st.uuids())}",
            name=draw(GPU_NAME),
            pci_bus_id=draw(st.none() | st.from_regex(r"\A[0-9A-F]{8}:[0-9a-f]{2}:1F\.[0-7]\Z")),
            memory_total_mib=draw(optional),
            memory_used_mib=draw(optional),
            ecc_uncorrected=draw(optional),
        )
        values = [
            str(gpu.index), gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.memory_total_mib,
            gpu.memory_used_mib, gpu.ecc_uncorrected,
        ]  # fmt: skip
        shown = [draw(st.sampled_from(NOT_REPORTED)) if v is None else str(v) for v in values]
        # The GPU's own error (ERR!) in a field is a fault too (docs/facts.md, Gpu).
        faults = tuple(
            f"{field}: {value}"
            for field, value in zip(OPTIONAL_GPU_FIELDS, shown[3:], strict=True)
            if value == "ERR!"
        )
        gpus.append(gpu.model_copy(update={"faults": faults}))
        lines.append(draw(st.sampled_from((",", ", ", " , "))).join(shown))
    blank = draw(st.sampled_from(("", "\n", "\n\n  \n")))
    return tuple(gpus), blank + "\n".join(lines) + "\n"


@PROPERTY_SETTINGS
@given(gpu_rows())
def test_a_generated_gpu_csv_is_read_back_to_the_gpus(rows: tuple[tuple[Gpu, ...], str]) -> None:
    gpus, text = rows
    assert parse_query_gpu(text) == gpus


@PROPERTY_SETTINGS
@given(
    st.none() | st.integers(0, 2**40),
    st.none() | st.integers(0, 2**40),
    st.integers(0, 3),
    st.none() | st.integers(0, 2**62) | st.just("max"),
)
def test_meminfo_and_a_cgroup_limit_are_read_to_mib_rounded_down(
    total: int | None, available: int | None, others: int, limit: int | str | None
) -> None:
    memory = parse_meminfo(meminfo_text(total, available, others))
    if total is None:
        assert memory is None
    else:
        assert memory == Memory(
            total_mib=total // 1024, available_mib=None if available is None else available // 1024
        )
    if limit is None:
        return
    capped = apply_cgroup_limit(memory, f"{limit}\n")
    if limit == "max" or (isinstance(limit, int) and limit >= 2**60):
        assert capped == memory  # no limit
        return
    assert isinstance(limit, int)
    mib = limit // (1024 * 1024)
    if memory is None:
        assert capped == Memory(total_mib=mib)
    else:
        assert capped is not None and capped.total_mib == min(memory.total_mib, mib)


@st.composite
def sysfs_ports(draw: st.DrawFn) -> tuple[tuple[HcaPort, ...], dict[str, str]]:
    files: dict[str, str] = {}
    ports = []
    hcas = draw(st.lists(st.integers(0, 12), unique=True, max_size=4))
    for number in hcas:
        for port in draw(st.lists(st.integers(1, 2), unique=True, min_size=1)):
            prefix = draw(st.sampled_from(("", "/sys/class/infiniband/")))
            where = f"{prefix}mlx5_{number}/ports/{port}"
            state = draw(st.sampled_from(("4: ACTIVE", "1: DOWN", "2: INIT", "3: ARMED")))
            rate = draw(st.none() | st.sampled_from((100, 200, 400)))
            layer = draw(st.none() | st.sampled_from(("InfiniBand", "Ethernet", "OmniPath")))
            files[f"{where}/state"] = state + draw(st.sampled_from(("", "\n")))
            if rate is not None:
                files[f"{where}/rate"] = f"{rate} Gb/sec (4X)"
            if layer is not None:
                files[f"{where}/link_layer"] = layer
            files[f"{where}/phys_state"] = "5: LinkUp"  # not one it reads
            ports.append(
                HcaPort(
                    hca=f"mlx5_{number}",
                    port=port,
                    state=state.split(": ")[1],
                    rate_gbps=None if rate is None else float(rate),
                    link_layer=None if layer == "OmniPath" else layer,
                )
            )
    ports.sort(key=lambda p: (int(p.hca.removeprefix("mlx5_")), p.port))  # mlx5_2 < mlx5_10
    shuffled = dict(draw(st.permutations(list(files.items()))))
    return tuple(ports), shuffled


@PROPERTY_SETTINGS
@given(sysfs_ports())
def test_sysfs_port_files_are_read_back_sorted_naturally(
    generated: tuple[tuple[HcaPort, ...], dict[str, str]],
) -> None:
    ports, files = generated
    assert parse_infiniband(files) == ports


NAME = st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,15}\Z")
records = st.builds(
    ShardRecord,
    replica=NAME,
    model=NAME,
    profile=NAME,
    rank=st.integers(0, 7),
    nodes=st.integers(1, 8),
    gpus=st.lists(st.integers(0, 7), unique=True, max_size=8).map(tuple),
    hcas=st.lists(st.sampled_from(("mlx5_0", "mlx5_1", "mlx5_10")), unique=True).map(tuple),
    port=st.none() | st.integers(8000, 8999),
    engine=st.sampled_from(("vllm", "sglang", "llama.cpp")),
    started=st.none()
    | st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(UTC)),
    memory_gib=st.none() | st.floats(0.5, 2048, allow_nan=False),
    unit=st.none() | NAME.map(lambda n: f"modelfleet-{n}.service"),
    origin=st.sampled_from(("reconcile", "manual")),
    state=st.sampled_from(("running", "starting", "failed", "stopped")),
)


@HEAVY_SETTINGS
@given(st.lists(st.tuples(records, st.sampled_from(list(UNIT_WORDS)), st.booleans()), max_size=5))
@example([(ShardRecord.model_validate_json(SHARD), "offline", False)])
def test_shard_records_are_read_back_with_the_units_word_for_their_state(
    lines: list[tuple[ShardRecord, str, bool]],
) -> None:
    text = ""
    for record, word, sorted_keys in lines:
        body = json.dumps(record.model_dump(mode="json"), sort_keys=sorted_keys)
        text += body + (f"\t{word}" if word else "") + "\n" + ("\n" if sorted_keys else "")
        event(f"unit word: {word or '(none)'}")
    parsed = parse_shard_records(text)
    expected = [
        record.model_copy(update={"state": UNIT_WORDS[word] or record.state})
        for record, word, _ in lines
    ]
    assert list(parsed) == expected


@PROPERTY_SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(1, 65535), st.sampled_from(TCP_STATES), st.booleans()), max_size=12
    )
)
def test_only_ports_in_listen_state_are_listening_ports(
    rows: list[tuple[int, str, bool]],
) -> None:
    four = [tcp_row(n, port, state, False) for n, (port, state, six) in enumerate(rows) if not six]
    six = [tcp_row(n, port, state, True) for n, (port, state, six) in enumerate(rows) if six]
    text = "\n".join([TCP_HEADER, *four, TCP6_HEADER, *six]) + "\n"
    listening = sorted({port for port, state, _ in rows if state == "0A"})
    if len(listening) < len({port for port, _, _ in rows}):
        event("some rows are not listening")
    assert list(parse_listening_ports(text)) == listening


def test_the_corrupted_texts_are_both_read_and_refused_often_enough() -> None:
    # Texts every parser refuses (or reads) would only test the first line of each.
    for name, parser in PARSERS.items():
        results = outcomes(parser)
        read = sum(results) / len(results)
        assert len(results) >= 50 and 0.10 <= read <= 0.90, f"{name}: {read:.0%} read"


def outcomes(parser: Parser) -> list[bool]:
    """Whether each of 60 of the parser's texts was read (True) or refused."""
    results: list[bool] = []

    @settings(max_examples=60)
    @given(parser.texts)
    def collect(text: str) -> None:
        try:
            parser.run(text)
        except FactsParseError:
            results.append(False)
        else:
            results.append(True)

    collect()
    return results


# --- found by the properties above ----------------------------------------------------------


def _digits(count: int) -> str:
    return "1" * count


CRASHES: dict[str, Callable[[], Any]] = {
    "cgroup": lambda: apply_cgroup_limit(None, _digits(4301)),
    "meminfo": lambda: parse_meminfo(f"MemTotal: {_digits(4301)} kB"),
    "query-gpu": lambda: parse_query_gpu(f"{_digits(4301)}, GPU-1, H100, [N/A], 1, 1, 0"),
    "compute-apps": lambda: parse_compute_apps(f"GPU-1, {_digits(4301)}, python3, 1"),
    "infiniband-port": lambda: parse_infiniband({f"mlx5_0/ports/{_digits(4301)}/state": "4: X"}),
    "topology": lambda: parse_topology(f"GPU0\tGPU{_digits(4301)}\nGPU0\t X \tSYS\n"),
}


@pytest.mark.parametrize("name", list(CRASHES))
def test_a_number_of_more_than_4300_digits_is_a_parse_error(name: str) -> None:
    # Python's int() refuses a decimal string of more than 4300 digits with ValueError; the
    # parsers check a number's length before they call it.
    with pytest.raises(FactsParseError):
        CRASHES[name]()


@pytest.mark.parametrize(
    "text", ["[" * 100_000, _digits(4301), '{"rank": ' + _digits(4301) + "}"],
    ids=["nested-too-deep", "4301-digits", "4301-digit-rank"],
)  # fmt: skip
def test_a_shard_record_json_cannot_read_is_a_parse_error(text: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(f"{SHARD}\n{text}\n")
    assert str(raised.value).startswith("shard records line 2: not JSON: ")
