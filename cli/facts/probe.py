"""The probe's output → NodeFacts. Pure: the text and the time it was read in, facts out.

The probe (probe.sh, beside this file) prints sections between `@@modelfleet begin NAME`
and `@@modelfleet end NAME STATUS`. Whatever a node cannot tell is None with a note that
says why; it is never taken for zero or for "none".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from cli.facts.model import Gpu, GpuProcess, HcaPort, Memory, NodeFacts, ShardRecord, ShardState
from cli.facts.parse import (
    FactsParseError,
    apply_cgroup_limit,
    parse_compute_apps,
    parse_infiniband,
    parse_listening_ports,
    parse_meminfo,
    parse_query_gpu,
    parse_shard_records,
    parse_topology,
)

PROBE_VERSION = "1"
# An exit status is 0 to 255: a longer number is no end mark (and never reaches int()).
_MARK = re.compile(r"^@@modelfleet (begin|end) ([a-z0-9-]{1,40})(?: ([0-9]{1,3}))?$")
COMMAND_NOT_FOUND = 127


@dataclass(frozen=True)
class Section:
    text: str
    status: int | None  # the exit status the probe recorded; None: the section never ended


def split_sections(output: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    current: str | None = None
    lines: list[str] = []
    for line in output.splitlines():
        mark = _MARK.match(line)
        if mark is None:
            if current is not None:
                lines.append(line)
            continue
        kind, name, status = mark.groups()
        if kind == "begin":
            current, lines = name, []
        elif current == name:
            text = "\n".join(lines).strip("\n")
            sections[name] = Section(text, int(status) if status is not None else None)
            current = None
    if current is not None:  # cut off: the command died or timed out mid-section
        sections[current] = Section("\n".join(lines), None)
    return sections


class ProbeOutputError(ValueError):
    """Output that cannot be trusted as a whole, e.g. unreadable shard records."""


def facts_from_probe(output: str, gathered_at: datetime) -> NodeFacts:
    """Facts of a node that answered at `gathered_at`.

    Unreadable shard records fail the whole node (ProbeOutputError): read as "no shards",
    they would make GPUs in use look free.
    """
    sections = split_sections(output)
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
    shards_section = sections.get("shards")
    if shards_section is None or shards_section.status != 0:
        raise ProbeOutputError("the probe did not finish reading the shard records")
    try:
        shards = read_shards(shards_section.text, notes)
    except FactsParseError as error:
        raise ProbeOutputError(str(error)) from None
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
        notes=tuple(notes),
    )


# `systemctl is-active` words → what the shard is while its record exists. `ctl` removes
# a shard's record when it stops it, so a unit that is not running while its record is
# there was stopped by something else — the node restarting (our units are not enabled),
# the engine exiting, an operator — and has failed. A failed unit's processes are gone,
# and with them their hold on the GPUs. ("stopped" is a record's own word, from a node
# without systemd: nothing runs, and the shard is not counted at all.)
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


GpuFacts = tuple[
    tuple[Gpu, ...] | None, tuple[GpuProcess, ...] | None, tuple[tuple[int, ...], ...] | None
]


def _gpus(sections: dict[str, Section], notes: list[str]) -> GpuFacts:
    query = sections.get("query-gpu")
    pci = sections.get("pci-nvidia", Section("", 0))
    devices = [line for line in pci.text.splitlines() if line]
    if query is None:
        notes.append("the probe did not report GPUs")
        return None, None, None
    if query.status == COMMAND_NOT_FOUND:
        if devices:
            notes.append(
                f"nvidia-smi not found, but {len(devices)} NVIDIA device(s) on the PCI bus"
            )
            return None, None, None
        notes.append("no NVIDIA device on the PCI bus")
        return (), (), None
    if query.status != 0:
        first = query.text.strip().splitlines()[0] if query.text.strip() else "no output"
        notes.append(f"nvidia-smi failed (exit {query.status}): {first}")
        return None, None, None
    try:
        gpus = parse_query_gpu(query.text)
    except FactsParseError as error:
        notes.append(str(error))
        return None, None, None
    processes = None
    apps = sections.get("compute-apps")
    if apps is not None and apps.status == 0:
        try:
            processes = parse_compute_apps(apps.text)
        except FactsParseError as error:
            notes.append(str(error))
    else:
        notes.append("nvidia-smi did not list compute processes")
    domains = None
    topology = sections.get("topology")
    if topology is not None and topology.status == 0 and len(gpus) > 0:
        try:
            domains = parse_topology(topology.text)
        except FactsParseError as error:
            notes.append(str(error))
    elif gpus:
        notes.append("nvidia-smi topo -m failed: NVLink topology unknown")
    return gpus, processes, domains


def _sysfs_files(text: str) -> dict[str, str]:
    files = {}
    for line in text.splitlines():
        path, _, value = line.partition("\t")
        if path:
            files[path] = value
    return files


def unreached(previous: NodeFacts | None, now: datetime, error: str) -> NodeFacts:
    """A node not reached now keeps its last known facts and shards: a blip must not look
    like a node with free GPUs. Only the attempt's time and its error change."""
    if previous is None:
        return NodeFacts(gathered_at=now, last_reached=None, error=error)
    return previous.model_copy(update={"gathered_at": now, "error": error})


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
