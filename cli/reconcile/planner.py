"""Desired against actual → a Plan, in the spirit of Nomad's reconciler. Pure.

The catalog says how many replicas each model wants; the shards the nodes report say what
runs. Every replica lands in one bucket:

- healthy or starting: counted, left alone;
- on an Unreachable node: counted and left alone — a blip is not a loss;
- on a Lost node: stopped where it still runs, and placed again elsewhere;
- failed (a rank failed or missing): stopped whole, every rank, and rebuilt after the
  model's backoff — the other ranks would hold their GPUs in a collective forever;
- unwanted (no catalog model or profile wants it): drained and stopped;
- surplus (more than the model wants): drained, lowest-priority profile first.

Broken replicas are stopped first and free their GPUs for this plan's placements; drains
come last, after the replacements are healthy, so capacity only shrinks once the new
replicas serve. New replicas are placed one at a time on a state that holds the previous.

At about 540 lines it is one function's worth of buckets and their helpers (the ports
book, manual replicas, drains with their replacements): the buckets decide together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from cli.catalog.load import Catalog, CatalogModel, CatalogProfile
from cli.cluster import name_order
from cli.cluster.snapshot import (
    NodeView,
    Reachability,
    Snapshot,
    checked,
    release,
    with_shards,
)
from cli.engines.specs import ENGINE_SPECS
from cli.facts.model import DEFAULT_MODEL_STORE, ShardRecord, store_directory
from cli.placement.moves import make_room, movable
from cli.placement.place import (
    PlacementRun,
    ReplicaPlacement,
    Verdict,
    new_replica_id,
    place,
    place_replica,
)
from cli.placement.state import PlacementState, ShardPlacement
from cli.reconcile.autoscale import Decision, Memory, decide
from cli.reconcile.backoff import Backoff, after_failure, failure_key
from cli.reconcile.renewal import Renewal
from cli.shards.engines import RENDEZVOUS_OFFSET, Rank
from cli.shards.staging import StageJob, staged_path, stages
from cli.shards.units import ShardFiles, shard_files

FIRST_PORT = 8000
LAST_PORT = 8999
DRAINING = "being drained"  # the cordon a node being drained is placed with


class Condition(StrEnum):
    HEALTHY = "healthy"
    STARTING = "starting"
    UNREACHABLE = "unreachable"
    LOST = "lost"
    FAILED = "failed"
    UNWANTED = "unwanted"


@dataclass(frozen=True)
class RunningShard:
    node: str
    record: ShardRecord


@dataclass(frozen=True)
class Replica:
    """A replica as the nodes report it: its shards, wherever they are."""

    replica: str
    model: str
    profile: str
    shards: tuple[RunningShard, ...]

    @property
    def nodes(self) -> int:
        return max(s.record.nodes for s in self.shards)

    @property
    def origin(self) -> str:
        return self.shards[0].record.origin

    @property
    def started(self) -> datetime | None:
        times = [s.record.started for s in self.shards if s.record.started is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class Stop:
    replica: str
    model: str
    shards: tuple[RunningShard, ...]  # the ones that can be reached and stopped
    reason: str
    drain: bool  # let in-flight requests finish: a healthy replica being retired
    # Drained off a node being emptied: the new replica that must serve before it goes.
    replacement: str | None = None
    # The nodes of its ranks not in `shards`: lost, out of reach; stopped when they answer.
    out_of_reach: tuple[str, ...] = ()


@dataclass(frozen=True)
class Start:
    replica: str
    model: str
    profile: CatalogProfile
    placement: ReplicaPlacement
    files: tuple[ShardFiles, ...]  # rank order
    reason: str
    stage: tuple[StageJob, ...] = ()  # weights to put in each node's store first

    @property
    def workers(self) -> tuple[ShardFiles, ...]:
        return tuple(f for f in self.files if f.rank > 0)

    @property
    def leader(self) -> ShardFiles:
        return self.files[0]


@dataclass(frozen=True)
class Wait:
    model: str
    until: datetime
    failures: int


@dataclass(frozen=True)
class Leave:
    replica: str
    model: str
    reason: str
    undrained: bool = False  # on a node being drained, kept: no replacement could be placed


@dataclass(frozen=True)
class Plan:
    now: datetime
    stops: tuple[Stop, ...] = ()  # broken replicas: stopped first, their GPUs reused
    starts: tuple[Start, ...] = ()
    drains: tuple[Stop, ...] = ()  # healthy replicas retired: after the starts
    waits: tuple[Wait, ...] = ()
    leaves: tuple[Leave, ...] = ()
    unplaced: tuple[ReplicaPlacement, ...] = ()
    ledger: Mapping[str, Backoff] = field(default_factory=dict)
    # Per model, the replicas counted toward replicas.min (healthy, starting, unreachable).
    running: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Node certificates due (cli/reconcile/renewal.py): renewed in this pass, with the CA here;
    # and only said, each with why not here and what to run instead.
    renewals: tuple[Renewal, ...] = ()
    certificates_due: tuple[Renewal, ...] = ()
    # Each autoscaled model's decision, and the memory the next pass starts from.
    scaling: tuple[Decision, ...] = ()
    scale_memory: Mapping[str, Memory] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing to change on any node."""
        return not (self.stops or self.starts or self.drains)


# The reason of a drain --force stops with no replacement: a replica the model is short of.
FORCED = "node drained (--force: no replacement could be placed)"


def retired_unreplaced(plan: Plan) -> tuple[tuple[str, ...], int]:
    """The healthy replicas `plan` retires with nothing to take their place, and how many
    healthy replicas there are: the figures of "this pass stops 5 of 8 running replicas"."""
    lost = tuple(stop.replica for stop in plan.drains if stop.replacement is None)
    running = {replica for replicas in plan.running.values() for replica in replicas}
    return lost, len(running | {stop.replica for stop in plan.drains})


def replicas_of(snapshot: Snapshot) -> list[Replica]:
    grouped: dict[str, list[RunningShard]] = {}
    for node in snapshot.nodes:
        for record in node.shards:
            grouped.setdefault(record.replica, []).append(RunningShard(node.name, record))
    replicas = []
    for name, shards in sorted(grouped.items(), key=lambda item: name_order(item[0])):
        shards.sort(key=lambda s: s.record.rank)
        first = shards[0].record
        replicas.append(Replica(name, first.model, first.profile, tuple(shards)))
    return replicas


def condition(
    replica: Replica, catalog: Catalog, nodes: Mapping[str, NodeView]
) -> tuple[Condition, str]:
    """The replica's bucket and, for people, why."""
    model = catalog.models.get(replica.model)
    if model is None:
        return Condition.UNWANTED, f"no catalog model {replica.model} wants it"
    if replica.profile not in {p.name for p in model.profiles}:
        return Condition.UNWANTED, f"profile {replica.profile} is no longer in the catalog"
    for shard in replica.shards:
        node = nodes[shard.node]
        if node.reachability is Reachability.LOST:
            return Condition.LOST, f"{shard.node} lost ({node.unreachable_reason})"
    for shard in replica.shards:
        node = nodes[shard.node]
        if node.reachability is Reachability.UNREACHABLE:
            return Condition.UNREACHABLE, f"{shard.node} unreachable; left alone"
    ranks = {s.record.rank for s in replica.shards}
    missing = sorted(set(range(replica.nodes)) - ranks)
    if missing:
        listed = ", ".join(str(r) for r in missing)
        return Condition.FAILED, f"rank {listed} missing"
    failed = [s for s in replica.shards if s.record.state in ("failed", "stopped")]
    if failed:
        where = ", ".join(f"rank {s.record.rank} on {s.node}" for s in failed)
        return Condition.FAILED, f"{where} failed"
    if any(s.record.state == "starting" for s in replica.shards):
        return Condition.STARTING, "starting"
    return Condition.HEALTHY, "healthy"


def plan(
    catalog: Catalog,
    snapshot: Snapshot,
    ledger: Mapping[str, Backoff],
    addresses: Mapping[str, str],
    rng: random.Random | None,
    evict: frozenset[str] = frozenset(),
    listen: Mapping[str, str] | None = None,
    force: bool = False,
    networks: Mapping[str, tuple[str | None, str | None]] | None = None,
    stores: Mapping[str, str | None] | None = None,
    defragment: bool = False,
    scale_memory: Mapping[str, Memory] | None = None,
) -> Plan:
    """The changes that bring the fleet to the catalog, as of `snapshot.now`.

    `addresses` maps node → the address other ranks and health checks use; `listen`, the
    address its shards serve on where that is not every address; `stores`, its model store
    where that is not the default (weights are staged there first), None where weights are
    not staged. `evict` names nodes
    being drained: placed as cordoned, their replicas are replaced elsewhere, then
    drained; one whose replacement cannot be placed is left running unless `force`.
    `defragment`: for a replica that fits nowhere now, the moves that make room for it
    (cli/placement/moves.py) are started and drained like a node's evictions, the new copy
    serving before the old goes; the replica itself is placed by the next pass.
    `scale_memory`: the autoscaler's, per model, from the last pass (cli/reconcile/
    autoscale.py); a model with an `autoscale` policy wants what it decides.
    """
    # Only the records worth believing (cli/cluster/trust.py): an invalid shard is never
    # stopped, counted or replaced, and its GPUs are no one's to take.
    snapshot = cordoned(checked(snapshot, catalog), dict.fromkeys(evict, DRAINING))
    now = snapshot.now
    nodes = {node.name: node for node in snapshot.nodes}
    certificates = serving_certificates(snapshot)
    restarting: set[str] = set()  # models with a replica restarted on a renewed certificate
    new_ledger = dict(ledger)
    stops: list[Stop] = []
    drains: list[Stop] = []
    leaves: list[Leave] = []
    counted: dict[str, list[Replica]] = {name: [] for name in catalog.models}
    notes: dict[str, list[str]] = {name: [] for name in catalog.models}
    moving: dict[str, list[Stop]] = {name: [] for name in catalog.models}
    for replica in replicas_of(snapshot):
        bucket, why = condition(replica, catalog, nodes)
        reachable = tuple(
            s for s in replica.shards if nodes[s.node].reachability is Reachability.READY
        )
        if bucket is Condition.UNWANTED:
            drains.append(Stop(replica.replica, replica.model, reachable, why, drain=True))
        elif bucket is Condition.LOST:
            lost = tuple(sorted({s.node for s in replica.shards} - {s.node for s in reachable}))
            stops.append(
                Stop(replica.replica, replica.model, reachable, why, drain=False, out_of_reach=lost)
            )
            notes[replica.model].append(f"replaces {replica.replica} ({why})")
        elif bucket is Condition.FAILED:
            stops.append(Stop(replica.replica, replica.model, reachable, why, drain=False))
            notes[replica.model].append(f"rebuilds {replica.replica} ({why})")
            before = new_ledger.get(replica.model, Backoff())
            key = failure_key(replica.replica, replica.started)
            new_ledger[replica.model] = after_failure(before, key, now, rng)
        elif bucket is Condition.UNREACHABLE:
            leaves.append(Leave(replica.replica, replica.model, why))
            counted[replica.model].append(replica)
        elif evict and {s.node for s in replica.shards} & evict:
            moving[replica.model].append(
                Stop(replica.replica, replica.model, reachable, "node drained", drain=True)
            )
            notes[replica.model].append(f"moves {replica.replica} off a drained node")
        elif replica.model not in restarting and _outdated_certificate(replica, certificates):
            # An engine that read its certificate once serves the old one until restarted:
            # replaced as a drain does, the new copy serving first; one a model per pass.
            restarting.add(replica.model)
            why = "serves the node's certificate from before its renewal"
            moving[replica.model].append(
                Stop(replica.replica, replica.model, reachable, why, drain=True)
            )
            notes[replica.model].append(f"restarts {replica.replica} on a renewed certificate")
        else:
            counted[replica.model].append(replica)
    # Broken replicas free what they held for this plan's placements; drained ones do not
    # until after the replacements serve.
    state = PlacementState(release(snapshot, [s.replica for s in stops]))
    taken = {r.replica for r in replicas_of(snapshot)}
    ports = _PortBook(snapshot, {s.replica for s in stops})
    starts: list[Start] = []
    waits: list[Wait] = []
    unplaced: list[ReplicaPlacement] = []
    decisions: list[Decision] = []
    for name, model in catalog.models.items():
        running = counted[name]
        want = model.replicas_min
        scaled: Decision | None = None
        if model.autoscale is not None:
            scaled = _autoscale(model, running, catalog, nodes, scale_memory or {}, now)
            decisions.append(scaled)
            want = scaled.desired
        if len(running) > want:
            left_alone = {leave.replica for leave in leaves}
            reachable_running = [r for r in running if r.replica not in left_alone]
            for replica, reason in _surplus(model, reachable_running, len(running), scaled):
                drains.append(Stop(replica.replica, name, replica.shards, reason, drain=True))
            continue
        missing = want - len(running)
        backoff = new_ledger.get(name, Backoff())
        if missing and backoff.waiting(now) and backoff.until is not None:
            waits.append(Wait(name, backoff.until, backoff.failures))
            continue
        if (
            not missing
            and backoff.failures
            and all(condition(r, catalog, nodes)[0] is Condition.HEALTHY for r in running)
        ):
            new_ledger.pop(name, None)  # serving as wanted again: forget the failures
        for _ in range(missing):
            replica_id = new_replica_id(name, taken, len(running) + 1)
            taken.add(replica_id)
            placement = place_replica(model, replica_id, state)
            if placement.profile is None:
                unplaced.append(placement)
                break  # the next would be refused for the same reasons
            reason = f"{len(running)} of {want} running"
            # Short of replicas.min (a replica lost or moving) is not the load's doing.
            if scaled is not None and scaled.change > 0 and len(running) >= model.replicas_min:
                reason = f"scale up: {scaled.why}"
            if notes[name]:
                reason += "; " + "; ".join(notes[name])
            starts.append(
                _start(placement, placement.profile, addresses, ports, now, reason,
                       listen=listen, networks=networks, stores=stores,
                       certificates=certificates)
            )  # fmt: skip
    moved, kept = _evictions(catalog, moving, counted, starts, evict, force)
    drains += moved
    if defragment:
        busy = {s.replica for s in (*stops, *drains)} | {
            stop.replica for found in moving.values() for stop in found
        }
        for copy, profile, why, drain in _make_room(
            catalog, snapshot, state, unplaced, taken, busy
        ):
            starts.append(
                _start(copy, profile, addresses, ports, now, why,
                       origin=start_origin(snapshot, drain.replica), listen=listen,
                       networks=networks, stores=stores, certificates=certificates)
            )  # fmt: skip
            drains.append(drain)
    leaves += kept
    return Plan(
        now=now,
        stops=tuple(stops),
        starts=tuple(starts),
        drains=tuple(drains),
        waits=tuple(waits),
        leaves=tuple(leaves),
        unplaced=tuple(unplaced),
        ledger=new_ledger,
        running={name: tuple(r.replica for r in found) for name, found in counted.items() if found},
        scaling=tuple(decisions),
        scale_memory={d.model: d.memory for d in decisions},
    )


def _autoscale(
    model: CatalogModel,
    running: Sequence[Replica],
    catalog: Catalog,
    nodes: Mapping[str, NodeView],
    memory: Mapping[str, Memory],
    now: datetime,
) -> Decision:
    """The autoscaler's decision for `model`: its load read from the node of each serving
    replica's rank 0, where that node was reached this pass (a figure from cached facts of
    a node not reached is no one's current load)."""
    assert model.autoscale is not None
    starting = 0
    loads = []
    for replica in running:
        if condition(replica, catalog, nodes)[0] is Condition.STARTING:
            starting += 1
            continue
        leader = next((s for s in replica.shards if s.record.rank == 0), None)
        node = nodes.get(leader.node) if leader is not None else None
        if node is None or node.reachability is not Reachability.READY:
            continue
        found = next((x for x in node.replica_load or () if x.replica == replica.replica), None)
        if found is not None:
            loads.append(found)
    return decide(
        model.name, model.autoscale, model.replicas_min, model.replicas_max, len(running),
        starting, loads, memory.get(model.name), now,
    )  # fmt: skip


def start_origin(snapshot: Snapshot, replica: str) -> str:
    """A moved replica's copy keeps its origin: a manual one stays manual."""
    for node in snapshot.nodes:
        for shard in node.shards:
            if shard.replica == replica:
                return shard.origin
    return "reconcile"


def _make_room(
    catalog: Catalog,
    snapshot: Snapshot,
    state: PlacementState,
    unplaced: Sequence[ReplicaPlacement],
    taken: set[str],
    busy: set[str],
) -> list[tuple[ReplicaPlacement, CatalogProfile, str, Stop]]:
    """Per move that makes room for a replica not placed, its new copy (a new replica of
    the model), why it starts, and the drain of the old one, which waits for the copy to
    serve. Replicas
    this plan already stops or drains do not move."""
    movable_now = [r for r in movable(catalog, snapshot) if r.replica not in busy]
    shards = {r.replica: r.shards for r in replicas_of(snapshot)}
    pairs: list[tuple[ReplicaPlacement, CatalogProfile, str, Stop]] = []
    for waiting in unplaced:
        if waiting.verdict is not Verdict.NOT_NOW:
            continue
        model = catalog.models[waiting.model]
        room = make_room(model, waiting.replica, state, movable_now)
        if room is None:
            continue
        for move in room.moves:
            copy = new_replica_id(move.model, taken, 1)
            taken.add(copy)
            placement = ReplicaPlacement(
                move.model, copy, move.profile, (move.target,), (), Verdict.PLACED
            )
            room_for = f"room for {waiting.replica}"
            onto = f"{move.target.node} as {move.profile.name}" if move.changes_profile else ""
            why = f"moved to {copy} on {onto or move.target.node}: {room_for}"
            old = Stop(move.replica, move.model, shards[move.replica], why, True, copy)
            moves = f"moves {move.replica} off {move.source.node}: {room_for}"
            pairs.append((placement, move.profile, moves, old))
        moved = {move.replica for move in room.moves}
        movable_now = [r for r in movable_now if r.replica not in moved]
    return pairs


def cordoned(snapshot: Snapshot, reasons: Mapping[str, str]) -> Snapshot:
    """`snapshot` with these nodes cordoned (node → reason), unless they already are."""
    nodes = tuple(
        replace(node, cordon=reasons[node.name])
        if node.name in reasons and node.cordon is None
        else node
        for node in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)


def _evictions(
    catalog: Catalog,
    moving: Mapping[str, Sequence[Stop]],
    counted: Mapping[str, Sequence[Replica]],
    starts: Sequence[Start],
    evict: frozenset[str],
    force: bool,
) -> tuple[list[Stop], list[Leave]]:
    """The drains of replicas on nodes being emptied, each paired with the new replica
    that must serve first; and, unless `force`, those left running because the model
    would otherwise fall short of replicas.min (no replacement could be placed)."""
    drains: list[Stop] = []
    kept: list[Leave] = []
    for name, stops in moving.items():
        placed = [start.replica for start in starts if start.model == name]
        # How many of these the model needs replaced to keep replicas.min, and how many of
        # those it would lose: what this plan's placements (rebuilds too) leave it short.
        short = max(0, catalog.models[name].replicas_min - len(counted[name]))
        needed = min(len(stops), short)
        lost = min(needed, short - len(placed))
        for index, stop in enumerate(stops):
            if index >= needed:
                drains.append(stop)  # the model keeps replicas.min without it
            elif index < needed - lost:
                drains.append(replace(stop, replacement=placed[index]))
            elif not {s.node for s in stop.shards} & evict:
                why = (
                    f"{stop.reason}: no replacement could be placed, so it serves on with the"
                    " old certificate while that is valid"
                )
                kept.append(Leave(stop.replica, name, why, undrained=True))
            elif force:
                drains.append(replace(stop, reason=FORCED))
            else:
                where = ", ".join(sorted({s.node for s in stop.shards} & evict, key=name_order))
                why = (
                    f"on {where}, being drained: no replacement could be placed, so it serves"
                    " on (drain --force stops it)"
                )
                kept.append(Leave(stop.replica, name, why, undrained=True))
    return drains, kept


def _surplus(
    model: CatalogModel,
    candidates: Sequence[Replica],
    running: int,
    scaled: Decision | None = None,
) -> list[tuple[Replica, str]]:
    """Which of `candidates` (reachable) to retire out of `running`: the lowest-priority
    profile first, then the newest.

    Replicas an operator started by hand are one more each on top of replicas.min, up
    to replicas.max: the model keeps min(max, min + manual ones) replicas, retiring
    reconcile's own first (an operator's `ctl place` must not just replace one of them).
    """
    priority = {p.name: p.spec.priority for p in model.profiles}

    def order(replica: Replica) -> tuple[bool, int, float, str]:
        started = replica.started.timestamp() if replica.started else 0.0
        return (replica.origin == "manual", priority.get(replica.profile, 0), -started,
                replica.replica)  # fmt: skip

    manual = sum(1 for replica in candidates if replica.origin == "manual")
    excess = running - min(model.replicas_max, model.replicas_min + manual)
    reason = f"scale down: {running} running, replicas.min {model.replicas_min}"
    if scaled is not None:  # the autoscaler's count: the operator's replicas are in it
        excess, reason = running - scaled.desired, f"scale down: {scaled.why}"
    chosen: list[tuple[Replica, str]] = []
    remaining = running
    for replica in sorted(candidates, key=order):
        if len(chosen) == excess:
            break
        if replica.origin == "manual" and remaining <= model.replicas_max:
            continue
        chosen.append((replica, reason))
        remaining -= 1
    return chosen


class _PortBook:
    """Ports in use per node, so shards on one node never collide."""

    def __init__(self, snapshot: Snapshot, stopping: set[str]) -> None:
        self.used: dict[str, set[int]] = {}
        for node in snapshot.nodes:
            self.used[node.name] = {
                s.port for s in node.shards if s.port is not None and s.replica not in stopping
            }
            # Whatever listens now, ours or not, until it is gone; and what a record we do
            # not believe says it listens on.
            self.used[node.name] |= node.listening_ports
            self.used[node.name] |= {
                i.record.port for i in node.invalid_shards if i.record.port is not None
            }

    def take(self, nodes: Sequence[str]) -> int:
        for port in range(FIRST_PORT, LAST_PORT + 1):
            if all(
                port not in self.used[n] and port + RENDEZVOUS_OFFSET not in self.used[n]
                for n in nodes
            ):
                for n in nodes:
                    self.used[n].add(port)
                return port
        raise RuntimeError(f"no free port in {FIRST_PORT}-{LAST_PORT} on {', '.join(nodes)}")


def plan_manual(
    catalog: Catalog,
    snapshot: Snapshot,
    models: Sequence[str],
    addresses: Mapping[str, str],
    listen: Mapping[str, str] | None = None,
    networks: Mapping[str, tuple[str | None, str | None]] | None = None,
    stores: Mapping[str, str | None] | None = None,
) -> Plan:
    """One more replica of each of `models`, started by an operator (`ctl place`): kept by
    reconcile while its model stays within replicas.max."""
    snapshot = checked(snapshot, catalog)
    run = place(catalog, snapshot, models)
    ports = _PortBook(snapshot, set())
    starts = tuple(
        _start(
            p,
            p.profile,
            addresses,
            ports,
            snapshot.now,
            "asked for by ctl place",
            "manual",
            listen or {},
            networks,
            stores,
            serving_certificates(snapshot),
        )
        for p in run.placements
        if p.profile is not None
    )
    unplaced = tuple(p for p in run.placements if p.profile is None)
    return Plan(now=snapshot.now, starts=starts, unplaced=unplaced)


def _start(
    placement: ReplicaPlacement,
    profile: CatalogProfile,
    addresses: Mapping[str, str],
    ports: _PortBook,
    now: datetime,
    reason: str,
    origin: str = "reconcile",
    listen: Mapping[str, str] | None = None,
    networks: Mapping[str, tuple[str | None, str | None]] | None = None,
    stores: Mapping[str, str | None] | None = None,
    certificates: Mapping[str, str] | None = None,
) -> Start:
    shards: tuple[ShardPlacement, ...] = placement.shards
    port = ports.take([s.node for s in shards])
    master = addresses.get(shards[0].node, shards[0].node)
    # A replica over several nodes meets on the inventory's fabric network where it names
    # one: rank 0's fabric address, each rank's own (VLLM_HOST_IP) and interface.
    fabric = {s.node: (networks or {}).get(s.node, (None, None)) for s in shards}
    if len(shards) > 1:
        master = fabric[shards[0].node][1] or master
    files = tuple(
        shard_files(
            s.node,
            addresses.get(s.node, s.node),
            placement.replica,
            profile,
            Rank(
                s.rank,
                len(shards),
                port,
                master,
                s.gpus,
                s.hcas,
                (listen or {}).get(s.node, "0.0.0.0"),
                host_ip=fabric[s.node][1] if len(shards) > 1 else None,
                socket_ifname=fabric[s.node][0] if len(shards) > 1 else None,
            ),
            now,
            origin,
            staged=staged_path(profile.source, profile.spec.engine, *_store(stores, s.node)),
            certificate=(certificates or {}).get(s.node),
        )
        for s in shards
    )
    stage = tuple(
        StageJob(
            s.node,
            placement.replica,
            profile.source,
            _store(stores, s.node)[0] or DEFAULT_MODEL_STORE,
            store_directory(profile.source),
            None if profile.spec.disk_gb is None else math.ceil(profile.spec.disk_gb * 1e9),
            profile.key if profile.token is not None else None,
        )
        for s in shards
        if _store(stores, s.node)[1] and stages(profile.source, profile.spec.engine)
    )
    return Start(placement.replica, placement.model, profile, placement, files, reason, stage)


def _outdated_certificate(replica: Replica, certificates: Mapping[str, str]) -> bool:
    """Its rank 0 serves TLS with a certificate its node has since renewed, and its engine
    cannot reload one (vLLM and SGLang can: cli/engines/specs.py)."""
    leader = next((s for s in replica.shards if s.record.rank == 0), None)
    if leader is None or leader.record.certificate is None:
        return False
    spec = ENGINE_SPECS.get(leader.record.engine)
    if spec is None or spec.reloads_certificate:
        return False
    current = certificates.get(leader.node)
    return current is not None and current != leader.record.certificate


def serving_certificates(snapshot: Snapshot) -> dict[str, str]:
    """Node → the serial of the certificate its new shards serve TLS with: every node with
    a usable one (cli/facts/model.py NodeCertificate.usable); the others serve plain HTTP."""
    return {
        node.name: node.certificate.serial
        for node in snapshot.nodes
        if node.certificate is not None and node.certificate.usable(snapshot.now)
    }


def _store(stores: Mapping[str, str | None] | None, node: str) -> tuple[str | None, bool]:
    """A node's model store (None: the default) and whether weights are staged there."""
    if stores is None or node not in stores:
        return None, True
    return stores[node], stores[node] is not None


def applied(plan_: Plan, snapshot: Snapshot) -> Snapshot:
    """The snapshot after `plan_` ran as intended: for tests and for `--watch` dry runs."""
    gone = {s.replica for s in (*plan_.stops, *plan_.drains)}
    after = release(snapshot, gone)
    started: dict[str, list[ShardRecord]] = {}
    for start in plan_.starts:
        for files in start.files:
            record = ShardRecord.model_validate_json(files.record_text)
            started.setdefault(files.node, []).append(record)
    nodes = tuple(
        with_shards(node, [*node.shards, *started[node.name]]) if node.name in started else node
        for node in after.nodes
    )
    return replace(after, nodes=nodes)


def placement_run(plan_: Plan, catalog: Catalog) -> PlacementRun:
    """`plan_`'s placements as `ctl place --all --dry-run` shows them: the same replicas on
    the same GPUs as the pass would start, model by model in catalog order. A model
    waiting out its backoff is asked for nothing."""
    waiting = {wait.model for wait in plan_.waits}
    placements = [
        placement
        for name in catalog.models
        for placement in (
            *(s.placement for s in plan_.starts if s.model == name),
            *(p for p in plan_.unplaced if p.model == name),
        )
    ]
    wanted = {
        name: max(0, model.replicas_min - len(plan_.running.get(name, ())))
        for name, model in catalog.models.items()
        if name not in waiting
    }
    return PlacementRun(tuple(placements), dict(plan_.running), wanted)
