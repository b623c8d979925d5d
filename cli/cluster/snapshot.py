"""Build the Snapshot: inventory + facts + the clock → nodes with status and free capacity.

Pure. A node's status comes from two owners that never overrule each other: reachability
from the facts (Ready → Unreachable → Lost as time passes) and the cordon from the
operator's inventory. Nothing gathered can clear a cordon.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from cli.catalog.load import Catalog
from cli.cluster import DEFAULT_LOST_AFTER, name_order
from cli.cluster.trust import (
    InvalidShard,
    catalog_problem,
    disagreements,
    memory_gib_problem,
    record_problem,
)
from cli.facts.model import (
    Gpu,
    HcaPort,
    ModelStore,
    NodeCertificate,
    NodeFacts,
    ReplicaLoad,
    ShardRecord,
)
from cli.inventory.schema import Host, HostVars

# GPU memory in use with no process the probe can see (containers hide other pids):
# an idle GPU holds a few MiB for the driver, so this much is someone's model.
INVISIBLE_USE_MIB = 1024

MIB_PER_GIB = 1024

ClassifyGpu = Callable[[str, Mapping[str, str]], str]


class Reachability(StrEnum):
    READY = "Ready"
    UNREACHABLE = "Unreachable"
    LOST = "Lost"


class Status(StrEnum):
    READY = "Ready"
    CORDONED = "Cordoned"
    UNREACHABLE = "Unreachable"
    LOST = "Lost"


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    gpu_class: str
    memory_total_mib: int | None
    unusable: str | None  # why no replica may have it, e.g. "2 uncorrected ECC errors"
    held_by: str | None  # the replica of ours running on it
    # The invalid shard (cli/cluster/trust.py) that claims it, in words: `unusable` says so
    # too when nothing else (a fault, a foreign process) makes it unusable.
    claim: str | None = None

    @property
    def fault(self) -> str | None:
        """Why it is unusable apart from an invalid shard's claim."""
        return None if self.claim is not None and self.unusable == self.claim else self.unusable


@dataclass(frozen=True)
class FabricView:
    name: str
    hcas: tuple[str, ...]  # as declared in the inventory
    active_hcas: tuple[str, ...] | None  # of those, the ones with an ACTIVE port; None: unknown
    rate_gbps: float | None
    down: tuple[str, ...] = ()  # declared HCAs with no ACTIVE port, e.g. "mlx5_1 DOWN"


@dataclass(frozen=True)
class NodeView:
    name: str
    reachability: Reachability
    cordon: str | None
    unreachable_reason: str | None
    last_reached: datetime | None
    labels: Mapping[str, str]
    memory_total_gib: float | None  # None: the node did not say
    memory_reserved_gib: float  # by our shards' profiles
    gpus: tuple[GpuView, ...] | None  # None: the node did not say
    nvlink_domains: tuple[frozenset[int], ...] | None  # None: topology unknown
    fabrics: tuple[FabricView, ...]
    shards: tuple[ShardRecord, ...]
    in_inventory: bool = True
    notes: tuple[str, ...] = ()
    listening_ports: frozenset[int] = frozenset()  # held by something, ours or not
    # Records the node reports that are not believed (cli/cluster/trust.py): never stopped,
    # never routed to, their GPUs unusable.
    invalid_shards: tuple[InvalidShard, ...] = ()
    # Whether `shards` were checked against the catalog; False: names, ports, numbers and
    # GPUs only (`ctl nodes` without one).
    catalog_checked: bool = False
    gpus_lost: int = 0  # GPUs the node has but nvidia-smi could not reach: never usable
    # The model store as the node reported it; None: not reported.
    model_store: ModelStore | None = None
    # Its TLS certificate; None: none, its shards serve plain HTTP (cli/facts/model.py).
    certificate: NodeCertificate | None = None
    # False: its engines fetch their own weights (`modelfleet_stage_weights: false`), so
    # the store is not where they go, and its room is not placement's concern.
    stages_weights: bool = True
    # The load of the replicas whose rank 0 runs here, as the engines said it when the
    # facts were gathered; None: not reported.
    replica_load: tuple[ReplicaLoad, ...] | None = None

    @property
    def status(self) -> Status:
        if self.reachability is Reachability.LOST:
            return Status.LOST
        if self.reachability is Reachability.UNREACHABLE:
            return Status.UNREACHABLE
        return Status.CORDONED if self.cordon is not None else Status.READY

    @property
    def gpu_classes(self) -> tuple[str, ...]:
        return tuple(sorted({gpu.gpu_class for gpu in self.gpus or ()}))


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    nodes: tuple[NodeView, ...]  # in name order (cli.cluster.name_order: node-2 before node-10)
    lost_after: timedelta = DEFAULT_LOST_AFTER
    problems: tuple[str, ...] = field(default=())

    def node(self, name: str) -> NodeView:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def build_snapshot(
    hosts: Sequence[Host],
    facts: Mapping[str, NodeFacts],
    now: datetime,
    classify: ClassifyGpu,
    lost_after: timedelta = DEFAULT_LOST_AFTER,
    what_if_vars: Mapping[str, HostVars] | None = None,
) -> Snapshot:
    """One view per inventory host; facts of hosts not in the inventory are what-if nodes."""
    views = [
        node_view(host.name, host.vars, facts.get(host.name), now, classify, lost_after)
        for host in hosts
    ]
    known = {host.name for host in hosts}
    for name in sorted(set(facts) - known, key=name_order):
        host_vars = (what_if_vars or {}).get(name, HostVars())
        view = node_view(name, host_vars, facts[name], now, classify, lost_after)
        views.append(_replace_in_inventory(view))
    snapshot = Snapshot(
        now=now, nodes=tuple(sorted(views, key=lambda v: name_order(v.name))), lost_after=lost_after
    )
    return checked(snapshot, None)


def checked(snapshot: Snapshot, catalog: Catalog | None) -> Snapshot:
    """`snapshot` with only the shard records worth believing in `shards`, the others in
    `invalid_shards` (cli/cluster/trust.py), checked against `catalog` when there is one.

    Decided afresh from every record the nodes report, so checking again with the catalog
    may believe what a check without it could not (a rank that only the catalog shows is
    the liar)."""
    kept: dict[str, list[ShardRecord]] = {}
    invalid: dict[str, list[InvalidShard]] = {}
    for node in snapshot.nodes:
        classes = None if node.gpus is None else {g.index: g.gpu_class for g in node.gpus}
        kept[node.name] = []
        invalid[node.name] = []
        for record in (*node.shards, *(i.record for i in node.invalid_shards)):
            problem = record_problem(record, classes)
            if problem is None and catalog is not None:
                problem = catalog_problem(record, catalog, classes)
            if problem is None:
                kept[node.name].append(record)
            else:
                invalid[node.name].append(InvalidShard(record, problem))
    disagree = disagreements([(name, r) for name, records in kept.items() for r in records])
    nodes = []
    for node in snapshot.nodes:
        believed = [r for r in kept[node.name] if r.replica not in disagree]
        rejected = invalid[node.name] + [
            InvalidShard(r, disagree[r.replica]) for r in kept[node.name] if r.replica in disagree
        ]
        view = replace(node, invalid_shards=tuple(rejected), catalog_checked=catalog is not None)
        nodes.append(with_shards(view, believed))
    return replace(snapshot, nodes=tuple(nodes))


def _replace_in_inventory(view: NodeView) -> NodeView:
    return replace(view, in_inventory=False)


def reachability(
    facts: NodeFacts | None, now: datetime, lost_after: timedelta
) -> tuple[Reachability, str | None]:
    if facts is None:
        return Reachability.UNREACHABLE, "no facts gathered yet"
    if facts.reached:
        return Reachability.READY, None
    reason = facts.error or "not reached"
    if facts.last_reached is None:
        return Reachability.UNREACHABLE, f"{reason}; never reached"
    # Lost is seen, not inferred: only a node watched failing for the whole lost_after.
    # A node last reached a week ago that fails once is Unreachable: nobody was looking.
    seen = facts.unreachable_since
    if seen is not None and now - seen >= lost_after:
        return Reachability.LOST, reason
    return Reachability.UNREACHABLE, reason


def node_view(
    name: str,
    host_vars: HostVars,
    facts: NodeFacts | None,
    now: datetime,
    classify: ClassifyGpu,
    lost_after: timedelta = DEFAULT_LOST_AFTER,
) -> NodeView:
    state, reason = reachability(facts, now, lost_after)
    # A failed shard is kept, ours to stop and rebuild, though it no longer holds its GPUs
    # or memory; a stopped one (a record's own word) is not there at all.
    shards = tuple(s for s in (facts.shards if facts else ()) if s.state != "stopped")
    memory_total = None
    if facts is not None and facts.memory is not None:
        memory_total = facts.memory.total_mib / MIB_PER_GIB
    gpus = None
    domains = None
    if facts is not None and facts.gpus is not None:
        gpus = _gpu_views(facts, shards, host_vars.gpu_classes, classify)
        if facts.nvlink_domains is not None:
            domains = tuple(frozenset(d) for d in facts.nvlink_domains)
    return NodeView(
        name=name,
        reachability=state,
        cordon=host_vars.cordoned,
        unreachable_reason=reason,
        last_reached=facts.last_reached if facts else None,
        labels=dict(host_vars.labels),
        memory_total_gib=memory_total,
        memory_reserved_gib=_reserved(shards),
        gpus=gpus,
        nvlink_domains=domains,
        fabrics=_fabric_views(host_vars, facts),
        shards=shards,
        notes=facts.notes if facts else (),
        listening_ports=frozenset(facts.listening_ports or ()) if facts else frozenset(),
        gpus_lost=facts.gpus_lost if facts and facts.gpus is not None else 0,
        model_store=facts.model_store if facts else None,
        certificate=facts.certificate if facts else None,
        stages_weights=host_vars.modelfleet_stage_weights,
        replica_load=facts.replica_load if facts else None,
    )


def _gpu_views(
    facts: NodeFacts,
    shards: Sequence[ShardRecord],
    overrides: Mapping[str, str],
    classify: ClassifyGpu,
) -> tuple[GpuView, ...]:
    holders = _holders(shards)
    processes: dict[str, list[str]] = {}
    for process in facts.gpu_processes or ():
        processes.setdefault(process.gpu_uuid, []).append(
            f"pid {process.pid} {process.process_name.rsplit('/', 1)[-1]}"
        )
    return tuple(
        GpuView(
            index=gpu.index,
            name=gpu.name,
            gpu_class=classify(gpu.name, overrides),
            memory_total_mib=gpu.memory_total_mib,
            unusable=_unusable(gpu, holders.get(gpu.index), processes.get(gpu.uuid, [])),
            held_by=holders.get(gpu.index),
        )
        for gpu in sorted(facts.gpus or (), key=lambda g: g.index)
    )


def _unusable(gpu: Gpu, holder: str | None, processes: list[str]) -> str | None:
    if gpu.ecc_uncorrected:
        plural = "s" if gpu.ecc_uncorrected != 1 else ""
        return f"{gpu.ecc_uncorrected} uncorrected ECC error{plural}"
    hardware = gpu.hardware_problem()
    if hardware is not None:
        return hardware
    if gpu.mig_enabled:
        # Placing on MIG slices is out of scope (docs/placement.md): a shard pinned to the
        # whole GPU would fail to start on it.
        return "MIG mode enabled"
    if holder is not None:
        return None  # the processes on it are our shard's
    if processes:
        return ", ".join(processes)
    if gpu.memory_used_mib is not None and gpu.memory_used_mib >= INVISIBLE_USE_MIB:
        return f"{gpu.memory_used_mib} MiB used by a process the probe cannot see"
    return None


def _fabric_views(host_vars: HostVars, facts: NodeFacts | None) -> tuple[FabricView, ...]:
    ports = facts.hcas if facts is not None else None
    views = []
    for fabric in host_vars.fabrics:
        if ports is None:
            views.append(FabricView(fabric.name, fabric.hcas, None, fabric.rate_gbps))
            continue
        active = tuple(h for h in fabric.hcas if any(p.hca == h and p.active for p in ports))
        down = tuple(f"{h} {_port_state(h, ports)}" for h in fabric.hcas if h not in active)
        views.append(FabricView(fabric.name, fabric.hcas, active, fabric.rate_gbps, down))
    return tuple(views)


def _port_state(hca: str, ports: Sequence[HcaPort]) -> str:
    states = sorted({p.state for p in ports if p.hca == hca})
    return "/".join(states) if states else "absent"


def _holders(shards: Sequence[ShardRecord]) -> dict[int, str]:
    """GPU index → the replica whose running or starting shard has it."""
    return {gpu: shard.replica for shard in shards if shard.holds for gpu in shard.gpus}


def _reserved(shards: Sequence[ShardRecord]) -> float:
    return sum(s.memory_gib or 0.0 for s in shards if s.holds)


def reserved_by_invalid(invalid: Sequence[InvalidShard]) -> float:
    """What invalid shards that say they run reserve: not believed as ours, but a process
    may be there holding that memory, as it holds the GPUs it claims. A figure that is no
    amount (trust.py refuses it) reserves nothing."""
    return sum(
        bad.record.memory_gib or 0.0
        for bad in invalid
        if bad.record.holds and memory_gib_problem(bad.record) is None
    )


def with_shards(node: NodeView, shards: Sequence[ShardRecord]) -> NodeView:
    """`node` with exactly `shards`: the GPUs the running and starting ones hold held, the
    others free, their memory reserved. A GPU's faults and foreign processes stay as
    they were, and so do the claims of its invalid shards."""
    holders = _holders(shards)
    claims: dict[int, str] = {}
    for bad in node.invalid_shards:
        for index in bad.record.gpus:
            claims.setdefault(
                index, f"claimed by invalid shard {bad.record.replica}/{bad.record.rank}"
            )
    gpus = None
    if node.gpus is not None:
        gpus = tuple(
            replace(
                gpu,
                held_by=holders.get(gpu.index),
                unusable=gpu.fault or claims.get(gpu.index),
                claim=claims.get(gpu.index),
            )
            for gpu in node.gpus
        )
    return replace(
        node,
        shards=tuple(shards),
        gpus=gpus,
        memory_reserved_gib=_reserved(shards) + reserved_by_invalid(node.invalid_shards),
    )


def release(snapshot: Snapshot, replicas: Collection[str]) -> Snapshot:
    """The snapshot as it will be once `replicas` are stopped: their GPUs and memory free."""
    if not replicas:
        return snapshot
    gone = set(replicas)
    nodes = tuple(
        with_shards(node, [s for s in node.shards if s.replica not in gone])
        if any(s.replica in gone for s in node.shards)
        else node
        for node in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)
