"""The placement constraints: one list of checks, one signature, in the order they run.

Each per-node constraint is a `NodeConstraint`: its stable code, what it holds, and up to
two checks that take a `Subject` (one profile on one node, as the run stands) and return a
`Rejection` or None. The `static` check reads the node and the profile alone and is done
once per run; the `capacity` check also reads what our shards hold, and is done again
wherever the run places something. A node's rejection is the first failing check in list
order, which is also the order explanations count them in (cli/placement/explain.py) and
the order docs/placement.md lists them in (its table is this list's, by cog).

A new constraint is one `NodeConstraint` here (and its code in cli/placement/reasons.py)
plus its test; the placer (cli/placement/place.py) walks the list and knows none of them.
The fabric constraint is not per node: it asks whether nodes that passed these share a
fabric, and lives with the multi-node placement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cli.catalog.schema import Profile
from cli.cluster.snapshot import GpuView, NodeView, Reachability
from cli.placement.gpus import format_indices
from cli.placement.reasons import Blocking, Constraint, Rejection
from cli.shards.staging import stages


@dataclass(frozen=True, slots=True)
class Relax:
    """What to pretend away when asking "would it ever fit?"."""

    capacity: bool = False  # our shards hold nothing
    conditions: bool = False  # every node Ready and uncordoned, every GPU healthy


class Holdings(Protocol):
    """What a capacity check may ask of the run: what our shards hold, as it goes on."""

    def reserved_gib(self, node: NodeView) -> float: ...

    def free_gpus(
        self, node: NodeView, gpu_class: str, gpu_memory_gb: float | None = None
    ) -> list[int]: ...

    def held_by(self, node: NodeView, gpu_class: str) -> dict[str, list[int]]: ...

    def weights_bytes(self, source: str, spec: Profile) -> int | None: ...

    def will_hold(self, node: NodeView, source: str) -> bool: ...

    def staged_bytes(self, node: NodeView) -> int: ...

    def evictable_bytes(self, node: NodeView) -> int: ...


@dataclass(frozen=True, slots=True)
class Subject:
    """What a check looks at: one profile on one node. A static check reads of `holdings`
    only `weights_bytes`, which is the same for the whole run."""

    profile: str
    spec: Profile
    node: NodeView
    relax: Relax
    holdings: Holdings
    source: str = ""  # the profile's source: the weights the disk constraint asks room for


Check = Callable[[Subject], "Rejection | None"]


@dataclass(frozen=True, slots=True)
class NodeConstraint:
    code: Constraint
    holds_when: str  # for people: docs/placement.md's table
    example: str  # a message it gives, as `ctl place` prints it
    static: Check | None = None
    capacity: Check | None = None


def gb(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def node_status(subject: Subject) -> Rejection | None:
    node = subject.node
    if subject.relax.conditions:
        return None
    if node.reachability is Reachability.LOST:
        summary, detail = "lost", node.unreachable_reason or ""
    elif node.reachability is Reachability.UNREACHABLE:
        summary, detail = "unreachable", node.unreachable_reason or ""
    elif node.cordon is not None:
        summary, detail = "cordoned", node.cordon
    else:
        return None
    return Rejection(
        subject.profile,
        node.name,
        Constraint.NODE_STATUS,
        f"{summary}: {detail}",
        summary,
        Blocking.CONDITION,
        detail=detail,
    )


def node_selector(subject: Subject) -> Rejection | None:
    node = subject.node
    for key, wanted in sorted(subject.spec.node_selector.items()):
        have = node.labels.get(key)
        if have != wanted:
            label = f"label {key}={have}" if have is not None else f"no label {key}"
            return Rejection(
                subject.profile,
                node.name,
                Constraint.NODE_SELECTOR,
                f"{label}, needs {key}={wanted}",
                f"lack {key}={wanted}",
                Blocking.HARDWARE,
            )
    return None


def memory_total(subject: Subject) -> Rejection | None:
    node, need_gib = subject.node, subject.spec.min_memory_gb
    if need_gib is None or node.memory_total_gib is None or node.memory_total_gib >= need_gib:
        return None
    return Rejection(
        subject.profile,
        node.name,
        Constraint.MEMORY,
        f"has {gb(node.memory_total_gib)} GB of memory, needs {gb(need_gib)}",
        f"have less than {gb(need_gib)} GB of memory",
        Blocking.HARDWARE,
    )


def memory_free(subject: Subject) -> Rejection | None:
    node, need_gib = subject.node, subject.spec.min_memory_gb
    if need_gib is None or node.memory_total_gib is None:
        return None
    reserved_gib = subject.holdings.reserved_gib(node)
    if node.memory_total_gib - reserved_gib >= need_gib:
        return None
    return Rejection(
        subject.profile,
        node.name,
        Constraint.MEMORY,
        f"has {gb(node.memory_total_gib)} GB of memory, {gb(reserved_gib)} reserved by our shards, "
        f"needs {gb(need_gib)}",
        "have too little unreserved memory",
        Blocking.CAPACITY,
    )


def gpu_class(subject: Subject) -> Rejection | None:
    node, spec, profile = subject.node, subject.spec, subject.profile
    wanted = spec.gpu_class
    if not spec.uses_gpus or wanted is None:
        return None
    if node.gpus is None:
        if subject.relax.conditions:
            return None
        return Rejection(
            profile,
            node.name,
            Constraint.GPU_CLASS,
            f"did not report its GPUs, needs {wanted}",
            "did not report GPUs",
            Blocking.CONDITION,
        )
    classes = node.gpu_classes
    if wanted in classes:
        return None
    if not classes:
        message, summary = f"has no GPUs, needs {wanted}", "have no GPUs"
    else:
        have = ", ".join(classes)
        message, summary = f"has {have} GPUs, needs {wanted}", f"have {have} GPUs"
    return Rejection(profile, node.name, Constraint.GPU_CLASS, message, summary, Blocking.HARDWARE)


BYTES_PER_MIB = 1024 * 1024
BYTES_PER_GB = 1_000_000_000  # GPU memory is sold, and asked for, in GB of 10^9 bytes


def has_memory(gpu: GpuView, gpu_memory_gb: float | None) -> bool:
    """At least `gpu_memory_gb` in all; a GPU that did not report its memory passes
    (unknown is not too small)."""
    if gpu_memory_gb is None or gpu.memory_total_mib is None:
        return True
    return gpu.memory_total_mib * BYTES_PER_MIB >= gpu_memory_gb * BYTES_PER_GB


def sized_gpus(node: NodeView, gpu_class: str, gpu_memory_gb: float | None) -> list[GpuView]:
    """The node's GPUs of the class that have the memory a profile asks of each."""
    return [g for g in node.gpus or () if g.gpu_class == gpu_class and has_memory(g, gpu_memory_gb)]


def gpu_memory(subject: Subject) -> Rejection | None:
    """Enough GPUs of the class have `gpu_memory_gb` each (as many as the node has of the
    class: too few of them at all is the `gpus` constraint's to say)."""
    node, spec = subject.node, subject.spec
    need_gb = spec.gpu_memory_gb
    if not spec.uses_gpus or spec.gpu_class is None or need_gb is None or node.gpus is None:
        return None
    of_class = [g for g in node.gpus if g.gpu_class == spec.gpu_class]
    small = [g for g in of_class if not has_memory(g, need_gb)]
    need = spec.gpus_per_node
    if len(of_class) - len(small) >= need or len(of_class) < need:
        return None
    sizes: dict[str, list[int]] = {}
    for gpu in small:
        total_gb = (gpu.memory_total_mib or 0) * BYTES_PER_MIB / BYTES_PER_GB
        sizes.setdefault(gb(total_gb), []).append(gpu.index)
    said = "; ".join(
        f"GPU {format_indices(indices)} {'has' if len(indices) == 1 else 'have'} {size} GB"
        for size, indices in sizes.items()
    )
    return Rejection(
        subject.profile,
        node.name,
        Constraint.GPU_MEMORY,
        f"{said}, needs {gb(need_gb)}",
        f"have {spec.gpu_class} GPUs under {gb(need_gb)} GB",
        Blocking.HARDWARE,
    )


def gpu_health(subject: Subject) -> Rejection | None:
    """Enough GPUs of the class that no fault or foreign process makes unusable."""
    node, spec, profile = subject.node, subject.spec, subject.profile
    if not spec.uses_gpus or spec.gpu_class is None or node.gpus is None:
        return None
    of_class = [g for g in node.gpus if g.gpu_class == spec.gpu_class]
    need = spec.gpus_per_node
    if len(of_class) < need:
        return Rejection(
            profile,
            node.name,
            Constraint.GPUS,
            f"has {len(of_class)} {spec.gpu_class}, needs {need}",
            f"have fewer than {need} {spec.gpu_class}",
            Blocking.HARDWARE,
            free=len(of_class),
            total=len(of_class),
        )
    if subject.relax.conditions:
        return None
    # Past gpu_memory: only the GPUs with the memory asked count from here on.
    sized = sized_gpus(node, spec.gpu_class, spec.gpu_memory_gb)
    unusable = [g for g in sized if g.unusable is not None]
    healthy = len(sized) - len(unusable)
    if healthy >= need:
        return None
    faults = "; ".join(f"GPU {g.index}: {g.unusable}" for g in unusable)
    return Rejection(
        profile,
        node.name,
        Constraint.GPUS,
        f"{healthy} of {len(sized)} {spec.gpu_class} usable, needs {need} ({faults})",
        f"have too few usable {spec.gpu_class}",
        Blocking.CONDITION,
        detail=faults,
        free=healthy,
        total=len(sized),
    )


def gpus_free(subject: Subject) -> Rejection | None:
    node, spec, profile = subject.node, subject.spec, subject.profile
    if not spec.uses_gpus or spec.gpu_class is None:
        return None
    if node.gpus is None:
        return None  # only ever here pretending conditions away: as if it reported them
    need = spec.gpus_per_node
    free = subject.holdings.free_gpus(node, spec.gpu_class, spec.gpu_memory_gb)
    if len(free) >= need:
        return None
    held = subject.holdings.held_by(node, spec.gpu_class)
    sized = sized_gpus(node, spec.gpu_class, spec.gpu_memory_gb)
    total = len(sized)
    parts = [f"GPU {format_indices(gpus)} held by {holder}" for holder, gpus in held.items()]
    parts += [f"GPU {g.index}: {g.unusable}" for g in sized if g.unusable is not None]
    detail = f" ({'; '.join(parts)})" if parts else ""
    return Rejection(
        profile,
        node.name,
        Constraint.GPUS,
        f"{len(free)} of {total} {spec.gpu_class} free, needs {need}{detail}",
        f"have too few free {spec.gpu_class}",
        Blocking.CAPACITY,
        free=len(free),
        total=total,
    )


def weights_bytes(
    source: str, engine: str, disk_gb: float | None, reported: int | None
) -> int | None:
    """The room a source's weights need in the model store: none for one the engine reads
    from elsewhere (a `file://` path; what it fetches itself: cli/shards/staging.py); the
    profile's `disk_gb` (GB of 10^9 bytes, as disks are sold) when
    it says; else what a node holding them complete reports; else unknown (None), which
    is never taken for zero."""
    if not stages(source, engine):
        return 0
    if disk_gb is not None:
        return math.ceil(disk_gb * BYTES_PER_GB)
    return reported


def disk_size(subject: Subject) -> Rejection | None:
    """The store's filesystem could hold the weights at all, or already holds them."""
    node = subject.node
    need = subject.holdings.weights_bytes(subject.source, subject.spec)
    if not need or not node.stages_weights:
        # None needed, or unknown (said in the explanation, not taken as zero); or a node
        # whose engines fetch their own weights, into their own caches, not the store.
        return None
    store = node.model_store
    if store is None:
        if subject.relax.conditions:
            return None
        return Rejection(
            subject.profile,
            node.name,
            Constraint.DISK,
            f"did not report its model store, needs {gb(need / BYTES_PER_GB)} GB",
            "did not report a model store",
            Blocking.CONDITION,
        )
    if store.holds(subject.source) or store.total_bytes >= need:
        return None
    return Rejection(
        subject.profile,
        node.name,
        Constraint.DISK,
        f"has a {gb(store.total_bytes / BYTES_PER_GB)} GB filesystem for {store.path},"
        f" needs {gb(need / BYTES_PER_GB)}",
        f"have disks under {gb(need / BYTES_PER_GB)} GB",
        Blocking.HARDWARE,
    )


def disk_free(subject: Subject) -> Rejection | None:
    """Room in the store for weights it does not hold, after what the run stages there.

    Every stored source is ours (only the staging step writes markers), and so is what
    the run stages. Weights no shard there loads are removed by the staging step when it
    needs their room (least recently used first): room they take counts as free. Space
    that weights in use fill is capacity ("not now"); space that other files fill is the
    node's condition ("blocked")."""
    node, holdings = subject.node, subject.holdings
    need = holdings.weights_bytes(subject.source, subject.spec)
    store = node.model_store
    if not need or not node.stages_weights or store is None:
        return None  # no store: only ever here pretending conditions away
    if holdings.will_hold(node, subject.source):
        return None
    staged = holdings.staged_bytes(node)
    free = store.free_bytes - staged
    if free + holdings.evictable_bytes(node) >= need:
        return None
    if subject.relax.capacity and free + store.stored_bytes >= need:
        return None
    if subject.relax.conditions:
        return None  # disk_size found the filesystem big enough
    where = f"has {gb(max(free, 0) / BYTES_PER_GB)} GB free in {store.path}"
    if staged:
        where += f" once this run's {gb(staged / BYTES_PER_GB)} GB are staged"
    need_gb = gb(need / BYTES_PER_GB)
    stored = f"weights stored there hold {gb(store.stored_bytes / BYTES_PER_GB)} GB"
    if free + store.stored_bytes + staged >= need:
        return Rejection(
            subject.profile,
            node.name,
            Constraint.DISK,
            f"{where}, needs {need_gb}; {stored}",
            "have too little free disk for the weights",
            Blocking.CAPACITY,
        )
    return Rejection(
        subject.profile,
        node.name,
        Constraint.DISK,
        f"{where}, needs {need_gb}; {stored}, other files the rest",
        "have disks full of other files",
        Blocking.CONDITION,
    )


NODE_CONSTRAINTS: tuple[NodeConstraint, ...] = (
    NodeConstraint(
        Constraint.NODE_STATUS,
        "the node is Ready: reached at the last gather, not Lost, not cordoned",
        "cordoned: PSU fan failing",
        static=node_status,
    ),
    NodeConstraint(
        Constraint.NODE_SELECTOR,
        "every `node_selector` label matches",
        "label role=general, needs role=coding",
        static=node_selector,
    ),
    NodeConstraint(
        Constraint.MEMORY,
        "MemTotal ≥ `min_memory_gb`, and what our shards reserve leaves enough; unknown"
        " memory passes",
        "has 8 GB of memory, needs 24",
        static=memory_total,
        capacity=memory_free,
    ),
    NodeConstraint(
        Constraint.GPU_CLASS,
        "the node has GPUs of the profile's class",
        "has L40S GPUs, needs H100",
        static=gpu_class,
    ),
    NodeConstraint(
        Constraint.GPU_MEMORY,
        "enough GPUs of the class have the profile's `gpu_memory_gb` each (GB of 10^9"
        " bytes); unknown GPU memory passes",
        "GPU 0-3 have 42.9 GB, needs 80",
        static=gpu_memory,
    ),
    NodeConstraint(
        Constraint.GPUS,
        "enough usable, free GPUs of that class (with that memory)",
        "3 of 8 H100 free, needs 4 (GPU 0-3 held by llama-3.1-8b-1)",
        static=gpu_health,
        capacity=gpus_free,
    ),
    NodeConstraint(
        Constraint.DISK,
        "the model store holds the source complete, or its filesystem has room for it"
        " (`disk_gb`, else the size a node holding it reports) beside what the run stages"
        " there; a size unknown passes, said; a store not reported does not",
        "has 80 GB free in /var/lib/modelfleet/models, needs 140; weights stored there hold 95 GB",
        static=disk_size,
        capacity=disk_free,
    ),
)
FABRIC_HOLDS_WHEN = "multi-node: the nodes share a fabric with an ACTIVE HCA on each"
FABRIC_EXAMPLE = "no active HCA on fabric ib-east (mlx5_0 DOWN)"
# Every constraint in the order a node is refused by it and explanations count it.
ORDER: tuple[Constraint, ...] = (*(c.code for c in NODE_CONSTRAINTS), Constraint.FABRIC)


def first_static_rejection(subject: Subject) -> Rejection | None:
    """The first constraint the node fails whatever our shards hold."""
    for constraint in NODE_CONSTRAINTS:
        if constraint.static is not None:
            rejection = constraint.static(subject)
            if rejection is not None:
                return rejection
    return None


def first_rejection(subject: Subject, static: Rejection | None) -> Rejection | None:
    """The first constraint the node fails now, given its `first_static_rejection`."""
    for constraint in NODE_CONSTRAINTS:
        if static is not None and static.constraint is constraint.code:
            return static
        if constraint.capacity is not None:
            rejection = constraint.capacity(subject)
            if rejection is not None:
                return rejection
    return None


def constraint_table() -> str:
    """docs/placement.md's table of the constraints (cog), in the order they are checked."""
    rows = [(c.code, c.holds_when, c.example) for c in NODE_CONSTRAINTS]
    rows.append((Constraint.FABRIC, FABRIC_HOLDS_WHEN, FABRIC_EXAMPLE))
    lines = ["| code | holds when | example message |", "|---|---|---|"]
    lines += [f"| `{code}` | {holds} | `{example}` |" for code, holds, example in rows]
    return "\n".join(lines) + "\n"
