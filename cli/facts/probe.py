"""The probe's output → NodeFacts. Pure: the text and the time it was read in, facts out.

The probe (probe.sh, beside this file) prints sections between `@@modelfleet begin NAME`
and `@@modelfleet end NAME STATUS`. Whatever a node cannot tell is None with a note that
says why; it is never taken for zero or for "none".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from cli.facts.model import (
    Gpu,
    GpuProcess,
    HcaPort,
    Memory,
    ModelStore,
    NodeCertificate,
    NodeFacts,
    ShardRecord,
)
from cli.facts.parse import (
    GPU_QUERY_FIELDS,
    UNIT_STATES,
    UNIT_UNTOLD,
    FactsParseError,
    apply_cgroup_limit,
    parse_compute_apps,
    parse_listening_ports,
    parse_meminfo,
    parse_mig_modes,
    parse_query_gpu,
    parse_shard_records,
    parse_topology,
)
from cli.facts.sections.certificate import parse_pki
from cli.facts.sections.gpuhealth import (
    REMAPPED_ROWS_COLUMNS,
    RETIRED_PAGES_COLUMNS,
    GpuFlags,
    parse_remapped_rows,
    parse_retired_pages,
)
from cli.facts.sections.infiniband import parse_infiniband
from cli.facts.sections.load import parse_metrics_section
from cli.facts.sections.store import parse_model_store

PROBE_VERSION = "1"
# An exit status is 0 to 255: a longer number is no end mark (and never reaches int()).
_MARK = re.compile(r"^@@modelfleet (begin|end) ([a-z0-9-]{1,40})(?: ([0-9]{1,3}))?$")
COMMAND_NOT_FOUND = 127


# probe.sh's smi() marks each line nvidia-smi wrote to stderr with this.
STDERR_MARK: Final = "@@stderr "


@dataclass(frozen=True)
class Section:
    text: str  # what the command wrote to stdout
    status: int | None  # the exit status the probe recorded; None: the section never ended
    stderr: tuple[str, ...] = ()  # its stderr lines, where the probe kept them apart


def split_sections(output: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    current: str | None = None
    lines: list[str] = []
    errors: list[str] = []
    for line in output.splitlines():
        mark = _MARK.fullmatch(line)
        if mark is None:
            if current is None:
                continue
            if line.startswith(STDERR_MARK):
                errors.append(line[len(STDERR_MARK) :])
            else:
                lines.append(line)
            continue
        kind, name, status = mark.groups()
        if kind == "begin":
            current, lines, errors = name, [], []
        elif current == name:
            text = "\n".join(lines).strip("\n")
            sections[name] = Section(
                text, int(status) if status is not None else None, tuple(errors)
            )
            current = None
    if current is not None:  # cut off: the command died or timed out mid-section
        sections[current] = Section("\n".join(lines), None, tuple(errors))
    return sections


# probe.sh asks for the GPUs, their MIG modes and their pages pending retirement in one
# nvidia-smi run, the section "gpus"; a driver that refused it (exit 2, a field it does not
# know) was asked the three queries apart, and those sections are read as they are.
GPU_QUERIES: Final = ("query-gpu", "mig", "retired-pages")
# The one run's fields, as probe.sh asks them (a unit test holds the two equal).
GPUS_FIELDS: Final = (*GPU_QUERY_FIELDS, "mig.mode.current", "retired_pages.pending")


def gpu_queries(sections: dict[str, Section]) -> dict[str, Section]:
    """The sections with the combined run read as the three queries it stands for would
    answer: each row split into theirs, and every other line (nvidia-smi's messages), the
    stderr and the exit status given to each, as each run of nvidia-smi would print them."""
    combined = sections.get("gpus")
    if combined is None or any(name in sections for name in GPU_QUERIES):
        return sections
    query: list[str] = []
    mig: list[str] = []
    retired: list[str] = []
    width = len(GPU_QUERY_FIELDS)
    for line in combined.text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == len(GPUS_FIELDS):
            query.append(", ".join(fields[:width]))
            mig.append(f"{fields[0]}, {fields[width]}")
            retired.append(f"{fields[0]}, {fields[width + 1]}")
        else:
            for rows in (query, mig, retired):
                rows.append(line)
    derived = {
        name: Section("\n".join(rows), combined.status, combined.stderr)
        for name, rows in zip(GPU_QUERIES, (query, mig, retired), strict=True)
    }
    return {**sections, **derived}


class ProbeOutputError(ValueError):
    """Output that cannot be trusted as a whole, e.g. unreadable shard records."""


def facts_from_probe(output: str, gathered_at: datetime) -> NodeFacts:
    """Facts of a node that answered at `gathered_at`.

    Unreadable shard records fail the whole node (ProbeOutputError): read as "no shards",
    they would make GPUs in use look free.
    """
    sections = gpu_queries(split_sections(output))
    notes: list[str] = []
    version = sections.get("version")
    memory = _memory(sections, notes)
    gpus, processes, domains = _gpus(sections, notes)
    hcas: tuple[HcaPort, ...] | None = None
    infiniband = sections.get("infiniband")
    if infiniband is None:
        notes.append("the probe did not report InfiniBand")
    elif infiniband.status == COMMAND_NOT_FOUND:
        hcas = ()  # no /sys/class/infiniband: no RDMA device
    else:
        try:
            hcas = parse_infiniband(_sysfs_files(infiniband.text))
        except FactsParseError as error:
            notes.append(str(error))
    listening = None
    tcp = sections.get("listening")
    if tcp is not None and tcp.status == 0:
        try:
            listening = parse_listening_ports(tcp.text)
        except FactsParseError as error:
            notes.append(str(error))
    model_store = _model_store(sections.get("model-store"), notes)
    certificate = _certificate(sections.get("pki"), gathered_at, notes)
    lost = _lost_gpus(sections.get("query-gpu")) if gpus is not None else 0
    shards_section = sections.get("shards")
    if shards_section is None or shards_section.status != 0:
        raise ProbeOutputError("the probe did not finish reading the shard records")
    try:
        shards = read_shards(shards_section.text, notes)
    except FactsParseError as error:
        raise ProbeOutputError(str(error)) from None
    metrics = sections.get("metrics")
    replica_load = None
    if metrics is not None and metrics.status == 0:
        replica_load = parse_metrics_section(metrics.text, shards, notes)
    elif metrics is not None:
        notes.append(f"the engines' load was not read (the metrics section ended {metrics.status})")
    return NodeFacts(
        gathered_at=gathered_at,
        last_reached=gathered_at,
        probe_version=version.text.strip() if version else None,
        memory=memory,
        gpus=gpus,
        gpu_processes=processes,
        nvlink_domains=domains,
        hcas=hcas,
        shards=shards,
        listening_ports=listening,
        model_store=model_store,
        gpus_lost=lost,
        certificate=certificate,
        router_served=router_served(sections.get("router")),
        replica_load=replica_load,
        notes=tuple(notes),
    )


def router_served(section: Section | None) -> str | None:
    """The router section: the line its last deployment left, if the routes file it names
    (`DIGEST CONFIG-SHA256`) is the one installed and both units are active; else None,
    and ctl deploys the routes again."""
    if section is None or section.status != 0:
        return None
    fields = dict(line.partition("\t")[::2] for line in section.text.splitlines())
    served = fields.get("served", "").split()
    if len(served) != 2 or not all(_HEX64.fullmatch(part) for part in served):
        return None
    if fields.get("config", "").strip() != served[1] or fields.get("units", "").split() != [
        "active",
        "active",
    ]:
        return None
    return " ".join(served)


_HEX64 = re.compile(r"[0-9a-f]{64}")


_SHOWN = 40  # characters of a word systemd should not have said, in its note


def read_shards(text: str, notes: list[str]) -> tuple[ShardRecord, ...]:
    """The shards section: one line a shard, its JSON record, then a tab and its unit's
    `systemctl is-active` word (none from a node without systemctl).

    A record that cannot be read raises FactsParseError: read as "no shard", its GPUs
    would look free. A word that is no unit state is a note in `notes`, and the record
    keeps the state it says (running unless it says otherwise)."""
    bodies: list[str] = []
    words: list[str] = []
    for raw in text.splitlines():
        body, _, word = raw.strip().partition("\t")
        bodies.append(body)
        if body.strip():
            words.append(word.strip())
    records = parse_shard_records("\n".join(bodies))
    told: list[ShardRecord] = []
    for record, word in zip(records, words, strict=True):
        state = UNIT_STATES.get(word)
        if state is not None:
            told.append(record.model_copy(update={"state": state}))
            continue
        if word not in UNIT_UNTOLD:
            shown = word if len(word) <= _SHOWN else word[: _SHOWN - 3] + "..."
            notes.append(
                f"shard {record.replica}/{record.rank}: unit state {shown!r} is not one"
                f" systemd has; taken as {record.state}, as its record says"
            )
        told.append(record)
    return tuple(told)


def _memory(sections: dict[str, Section], notes: list[str]) -> Memory | None:
    meminfo = sections.get("meminfo")
    memory = None
    if meminfo is None or meminfo.status != 0:
        notes.append("did not report /proc/meminfo")
    else:
        try:
            memory = parse_meminfo(meminfo.text)
        except FactsParseError as error:
            notes.append(str(error))
    limit = sections.get("cgroup-memory")
    if limit is not None and limit.status == 0:
        try:
            memory = apply_cgroup_limit(memory, limit.text)
        except FactsParseError as error:
            notes.append(str(error))
    return memory


def _model_store(section: Section | None, notes: list[str]) -> ModelStore | None:
    """The model store, or None (not reported) with a note saying why."""
    if section is None:
        return None  # a probe from before the store: nothing to say but "unknown"
    if section.status != 0:
        said = [line for line in section.text.splitlines() if line.strip()]
        cause = _said(said[-1]) if said else "no output"
        how = "was cut off" if section.status is None else f"failed (exit {section.status})"
        notes.append(f"model store: stat -f {how}: {cause}")
        return None
    try:
        store, line_notes = parse_model_store(section.text)
    except FactsParseError as error:
        notes.append(str(error))
        return None
    notes.extend(line_notes)
    return store


def _certificate(
    section: Section | None, gathered_at: datetime, notes: list[str]
) -> NodeCertificate | None:
    """The node's certificate (None: no node.pem, or a probe from before the section)."""
    if section is None:
        return None
    if section.status != 0:
        notes.append("pki: the probe did not finish reading /etc/modelfleet/pki")
        return None
    try:
        certificate, said = parse_pki(section.text, gathered_at)
    except FactsParseError as error:
        notes.append(str(error))
        return None
    notes.extend(said)
    return certificate


GpuFacts = tuple[
    tuple[Gpu, ...] | None, tuple[GpuProcess, ...] | None, tuple[tuple[int, ...], ...] | None
]


# nvidia-smi's exit codes, as nvidia-smi(1) RETURN VALUE documents them.
SMI_NO_DEVICES: Final = 6  # "A query to find an object was unsuccessful"
SMI_NO_DRIVER: Final = 9  # "NVIDIA driver is not loaded"
SMI_INFOROM: Final = 14  # "infoROM is corrupted": a warning; the rows are good
SMI_GPU_LOST: Final = 15  # "The GPU has fallen off the bus or has otherwise become inaccessible"
SMI_VERSION_MISMATCH: Final = 18  # NVML_ERROR_LIB_RM_VERSION_MISMATCH: driver and library differ
# Exits after which the rows printed are still the healthy GPUs' rows.
_ROWS_STILL_GOOD: Final = frozenset({0, SMI_INFOROM, SMI_GPU_LOST})
_SMI_FAILURES: Final[dict[int, str]] = {
    SMI_NO_DRIVER: "the NVIDIA driver is not loaded",
    SMI_VERSION_MISMATCH: "the NVIDIA driver and its library differ in version (reboot?)",
}
# Lines nvidia-smi prints around its rows (either stream, by driver): a warning, or a GPU
# it could not reach. "GPU 0000:02:00.0" and "GPU0000:17:00.0" are both seen in the wild.
_SMI_MESSAGE = re.compile(r"^(?:WARNING: .*|Unable to determine the device handle for GPU.*)$")
_SHOWN_LINE = 160  # characters of a line nvidia-smi printed, in a note


def _said(line: str) -> str:
    line = line.strip()
    return line if len(line) <= _SHOWN_LINE else line[: _SHOWN_LINE - 3] + "..."


def _rows_and_messages(section: Section) -> tuple[str, list[str]]:
    """The CSV rows of an nvidia-smi section, and the messages printed around them."""
    rows: list[str] = []
    messages = [_said(line) for line in section.stderr if line.strip()]
    for line in section.text.splitlines():
        if _SMI_MESSAGE.fullmatch(line.strip()):
            messages.append(_said(line))
        else:
            rows.append(line)
    return "\n".join(rows), messages


_SMI_LOST = re.compile(r"^Unable to determine the device handle for GPU ?([0-9A-Fa-f:.]+)")
MAX_LOST_GPUS: Final = 1024  # as many as rows are read


def _lost_gpus(query: Section | None) -> int:
    """GPUs nvidia-smi could not reach (exit 15): one "Unable to determine the device
    handle" line each, by PCI address, on either stream. Counted so a node's GPU total
    still holds them: 7 answering of 8 is not an 7-GPU node."""
    if query is None or query.status not in _ROWS_STILL_GOOD:
        return 0
    lines = [*query.stderr, *query.text.splitlines()]
    addresses = {m.group(1).lower() for line in lines if (m := _SMI_LOST.match(line.strip()))}
    return min(len(addresses), MAX_LOST_GPUS)


def _gpus(sections: dict[str, Section], notes: list[str]) -> GpuFacts:
    query = sections.get("query-gpu")
    pci = sections.get("pci-nvidia", Section("", 0))
    devices = [line for line in pci.text.splitlines() if line]
    on_bus = f"{len(devices)} NVIDIA device(s) on the PCI bus"
    if query is None:
        notes.append("the probe did not report GPUs")
        return None, None, None
    if query.status == COMMAND_NOT_FOUND:
        if devices:
            notes.append(f"nvidia-smi not found, but {on_bus}")
            return None, None, None
        notes.append("no NVIDIA device on the PCI bus")
        return (), (), None
    rows, messages = _rows_and_messages(query)
    if query.status in (SMI_NO_DEVICES, SMI_NO_DRIVER) and not devices:
        # Driver tools on a machine without NVIDIA hardware: a CPU node, not a broken one.
        notes.append("no NVIDIA device on the PCI bus")
        return (), (), None
    if query.status == SMI_NO_DEVICES:
        notes.append(f"nvidia-smi found no devices, but {on_bus}")
        return None, None, None
    if query.status is None:
        notes.append("nvidia-smi did not finish (the probe's output was cut off): GPUs unknown")
        return None, None, None
    if query.status not in _ROWS_STILL_GOOD:
        # Its own words first; what the exit code documents when it printed none.
        said = [line for line in messages + rows.splitlines() if line.strip()]
        cause = said[0] if said else _SMI_FAILURES.get(query.status, "no output")
        notes.append(f"nvidia-smi failed (exit {query.status}): {_said(cause)}")
        return None, None, None
    notes.extend(f"nvidia-smi: {message}" for message in messages)
    try:
        gpus = parse_query_gpu(rows)
    except FactsParseError as error:
        notes.append(str(error))
        return None, None, None
    gpus = _with_mig_modes(gpus, sections.get("mig"), notes)
    try:
        gpus = _with_memory_repairs(gpus, sections, notes)
    except FactsParseError as error:
        notes.append(str(error))
    notes.extend(
        f"GPU {gpu.index}: {problem}"
        for gpu in gpus
        if (problem := gpu.hardware_problem()) is not None
    )
    processes = None
    apps = sections.get("compute-apps")
    if apps is not None and apps.status in _ROWS_STILL_GOOD:
        try:
            processes = parse_compute_apps(_rows_and_messages(apps)[0])
        except FactsParseError as error:
            notes.append(str(error))
    else:
        notes.append("nvidia-smi did not list compute processes")
    domains = None
    topology = sections.get("topology")
    if topology is not None and topology.status in _ROWS_STILL_GOOD and len(gpus) > 0:
        try:
            domains = parse_topology(_rows_and_messages(topology)[0])
        except FactsParseError as error:
            notes.append(str(error))
        else:
            domains = _checked_against(domains, gpus, notes)
    elif gpus:
        notes.append("nvidia-smi topo -m failed: NVLink topology unknown")
    return gpus, processes, domains


def _with_mig_modes(
    gpus: tuple[Gpu, ...], mig: Section | None, notes: list[str]
) -> tuple[Gpu, ...]:
    """Each GPU with its MIG mode; unchanged (unknown) where the node could not say."""
    if mig is None or not gpus:
        return gpus  # a probe from before MIG was asked about
    if mig.status not in _ROWS_STILL_GOOD:
        notes.append(f"nvidia-smi did not report MIG mode (exit {mig.status})")
        return gpus
    faults: dict[int, str] = {}
    try:
        modes = parse_mig_modes(_rows_and_messages(mig)[0], faults)
    except FactsParseError as error:
        notes.append(str(error))
        return gpus
    return tuple(
        gpu.model_copy(
            update={
                "mig_enabled": modes[gpu.index],
                "faults": gpu.faults + ((faults[gpu.index],) if gpu.index in faults else ()),
            }
        )
        if gpu.index in modes
        else gpu
        for gpu in gpus
    )


def _with_memory_repairs(
    gpus: tuple[Gpu, ...], sections: dict[str, Section], notes: list[str]
) -> tuple[Gpu, ...]:
    """Each GPU with the memory repairs it waits for, and the faults those queries found;
    unchanged (unknown) where the node could not say."""
    if not gpus:
        return gpus
    retired = _repair_rows(sections.get("retired-pages"), "retired pages", notes)
    remapped = _repair_rows(sections.get("remapped-rows"), "remapped rows", notes)
    by_index = parse_retired_pages(retired) if retired is not None else {}
    by_uuid = parse_remapped_rows(remapped) if remapped is not None else {}
    return tuple(
        _flagged(
            _flagged(gpu, by_index.get(gpu.index), RETIRED_PAGES_COLUMNS),
            by_uuid.get(gpu.uuid),
            REMAPPED_ROWS_COLUMNS,
        )
        for gpu in gpus
    )


def _repair_rows(section: Section | None, what: str, notes: list[str]) -> str | None:
    """The section's rows; None (with a note when it failed) where there are none to read."""
    if section is None:
        return None  # a probe from before these were asked about
    if section.status not in _ROWS_STILL_GOOD:
        notes.append(f"nvidia-smi did not report {what} (exit {section.status})")
        return None
    return _rows_and_messages(section)[0]


def _flagged(gpu: Gpu, flags: GpuFlags | None, attributes: dict[str, str]) -> Gpu:
    if flags is None:
        return gpu
    update: dict[str, Any] = {
        attribute: flags.values[field] for field, attribute in attributes.items()
    }
    return gpu.model_copy(update={**update, "faults": gpu.faults + flags.faults})


def _checked_against(
    domains: tuple[tuple[int, ...], ...], gpus: tuple[Gpu, ...], notes: list[str]
) -> tuple[tuple[int, ...], ...] | None:
    """The topology only when it names the GPUs the GPU list has: a wrong one is worse
    than none (two GPUs on different CPUs taken for an NVLink pair)."""
    listed = {gpu.index for gpu in gpus}
    drawn = {gpu for domain in domains for gpu in domain}
    if drawn == listed:
        return domains
    only_drawn = ", ".join(f"GPU{gpu}" for gpu in sorted(drawn - listed)) or "none"
    only_listed = ", ".join(f"GPU{gpu}" for gpu in sorted(listed - drawn)) or "none"
    notes.append(
        f"nvidia-smi topo -m does not match the GPU list (only in the topology: {only_drawn};"
        f" only in the list: {only_listed}): NVLink topology unknown"
    )
    return None


def _sysfs_files(text: str) -> dict[str, str]:
    files = {}
    for line in text.splitlines():
        path, _, value = line.partition("\t")
        if path:
            files[path] = value
    return files


def unreached(previous: NodeFacts | None, now: datetime, error: str) -> NodeFacts:
    """A node not reached now keeps its last known facts and shards: a blip must not look
    like a node with free GPUs. Only the attempt's time and its error change, and the first
    failed attempt since it was last reached is kept (from then on it is seen unreachable)."""
    if previous is None:
        return NodeFacts(gathered_at=now, last_reached=None, error=error, unreachable_since=now)
    since = now if previous.error is None else previous.unreachable_since or now
    return previous.model_copy(
        update={"gathered_at": now, "error": error, "unreachable_since": since}
    )


def facts_from_attempt(
    output: str | None, error: str | None, previous: NodeFacts | None, now: datetime
) -> NodeFacts:
    """What we know of a node after one gather attempt, given what we knew before."""
    if output is None:
        return unreached(previous, now, error or "not reached")
    try:
        return facts_from_probe(output, now)
    except ProbeOutputError as failure:
        return unreached(previous, now, f"unusable probe output: {failure}")
    except (ValueError, RecursionError, MemoryError) as failure:
        # Never expected (every parser says what it cannot read as FactsParseError), but
        # one node's output must not stop the others: it is that node's error.
        return unreached(previous, now, f"unusable probe output: {type(failure).__name__}")
