"""Random fleets and catalogs for the placement and planner properties.

The stable public part, for other property files to import:

- `scenarios(max_nodes=8)`: a strategy for a `Scenario`: a parsed catalog, the nodes as
  raw inputs (inventory host and gathered facts, each possibly missing) and the models
  `place` is asked for (None: every model up to `replicas.min`);
- `Scenario.snapshot()` (at `NOW`) and `Scenario.run()` (snapshot and `place()` on it);
- `NodeInput`, `NOW`, `CLASSES`.

The generators aim at the cases placement gets wrong when it goes wrong, and produce them
often (tests/property/test_placement_oracle.py measures how often):

- pods: most nodes healthy twins on one fabric, so multi-node replicas fit and get
  placed, with several equally empty nodes to choose from;
- multi-node replicas already running, with ranks spread over nodes, ranks other than 0
  on a node, and replicas that lost a rank;
- irregular NVLink domains: uneven sizes, singletons, scattered indices, two domains of
  different sizes that both hold a group, unknown topology;
- nodes whose memory is exactly what a profile asks for, in total or once our shards'
  reservations are taken off;
- nodes with exactly `need` and `need - 1` healthy free GPUs of the fleet's class, the
  rest faulty, foreign-held or held by our shards;
- models whose `replicas.max` makes the spread limit (a quarter of it, rounded up) more
  than one replica per node;
- model stores with exactly a profile's `disk_gb` free, or a GB less, filled by weights of
  ours or by other files, filesystems smaller than the ask, stores not reported, and the
  catalog's sources stored complete on some nodes (with and without `disk_gb`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import yaml
from hypothesis import strategies as st

from cli.catalog.load import Catalog, parse_catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import (
    Gpu,
    GpuProcess,
    HcaPort,
    Memory,
    ModelStore,
    NodeFacts,
    ShardRecord,
    StoredWeights,
)
from cli.inventory.schema import Fabric, Host, HostVars
from cli.placement.place import PlacementRun, place

__all__ = [
    "CLASSES",
    "NOW",
    "NodeInput",
    "Scenario",
    "scenarios",
]

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
T = TypeVar("T")

GPU_NAMES: dict[str, tuple[str, ...]] = {
    "H100": ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
    "A100": ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
    "L40S": ("NVIDIA L40S",),
}
CLASSES: tuple[str, ...] = tuple(GPU_NAMES)
FABRIC_NAMES = ("ib-east", "ib-west", "roce-a")
LABELS: dict[str, tuple[str, ...]] = {"role": ("coding", "general"), "zone": ("a", "b")}
MODEL_NAMES = ("qwen-7b", "llama-70b", "deepseek-v3", "mistral", "phi-4", "gemma-27b")
NODE_PREFIXES = ("hgx", "gpu", "cpu", "dgx", "node")
MEMORY_GIB = (0.5, 1, 2, 4, 8, 16, 24, 32, 64, 128, 512)  # dyadic: sums compare exactly
# GPU memory.total as nvidia-smi reports it: an 80 GB H100 (85.5 GB of 10^9 bytes), a 40 GB
# A100 (42.9 GB), a 24 GB card (25.3 GB), one that did not say; and what profiles ask.
GPU_MEMORY_MIB = (81559, 81559, 81559, 81559, 40960, 24576, None)
GPU_MEMORY_ASKS = (40, 80, 80, 24)
TWIN_TOTAL_MIB = (1048576, 1048576, None, 262144, 2048)
GB = 10**9
DISK_ASKS = (15, 140, 140, 700)  # a profile's disk_gb
STORED_GB = (15, 140, 30, 700)  # what a node says a stored source takes
FILESYSTEM_GB = (4000, 1000, 1000, 200, 100)
TOTAL_MIB = (None, 2048, 8192, 16384, 24576, 65536, 262144, 1048576, None, 0, 33333, 1500001)
SHARD_MEMORY_GIB = (None, 1.0, 8.0, 32.0)
# (variant of the GPU's name, ECC count and memory used of a healthy GPU)
CLEAN_GPUS = tuple(itertools.product((0, 1), (None, 0), (None, 0, 4, 1023)))
FABRIC_SHAPES = tuple(itertools.product((1, 2), (None, 200.0, 400.0)))  # (HCAs, rate)
PORT_STATES = ("ACTIVE",) * 6 + ("DOWN", "INIT", "absent")
TWIN_PORT_STATES = ("ACTIVE",) * 10 + ("DOWN", "absent")
# How one GPU is made unusable: an ECC fault, a foreign process, memory in use unseen.
FAULTS = ("ecc", "process", "invisible")
# replicas.max beyond min; 5, 6, 7, 9, 10, 11 make ceil(max / 4) differ from floor(max / 4).
REPLICAS_MAX = (None, 0, 1, 5, 5, 6, 7, 9, 10, 11)
TOPOLOGIES = (
    "all",
    "unknown",
    "pairs",
    "quads",
    "singletons",
    "uneven",
    "uneven",
    "two-sizes",
    "two-sizes",
    "two-sizes",
)

# (error, how long ago the node was last reached; None: never). Lost after an hour.
Reach = tuple[str | None, timedelta | None]
READY: Reach = (None, timedelta(minutes=5))
REACHES: tuple[Reach, ...] = (READY,) * 6 + (
    (None, timedelta(hours=30)),  # reached, long ago: the cache says it answered
    (None, None),  # no error but never reached: not Ready
    ("ssh: connection timed out", timedelta(minutes=3)),
    ("ssh: connection timed out", timedelta(minutes=59, seconds=59)),
    ("ssh: no route to host", None),
    ("ssh: connection refused", timedelta(hours=1)),
    ("ssh: connection refused", timedelta(days=2)),
)

ShardState = Literal["running", "starting", "failed", "stopped"]
SHARD_STATES: tuple[ShardState, ...] = ("running", "running", "starting", "failed", "stopped")
LIVE_STATES: tuple[ShardState, ...] = ("running", "running", "starting", "failed")

Presence = Literal["both", "inventory-only", "facts-only"]
PRESENCES: tuple[Presence, ...] = ("both",) * 8 + ("inventory-only", "facts-only")


# --- drawing helpers -----------------------------------------------------------------------
#
# Only `scenarios` is a strategy; the helpers take its `draw` and use strategies built once
# (building a strategy per draw costs more than the placement under test).

_SAMPLERS: dict[tuple[Any, ...], st.SearchStrategy[Any]] = {}
_SUBSETS: dict[int, st.SearchStrategy[list[int]]] = {}
_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}
_PERMUTATIONS: dict[int, st.SearchStrategy[list[int]]] = {}


def pick(draw: st.DrawFn, options: tuple[T, ...]) -> T:
    """One of `options`; shrinks towards the first. Cached by `options`, which compare by
    value: (1, 2) and (1.0, 2.0) are one key, so pick by index from computed tuples."""
    sampler = _SAMPLERS.get(options)
    if sampler is None:
        sampler = _SAMPLERS[options] = st.sampled_from(options)
    value: T = draw(sampler)
    return value


def number(draw: st.DrawFn, low: int, high: int) -> int:
    strategy = _INTEGERS.get((low, high))
    if strategy is None:
        strategy = _INTEGERS[low, high] = st.integers(low, high)
    return draw(strategy)


def one_in(draw: st.DrawFn, odds: int) -> bool:
    return number(draw, 0, odds - 1) == 0


def subset(draw: st.DrawFn, count: int, most: int) -> list[int]:
    """Up to `most` distinct indices below `count` (usually fewer)."""
    if count == 0:
        return []
    strategy = _SUBSETS.get(most)
    if strategy is None:
        strategy = _SUBSETS[most] = st.lists(st.integers(0, 7), max_size=most, unique=True)
    return [index for index in draw(strategy) if index < count]


def permutation(draw: st.DrawFn, count: int) -> list[int]:
    """0..count-1 in a random order (shrinks towards 0, 1, 2...)."""
    strategy = _PERMUTATIONS.get(count)
    if strategy is None:
        strategy = _PERMUTATIONS[count] = st.permutations(range(count))
    return list(draw(strategy))


# --- catalogs ------------------------------------------------------------------------------


def parallelisms(gpus_per_node: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """Every (tp, pp) the catalog loader accepts for this shape."""
    total = gpus_per_node * nodes
    valid = []
    for tp in range(1, total + 1):
        if total % tp:
            continue
        group = min(tp, gpus_per_node)
        if gpus_per_node % group == 0 and tp % group == 0:
            valid.append((tp, total // tp))
    return tuple(valid)


def selector(draw: st.DrawFn) -> dict[str, str]:
    keys = pick(draw, ((), ("role",), ("zone",), ("role", "zone")))
    return {key: pick(draw, LABELS[key]) for key in keys}


def profile_dict(
    draw: st.DrawFn, name: str, priority: int, fleet_class: str, pod: bool
) -> dict[str, Any]:
    # A pod's catalog asks for multi-node replicas often, mostly of the pod's class.
    kinds = (
        ("cpu", "gpu", "gpu", "multi", "multi", "multi") if pod else ("cpu", "gpu", "gpu", "multi")
    )
    kind = pick(draw, kinds)
    profile: dict[str, Any] = {"name": name, "priority": priority}
    if kind == "cpu":
        profile["engine"] = "llama.cpp"
        if one_in(draw, 2):
            profile["min_memory_gb"] = pick(draw, MEMORY_GIB)
        if one_in(draw, 4):
            profile["disk_gb"] = pick(draw, DISK_ASKS)
        if one_in(draw, 2):
            profile["node_selector"] = selector(draw)
        return profile
    gpus = pick(draw, (1, 2, 4, 8, 2, 4))
    nodes = 1 if kind == "gpu" else pick(draw, (2, 2, 2, 3))
    engines = ("vllm", "sglang", "llama.cpp") if nodes == 1 else ("vllm", "sglang")
    profile["engine"] = pick(draw, engines)
    odd_class = one_in(draw, 6 if pod and nodes > 1 else 3)
    profile["gpu_class"] = pick(draw, CLASSES) if odd_class else fleet_class
    profile["gpus_per_node"] = gpus
    if nodes > 1:
        profile["nodes"] = nodes
    # Half the time one tensor-parallel group per node: the NVLink rule's case.
    tp, pp = (gpus, nodes) if one_in(draw, 2) else pick(draw, parallelisms(gpus, nodes))
    if tp != gpus or one_in(draw, 2):
        profile["tensor_parallel"] = tp
    if pp != 1:
        profile["pipeline_parallel"] = pp
    if one_in(draw, 3):
        profile["min_memory_gb"] = pick(draw, MEMORY_GIB)
    if one_in(draw, 4):
        profile["gpu_memory_gb"] = pick(draw, GPU_MEMORY_ASKS)
    if one_in(draw, 4):
        profile["disk_gb"] = pick(draw, DISK_ASKS)
    if one_in(draw, 6):
        profile["node_selector"] = selector(draw)
    return profile


def catalog_dict(draw: st.DrawFn, fleet_class: str, pod: bool) -> dict[str, Any]:
    names = [name for name in MODEL_NAMES if one_in(draw, 2)] or [pick(draw, MODEL_NAMES)]
    models: dict[str, Any] = {}
    for name in names[:5]:
        priorities: list[int] = []
        for _ in range(number(draw, 1, 3)):
            priority = number(draw, 0, 200)
            if priority not in priorities:
                priorities.append(priority)
        low = pick(draw, (0, 1, 2, 2, 3, 3))
        replicas: dict[str, int] = {"min": low}
        extra = pick(draw, REPLICAS_MAX)
        if extra is not None:
            replicas["max"] = max(low, extra) if extra >= 5 else low + extra
        models[name] = {
            "source": f"hf://org/{name}",
            "replicas": replicas,
            "profiles": [
                profile_dict(draw, f"p{index}", priority, fleet_class, pod)
                for index, priority in enumerate(priorities)
            ],
        }
    return {"models": models}


# --- nodes ---------------------------------------------------------------------------------


def nvlink_domains(draw: st.DrawFn, kind: str, count: int) -> tuple[tuple[int, ...], ...] | None:
    indices = list(range(count))
    if kind == "unknown":
        return None
    if kind == "all":
        return (tuple(indices),) if indices else ()
    if kind == "pairs":
        return tuple(tuple(indices[i : i + 2]) for i in range(0, count, 2))
    if kind == "quads":
        return tuple(tuple(indices[i : i + 4]) for i in range(0, count, 4))
    if kind == "uneven":  # random sizes over scattered indices: (5, 0, 3), (7,), (1, 2, 6, 4)
        order = permutation(draw, count)
        domains: list[tuple[int, ...]] = []
        while order:
            size = pick(draw, (1, 2, 3, 4, 5))
            domains.append(tuple(order[:size]))
            order = order[size:]
        return tuple(domains)
    if kind == "two-sizes":  # a big and a small domain that both hold a pair, then singletons
        big = 4 if count >= 6 else max(0, count - 2)
        cuts = [indices[:big], indices[big : big + 2], *([i] for i in indices[big + 2 :])]
        return tuple(tuple(cut) for cut in cuts if cut)
    return tuple((i,) for i in indices)


@dataclass(frozen=True)
class Fleet:
    """What most nodes of one random fleet share, so that multi-node replicas can fit."""

    gpu_class: str
    fabric: str
    models: tuple[str, ...]
    pod: bool  # most nodes alike: 8 GPUs of the class, on the fabric
    gpu_needs: tuple[int, ...] = ()  # gpus_per_node of the profiles of the fleet's class
    memory_asks: tuple[float, ...] = ()  # every min_memory_gb of the catalog
    # Models whose spread limit is more than one replica per node (replicas.max ≥ 5).
    spread_models: tuple[str, ...] = ()
    disk_asks: tuple[float, ...] = ()  # every disk_gb of the catalog
    sources: tuple[str, ...] = ()  # every source of the catalog


GpuFacts = tuple[
    tuple[Gpu, ...] | None,
    tuple[GpuProcess, ...] | None,
    tuple[tuple[int, ...], ...] | None,
    tuple[ShardRecord, ...],
]


def gpu_facts(draw: st.DrawFn, node: str, fleet: Fleet, twin: bool) -> GpuFacts:
    """GPUs (None: not reported), processes, NVLink domains and our shards on one node."""
    if not twin and one_in(draw, 12):
        return None, None, None, ()
    if twin:
        count, kind = 8, "fleet"
    elif fleet.pod:
        count = pick(draw, (8, 8, 8, 4, 2, 0))
        kind = pick(draw, ("fleet",) * 6 + ("other", "mixed"))
    else:
        count = pick(draw, (0, 8, 1, 2, 4, 8, 8, 3, 6))
        kind = pick(draw, ("fleet", "fleet", "fleet", "other", "mixed"))
    node_class = fleet.gpu_class if kind == "fleet" else pick(draw, CLASSES)
    variant, clean_ecc, clean_used = pick(draw, CLEAN_GPUS)
    node_memory = pick(draw, GPU_MEMORY_MIB)
    # Sometimes exactly `need` or `need - 1` healthy free GPUs of the class: the others
    # faulty, foreign-held or held by our shards, in a random mix.
    target: int | None = None
    if kind == "fleet" and fleet.gpu_needs and count and one_in(draw, 6 if twin else 3):
        need = fleet.gpu_needs[number(draw, 0, len(fleet.gpu_needs) - 1)]
        if need <= count:
            target = need - number(draw, 0, 1)
    held_pool: list[int] = []
    if target is not None:
        order = permutation(draw, count)
        taken_away = order[: count - target]
        # All faulty (too few usable: condition), all ours (too few free: capacity), or a mix.
        mix = pick(draw, ("faulty", "ours", "mixed"))
        split = {"faulty": len(taken_away), "ours": 0}.get(mix, -1)
        if split < 0:
            split = number(draw, 0, len(taken_away))
        faulty = set(taken_away[:split])
        held_pool = taken_away[split:]
    else:
        faulty = set(subset(draw, count, 2)) if one_in(draw, 6 if twin else 3) else set()
        faulty |= set(subset(draw, count, 1)) if one_in(draw, 6) else set()
    faults = {index: pick(draw, FAULTS) for index in sorted(faulty)}
    gpus = []
    for index in range(count):
        klass = pick(draw, CLASSES) if kind == "mixed" else node_class
        names = GPU_NAMES[klass]
        fault = faults.get(index)
        gpus.append(
            Gpu(
                index=index,
                uuid=f"GPU-{node}-{index}",
                name=names[variant % len(names)],
                memory_total_mib=pick(draw, GPU_MEMORY_MIB) if kind == "mixed" else node_memory,
                memory_used_mib=pick(draw, (2048, 1024)) if fault == "invisible" else clean_used,
                ecc_uncorrected=number(draw, 1, 3) if fault == "ecc" else clean_ecc,
            )
        )
    if gpus and target is None and one_in(draw, 10):  # one fell off the bus: a gap
        del gpus[number(draw, 0, len(gpus) - 1)]
    shards: list[ShardRecord] = []
    if held_pool:
        cut = number(draw, 1, len(held_pool))
        for ordinal, held in enumerate((held_pool[:cut], held_pool[cut:])):
            if held:
                shards.append(single_shard(draw, node, fleet, ordinal, held, LIVE_STATES))
    else:
        taken: set[int] = set()
        for ordinal in range(pick(draw, (0, 0, 0, 1) if twin else (0, 0, 1, 2))):
            held = [index for index in subset(draw, count, 4) if index not in taken]
            taken.update(held)
            shards.append(single_shard(draw, node, fleet, ordinal, held, SHARD_STATES))
    busy = [i for i, fault in faults.items() if fault == "process"]
    if target is None and one_in(draw, 3):
        busy += subset(draw, count, 3)
    processes = tuple(
        GpuProcess(gpu_uuid=f"GPU-{node}-{index}", pid=1000 + index, process_name="/bin/python3")
        for index in sorted(set(busy))
    )
    if one_in(draw, 8):
        processes += (GpuProcess(gpu_uuid="GPU-elsewhere", pid=7, process_name="ghost"),)
    topology = pick(draw, TOPOLOGIES)
    return tuple(gpus), processes, nvlink_domains(draw, topology, count), tuple(shards)


def single_shard(
    draw: st.DrawFn,
    node: str,
    fleet: Fleet,
    ordinal: int,
    held: Sequence[int],
    states: tuple[ShardState, ...],
) -> ShardRecord:
    # Often a model that may hold several replicas per node: the spread limit then decides
    # whether this node takes another.
    if fleet.spread_models and one_in(draw, 4):
        model = pick(draw, fleet.spread_models)
    else:
        model = pick(draw, (*fleet.models, "retired-model"))
    return ShardRecord(
        replica=pick(draw, (f"{model}-{10 + ordinal}-{node}", f"{model}-1", f"{model}-2")),
        model=model,
        profile="p0",
        rank=0,
        gpus=tuple(sorted(held)),
        engine="vllm" if held else "llama.cpp",
        memory_gib=pick(draw, SHARD_MEMORY_GIB),
        state=pick(draw, states),
        # What it loads: its weights in the store are then in use, not evictable; None (a
        # record from before ctl said it) keeps every weight on the node from eviction.
        # (Not a draw of its own: a new draw shifts every later one, and the frequency
        # floors of tests/property/test_placement_oracle.py were measured without it.)
        source=None if ordinal % 3 == 2 else f"hf://org/{model}",
    )


def fabrics_and_ports(
    draw: st.DrawFn, fleet: Fleet, twin: bool
) -> tuple[tuple[Fabric, ...], tuple[HcaPort, ...] | None]:
    """0-2 inventory fabrics (mostly the fleet's), and the HCA ports (None: unknown)."""
    names = [fleet.fabric] if twin or not one_in(draw, 4) else []
    if one_in(draw, 3):
        other = pick(draw, FABRIC_NAMES)
        if other not in names:
            names.append(other)
    fabrics = []
    next_hca = 0
    for name in names:
        count, rate = pick(draw, FABRIC_SHAPES)
        hcas = tuple(f"mlx5_{next_hca + i}" for i in range(count))
        next_hca += count
        fabrics.append(Fabric(name=name, hcas=hcas, rate_gbps=rate))
    if one_in(draw, 5):
        return tuple(fabrics), None
    ports = []
    for hca in [h for fabric in fabrics for h in fabric.hcas] + [f"mlx5_{next_hca}"]:
        state = pick(draw, TWIN_PORT_STATES if twin else PORT_STATES)
        if state != "absent":
            ports.append(HcaPort(hca=hca, port=1, state=state, rate_gbps=400.0))
    return tuple(fabrics), tuple(ports)


@dataclass(frozen=True)
class NodeInput:
    name: str
    host: Host | None  # None: a what-if node, only in the facts
    facts: NodeFacts | None  # None: never gathered

    @property
    def vars(self) -> HostVars:
        return self.host.vars if self.host is not None else HostVars()


def memory_mib(
    draw: st.DrawFn, fleet: Fleet, shards: Sequence[ShardRecord], twin: bool
) -> int | None:
    """MemTotal: often exactly a profile's min_memory_gb, in total or once our shards'
    reservations are taken off; else one of a few sizes (None: not reported), a twin's
    mostly big enough for anything."""
    if fleet.memory_asks and one_in(draw, 3):
        # By index: `pick` caches by the options, and (1.0, 2.0) == (1, 2) as a key.
        ask = fleet.memory_asks[number(draw, 0, len(fleet.memory_asks) - 1)]
        if one_in(draw, 2):
            ask += sum(s.memory_gib or 0.0 for s in shards if s.state != "stopped")
        return int(ask * 1024)
    return pick(draw, TWIN_TOTAL_MIB if twin else TOTAL_MIB)


def model_store(draw: st.DrawFn, fleet: Fleet, twin: bool) -> ModelStore | None:
    """The store: sometimes not reported; free space often exactly a profile's disk_gb or
    a GB less, the rest of the filesystem weights of ours or other files; a twin's mostly
    roomy, so multi-node replicas still fit."""
    if one_in(draw, 16 if twin else 8):
        return None
    weights = []
    for source in fleet.sources:
        if one_in(draw, 4):
            weights.append(StoredWeights(source=source, bytes=pick(draw, STORED_GB) * GB))
    stored = sum(w.bytes for w in weights)
    if fleet.disk_asks and one_in(draw, 6 if twin else 2):
        ask = fleet.disk_asks[number(draw, 0, len(fleet.disk_asks) - 1)]
        free = int(ask * GB) - pick(draw, (0, 0, GB))
        total = free + stored + pick(draw, (0, 50, 500)) * GB
    else:
        total = (pick(draw, FILESYSTEM_GB) if not twin else 4000) * GB
        total = max(total, stored)
        free = min(total - stored, pick(draw, (4000, 2000, 500, 100, 10)) * GB)
    path = "/var/lib/modelfleet/models"
    return ModelStore(
        path=path,
        present=True,
        measured=path,
        total_bytes=total,
        free_bytes=max(free, 0),
        weights=tuple(weights),
    )


def node_input(draw: st.DrawFn, name: str, fleet: Fleet) -> NodeInput:
    # In a pod, most nodes are healthy twins: Ready, 8 GPUs of the class, on its fabric.
    twin = fleet.pod and not one_in(draw, 4)
    presence: Presence = "both" if twin else pick(draw, PRESENCES)
    fabrics, ports = fabrics_and_ports(draw, fleet, twin)
    host_vars = HostVars(
        labels=selector(draw),
        fabrics=fabrics,
        cordoned="PSU fan failing" if not twin and one_in(draw, 8) else None,
        gpu_classes={"NVIDIA A100*": "A100X"} if not twin and one_in(draw, 8) else {},
    )
    host = Host(name=name, groups=("all",), address=name, vars=host_vars)
    if presence == "inventory-only":
        return NodeInput(name, host, None)
    error, age = READY if twin else pick(draw, REACHES)
    last_reached = None if age is None else NOW - age
    gpus, processes, domains, shards = gpu_facts(draw, name, fleet, twin)
    total_mib = memory_mib(draw, fleet, shards, twin)
    memory = None if total_mib is None else Memory(total_mib=total_mib)
    facts = NodeFacts(
        gathered_at=NOW,
        last_reached=last_reached,
        error=error,
        # Watched failing since it was last reached: how long it has been is the age drawn.
        unreachable_since=last_reached if error is not None else None,
        memory=memory,
        gpus=gpus,
        gpu_processes=processes,
        nvlink_domains=domains,
        hcas=ports,
        shards=shards,
        model_store=model_store(draw, fleet, twin),
    )
    return NodeInput(name, None if presence == "facts-only" else host, facts)


def with_running_multi_node_replica(
    draw: st.DrawFn, nodes: list[NodeInput], fleet: Fleet, ordinal: int
) -> None:
    """Add a multi-node replica of ours already running: one rank per node, on GPUs no
    shard holds there; sometimes a rank is missing (its node lost the record)."""
    hosts = [i for i, node in enumerate(nodes) if node.facts is not None and node.facts.gpus]
    if len(hosts) < 2:
        return
    width = min(len(hosts), pick(draw, (2, 2, 3)))
    order = permutation(draw, len(hosts))
    chosen = [hosts[i] for i in order[:width]]
    ranks = list(range(width))
    if one_in(draw, 3):
        del ranks[number(draw, 0, width - 1)]
    model = pick(draw, (*fleet.models, "retired-model"))
    replica = f"{model}-{pick(draw, (3, 4, 20))}" if ordinal == 0 else f"{model}-{21 + ordinal}"
    per_node = pick(draw, (1, 1, 2, 4))
    memory = pick(draw, SHARD_MEMORY_GIB)
    state = pick(draw, LIVE_STATES)
    for rank, position in zip(ranks, chosen[: len(ranks)], strict=True):
        node = nodes[position]
        facts = node.facts
        assert facts is not None and facts.gpus is not None
        held = {i for s in facts.shards if s.state != "stopped" for i in s.gpus}
        free = [gpu.index for gpu in facts.gpus if gpu.index not in held][:per_node]
        record = ShardRecord(
            replica=replica,
            model=model,
            profile="p0",
            rank=rank,
            nodes=width,
            gpus=tuple(free),
            hcas=tuple(h for f in node.vars.fabrics for h in f.hcas)[:1],
            engine="vllm",
            memory_gib=memory,
            state=state,
        )
        update = {"shards": (*facts.shards, record)}
        nodes[position] = NodeInput(node.name, node.host, facts.model_copy(update=update))


@dataclass(frozen=True)
class Scenario:
    catalog: Catalog
    nodes: tuple[NodeInput, ...]  # in the inventory's (random) order
    models: tuple[str, ...] | None  # what `place` is asked for; None: up to replicas.min

    @property
    def hosts(self) -> list[Host]:
        return [node.host for node in self.nodes if node.host is not None]

    @property
    def facts(self) -> dict[str, NodeFacts]:
        return {node.name: node.facts for node in self.nodes if node.facts is not None}

    def snapshot(self) -> Snapshot:
        return build_snapshot(self.hosts, self.facts, NOW, gpu_class)

    def run(self) -> tuple[Snapshot, PlacementRun]:
        snapshot = self.snapshot()
        return snapshot, place(self.catalog, snapshot, self.models)

    def replace(self, nodes: Sequence[NodeInput]) -> Scenario:
        return Scenario(self.catalog, tuple(nodes), self.models)


def _draw_scenario(draw: st.DrawFn, max_nodes: int) -> Scenario:
    gpu_class_ = pick(draw, CLASSES)
    pod = not one_in(draw, 4)
    document = catalog_dict(draw, gpu_class_, pod)
    text = yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False)
    catalog = parse_catalog(text, "catalog.yaml")
    model_names = tuple(catalog.models)
    specs = [p.spec for m in catalog.models.values() for p in m.profiles]
    fleet = Fleet(
        gpu_class_,
        pick(draw, FABRIC_NAMES),
        model_names,
        pod,
        gpu_needs=tuple(sorted({s.gpus_per_node for s in specs if s.gpu_class == gpu_class_})),
        memory_asks=tuple(sorted({s.min_memory_gb for s in specs if s.min_memory_gb})),
        spread_models=tuple(name for name, m in catalog.models.items() if m.replicas_max >= 5),
        disk_asks=tuple(sorted({s.disk_gb for s in specs if s.disk_gb})),
        sources=tuple(sorted({p.source for m in catalog.models.values() for p in m.profiles})),
    )
    names: list[str] = []
    for _ in range(number(draw, 2 if fleet.pod else 0, max_nodes)):
        name = f"{pick(draw, NODE_PREFIXES)}-{number(draw, 0, 99):02d}"
        if name not in names:
            names.append(name)
    nodes = [node_input(draw, name, fleet) for name in names]
    for ordinal in range(pick(draw, (0, 0, 1, 1, 2))):
        with_running_multi_node_replica(draw, nodes, fleet, ordinal)
    models = None
    if one_in(draw, 2):
        models = tuple(pick(draw, model_names) for _ in range(number(draw, 0, 4)))
    return Scenario(catalog, tuple(nodes), models)


_SCENARIOS: dict[int, st.SearchStrategy[Scenario]] = {}


def scenarios(max_nodes: int = 8) -> st.SearchStrategy[Scenario]:
    """A random catalog and fleet of at most `max_nodes` nodes (the stable entry point)."""
    strategy = _SCENARIOS.get(max_nodes)
    if strategy is None:
        strategy = _SCENARIOS[max_nodes] = st.composite(_draw_scenario)(max_nodes)
    return strategy
