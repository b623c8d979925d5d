"""The metrics section: each local replica's engine's `/metrics`, turned into its load.

The probe asks the engine of every rank 0 on the node over loopback and prints, per
replica, `replica<TAB>NAME<TAB>STATUS[<TAB>WHY]` and then the body, each line marked `|`
(probe.sh). The body is the engine's, so it is untrusted like every fact: read as the
Prometheus text exposition format (version 0.0.4), bounded in size and lines, a line that
is not in the format noted and skipped, never fatal. A figure not read is None, never 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cli.engines.specs import ENGINE_SPECS, LoadMetrics
from cli.facts.model import ReplicaLoad, ShardRecord
from cli.facts.parse import _quote

SECTION_METRICS: Final = "metrics"
# What the probe reads of one engine's /metrics (a vLLM's is some 50 KiB), and the lines
# read of it: more is cut, and said.
MAX_METRICS_BYTES: Final = 256 * 1024
MAX_METRICS_LINES: Final = 20_000
BODY_MARK: Final = "|"

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]{0,199}"
_SAMPLE = re.compile(
    rf"(?P<name>{_NAME})(?:\{{(?P<labels>[^\n]*)\}})?[ \t]+(?P<value>\S+)(?:[ \t]+-?\d{{1,20}})?"
)
_LABEL = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]{0,199})[ \t]*=[ \t]*"((?:[^"\\]|\\.){0,4096})"[ \t]*(,|$)'
)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN")
_TYPE = re.compile(rf"#[ \t]+TYPE[ \t]+(?P<name>{_NAME})[ \t]+(?P<type>[a-z]+)[ \t]*")
_HEADER = re.compile(
    r"replica\t(?P<replica>[^\t]{1,256})\t(?P<status>[^\t]{1,16})(?:\t(?P<why>.*))?"
)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Exposition:
    """What a /metrics body said: its samples, the types it declared, and what it could
    not say in the format (`bad`: how many lines; `first_bad`: the first, to show)."""

    samples: tuple[Sample, ...]
    types: Mapping[str, str]
    bad: int = 0
    first_bad: str | None = None
    cut: bool = False  # more lines than MAX_METRICS_LINES: the rest was not read


def parse_exposition(text: str) -> Exposition:
    """The Prometheus text format, read without trusting it: bad lines counted, not fatal."""
    samples: list[Sample] = []
    types: dict[str, str] = {}
    bad = 0
    first_bad: str | None = None
    # The newline that ends the last line starts no line of its own: a body of exactly
    # MAX_METRICS_LINES lines is read whole.
    lines = text.removesuffix("\n").split("\n")
    cut = len(lines) > MAX_METRICS_LINES
    for raw in lines[:MAX_METRICS_LINES]:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            declared = _TYPE.fullmatch(line)
            if declared is not None:
                types.setdefault(declared["name"], declared["type"])
            continue  # HELP and comments say nothing we read
        sample = _sample(line)
        if sample is None:
            bad += 1
            first_bad = first_bad or line
            continue
        samples.append(sample)
    return Exposition(tuple(samples), types, bad, first_bad, cut)


def _sample(line: str) -> Sample | None:
    match = _SAMPLE.fullmatch(line)
    if match is None or _NUMBER.fullmatch(match["value"]) is None:
        return None
    labels: list[tuple[str, str]] = []
    text = match["labels"] or ""
    position = 0
    while position < len(text):
        label = _LABEL.match(text, position)
        if label is None or label.end() == position:
            return None
        labels.append((label[1], label[2]))
        position = label.end()
    return Sample(match["name"], tuple(labels), float(match["value"]))


def _gauge(exposition: Exposition, name: str, notes: list[str]) -> list[float] | None:
    declared = exposition.types.get(name)
    if declared is not None and declared != "gauge":
        notes.append(f"{name} is a {_quote(declared, 20)}, not a gauge")
        return None
    values = [sample.value for sample in exposition.samples if sample.name == name]
    if not values:
        notes.append(f"no {name}")
        return None
    if not all(math.isfinite(value) and value >= 0 for value in values):
        notes.append(f"{name} is not a count (negative, NaN or infinite)")
        return None
    return values


def load_from_metrics(replica: str, metrics: LoadMetrics, text: str) -> ReplicaLoad:
    """A replica's load from its engine's /metrics body. Running and waiting are summed
    over the samples (a data-parallel vLLM labels each engine core apart); KV use is the
    fullest engine's."""
    notes: list[str] = []
    if len(text) > MAX_METRICS_BYTES:
        return ReplicaLoad(replica=replica, note=f"/metrics is larger than {MAX_METRICS_BYTES:,}")
    exposition = parse_exposition(text)
    if exposition.bad:
        notes.append(
            f"{exposition.bad} line(s) not in the Prometheus text format, first"
            f" {_quote(exposition.first_bad or '')}"
        )
    if exposition.cut:
        notes.append(f"read only its first {MAX_METRICS_LINES:,} lines")
    running = _gauge(exposition, metrics.running, notes)
    waiting = _gauge(exposition, metrics.waiting, notes)
    kv_use: float | None = None
    if metrics.kv_use is None:
        notes.append("this engine has no KV-use gauge")
    else:
        kv = _gauge(exposition, metrics.kv_use, notes)
        if kv is not None and max(kv) > 1:
            notes.append(f"{metrics.kv_use} {max(kv):g} is more than 1")
        elif kv is not None:
            kv_use = max(kv)
    return ReplicaLoad(
        replica=replica,
        running=None if running is None else sum(running),
        waiting=None if waiting is None else sum(waiting),
        kv_use=kv_use,
        note="; ".join(notes)[:512] or None,
    )


@dataclass
class _Reported:
    replica: str
    status: str
    why: str
    body: list[str]


def _reports(text: str, notes: list[str]) -> Iterable[_Reported]:
    current: _Reported | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith(BODY_MARK):
            if current is not None:
                current.body.append(line[1:])
            continue
        if not line.strip():
            continue
        if current is not None:
            yield current
            current = None
        header = _HEADER.fullmatch(line)
        if header is None:
            notes.append(f"{SECTION_METRICS} line {number}: not a replica's header {_quote(line)}")
            continue
        current = _Reported(header["replica"], header["status"], header["why"] or "", [])
    if current is not None:
        yield current


def parse_metrics_section(
    text: str, shards: Sequence[ShardRecord], notes: list[str]
) -> tuple[ReplicaLoad, ...]:
    """The load of each replica whose rank 0 runs on this node, as its engine said it; a
    name no rank 0 here has is noted and dropped (a node speaks for its own replicas
    only), and so is a second report of the same one."""
    leaders = {shard.replica: shard for shard in shards if shard.rank == 0}
    loads: dict[str, ReplicaLoad] = {}
    for report in _reports(text, notes):
        shard = leaders.get(report.replica)
        if shard is None or report.replica in loads:
            why = "reported twice" if shard is not None else "not a replica whose rank 0 is here"
            notes.append(f"{SECTION_METRICS}: load of {_quote(report.replica)} ignored: {why}")
            continue
        spec = ENGINE_SPECS.get(shard.engine)
        if spec is None or spec.load_metrics is None:
            loads[shard.replica] = ReplicaLoad(replica=shard.replica, note="no known metrics")
            continue
        if report.status != "200":
            said = (
                f"its /metrics answered HTTP {report.status}"
                if report.status.isdigit()
                else f"its /metrics was not read: {_quote(report.status + ' ' + report.why)}"
            )
            loads[shard.replica] = ReplicaLoad(replica=shard.replica, note=said)
            continue
        loads[shard.replica] = load_from_metrics(
            shard.replica, spec.load_metrics, "\n".join(report.body)
        )
    return tuple(loads.values())
