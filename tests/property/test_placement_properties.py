"""Safety properties of placement, checked on random clusters and random catalogs.

Every property is checked against the raw inputs (inventory hosts and node facts), not
against the snapshot the core builds from them, so a slip in either shows up.

The properties:

1. Fabric: every multi-node replica's shards are all on one fabric; that fabric is one of
   each node's inventory fabrics; each shard's HCAs are exactly that fabric's ACTIVE HCAs
   on its node, or the declared HCAs when the node's HCA state is unknown. Single-node
   shards have no fabric and no HCAs; ranks run 0..n-1 over distinct nodes.
2. GPU class and count: every placed GPU exists and is of the profile's gpu_class (with
   the node's gpu_classes overrides); each shard has exactly gpus_per_node distinct GPUs.
3. GPU safety: no placed GPU has uncorrected ECC errors, a foreign process (or memory in
   use by a process the probe cannot see), or is held by a shard of ours (in any state
   but stopped); no GPU is handed out twice in a run.
4. Node fitness: a shard's node is Ready and not cordoned, matches the node selector,
   and has MemTotal ≥ min_memory_gb plus what our shards and the run's earlier
   placements reserve there (or did not report its memory).
5. Every refusal is explained: each failed attempt (of an unplaced replica, or before
   the profile that fitted) considered every node and rejects every node exactly once,
   with one of the six constraint codes; a fitting attempt rejects no node it used.
6. Determinism: shuffling the inventory's host order, the facts mapping's order and the
   order of each node's GPU rows, NVLink domains and HCA ports gives the same placement
   JSON.
7. Highest priority wins: attempts run in descending priority; every attempt but the
   last of a placed replica failed and the last fitted; replaying the run, no
   higher-priority profile fits on the state holding the earlier placements.
8. Verdicts are consistent: a replica that is not "not-now" stays unplaced when placed
   alone with every shard of ours freed; a "not-now" one is placed then; a "never" one
   stays unplaced even on a healed fleet (all nodes Ready, uncordoned, every GPU and
   HCA healthy), and a "blocked" one is placed on it, unless some node did not report
   its GPUs (the verdict counts such a node as one that may have them).
9. The run adds exactly the missing replicas: `running` is every replica with a shard on
   a node that is not Lost; `wanted` is replicas.min minus those (or the models asked
   for); there is one placement record per wanted replica.
10. New replica ids are fresh: distinct, prefixed by the model, and not the id of any
    shard still recorded on a node (a Lost node's included: it may come back).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.catalog.load import Catalog, CatalogModel, CatalogProfile, parse_catalog
from cli.cluster.snapshot import INVISIBLE_USE_MIB, Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import Gpu, GpuProcess, HcaPort, Memory, NodeFacts, ShardRecord
from cli.inventory.schema import Fabric, Host, HostVars
from cli.placement.explain import placement_json
from cli.placement.place import (
    PlacementRun,
    PlacementState,
    ReplicaPlacement,
    Verdict,
    place,
    try_profile,
)
from cli.placement.reasons import Constraint

# The profile (tests/conftest.py) derandomizes; this sets only how many examples.
PROPERTY_SETTINGS = settings(max_examples=400)

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
TOTAL_MIB = (None, 2048, 8192, 16384, 24576, 65536, 262144, 1048576, None, 0, 33333, 1500001)
# (variant of the GPU's name, ECC count and memory used of a healthy GPU)
CLEAN_GPUS = tuple(itertools.product((0, 1), (None, 0), (None, 0, 4, 1023)))
FABRIC_SHAPES = tuple(itertools.product((1, 2), (None, 200.0, 400.0)))  # (HCAs, rate)
PORT_STATES = ("ACTIVE",) * 6 + ("DOWN", "INIT", "absent")
TWIN_PORT_STATES = ("ACTIVE",) * 4 + ("DOWN", "absent")

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

Presence = Literal["both", "inventory-only", "facts-only"]
PRESENCES: tuple[Presence, ...] = ("both",) * 8 + ("inventory-only", "facts-only")


# --- strategies ----------------------------------------------------------------------------
#
# Only `scenarios` is a strategy; the helpers take its `draw` and use strategies built once
# (building a strategy per draw costs more than the placement under test).

_SAMPLERS: dict[tuple[Any, ...], st.SearchStrategy[Any]] = {}
_SUBSETS: dict[int, st.SearchStrategy[list[int]]] = {}
_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}


def pick(draw: st.DrawFn, options: tuple[T, ...]) -> T:
    """One of `options`; shrinks towards the first."""
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


def profile_dict(draw: st.DrawFn, name: str, priority: int, fleet_class: str) -> dict[str, Any]:
    kind = pick(draw, ("cpu", "gpu", "gpu", "multi"))
    profile: dict[str, Any] = {"name": name, "priority": priority}
    if kind == "cpu":
        profile["engine"] = "llama.cpp"
        if one_in(draw, 2):
            profile["min_memory_gb"] = pick(draw, MEMORY_GIB)
        if one_in(draw, 2):
            profile["node_selector"] = selector(draw)
        return profile
    gpus = pick(draw, (1, 2, 4, 8))
    nodes = 1 if kind == "gpu" else pick(draw, (2, 2, 2, 3))
    engines = ("vllm", "sglang", "llama.cpp") if nodes == 1 else ("vllm", "sglang")
    profile["engine"] = pick(draw, engines)
    profile["gpu_class"] = fleet_class if not one_in(draw, 3) else pick(draw, CLASSES)
    profile["gpus_per_node"] = gpus
    if nodes > 1:
        profile["nodes"] = nodes
    tp, pp = pick(draw, parallelisms(gpus, nodes))
    if tp != gpus or one_in(draw, 2):
        profile["tensor_parallel"] = tp
    if pp != 1:
        profile["pipeline_parallel"] = pp
    if one_in(draw, 4):
        profile["min_memory_gb"] = pick(draw, MEMORY_GIB)
    if one_in(draw, 6):
        profile["node_selector"] = selector(draw)
    return profile


def catalog_dict(draw: st.DrawFn, fleet_class: str) -> dict[str, Any]:
    names = [name for name in MODEL_NAMES if one_in(draw, 2)] or [pick(draw, MODEL_NAMES)]
    models: dict[str, Any] = {}
    for name in names[:5]:
        priorities: list[int] = []
        for _ in range(number(draw, 1, 3)):
            priority = number(draw, 0, 200)
            if priority not in priorities:
                priorities.append(priority)
        models[name] = {
            "source": f"hf://org/{name}",
            "replicas": {"min": number(draw, 0, 3)},
            "profiles": [
                profile_dict(draw, f"p{index}", priority, fleet_class)
                for index, priority in enumerate(priorities)
            ],
        }
    return {"models": models}


def nvlink_domains(kind: str, count: int) -> tuple[tuple[int, ...], ...] | None:
    indices = list(range(count))
    if kind == "unknown":
        return None
    if kind == "all":
        return (tuple(indices),) if indices else ()
    if kind == "pairs":
        return tuple(tuple(indices[i : i + 2]) for i in range(0, count, 2))
    if kind == "quads":
        return tuple(tuple(indices[i : i + 4]) for i in range(0, count, 4))
    return tuple((i,) for i in indices)


@dataclass(frozen=True)
class Fleet:
    """What most nodes of one random fleet share, so that multi-node replicas can fit."""

    gpu_class: str
    fabric: str
    models: tuple[str, ...]
    pod: bool  # most nodes alike: 8 GPUs of the class, on the fabric


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
    faulty = set(subset(draw, count, 2)) if one_in(draw, 6 if twin else 3) else set()
    invisible = set(subset(draw, count, 1)) if one_in(draw, 6) else set()
    gpus = []
    for index in range(count):
        klass = pick(draw, CLASSES) if kind == "mixed" else node_class
        names = GPU_NAMES[klass]
        gpus.append(
            Gpu(
                index=index,
                uuid=f"GPU-{node}-{index}",
                name=names[variant % len(names)],
                memory_total_mib=81559,
                memory_used_mib=pick(draw, (2048, 1024)) if index in invisible else clean_used,
                ecc_uncorrected=number(draw, 1, 3) if index in faulty else clean_ecc,
            )
        )
    if gpus and one_in(draw, 10):  # one fell off the bus: the indices have a gap
        del gpus[number(draw, 0, len(gpus) - 1)]
    shards: list[ShardRecord] = []
    taken: set[int] = set()
    for ordinal in range(pick(draw, (0, 0, 1, 2))):
        held = [index for index in subset(draw, count, 4) if index not in taken]
        taken.update(held)
        model = pick(draw, (*fleet.models, "retired-model"))
        shards.append(
            ShardRecord(
                replica=pick(draw, (f"{model}-{10 + ordinal}-{node}", f"{model}-1", f"{model}-2")),
                model=model,
                profile="p0",
                rank=0,
                gpus=tuple(held),
                engine="vllm" if held else "llama.cpp",
                memory_gib=pick(draw, (None, 1.0, 8.0, 32.0)),
                state=pick(draw, SHARD_STATES),
            )
        )
    busy = subset(draw, count, 3) if one_in(draw, 3) else []
    processes = tuple(
        GpuProcess(gpu_uuid=f"GPU-{node}-{index}", pid=1000 + index, process_name="/bin/python3")
        for index in busy
    )
    if one_in(draw, 8):
        processes += (GpuProcess(gpu_uuid="GPU-elsewhere", pid=7, process_name="ghost"),)
    topology = pick(draw, ("all", "unknown", "pairs", "quads", "singletons"))
    return tuple(gpus), processes, nvlink_domains(topology, count), tuple(shards)


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


def node_input(draw: st.DrawFn, name: str, fleet: Fleet) -> NodeInput:
    # In a pod, most nodes are healthy twins: Ready, 8 GPUs of the class, on its fabric.
    twin = fleet.pod and not one_in(draw, 3)
    presence: Presence = "both" if twin else pick(draw, PRESENCES)
    fabrics, ports = fabrics_and_ports(draw, fleet, twin)
    host_vars = HostVars(
        labels=selector(draw),
        fabrics=fabrics,
        cordoned="PSU fan failing" if not twin and one_in(draw, 8) else None,
        gpu_classes={"NVIDIA A100*": "A100X"} if one_in(draw, 10) else {},
    )
    host = Host(name=name, groups=("all",), address=name, vars=host_vars)
    if presence == "inventory-only":
        return NodeInput(name, host, None)
    error, age = READY if twin else pick(draw, REACHES)
    last_reached = None if age is None else NOW - age
    gpus, processes, domains, shards = gpu_facts(draw, name, fleet, twin)
    total_mib = pick(draw, TOTAL_MIB)
    memory = None if total_mib is None else Memory(total_mib=total_mib)
    facts = NodeFacts(
        gathered_at=NOW,
        last_reached=last_reached,
        error=error,
        memory=memory,
        gpus=gpus,
        gpu_processes=processes,
        nvlink_domains=domains,
        hcas=ports,
        shards=shards,
    )
    return NodeInput(name, None if presence == "facts-only" else host, facts)


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


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    gpu_class_ = pick(draw, CLASSES)
    text = yaml.dump(catalog_dict(draw, gpu_class_), Dumper=yaml.CSafeDumper, sort_keys=False)
    catalog = parse_catalog(text, "catalog.yaml")
    model_names = tuple(catalog.models)
    fleet = Fleet(gpu_class_, pick(draw, FABRIC_NAMES), model_names, one_in(draw, 2))
    names: list[str] = []
    for _ in range(number(draw, 2 if fleet.pod else 0, 8)):
        name = f"{pick(draw, NODE_PREFIXES)}-{number(draw, 0, 99):02d}"
        if name not in names:
            names.append(name)
    nodes = [node_input(draw, name, fleet) for name in names]
    models = None
    if one_in(draw, 2):
        models = tuple(pick(draw, model_names) for _ in range(number(draw, 0, 4)))
    return Scenario(catalog, tuple(nodes), models)


# --- what the raw inputs say ---------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """One node's facts read directly, without the snapshot."""

    node: NodeInput
    gpus: dict[int, Gpu] = field(init=False)

    def __post_init__(self) -> None:
        rows = (self.node.facts.gpus if self.node.facts else None) or ()
        object.__setattr__(self, "gpus", {gpu.index: gpu for gpu in rows})

    @property
    def ready(self) -> bool:
        facts = self.node.facts
        return (
            self.node.vars.cordoned is None
            and facts is not None
            and facts.error is None
            and facts.last_reached is not None
        )

    @property
    def running_shards(self) -> tuple[ShardRecord, ...]:
        facts = self.node.facts
        return tuple(s for s in (facts.shards if facts else ()) if s.state != "stopped")

    @property
    def held(self) -> set[int]:
        return {index for shard in self.running_shards for index in shard.gpus}

    @property
    def memory_gib(self) -> float | None:
        facts = self.node.facts
        if facts is None or facts.memory is None:
            return None
        return facts.memory.total_mib / 1024

    @property
    def reserved_gib(self) -> float:
        return sum(shard.memory_gib or 0.0 for shard in self.running_shards)

    def gpu_class(self, index: int) -> str:
        return gpu_class(self.gpus[index].name, self.node.vars.gpu_classes)

    def usable(self, index: int) -> bool:
        gpu = self.gpus.get(index)
        if gpu is None or gpu.ecc_uncorrected or index in self.held:
            return False
        facts = self.node.facts
        assert facts is not None
        foreign = any(p.gpu_uuid == gpu.uuid for p in facts.gpu_processes or ())
        invisible = gpu.memory_used_mib is not None and gpu.memory_used_mib >= INVISIBLE_USE_MIB
        return not foreign and not invisible

    def fabric_hcas(self, fabric: str) -> tuple[str, ...] | None:
        """The HCAs a shard on `fabric` should get; None when the node is not on it."""
        for declared in self.node.vars.fabrics:
            if declared.name != fabric:
                continue
            ports = self.node.facts.hcas if self.node.facts else None
            if ports is None:
                return declared.hcas
            return tuple(
                hca
                for hca in declared.hcas
                if any(p.hca == hca and p.state == "ACTIVE" for p in ports)
            )
        return None


def truths(scenario: Scenario) -> dict[str, Truth]:
    return {node.name: Truth(node) for node in scenario.nodes}


def placed(run: PlacementRun) -> Iterator[tuple[ReplicaPlacement, CatalogProfile]]:
    for placement in run.placements:
        if placement.profile is not None:
            yield placement, placement.profile


# --- the properties ------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_multi_node_replica_sits_on_one_fabric_with_that_fabrics_active_hcas(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    for placement, profile in placed(run):
        shards = placement.shards
        assert len(shards) == profile.spec.nodes
        assert [s.rank for s in shards] == list(range(len(shards)))
        assert len({s.node for s in shards}) == len(shards)
        if profile.spec.nodes == 1:
            assert shards[0].fabric is None and shards[0].hcas == ()
            continue
        fabrics = {s.fabric for s in shards}
        assert len(fabrics) == 1 and None not in fabrics, fabrics
        for shard in shards:
            assert shard.fabric is not None
            expected = nodes[shard.node].fabric_hcas(shard.fabric)
            assert expected is not None, f"{shard.node} is not on fabric {shard.fabric}"
            assert shard.hcas == expected, (shard, expected)
            assert shard.hcas, f"{shard.node}: a shard on {shard.fabric} with no HCA"


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_replica_gets_exactly_gpus_per_node_distinct_gpus_of_its_class(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    for placement, profile in placed(run):
        spec = profile.spec
        for shard in placement.shards:
            assert len(shard.gpus) == spec.gpus_per_node, shard
            assert len(set(shard.gpus)) == len(shard.gpus), shard
            truth = nodes[shard.node]
            for index in shard.gpus:
                assert index in truth.gpus, f"{shard.node} has no GPU {index}"
                assert truth.gpu_class(index) == spec.gpu_class, (shard, index)


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_placed_gpu_is_unusable_and_none_is_handed_out_twice(scenario: Scenario) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    handed_out: Counter[tuple[str, int]] = Counter()
    for placement, _ in placed(run):
        for shard in placement.shards:
            for index in shard.gpus:
                handed_out[shard.node, index] += 1
                assert nodes[shard.node].usable(index), (
                    f"{placement.replica} got GPU {index} of {shard.node}, which is unusable"
                )
    twice = [gpu for gpu, count in handed_out.items() if count > 1]
    assert not twice, f"handed out twice: {twice}"


@PROPERTY_SETTINGS
@given(scenarios())
def test_placed_nodes_are_ready_match_the_selector_and_have_the_memory(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    reserved = {name: truth.reserved_gib for name, truth in nodes.items()}
    for placement, profile in placed(run):
        spec = profile.spec
        for shard in placement.shards:
            truth = nodes[shard.node]
            assert truth.ready, f"{placement.replica} placed on {shard.node}, which is not Ready"
            labels = truth.node.vars.labels
            for key, value in spec.node_selector.items():
                assert labels.get(key) == value, (shard.node, key, value, labels)
            need = spec.min_memory_gb
            if need is None:
                continue
            total = truth.memory_gib
            if total is not None:
                assert reserved[shard.node] + need <= total, (
                    f"{shard.node}: {total} GiB, {reserved[shard.node]} reserved, "
                    f"{placement.replica} needs {need}"
                )
            reserved[shard.node] += need


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_failed_attempt_rejects_every_node_once_with_a_known_constraint(
    scenario: Scenario,
) -> None:
    snapshot, run = scenario.run()
    names = sorted(node.name for node in snapshot.nodes)
    assert names == sorted(node.name for node in scenario.nodes)
    assert len(Constraint) == 6
    for placement in run.placements:
        for attempt in placement.attempts:
            assert attempt.nodes_considered == len(snapshot.nodes)
            for rejection in attempt.rejections:
                assert rejection.constraint in set(Constraint)
                assert rejection.profile == attempt.profile.name
                assert rejection.node in names
            rejected = Counter(r.node for r in attempt.rejections)
            assert all(count == 1 for count in rejected.values()), (attempt.profile.key, rejected)
            if attempt.fits:
                used = {s.node for s in placement.shards}
                assert not used & set(rejected), (placement.replica, used, rejected)
            else:
                assert sorted(rejected) == names, (
                    f"{placement.replica} {attempt.profile.key}: "
                    f"no rejection for {sorted(set(names) - set(rejected))}"
                )


@PROPERTY_SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_shuffling_hosts_facts_and_probe_rows_gives_the_same_placement(
    scenario: Scenario, rng: random.Random
) -> None:
    _, run = scenario.run()
    shuffled_nodes = []
    for node in scenario.nodes:
        facts = node.facts
        if facts is not None:
            update = {
                key: tuple(rng.sample(rows, len(rows)))
                for key, rows in (
                    ("gpus", facts.gpus),
                    ("nvlink_domains", facts.nvlink_domains),
                    ("hcas", facts.hcas),
                )
                if rows is not None
            }
            facts = facts.model_copy(update=update)
        shuffled_nodes.append(NodeInput(node.name, node.host, facts))
    rng.shuffle(shuffled_nodes)
    hosts = [node.host for node in shuffled_nodes if node.host is not None]
    rng.shuffle(hosts)
    facts_items = [(node.name, node.facts) for node in shuffled_nodes if node.facts is not None]
    rng.shuffle(facts_items)
    snapshot = build_snapshot(hosts, dict(facts_items), NOW, gpu_class)
    again = place(scenario.catalog, snapshot, scenario.models)
    assert placement_json(again) == placement_json(run)
    assert again.wanted == run.wanted


@PROPERTY_SETTINGS
@given(scenarios())
def test_the_highest_priority_profile_that_fits_wins(scenario: Scenario) -> None:
    snapshot, run = scenario.run()
    state = PlacementState(snapshot)
    for placement in run.placements:
        model: CatalogModel = scenario.catalog.models[placement.model]
        priorities = [a.profile.spec.priority for a in placement.attempts]
        assert priorities == sorted(priorities, reverse=True)
        assert len(set(priorities)) == len(priorities)
        tried = [a.profile.key for a in placement.attempts]
        assert tried == [p.key for p in model.profiles[: len(tried)]]
        if placement.profile is None:
            assert not any(a.fits for a in placement.attempts)
            assert len(placement.attempts) == len(model.profiles)
            assert placement.verdict is not Verdict.PLACED
        else:
            assert [a.fits for a in placement.attempts] == [False] * (len(tried) - 1) + [True]
            assert placement.attempts[-1].profile.key == placement.profile.key
            assert placement.verdict is Verdict.PLACED
        # Replay: on the state holding every earlier placement, no better profile fits.
        winner = placement.profile.spec.priority if placement.profile else None
        for profile in model.profiles:
            if winner is not None and profile.spec.priority <= winner:
                break
            shards, _ = try_profile(profile, state)
            assert shards is None, (
                f"{placement.replica}: {profile.key} fits but "
                f"{placement.profile.key if placement.profile else 'nothing'} was chosen"
            )
        if placement.profile is not None:
            state.hold(placement.replica, placement.profile, placement.shards)


def freed(node: NodeInput) -> NodeInput:
    """The node with our shards gone, and with them their processes and GPU memory."""
    facts = node.facts
    if facts is None:
        return node
    held = Truth(node).held
    uuids = {gpu.uuid for gpu in facts.gpus or () if gpu.index in held}
    gpus = None
    if facts.gpus is not None:
        gpus = tuple(
            gpu.model_copy(update={"memory_used_mib": None}) if gpu.index in held else gpu
            for gpu in facts.gpus
        )
    processes = None
    if facts.gpu_processes is not None:
        processes = tuple(p for p in facts.gpu_processes if p.gpu_uuid not in uuids)
    update = {"shards": (), "gpus": gpus, "gpu_processes": processes}
    return NodeInput(node.name, node.host, facts.model_copy(update=update))


def healed(node: NodeInput) -> NodeInput:
    """The node Ready, uncordoned, with every GPU and every declared HCA healthy."""
    host = node.host
    if host is not None and host.vars.cordoned is not None:
        host = host.model_copy(update={"vars": host.vars.model_copy(update={"cordoned": None})})
    facts = node.facts or NodeFacts(gathered_at=NOW)
    gpus = None
    if facts.gpus is not None:
        gpus = tuple(
            gpu.model_copy(update={"ecc_uncorrected": None, "memory_used_mib": None})
            for gpu in facts.gpus
        )
    ports = None
    if facts.hcas is not None:
        declared = [hca for fabric in node.vars.fabrics for hca in fabric.hcas]
        ports = tuple(HcaPort(hca=hca, port=1, state="ACTIVE") for hca in declared)
    update = {
        "error": None,
        "last_reached": NOW,
        "gpus": gpus,
        "gpu_processes": () if facts.gpu_processes is not None else None,
        "hcas": ports,
    }
    return NodeInput(node.name, host, facts.model_copy(update=update))


@PROPERTY_SETTINGS
@given(scenarios())
def test_verdicts_agree_with_placing_alone_on_a_freed_and_on_a_healed_fleet(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    free = scenario.replace([freed(node) for node in scenario.nodes])
    fixed = free.replace([healed(node) for node in free.nodes])
    alone: dict[tuple[str, bool], bool] = {}
    unreported = any(node.facts is None or node.facts.gpus is None for node in fixed.nodes)

    def fits_alone(model: str, healthy: bool) -> bool:
        key = (model, healthy)
        if key not in alone:
            fleet = (fixed if healthy else free).snapshot()
            alone[key] = place(scenario.catalog, fleet, [model]).all_placed
        return alone[key]

    for placement in run.placements:
        verdict, model = placement.verdict, placement.model
        if verdict is Verdict.PLACED:
            continue
        assert fits_alone(model, healthy=False) == (verdict is Verdict.NOT_NOW), (
            f"{placement.replica} is {verdict.value}, but placed alone with our shards freed "
            f"it {'fits' if fits_alone(model, healthy=False) else 'does not fit'}"
        )
        if verdict is Verdict.NEVER:
            assert not fits_alone(model, healthy=True), (
                f"{placement.replica} is never, but fits on a freed and healed fleet"
            )
        if verdict is Verdict.BLOCKED and not fits_alone(model, healthy=True):
            # A node that did not report its GPUs may have them: "blocked", not "never".
            assert unreported, f"{placement.replica} is blocked, but never fits when healed"


@PROPERTY_SETTINGS
@given(scenarios())
def test_the_run_adds_exactly_the_missing_replicas(scenario: Scenario) -> None:
    snapshot, run = scenario.run()
    running: dict[str, set[str]] = {}
    for node in scenario.nodes:
        facts = node.facts
        if facts is None or (
            facts.error is not None
            and facts.last_reached is not None
            and NOW - facts.last_reached >= snapshot.lost_after
        ):
            continue  # a Lost node's replicas are not running
        for shard in facts.shards:
            if shard.state != "stopped":
                running.setdefault(shard.model, set()).add(shard.replica)
    assert {model: set(replicas) for model, replicas in run.running.items()} == running
    if scenario.models is None:
        wanted = {
            name: max(0, model.replicas_min - len(running.get(name, ())))
            for name, model in scenario.catalog.models.items()
        }
    else:
        wanted = dict(Counter(scenario.models))
    assert run.wanted == wanted
    added = Counter(placement.model for placement in run.placements)
    assert added == Counter({model: count for model, count in wanted.items() if count})


@PROPERTY_SETTINGS
@given(scenarios())
def test_new_replicas_get_ids_that_no_shard_on_any_node_already_uses(scenario: Scenario) -> None:
    _, run = scenario.run()
    ids = [placement.replica for placement in run.placements]
    assert len(set(ids)) == len(ids), ids
    for placement in run.placements:
        assert placement.replica.startswith(f"{placement.model}-")
    in_use = {
        shard.replica: node.name
        for node in scenario.nodes
        for shard in (node.facts.shards if node.facts else ())
        if shard.state != "stopped"
    }
    reused = {replica: in_use[replica] for replica in ids if replica in in_use}
    assert not reused, f"new replicas reuse ids of shards still on nodes: {reused}"
