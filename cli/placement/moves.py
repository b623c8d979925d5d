"""Moves that make room: when a replica fits nowhere, the fewest, cheapest moves of running
single-node replicas after which it fits (docs/placement.md, "Moves that make room").

Make-before-break: each moved replica's new copy is placed first, by the same placement
and hard constraints as any replica (so never on a cordoned, unreachable or faulty node),
and only then is the old copy released, so no model ever runs fewer replicas than before,
let alone fewer than its `replicas.min`. Moves run one after another; the waiting replica
is placed after the last. A multi-node replica never moves: it is the least movable thing
and the most expensive to reload. A copy keeps its replica's profile unless no plan works
that way; then it may take another profile of its model, as placement would.

Pure: it tries each plan on the run's PlacementState and takes back what did not work, so
the state ends holding the plan found, or exactly what it held before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, product

from cli.catalog.load import Catalog, CatalogModel, CatalogProfile
from cli.cluster import NameKey, name_order
from cli.cluster.snapshot import NodeView, Reachability, Snapshot
from cli.placement.place import (
    PlacementRun,
    ReplicaPlacement,
    Verdict,
    spread_limit,
    try_profile,
)
from cli.placement.state import PlacementState, ShardPlacement

MOVES_LIMIT = 3  # moves per replica admitted, by default
# Plans tried per profile, cheapest first: each is a placement per move, and a large
# fleet offers thousands that all fail alike (no node free enough for the moved copy).
TRIED_MOST = 200
# Nodes of a fabric, cheapest to clear first, among which a multi-node replica's are sought.
NODES_MOST = 24


@dataclass(frozen=True, slots=True)
class Running:
    """A running single-node replica that may move."""

    model: CatalogModel
    replica: str
    profile: CatalogProfile
    shard: ShardPlacement

    @property
    def gpus(self) -> int:
        return len(self.shard.gpus)


@dataclass(frozen=True, slots=True)
class Move:
    replica: str
    model: str
    profile: CatalogProfile  # the new copy's
    source: ShardPlacement
    target: ShardPlacement
    was: CatalogProfile  # the old copy's: another only when no plan kept every profile

    @property
    def changes_profile(self) -> bool:
        return self.profile is not self.was


@dataclass(frozen=True)
class Room:
    """The moves, in order, and the waiting replica placed after them."""

    moves: tuple[Move, ...]
    placement: ReplicaPlacement

    @property
    def gpus_reloaded(self) -> int:
        """GPUs whose model is loaded anew by the moves: what they cost beyond the replica."""
        return sum(len(move.target.gpus) for move in self.moves)


def movable(catalog: Catalog, snapshot: Snapshot) -> list[Running]:
    """The snapshot's running replicas that may move: one shard, on a Ready node that is
    not cordoned, of a catalog profile whose memory is what the shard reserved (what the
    release gives back must be what the node counts as held)."""
    found: list[Running] = []
    for node in snapshot.nodes:
        if node.reachability is not Reachability.READY or node.cordon is not None:
            continue
        for shard in node.shards:
            model = catalog.models.get(shard.model)
            if not shard.holds or shard.nodes != 1 or model is None:
                continue
            profile = next((p for p in model.profiles if p.name == shard.profile), None)
            if profile is None or (shard.memory_gib or 0.0) != (profile.spec.min_memory_gb or 0.0):
                continue
            placed = ShardPlacement(node.name, 0, tuple(shard.gpus), (), None)
            found.append(Running(model, shard.replica, profile, placed))
    return found


def make_room(
    model: CatalogModel,
    replica: str,
    state: PlacementState,
    running: Sequence[Running],
    limit: int = MOVES_LIMIT,
) -> Room | None:
    """The highest-priority profile that fits after at most `limit` moves, with the fewest
    moves and then the fewest GPUs reloaded (among the `TRIED_MOST` cheapest plans of each
    profile); held on `state`. None: no such plan, `state` as it was.

    Each moved copy keeps its profile if any plan works so; only if none does may a copy
    take another of its model's profiles (as placement would place it, highest priority
    first), which is how an H100 node is freed of a replica that may also run on A100s."""
    for profile in model.profiles:
        plans = _plans(profile, state, running, limit)[:TRIED_MOST]
        for others in (False, True):
            for plan in plans:
                room = _try(model, replica, profile, plan, state, others)
                if room is not None:
                    return room
    return None


# A plan: the replicas to move in order, each with the nodes its new copy must avoid.
Plan = tuple[tuple[Running, frozenset[str]], ...]


def _plans(
    profile: CatalogProfile, state: PlacementState, running: Sequence[Running], limit: int
) -> list[Plan]:
    """Plans worth trying, fewest moves first, then fewest GPUs reloaded, then by name.

    A move helps only if it frees what the profile asks on a node where the profile could
    then run: replicas moved off that node (as few as free enough, at most `limit`), off
    each of the nodes of one fabric a multi-node replica needs, or one replica moved off
    that node after another moves out of the way of its new copy (a chain).
    """
    spec = profile.spec
    static = state.static_rejections(profile)
    eligible = [node for node, rejection in zip(state.nodes, static, strict=True) if not rejection]
    by_name = {node.name: node for node in state.nodes}

    def frees(r: Running) -> bool:
        if spec.uses_gpus:
            return bool(r.shard.gpus) and r.profile.spec.gpu_class == spec.gpu_class
        return bool(spec.min_memory_gb) and bool(r.profile.spec.min_memory_gb)

    def size(r: Running) -> float:
        """What the replica's leaving gives back: GPUs, or for a CPU profile GiB."""
        if spec.uses_gpus and spec.gpu_class is not None:
            return r.gpus
        return r.profile.spec.min_memory_gb or 0.0

    def lacks(node: NodeView) -> float | None:
        """Counting only: what the node lacks for one shard of the profile (≤ 0: none),
        None when it cannot say."""
        if spec.uses_gpus and spec.gpu_class is not None:
            free = len(state.free_gpus(node, spec.gpu_class, spec.gpu_memory_gb))
            return spec.gpus_per_node - free
        if node.memory_total_gib is None:
            return None
        return (spec.min_memory_gb or 0.0) - (node.memory_total_gib - state.reserved_gib(node))

    on_node: dict[str, list[Running]] = {}
    for r in running:
        if frees(r):
            on_node.setdefault(r.shard.node, []).append(r)

    def clearings(node: NodeView) -> list[tuple[Running, ...]]:
        """The fewest replicas that leaving the node would make room there, largest first;
        () when it has room already. Replicas of one profile on a node are alike to a plan,
        so the first by name stands for the others."""
        lack = lacks(node)
        if lack is None:
            return []
        if lack <= 0:
            return [()]
        kinds: dict[str, list[Running]] = {}
        for r in sorted(on_node.get(node.name, ()), key=lambda r: name_order(r.replica)):
            kinds.setdefault(r.profile.key, []).append(r)
        here = sorted(
            (r for alike in kinds.values() for r in alike[:limit]),
            key=lambda r: (-size(r), r.profile.key, name_order(r.replica)),
        )
        found: dict[tuple[str, ...], tuple[Running, ...]] = {}
        for count in range(1, limit + 1):
            for leaving in combinations(here, count):
                total = sum(size(r) for r in leaving)
                # As few as will do: without its smallest, the rest would not.
                if total >= lack and total - size(leaving[-1]) < lack:
                    found.setdefault(tuple(r.profile.key for r in leaving), leaving)
        return list(found.values())

    plans: list[tuple[tuple[int, int, tuple[NameKey, ...]], Plan]] = []

    def add(plan: Plan) -> None:
        cost = sum(r.gpus for r, _ in plan)
        names = tuple(name_order(r.replica) for r, _ in plan)
        plans.append(((len(plan), cost, names), plan))

    singles: list[Running] = []  # replicas whose move alone makes room
    if spec.nodes == 1:
        for node in eligible:
            for leaving in clearings(node):
                if leaving:
                    target = frozenset({node.name})
                    add(tuple((r, target) for r in leaving))
                    if len(leaving) == 1:
                        singles.append(leaving[0])
    else:
        # A replica over several nodes needs that many with room on one fabric: replicas
        # moved off each that lacks it, none onto any of them.
        fabrics: dict[str, list[tuple[NodeView, list[tuple[Running, ...]]]]] = {}
        for node in eligible:
            found = clearings(node)
            singles += [c[0] for c in found if len(c) == 1]
            if found:
                for view in node.fabrics:
                    fabrics.setdefault(view.name, []).append((node, found))
        seen: set[frozenset[str]] = set()
        for members in fabrics.values():
            ready = [m for m in members if m[1] == [()]][: spec.nodes]
            busy = sorted(
                (m for m in members if m[1] != [()]),
                key=lambda m: (min(len(c) for c in m[1]), name_order(m[0].name)),
            )[:NODES_MOST]
            for group in combinations(ready + busy, spec.nodes):
                for picked in product(*(m[1] for m in group)):
                    moving = sorted(
                        (r for c in picked for r in c),
                        key=lambda r: (-size(r), name_order(r.replica)),
                    )
                    key = frozenset(r.replica for r in moving)
                    if not moving or len(moving) > limit or key in seen:
                        continue
                    seen.add(key)
                    avoid = frozenset(m[0].name for m in group)
                    add(tuple((r, avoid) for r in moving))
    if limit >= 2:
        # A chain: `b` moves out of the way (never onto the node being freed), then `a`'s
        # copy may take b's place.
        for a in singles:
            wanted = a.profile.spec
            if wanted.gpu_class is None:
                continue  # memory frees itself less in steps: chains are for GPUs
            a_static = state.static_rejections(a.profile)
            open_to_a = {
                node.name
                for node, rejection in zip(state.nodes, a_static, strict=True)
                if not rejection
            }
            for b in running:
                node_name = b.shard.node
                if node_name == a.shard.node or node_name not in open_to_a:
                    continue
                free = len(
                    state.free_gpus(by_name[node_name], wanted.gpu_class, wanted.gpu_memory_gb)
                )
                if b.profile.spec.gpu_class == wanted.gpu_class and free < a.gpus <= free + b.gpus:
                    away = frozenset({node_name, a.shard.node})
                    add(((b, away), (a, frozenset({a.shard.node}))))
    plans.sort(key=lambda p: p[0])
    return [plan for _, plan in plans if len(plan) <= limit]


def _try(
    model: CatalogModel,
    replica: str,
    profile: CatalogProfile,
    plan: Plan,
    state: PlacementState,
    others: bool,
) -> Room | None:
    """Carry the plan out on `state` (make-before-break), then place the replica; or take
    every step back and say None. `others`: a moved copy may take another profile of its
    model when its own fits nowhere (None at once if no moved replica's model has one:
    the plan was tried without)."""
    if others and all(len(moving.model.profiles) == 1 for moving, _ in plan):
        return None
    done: list[tuple[Running, CatalogProfile, ShardPlacement, frozenset[str]]] = []
    moves: list[Move] = []
    for moving, avoid in plan:
        away = avoid | {moving.shard.node}
        spread = spread_limit(moving.model)
        choices = [moving.profile]
        if others:
            choices += [p for p in moving.model.profiles if p is not moving.profile]
        for target in choices:
            shards, _ = try_profile(target, state, spread, away)
            if shards is not None:
                break
        if shards is None:
            _undo(done, state)
            return None
        staged = state.hold(moving.replica, target, shards)
        state.release(moving.replica, moving.profile, (moving.shard,))
        done.append((moving, target, shards[0], staged))
        moves.append(
            Move(moving.replica, moving.model.name, target, moving.shard, shards[0], moving.profile)
        )
    shards, attempt = try_profile(profile, state, spread_limit(model))
    if shards is None:
        _undo(done, state)
        return None
    state.hold(replica, profile, shards)
    placement = ReplicaPlacement(model.name, replica, profile, shards, (attempt,), Verdict.PLACED)
    return Room(tuple(moves), placement)


def _undo(
    done: Sequence[tuple[Running, CatalogProfile, ShardPlacement, frozenset[str]]],
    state: PlacementState,
) -> None:
    # The old copy held again as it was, the copy's weights unstaged where it staged them;
    # and the old copy's where holding it again staged them (its node's store did not
    # report them): they were not staged before the plan either.
    for moving, profile, target, staged in reversed(done):
        again = state.hold(moving.replica, moving.profile, (moving.shard,))
        state.release(moving.replica, profile, (target,), unstage=staged)
        state.release(moving.replica, moving.profile, (), unstage=again)


def rooms_for(
    run: PlacementRun, catalog: Catalog, snapshot: Snapshot, limit: int = MOVES_LIMIT
) -> dict[str, Room]:
    """Replica → the moves that would admit it, for each replica of the run that could fit
    once capacity frees ("not now"), planned one after another on the run's end state so
    that no two plans count on the same room. Nothing is moved: this is what
    `ctl place --dry-run` explains."""
    state = PlacementState(snapshot)
    for placement in run.placements:
        if placement.profile is not None:
            state.hold(placement.replica, placement.profile, placement.shards)
    running = movable(catalog, snapshot)
    rooms: dict[str, Room] = {}
    for placement in run.placements:
        if placement.verdict is not Verdict.NOT_NOW:
            continue
        room = make_room(catalog.models[placement.model], placement.replica, state, running, limit)
        if room is not None:
            rooms[placement.replica] = room
            moved = {move.replica for move in room.moves}
            running = [r for r in running if r.replica not in moved]
    return rooms
