"""The per-node placement constraints, each returning a Rejection or None.

Static checks depend only on the node and the profile; the capacity checks also on what
our shards hold, which changes as a run places replicas one at a time.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from cli.catalog.schema import Profile
from cli.cluster.snapshot import NodeView, Reachability
from cli.placement.gpus import format_indices
from cli.placement.reasons import Blocking, Constraint, Rejection


@dataclass(frozen=True, slots=True)
class Relax:
    """What to pretend away when asking "would it ever fit?"."""

    capacity: bool = False  # our shards hold nothing
    conditions: bool = False  # every node Ready and uncordoned, every GPU healthy


def gb(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def node_status(profile: str, node: NodeView, relax: Relax) -> Rejection | None:
    if relax.conditions:
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
        profile,
        node.name,
        Constraint.NODE_STATUS,
        f"{summary}: {detail}",
        summary,
        Blocking.CONDITION,
        detail=detail,
    )


def node_selector(profile: str, node: NodeView, selector: dict[str, str]) -> Rejection | None:
    for key, wanted in sorted(selector.items()):
        have = node.labels.get(key)
        if have != wanted:
            label = f"label {key}={have}" if have is not None else f"no label {key}"
            return Rejection(
                profile,
                node.name,
                Constraint.NODE_SELECTOR,
                f"{label}, needs {key}={wanted}",
                f"lack {key}={wanted}",
                Blocking.HARDWARE,
            )
    return None


def memory_total(profile: str, node: NodeView, need_gib: float | None) -> Rejection | None:
    if need_gib is None or node.memory_total_gib is None or node.memory_total_gib >= need_gib:
        return None
    return Rejection(
        profile,
        node.name,
        Constraint.MEMORY,
        f"has {gb(node.memory_total_gib)} GB of memory, needs {gb(need_gib)}",
        f"have less than {gb(need_gib)} GB of memory",
        Blocking.HARDWARE,
    )


def memory_free(
    profile: str, node: NodeView, need_gib: float | None, reserved_gib: float
) -> Rejection | None:
    if need_gib is None or node.memory_total_gib is None:
        return None
    if node.memory_total_gib - reserved_gib >= need_gib:
        return None
    return Rejection(
        profile,
        node.name,
        Constraint.MEMORY,
        f"has {gb(node.memory_total_gib)} GB of memory, {gb(reserved_gib)} reserved by our shards, "
        f"needs {gb(need_gib)}",
        "have too little unreserved memory",
        Blocking.CAPACITY,
    )


def gpu_class(profile: str, node: NodeView, spec: Profile, relax: Relax) -> Rejection | None:
    wanted = spec.gpu_class
    if not spec.uses_gpus or wanted is None:
        return None
    if node.gpus is None:
        if relax.conditions:
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


def gpu_health(profile: str, node: NodeView, spec: Profile, relax: Relax) -> Rejection | None:
    """Enough GPUs of the class that no fault or foreign process makes unusable."""
    if not spec.uses_gpus or node.gpus is None:
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
    if relax.conditions:
        return None
    unusable = [g for g in of_class if g.unusable is not None]
    healthy = len(of_class) - len(unusable)
    if healthy >= need:
        return None
    faults = "; ".join(f"GPU {g.index}: {g.unusable}" for g in unusable)
    return Rejection(
        profile,
        node.name,
        Constraint.GPUS,
        f"{healthy} of {len(of_class)} {spec.gpu_class} usable, needs {need} ({faults})",
        f"have too few usable {spec.gpu_class}",
        Blocking.CONDITION,
        detail=faults,
        free=healthy,
        total=len(of_class),
    )


def gpus_free(
    profile: str,
    node: NodeView,
    spec: Profile,
    free: Collection[int],
    held: dict[str, list[int]],
) -> Rejection | None:
    need = spec.gpus_per_node
    if len(free) >= need:
        return None
    total = sum(1 for g in node.gpus or () if g.gpu_class == spec.gpu_class)
    parts = [f"GPU {format_indices(gpus)} held by {holder}" for holder, gpus in held.items()]
    parts += [
        f"GPU {g.index}: {g.unusable}"
        for g in node.gpus or ()
        if g.gpu_class == spec.gpu_class and g.unusable is not None
    ]
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
