"""Place replicas: for each, the highest-priority profile that fits, on a snapshot that
already holds every replica placed before it in the run (never the same GPU twice).

Pure and deterministic: nodes are considered in name order and every tie is broken by
name, so the answer does not depend on how the inventory lists its hosts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from cli.catalog.load import Catalog, CatalogModel, CatalogProfile
from cli.cluster import NameKey, name_order
from cli.cluster.snapshot import NodeView, Reachability, Snapshot
from cli.placement.constraints import Relax
from cli.placement.gpus import GpuChoice, choose_gpus
from cli.placement.reasons import Blocking, Constraint, Rejection
from cli.placement.state import Candidate, PlacementState, ShardPlacement


class Verdict(StrEnum):
    PLACED = "placed"
    NOT_NOW = "not-now"  # fits once our own shards free capacity
    BLOCKED = "blocked"  # fits once node conditions are fixed (cordon, reachability, faults)
    NEVER = "never"  # no node or fabric of this fleet could ever hold it


@dataclass(frozen=True)
class FabricShortfall:
    fabric: str
    eligible: tuple[str, ...]
    needed: int


@dataclass(frozen=True)
class ProfileAttempt:
    profile: CatalogProfile
    fits: bool
    nodes_considered: int
    # Per node (name order) its Rejection, or its free GPUs when it passed: kept whole and
    # turned into `rejections` only when someone asks, since most never are.
    checks: tuple[Rejection | int, ...]
    fabric_rejections: tuple[Rejection, ...] = ()
    fabric_shortfalls: tuple[FabricShortfall, ...] = ()
    # Nodes that passed the memory constraint only because they did not report memory.
    memory_unknown: tuple[str, ...] = ()
    # The room its weights need (disk_gb, or as a node holding them reports); None: unknown.
    weights_bytes: int | None = None

    @cached_property
    def rejections(self) -> tuple[Rejection, ...]:
        """Every node this profile was refused on, in node-name order."""
        found = [check for check in self.checks if isinstance(check, Rejection)]
        if self.fabric_rejections:
            found = sorted([*found, *self.fabric_rejections], key=lambda r: name_order(r.node))
        return tuple(found)


@dataclass(frozen=True)
class ReplicaPlacement:
    model: str
    replica: str
    profile: CatalogProfile | None
    shards: tuple[ShardPlacement, ...]
    attempts: tuple[ProfileAttempt, ...]
    verdict: Verdict

    @property
    def placed(self) -> bool:
        return self.profile is not None

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        return tuple(r for attempt in self.attempts for r in attempt.rejections)


@dataclass(frozen=True)
class PlacementRun:
    placements: tuple[ReplicaPlacement, ...]
    running: dict[str, tuple[str, ...]]  # model → replicas already running
    wanted: dict[str, int]  # model → replicas the run was asked to add

    @property
    def all_placed(self) -> bool:
        return all(p.placed for p in self.placements)


# ---------------------------------------------------------------------------------------


def try_profile(
    profile: CatalogProfile,
    state: PlacementState,
    spread: int = 1,
    avoid: frozenset[str] = frozenset(),
) -> tuple[tuple[ShardPlacement, ...] | None, ProfileAttempt]:
    """Place one replica as `profile`, or say for every node why not.

    Nodes in `avoid` pass or fail as ever but are not chosen: a replica moved to make room
    (moves.py) must not take the room it is making."""
    spec = profile.spec
    results, passed = state.capacity_results(profile)
    checks = tuple(results)
    candidates = [c for c in passed.values() if c.node.name not in avoid]
    memory_unknown: tuple[str, ...] = ()
    if spec.min_memory_gb is not None:
        memory_unknown = tuple(
            sorted(c.node.name for c in candidates if c.node.memory_total_gib is None)
        )
    considered = len(state.nodes)
    size = state.weights_bytes(profile.source, spec)
    if spec.nodes == 1:
        shards = _place_single(profile, candidates, state, spread)
        attempt = ProfileAttempt(
            profile,
            shards is not None,
            considered,
            checks,
            memory_unknown=memory_unknown,
            weights_bytes=size,
        )
        return shards, attempt
    shards, fabric_rejections, shortfalls = _place_multi(profile, candidates, state)
    attempt = ProfileAttempt(
        profile,
        shards is not None,
        considered,
        checks,
        tuple(fabric_rejections),
        tuple(shortfalls) if shards is None else (),
        memory_unknown,
        size,
    )
    return shards, attempt


def _choose(profile: CatalogProfile, node: NodeView, state: PlacementState) -> GpuChoice:
    spec = profile.spec
    if not spec.uses_gpus or spec.gpu_class is None:
        return GpuChoice((), 0, "")
    if node.gpus is None:
        return GpuChoice(tuple(range(spec.gpus_per_node)), 1, "GPUs not reported")
    free = state.free_gpus(node, spec.gpu_class, spec.gpu_memory_gb)
    choice = choose_gpus(free, spec.gpus_per_node, spec.nvlink_group, node.nvlink_domains)
    if choice is None:  # the capacity check said it fits
        raise AssertionError(f"{node.name}: {len(free)} free GPUs cannot hold {spec.gpus_per_node}")
    return choice


def spread_limit(model: CatalogModel) -> int:
    """Replicas of one model a node may hold before others are preferred: a quarter of the
    most the model may run, at least one. A node failing then takes at most a quarter of
    a model's replicas, and a model of hundreds does not break whole nodes to stay apart."""
    return max(1, math.ceil(model.replicas_max / 4))


def _place_single(
    profile: CatalogProfile, candidates: list[Candidate], state: PlacementState, spread: int
) -> tuple[ShardPlacement, ...] | None:
    """Best fit: the partly used node the replica fills most, so whole nodes stay whole.

    Before that, a node holding fewer than `spread` replicas of this model (one node
    failing should not take every replica of a model), and for a tensor-parallel group,
    one NVLink domain.
    """
    if not candidates:
        return None
    spec = profile.spec
    counts = state.replica_counts(profile.model)
    # Among nodes that fit equally, one that holds the weights starts without a download.
    holders = state.holders(profile.source)

    if not spec.uses_gpus:
        need = spec.min_memory_gb or 0.0

        def cpu_key(c: Candidate) -> tuple[bool, bool, bool, float, bool, NameKey]:
            total = c.node.memory_total_gib
            left = 0.0 if total is None else total - state.reserved_gib(c.node) - need
            # GPU nodes last: a CPU model there holds RAM a GPU replica will need.
            crowded = counts.get(c.node.name, 0) >= spread
            return (
                bool(c.node.gpus),
                crowded,
                total is None,
                left,
                c.node.name not in holders,
                name_order(c.node.name),
            )

        best = min(candidates, key=cpu_key)
        return (ShardPlacement(best.node.name, 0, (), (), None, ""),)

    def key(c: Candidate) -> tuple[bool, int, bool, int, NameKey]:
        here = counts.get(c.node.name, 0)
        return (here >= spread, c.free, c.node.name not in holders, here, name_order(c.node.name))

    # The best by key usually keeps its group in one NVLink domain: try it before sorting.
    first = min(candidates, key=key)
    choice = _choose(profile, first.node, state)
    chosen: tuple[Candidate, GpuChoice] = (first, choice)
    if choice.quality != 0:
        group = spec.nvlink_group
        for candidate in sorted(candidates, key=key):
            domains = candidate.node.nvlink_domains
            if domains is not None and max(map(len, domains), default=0) < group:
                continue  # no domain here can hold the group: no better than `chosen`
            choice = _choose(profile, candidate.node, state)
            if choice.quality < chosen[1].quality:
                chosen = (candidate, choice)
            if choice.quality == 0:
                break
    node, choice = chosen[0].node, chosen[1]
    return (ShardPlacement(node.name, 0, choice.gpus, (), None, choice.note),)


# A fabric group's rank: most free GPUs, the faster fabric, more nodes holding the
# weights, the fabric's name.
GroupKey = tuple[int, float, int, str]


def _place_multi(
    profile: CatalogProfile, candidates: list[Candidate], state: PlacementState
) -> tuple[tuple[ShardPlacement, ...] | None, list[Rejection], list[FabricShortfall]]:
    """The emptiest nodes of one fabric: a multi-node replica is the least movable thing."""
    spec = profile.spec
    by_fabric: dict[str, list[tuple[Candidate, tuple[str, ...]]]] = {}
    rejections: list[Rejection] = []
    for candidate in candidates:
        usable, rejection = _fabric_hcas(profile, candidate.node, state.relax)
        if rejection is not None:
            rejections.append(rejection)
        for fabric, hcas in usable:
            by_fabric.setdefault(fabric, []).append((candidate, hcas))
    groups: list[tuple[GroupKey, str, list[tuple[Candidate, tuple[str, ...]]]]] = []
    shortfalls: list[FabricShortfall] = []
    holders = state.holders(profile.source)
    for fabric, members in sorted(by_fabric.items()):
        if len(members) < spec.nodes:
            shortfalls.append(
                FabricShortfall(fabric, tuple(c.node.name for c, _ in members), spec.nodes)
            )
            continue
        # Among equally empty nodes, those that hold the weights: fewer downloads.
        members.sort(
            key=lambda m: (-m[0].free, m[0].node.name not in holders, name_order(m[0].node.name))
        )
        chosen = members[: spec.nodes]
        rate = min(_rate(m[0].node, fabric) for m in chosen)
        holding = sum(m[0].node.name in holders for m in chosen)
        groups.append(((-sum(m[0].free for m in chosen), -rate, -holding, fabric), fabric, chosen))
    if not groups:
        placed_nodes = {r.node for r in rejections}
        for candidate in candidates:
            if candidate.node.name in placed_nodes:
                continue
            rejections.append(_fabric_shortfall(profile, candidate.node, shortfalls))
        return None, rejections, shortfalls
    _, fabric, chosen = min(groups, key=lambda g: g[0])
    shards = []
    for rank, (candidate, hcas) in enumerate(chosen):
        choice = _choose(profile, candidate.node, state)
        shards.append(
            ShardPlacement(candidate.node.name, rank, choice.gpus, hcas, fabric, choice.note)
        )
    return tuple(shards), rejections, shortfalls


def _rate(node: NodeView, fabric: str) -> float:
    for view in node.fabrics:
        if view.name == fabric:
            return view.rate_gbps or 0.0
    return 0.0


def _fabric_hcas(
    profile: CatalogProfile, node: NodeView, relax: Relax
) -> tuple[list[tuple[str, tuple[str, ...]]], Rejection | None]:
    """The fabrics this node can join, each with only its active HCAs."""
    usable: list[tuple[str, tuple[str, ...]]] = []
    dead: list[str] = []
    for view in node.fabrics:
        hcas = view.hcas if view.active_hcas is None or relax.conditions else view.active_hcas
        if hcas:
            usable.append((view.name, hcas))
        else:
            dead.append(f"{view.name} ({', '.join(view.down)})" if view.down else view.name)
    if usable or (not dead and node.fabrics):
        return usable, None
    if not node.fabrics:
        return [], Rejection(
            profile.name,
            node.name,
            Constraint.FABRIC,
            "is on no fabric; a multi-node replica needs one",
            "are on no fabric",
            Blocking.HARDWARE,
        )
    return [], Rejection(
        profile.name,
        node.name,
        Constraint.FABRIC,
        f"no active HCA on fabric {', '.join(dead)}",
        "have no active HCA",
        Blocking.CONDITION,
    )


def _fabric_shortfall(
    profile: CatalogProfile, node: NodeView, shortfalls: Sequence[FabricShortfall]
) -> Rejection:
    mine = [s for s in shortfalls if node.name in s.eligible]
    parts = []
    for shortfall in mine:
        others = [n for n in shortfall.eligible if n != node.name]
        with_whom = f"with {', '.join(others)}" if others else "alone"
        parts.append(
            f"{shortfall.fabric} has {len(shortfall.eligible)} eligible node(s) ({with_whom})"
        )
    needed = profile.spec.nodes
    return Rejection(
        profile.name,
        node.name,
        Constraint.FABRIC,
        f"{'; '.join(parts)}, needs {needed} on one fabric",
        f"have no {needed}-node fabric group",
        Blocking.HARDWARE,
    )


# ---------------------------------------------------------------------------------------


def place_replica(
    model: CatalogModel,
    replica: str,
    state: PlacementState,
    verdicts: dict[str, Verdict] | None = None,
) -> ReplicaPlacement:
    """The highest-priority profile that fits, held on `state`; or every refusal.

    `verdicts` caches per model the answer to "would it ever fit?", which does not change
    within a run because it pretends our own holdings away.
    """
    attempts: list[ProfileAttempt] = []
    for profile in model.profiles:
        shards, attempt = try_profile(profile, state, spread_limit(model))
        attempts.append(attempt)
        if shards is not None:
            state.hold(replica, profile, shards)
            return ReplicaPlacement(
                model.name, replica, profile, shards, tuple(attempts), Verdict.PLACED
            )
    cache = verdicts if verdicts is not None else {}
    if model.name not in cache:
        cache[model.name] = verdict_for(model, state.snapshot)
    return ReplicaPlacement(model.name, replica, None, (), tuple(attempts), cache[model.name])


def verdict_for(model: CatalogModel, snapshot: Snapshot) -> Verdict:
    """Would it fit if our shards freed everything? If, besides, every node were healthy?"""
    for relax, verdict in (
        (Relax(capacity=True), Verdict.NOT_NOW),
        (Relax(capacity=True, conditions=True), Verdict.BLOCKED),
    ):
        state = PlacementState(snapshot, relax)
        if any(try_profile(profile, state)[0] is not None for profile in model.profiles):
            return verdict
    return Verdict.NEVER


def running_replicas(snapshot: Snapshot) -> dict[str, tuple[str, ...]]:
    """Replicas of each model with a shard that runs (or starts) on a node not Lost; one
    whose every unit failed runs nothing, though its records keep its name taken."""
    running: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        if node.reachability is Reachability.LOST:
            continue
        for shard in node.shards:
            if shard.holds:
                running.setdefault(shard.model, set()).add(shard.replica)
    return {model: tuple(sorted(replicas, key=name_order)) for model, replicas in running.items()}


def new_replica_id(model: str, taken: Iterable[str], ordinal: int) -> str:
    used = set(taken)
    number = ordinal
    while f"{model}-{number}" in used:
        number += 1
    return f"{model}-{number}"


def place(
    catalog: Catalog, snapshot: Snapshot, models: Sequence[str] | None = None
) -> PlacementRun:
    """Place `models` (one more replica each), or every model up to its `replicas.min`.

    Replicas are placed one at a time in rounds (every model's first, then every model's
    second...), each on the state that holds the ones before it.
    """
    running = running_replicas(snapshot)
    existing: dict[str, list[str]] = {}
    # Lost nodes and invalid records too: their names are still taken on some node.
    for node in snapshot.nodes:
        for record in (*node.shards, *(bad.record for bad in node.invalid_shards)):
            existing.setdefault(record.model, []).append(record.replica)
    if models is None:
        wanted = {
            name: max(0, model.replicas_min - len(running.get(name, ())))
            for name, model in catalog.models.items()
        }
    else:
        wanted = {}
        for name in models:
            wanted[name] = wanted.get(name, 0) + 1
    state = PlacementState(snapshot)
    placements: list[ReplicaPlacement] = []
    taken = {name: sorted(set(existing.get(name, ()))) for name in wanted}
    verdicts: dict[str, Verdict] = {}
    for round_number in range(max(wanted.values(), default=0)):
        for name, count in wanted.items():
            if round_number >= count:
                continue
            replica = new_replica_id(name, taken[name], len(running.get(name, ())) + 1)
            taken[name].append(replica)
            placements.append(place_replica(catalog.models[name], replica, state, verdicts))
    return PlacementRun(tuple(placements), running, wanted)
