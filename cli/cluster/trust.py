"""Which shard records to believe (docs/facts.md, "Which records are believed"). Pure.

A shard record is a node's own word: a compromised or broken node can write anything in it.
A record is believed only when it is well formed (names the catalog could have given,
a port, ranks and numbers in range), the GPUs it claims exist on its node, and, once the
catalog is at hand, its model's profile would have placed it so (GPU class, GPU count,
nodes). A replica is believed only when its ranks agree across nodes. The rest
are invalid shards: shown, never stopped, never routed to, their GPUs held by something
foreign.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cli.catalog.load import Catalog
from cli.catalog.schema import NAME_PATTERN
from cli.engines.specs import ENGINE_NAMES
from cli.facts.model import ShardRecord

NAME: Final = re.compile(NAME_PATTERN)
MAX_NAME = 200  # characters: a replica id is a model name and a number
# Without a catalog, the most ranks a record may claim; with one, the profile's nodes.
MAX_RANKS = 1024
MAX_MEMORY_GIB = 1024.0 * 1024  # a PiB of memory reserved by one shard is no real shard
UNCHECKED: Final = "checked without a catalog: model, profile and GPU class unchecked"


@dataclass(frozen=True)
class InvalidShard:
    """A record its node reports that is not believed, and why (text for people)."""

    record: ShardRecord
    reason: str


def _name_problem(what: str, value: str) -> str | None:
    if len(value) > MAX_NAME or NAME.fullmatch(value) is None:
        return f"{what} {value[:MAX_NAME]!r} is not a name the catalog could give"
    return None


def memory_gib_problem(record: ShardRecord) -> str | None:
    if record.memory_gib is not None and not (
        math.isfinite(record.memory_gib) and 0 <= record.memory_gib <= MAX_MEMORY_GIB
    ):
        return f"memory_gib {record.memory_gib} is not a finite amount in 0-{MAX_MEMORY_GIB:.0f}"
    return None


def record_problem(record: ShardRecord, gpu_classes: Mapping[int, str] | None) -> str | None:
    """What makes `record` unbelievable without a catalog; None: nothing found.

    `gpu_classes` is the node's GPUs, index → class; None when the node did not report
    them (then a record that claims GPUs cannot be believed)."""
    for what, value in (
        ("replica", record.replica),
        ("model", record.model),
        ("profile", record.profile),
    ):
        problem = _name_problem(what, value)
        if problem is not None:
            return problem
    if record.engine not in ENGINE_NAMES:
        return f"engine {record.engine[:MAX_NAME]!r} is not one ctl starts"
    if record.nodes > MAX_RANKS:
        return f"nodes {record.nodes} is more than {MAX_RANKS}"
    if record.rank >= record.nodes:
        return f"rank {record.rank} is not below nodes {record.nodes}"
    if record.port is not None and not 1 <= record.port <= 65535:
        return f"port {record.port} is not in 1-65535"
    memory = memory_gib_problem(record)
    if memory is not None:
        return memory
    if len(set(record.gpus)) != len(record.gpus):
        return "claims a GPU twice"
    if record.gpus and gpu_classes is None:
        return "claims GPUs on a node that did not report its GPUs"
    absent = [g for g in record.gpus if g not in (gpu_classes or {})]
    if absent:
        listed = ", ".join(str(g) for g in absent[:8])
        return f"claims GPU {listed}, which the node does not have"
    return None


def catalog_problem(
    record: ShardRecord, catalog: Catalog, gpu_classes: Mapping[int, str] | None
) -> str | None:
    """What the catalog says is wrong with a well-formed `record`; None: nothing.

    A record of a model or profile the catalog no longer has is believed: it is ours from
    an earlier catalog, unwanted, and drained (it cannot be checked against a profile)."""
    model = catalog.models.get(record.model)
    profile = next((p for p in (model.profiles if model else ()) if p.name == record.profile), None)
    if profile is None:
        return None
    spec = profile.spec
    if record.nodes > spec.nodes:
        return f"nodes {record.nodes} is more than profile {spec.name}'s {spec.nodes}"
    if spec.gpus_per_node and spec.gpu_class is not None and not record.gpus:
        # No GPUs named (records older than GPU lists, and hand-written ones): the node
        # must at least have GPUs of the profile's class.
        if spec.gpu_class not in set((gpu_classes or {}).values()):
            return f"profile {spec.name} needs {spec.gpu_class} GPUs; the node has none"
        return None
    if len(record.gpus) != spec.gpus_per_node:
        return (
            f"holds {len(record.gpus)} GPUs; profile {spec.name} takes {spec.gpus_per_node}"
            " per node"
        )
    if spec.gpu_class is not None:
        wrong = sorted(
            {(gpu_classes or {}).get(g, "unknown") for g in record.gpus} - {spec.gpu_class}
        )
        if wrong:
            return f"GPU class {', '.join(wrong)} is not profile {spec.name}'s {spec.gpu_class}"
    return None


def disagreements(claims: Sequence[tuple[str, ShardRecord]]) -> dict[str, str]:
    """Replica → why its records, (node, record) over the fleet, contradict each other:
    not the same model, profile or nodes count, or a rank claimed twice."""
    grouped: dict[str, list[tuple[str, ShardRecord]]] = {}
    for node, record in claims:
        grouped.setdefault(record.replica, []).append((node, record))
    found: dict[str, str] = {}
    for replica, records in grouped.items():
        shapes = {(r.model, r.profile, r.nodes) for _, r in records}
        if len(shapes) > 1:
            where = ", ".join(sorted({node for node, _ in records}))
            found[replica] = f"its ranks disagree (model, profile or nodes) across {where}"
            continue
        seen: dict[int, str] = {}
        for node, record in records:
            if record.rank in seen:
                found[replica] = f"rank {record.rank} claimed on {seen[record.rank]} and {node}"
                break
            seen[record.rank] = node
    return found
