"""Which GPUs of a node a shard gets: tensor-parallel groups kept inside NVLink domains.

A tensor-parallel group all-reduces on every layer; across PCIe it runs, passes health
checks, and then crawls under load. So each group goes into the NVLink domain with the
fewest free GPUs that still holds it (best fit keeps big domains whole for big groups),
and only when no domain holds it, or the topology is unknown, into the lowest free indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuChoice:
    gpus: tuple[int, ...]
    # 0: every group inside one NVLink domain (or groups of one GPU);
    # 1: topology unknown; 2: some group spans domains (PCIe between them).
    quality: int
    note: str


def choose_gpus(
    free: Sequence[int],
    count: int,
    group: int,
    domains: Sequence[frozenset[int]] | None,
) -> GpuChoice | None:
    """`count` GPUs from `free` in groups of `group`; None when there are too few."""
    if len(free) < count:
        return None
    if group <= 1 or count == 0:
        return GpuChoice(tuple(sorted(free)[:count]), 0, "")
    if domains is None:
        return GpuChoice(tuple(sorted(free)[:count]), 1, "NVLink topology unknown")
    remaining = set(free)
    chosen: list[int] = []
    spanned = 0
    for _ in range(count // group):
        best: tuple[int, int, int] | None = None
        best_members: list[int] = []
        for domain in domains:
            members = sorted(domain & remaining)
            if len(members) < group:
                continue
            key = (len(members), len(domain), members[0])
            if best is None or key < best:
                best, best_members = key, members
        if best is None:
            spanned += 1
            picked = sorted(remaining)[:group]
        else:
            picked = best_members[:group]
        chosen += picked
        remaining.difference_update(picked)
    if spanned:
        groups = "group spans" if spanned == 1 else "groups span"
        return GpuChoice(
            tuple(sorted(chosen)), 2, f"{spanned} tensor-parallel {groups} NVLink domains"
        )
    groups = "one NVLink domain" if count == group else "each group in one NVLink domain"
    return GpuChoice(tuple(sorted(chosen)), 0, groups)


def format_indices(indices: Sequence[int]) -> str:
    """(0, 1, 2, 3, 6) → '0-3,6'."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = None
    for index in ordered:
        if prev is not None and index == prev + 1:
            prev = index
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = index
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def format_devices(names: Sequence[str]) -> str:
    """('mlx5_0', 'mlx5_2', 'mlx5_3') → 'mlx5_0,2-3': one prefix, the indices folded."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        stem = name.rstrip("0123456789")
        if stem == name or stem in ("", name):
            plain.append(name)
        else:
            groups.setdefault(stem, []).append(int(name[len(stem) :]))
    return ",".join([*(f"{stem}{format_indices(ix)}" for stem, ix in groups.items()), *plain])
