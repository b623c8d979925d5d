"""What a placement run holds as it goes: the snapshot plus the replicas placed so far.

Capacity is incremental: `hold()` logs the nodes it changed, and each profile's per-node
answers (cli/placement/constraints.py, in list order) are redone only there, so placing
the thousandth replica costs about what the first did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cli.catalog.load import CatalogProfile
from cli.catalog.schema import Profile as ProfileSpec
from cli.cluster.snapshot import NodeView, Snapshot, reserved_by_invalid
from cli.placement.constraints import (
    Relax,
    Subject,
    first_rejection,
    first_static_rejection,
    sized_gpus,
    weights_bytes,
)
from cli.placement.reasons import Rejection
from cli.shards.staging import unused_weights


@dataclass(frozen=True, slots=True)
class ShardPlacement:
    node: str
    rank: int
    gpus: tuple[int, ...]
    hcas: tuple[str, ...]
    fabric: str | None
    note: str = ""  # how the GPUs sit in the NVLink topology


@dataclass(frozen=True, slots=True)
class Candidate:
    node: NodeView
    free: int  # free GPUs of the class (0 for CPU profiles)


@dataclass
class _Holdings:
    """What our shards hold on one node, as the run goes on."""

    gpus: dict[int, str] = field(default_factory=dict)  # GPU index → replica
    memory_gib: float = 0.0
    replicas: dict[str, set[str]] = field(default_factory=dict)  # model → its replicas here
    # Sources the run placed here that the store does not hold: bytes each will take once
    # staged (0 when the size is unknown). A second replica of one needs no more room.
    staged: dict[str, int] = field(default_factory=dict)
    uses: set[str] = field(default_factory=set)  # sources the run placed replicas of here


NO_RELAX = Relax()


class PlacementState:
    """The snapshot plus the run's own placements so far."""

    def __init__(self, snapshot: Snapshot, relax: Relax = NO_RELAX) -> None:
        self.snapshot = snapshot
        self.relax = relax
        self.nodes = snapshot.nodes
        self._holdings: dict[str, _Holdings] = {}
        for node in self.nodes:
            holdings = _Holdings()
            if relax.capacity and not relax.conditions:
                # Invalid shards are not ours to free: while one says it runs, what it says
                # it reserves stays reserved (docs/facts.md) until someone sees to it.
                holdings.memory_gib = reserved_by_invalid(node.invalid_shards)
            if not relax.capacity:
                holdings.memory_gib = node.memory_reserved_gib
                for shard in node.shards:
                    holdings.replicas.setdefault(shard.model, set()).add(shard.replica)
                for gpu in node.gpus or ():
                    if gpu.held_by is not None:
                        holdings.gpus[gpu.index] = gpu.held_by
            self._holdings[node.name] = holdings
        self._static: dict[str, list[Rejection | None]] = {}
        # Incremental capacity: hold() logs the snapshot positions it changed; each profile
        # keeps its per-node results and how far into the log it has caught up.
        self._position = {node.name: i for i, node in enumerate(self.nodes)}
        self._changed: list[int] = []
        self._results: dict[str, tuple[list[Rejection | int], dict[int, Candidate], int]] = {}
        self._placed: dict[str, dict[str, int]] = {}  # model → node → replicas there
        for node in self.nodes:
            for model, replicas in self._holdings[node.name].replicas.items():
                self._placed.setdefault(model, {})[node.name] = len(replicas)
        # Per node and class: the healthy GPU indices, sorted; computed once per run.
        self._healthy: dict[tuple[str, str, float | None], tuple[int, ...]] = {}
        # Each source's size as the nodes holding it complete report it (the largest,
        # should they differ), for profiles without `disk_gb`.
        self._reported: dict[str, int] = {}
        # Each source's nodes that reported it stored complete, for the preference.
        self._holders: dict[str, set[str]] = {}
        for node in self.nodes:
            for weights in node.model_store.weights if node.model_store else ():
                known = self._reported.get(weights.source, 0)
                self._reported[weights.source] = max(known, weights.bytes)
                self._holders.setdefault(weights.source, set()).add(node.name)

    def static_rejections(self, profile: CatalogProfile) -> list[Rejection | None]:
        """Per node (snapshot order), the first constraint that fails whatever is held."""
        cached = self._static.get(profile.key)
        if cached is None:
            cached = [self._static_check(profile, node) for node in self.nodes]
            self._static[profile.key] = cached
        return cached

    def _static_check(self, profile: CatalogProfile, node: NodeView) -> Rejection | None:
        return first_static_rejection(subject(profile, node, self))

    def healthy_gpus(
        self, node: NodeView, gpu_class: str, gpu_memory_gb: float | None = None
    ) -> tuple[int, ...]:
        """The node's usable GPUs of the class with at least `gpu_memory_gb` each."""
        key = (node.name, gpu_class, gpu_memory_gb)
        healthy = self._healthy.get(key)
        if healthy is None:
            healthy = tuple(
                g.index
                for g in sized_gpus(node, gpu_class, gpu_memory_gb)
                if g.unusable is None or self.relax.conditions
            )
            self._healthy[key] = healthy
        return healthy

    def free_gpus(
        self, node: NodeView, gpu_class: str, gpu_memory_gb: float | None = None
    ) -> list[int]:
        held = self._holdings[node.name].gpus
        return [i for i in self.healthy_gpus(node, gpu_class, gpu_memory_gb) if i not in held]

    def held_by(self, node: NodeView, gpu_class: str) -> dict[str, list[int]]:
        holders: dict[str, list[int]] = {}
        classes = {g.index: g.gpu_class for g in node.gpus or ()}
        for index, replica in sorted(self._holdings[node.name].gpus.items()):
            if classes.get(index) == gpu_class:
                holders.setdefault(replica, []).append(index)
        return holders

    def reserved_gib(self, node: NodeView) -> float:
        return self._holdings[node.name].memory_gib

    def weights_bytes(self, source: str, spec: ProfileSpec) -> int | None:
        return weights_bytes(source, spec.engine, spec.disk_gb, self._reported.get(source))

    def holders(self, source: str) -> frozenset[str]:
        """The nodes that reported the source stored complete. (Not those the run stages it
        on: the preference is for a node that starts without a download, as the probe saw
        it.)"""
        return frozenset(self._holders.get(source, ()))

    def will_hold(self, node: NodeView, source: str) -> bool:
        """The node's store holds the source complete, or will once the run stages it."""
        stored = node.model_store is not None and node.model_store.holds(source)
        return stored or source in self._holdings[node.name].staged

    def staged_bytes(self, node: NodeView) -> int:
        return sum(self._holdings[node.name].staged.values())

    def evictable_bytes(self, node: NodeView) -> int:
        """The bytes of the node's unused weights (cli/shards/staging.py): what the staging
        step may remove to make room, the run's own placements there counted as in use."""
        return sum(w.bytes for w in unused_weights(node, self._holdings[node.name].uses))

    def hold(
        self, replica: str, profile: CatalogProfile, shards: Iterable[ShardPlacement]
    ) -> frozenset[str]:
        """Hold the replica's GPUs and memory; the nodes where it stages its source anew,
        which a hold that is tried and taken back (moves.py) unstages on release."""
        staged: set[str] = set()
        for shard in shards:
            holdings = self._holdings[shard.node]
            for index in shard.gpus:
                if index in holdings.gpus:
                    raise AssertionError(f"GPU {index} of {shard.node} handed out twice")
                holdings.gpus[index] = replica
            holdings.memory_gib += profile.spec.min_memory_gb or 0.0
            holdings.uses.add(profile.source)
            node = self.nodes[self._position[shard.node]]
            if not self.will_hold(node, profile.source):
                size = self.weights_bytes(profile.source, profile.spec)
                holdings.staged[profile.source] = size or 0
                staged.add(shard.node)
            mine = holdings.replicas.setdefault(profile.model, set())
            if replica not in mine:
                mine.add(replica)
                counts = self._placed.setdefault(profile.model, {})
                counts[shard.node] = counts.get(shard.node, 0) + 1
            self._changed.append(self._position[shard.node])
        return frozenset(staged)

    def release(
        self,
        replica: str,
        profile: CatalogProfile,
        shards: Iterable[ShardPlacement],
        unstage: Iterable[str] = (),
    ) -> None:
        """Undo `hold()`: a replica held leaves, its GPUs and memory free again.

        What it staged stays staged, weights on a disk outliving the replica that brought
        them (eviction is a later step), but on the nodes of `unstage`: a hold that never
        happened (what hold() returned, when it is taken back).
        """
        for node in unstage:
            self._holdings[node].staged.pop(profile.source, None)
        for shard in shards:
            holdings = self._holdings[shard.node]
            for index in shard.gpus:
                if holdings.gpus.get(index) != replica:
                    raise AssertionError(f"GPU {index} of {shard.node} is not {replica}'s")
                del holdings.gpus[index]
            holdings.memory_gib -= profile.spec.min_memory_gb or 0.0
            mine = holdings.replicas.get(profile.model, set())
            if replica in mine:
                mine.discard(replica)
                counts = self._placed[profile.model]
                counts[shard.node] -= 1
                if not counts[shard.node]:
                    del counts[shard.node]
            self._changed.append(self._position[shard.node])

    def capacity_results(
        self, profile: CatalogProfile
    ) -> tuple[list[Rejection | int], dict[int, Candidate]]:
        """Per node (snapshot order) `_capacity_check`, and the nodes that passed; redone
        only where hold() changed something since this profile last asked."""
        entry = self._results.get(profile.key)
        static = self.static_rejections(profile)
        if entry is None:
            results: list[Rejection | int] = [
                _capacity_check(profile, node, rejection, self)
                for node, rejection in zip(self.nodes, static, strict=True)
            ]
            candidates = {
                position: Candidate(self.nodes[position], found)
                for position, found in enumerate(results)
                if not isinstance(found, Rejection)
            }
        else:
            results, candidates, seen = entry
            for position in set(self._changed[seen:]):
                node = self.nodes[position]
                found = _capacity_check(profile, node, static[position], self)
                results[position] = found
                if isinstance(found, Rejection):
                    candidates.pop(position, None)
                else:
                    candidates[position] = Candidate(node, found)
        self._results[profile.key] = (results, candidates, len(self._changed))
        return results, candidates

    def replica_counts(self, model: str) -> dict[str, int]:
        """Node → replicas of `model` on it."""
        return self._placed.setdefault(model, {})


def subject(profile: CatalogProfile, node: NodeView, state: PlacementState) -> Subject:
    return Subject(profile.name, profile.spec, node, state.relax, state, profile.source)


def _capacity_check(
    profile: CatalogProfile, node: NodeView, static: Rejection | None, state: PlacementState
) -> Rejection | int:
    """The node's first failing constraint, in the documented order, or its free GPU count."""
    spec = profile.spec
    rejection = first_rejection(subject(profile, node, state), static)
    if rejection is not None:
        return rejection
    if not spec.uses_gpus or spec.gpu_class is None:
        return 0
    if node.gpus is None:  # only when pretending conditions away: "blocked", not "never"
        return spec.gpus_per_node
    return len(state.free_gpus(node, spec.gpu_class, spec.gpu_memory_gb))
