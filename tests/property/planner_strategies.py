"""Random fleets in the middle of their lives, for the reconcile planner's properties.

A `PlannerScenario` is a catalog, a fleet of HGX-like nodes in every status (Ready,
Cordoned, Unreachable, Lost), the replicas running on it, and a backoff ledger. The
replicas are generated as they were started (all ranks, on distinct nodes, one port per
replica free on each of its nodes) and then damaged: ranks dropped (rank 0 included),
shards failed or stopped, profiles and models retired, started by hand, too many of them.

Each generated replica also carries what the docs say should become of it
(`TruthReplica.bucket`), worked out from the generated data alone, never from the
snapshot or the planner, so a property can hold the planner to it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Literal, TypeVar

import yaml
from hypothesis import strategies as st

from cli.catalog.load import Catalog, parse_catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import ShardRecord
from cli.reconcile.backoff import Backoff, failure_key
from cli.reconcile.planner import Plan, plan
from tests.builders import NOW, NodeSpec, facts, host, nvswitch, shard
from tests.property.strategies import number, one_in

T = TypeVar("T")

# A node's status as generated: how the facts will make the snapshot see it.
NodeStatus = Literal["ready", "cordoned", "unreachable", "lost"]
NODE_STATUSES: tuple[NodeStatus, ...] = (
    ("ready",) * 6 + ("cordoned",) + ("unreachable",) * 2 + ("lost",) * 2
)
ANSWERING: tuple[NodeStatus, ...] = ("ready",) * 6 + ("cordoned",)
# How long each status has gone unreached (Lost after an hour: cli.cluster).
UNREACHED_FOR: dict[NodeStatus, timedelta | None] = {
    "ready": None,
    "cordoned": None,
    "unreachable": timedelta(minutes=5),
    "lost": timedelta(hours=2),
}
FABRIC = [("ib", ["mlx5_0", "mlx5_1"])]
GPUS_PER_NODE = 8

# Ports something other than our records holds: ours (8000-8999), their rendezvous ports
# (18000-18999) and others'.
LISTENING = (8000, 8001, 8003, 18000, 18002, 22, 9090)

# Profile shapes: engine, GPUs a node, nodes, tensor and pipeline parallelism.
SHAPES: dict[str, dict[str, Any]] = {
    "x1": {"engine": "vllm", "gpu_class": "H100", "gpus_per_node": 1},
    "x2": {"engine": "sglang", "gpu_class": "H100", "gpus_per_node": 2},
    "x4": {"engine": "vllm", "gpu_class": "H100", "gpus_per_node": 4},
    "cpu": {"engine": "llama.cpp"},
    "m2x4": {
        "engine": "vllm",
        "gpu_class": "H100",
        "gpus_per_node": 4,
        "nodes": 2,
        "tensor_parallel": 8,
    },
    "m2x8": {
        "engine": "sglang",
        "gpu_class": "H100",
        "gpus_per_node": 8,
        "nodes": 2,
        "tensor_parallel": 16,
    },
    "m3x2": {
        "engine": "vllm",
        "gpu_class": "H100",
        "gpus_per_node": 2,
        "nodes": 3,
        "tensor_parallel": 2,
        "pipeline_parallel": 3,
    },
}
SHAPE_NAMES = tuple(SHAPES)
MULTI_NODE_SHAPES = ("m2x4", "m2x8", "m3x2")
MODEL_NAMES = ("alpha", "beta", "gamma")
RETIRED_MODEL = "retired"
RETIRED_PROFILE = "old"
SHARD_STATES = ("running",) * 5 + ("starting", "failed", "stopped")
BACKOFF_ENDS = (
    timedelta(minutes=-10),
    timedelta(seconds=-1),
    timedelta(0),  # ends exactly now: expired (waiting is `now < until`)
    timedelta(seconds=1),
    timedelta(seconds=45),
    timedelta(minutes=10),
)

Bucket = Literal["unwanted", "lost", "unreachable", "failed", "counted"]


def pick(draw: st.DrawFn, options: Sequence[T]) -> T:
    """One of `options`; shrinks towards the first."""
    return options[number(draw, 0, len(options) - 1)]


@dataclass(frozen=True)
class TruthShard:
    rank: int
    node: str
    gpus: tuple[int, ...]
    state: str


@dataclass(frozen=True)
class TruthReplica:
    """A replica as generated, and what the docs say its bucket is."""

    replica: str
    model: str
    profile: str
    nodes: int  # ranks the replica was started with
    port: int
    origin: Literal["reconcile", "manual"]
    started: datetime | None
    shards: tuple[TruthShard, ...]  # every generated shard, dropped ranks not among them
    priority: int  # of its profile in the catalog (0 when retired)
    wanted: bool  # a catalog model and profile want it
    statuses: Mapping[str, NodeStatus]  # node → status, of every node of the fleet

    @property
    def present(self) -> tuple[TruthShard, ...]:
        """The shards a node reports: a stopped one's record is not a running shard."""
        return tuple(s for s in self.shards if s.state != "stopped")

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        ranks = {s.rank for s in self.present}
        return tuple(r for r in range(self.nodes) if r not in ranks)

    @property
    def bucket(self) -> Bucket:
        """The planner's docstring and docs/reconcile.md, checked in the code's order: a
        replica nobody wants is retired whatever its state; one touching a Lost node is
        replaced; one touching an Unreachable node is left alone (its ranks cannot be
        known); then a rank missing or failed fails it whole."""
        if not self.wanted:
            return "unwanted"
        where = {self.statuses[s.node] for s in self.present}
        if "lost" in where:
            return "lost"
        if "unreachable" in where:
            return "unreachable"
        if self.missing_ranks or any(s.state == "failed" for s in self.present):
            return "failed"
        return "counted"

    @property
    def reachable(self) -> tuple[tuple[str, int], ...]:
        """(node, rank) of the present shards on nodes that answer (Ready or Cordoned)."""
        return tuple(
            (s.node, s.rank)
            for s in sorted(self.present, key=lambda s: s.rank)
            if self.statuses[s.node] in ("ready", "cordoned")
        )

    @property
    def key(self) -> str:
        return failure_key(self.replica, self.started)


@dataclass(frozen=True)
class PlannerScenario:
    catalog: Catalog
    specs: tuple[NodeSpec, ...]  # in name order
    statuses: Mapping[str, NodeStatus]
    replicas: tuple[TruthReplica, ...]  # those with at least one present shard
    ledger: Mapping[str, Backoff]
    seed: int
    notes: frozenset[str] = field(default=frozenset())  # generator features, for statistics

    @property
    def addresses(self) -> dict[str, str]:
        return {spec.name: f"10.0.0.{index}" for index, spec in enumerate(self.specs, 1)}

    @property
    def listening(self) -> dict[str, frozenset[int]]:
        return {spec.name: frozenset(spec.listening) for spec in self.specs}

    def build(self, order: random.Random | None = None) -> Snapshot:
        """The snapshot; with `order`, hosts, facts and each node's shards shuffled."""
        specs = list(self.specs)
        if order is not None:
            specs = [
                replace(spec, shards=order.sample(list(spec.shards), len(spec.shards)))
                for spec in order.sample(specs, len(specs))
            ]
        node_facts = {spec.name: facts(spec) for spec in specs}
        if order is not None:
            names = order.sample(list(node_facts), len(node_facts))
            node_facts = {name: node_facts[name] for name in names}
        return build_snapshot([host(spec) for spec in specs], node_facts, NOW, gpu_class)

    @cached_property
    def snapshot(self) -> Snapshot:
        return self.build()

    def plan(
        self, snapshot: Snapshot | None = None, ledger: Mapping[str, Backoff] | None = None
    ) -> Plan:
        return plan(
            self.catalog,
            snapshot if snapshot is not None else self.snapshot,
            dict(self.ledger if ledger is None else ledger),
            self.addresses,
            random.Random(self.seed),
        )

    @cached_property
    def result(self) -> Plan:
        return self.plan()

    def of_model(self, model: str) -> list[TruthReplica]:
        return [r for r in self.replicas if r.model == model]

    def counted(self, model: str) -> list[TruthReplica]:
        """Replicas the docs count towards replicas.min: healthy, starting, unreachable."""
        return [r for r in self.of_model(model) if r.bucket in ("counted", "unreachable")]

    def new_failures(self, model: str) -> set[str]:
        """The failures (`failure_key`s) of `model` seen now and not yet in its ledger."""
        counted = self.ledger[model].counted if model in self.ledger else ()
        return {r.key for r in self.of_model(model) if r.bucket == "failed"} - set(counted)

    def new_failure(self, model: str) -> bool:
        return bool(self.new_failures(model))


def _catalog(draw: st.DrawFn) -> Catalog:
    names = [name for name in MODEL_NAMES if one_in(draw, 2)] or [pick(draw, MODEL_NAMES)]
    models: dict[str, Any] = {}
    for name in names:
        shapes: list[str] = []
        for _ in range(number(draw, 1, 2)):
            shape = pick(draw, SHAPE_NAMES)
            if shape not in shapes:
                shapes.append(shape)
        low = number(draw, 0, 3)
        replicas: dict[str, int] = {"min": low}
        spread = pick(draw, (None, 0, 1, 2))  # None: max left out, which means max = min
        if spread is not None:
            replicas["max"] = low + spread
        models[name] = {
            "source": f"hf://org/{name}",
            "replicas": replicas,
            "profiles": [
                {"name": shape, "priority": 100 - 10 * index - number(draw, 0, 5), **SHAPES[shape]}
                for index, shape in enumerate(shapes)
            ],
        }
    text = yaml.safe_dump({"models": models}, sort_keys=False)
    return parse_catalog(text, "catalog.yaml")


@st.composite
def planner_scenarios(draw: st.DrawFn) -> PlannerScenario:
    catalog = _catalog(draw)
    count = number(draw, 2, 5)
    names = [f"hgx-{index}" for index in range(1, count + 1)]
    # Half the fleets answer whole (Ready or Cordoned): a damaged replica there is failed,
    # not hidden behind a node that does not answer.
    choices = NODE_STATUSES if one_in(draw, 2) else ANSWERING
    statuses: dict[str, NodeStatus] = {name: pick(draw, choices) for name in names}
    listening: dict[str, list[int]] = {}
    for name in names:
        listening[name] = [port for port in LISTENING if one_in(draw, 2)] if one_in(draw, 2) else []
    free: dict[str, list[int]] = {name: list(range(GPUS_PER_NODE)) for name in names}
    ports: dict[str, set[int]] = {name: set() for name in names}
    records: dict[str, list[ShardRecord]] = {name: [] for name in names}
    replicas: list[TruthReplica] = []
    ordinal: dict[str, int] = {}
    for _ in range(number(draw, 0, 7)):
        model_name = pick(draw, (*catalog.models, *catalog.models, RETIRED_MODEL))
        model = catalog.models.get(model_name)
        if model is None or one_in(draw, 8):
            profile_name, priority = RETIRED_PROFILE, 0
            retired = ({"gpus_per_node": 1}, {"gpus_per_node": 2, "nodes": 2})
            shape: dict[str, Any] = {"engine": "vllm", **pick(draw, retired)}
        else:
            chosen = pick(draw, model.profiles)
            profile_name, priority = chosen.name, chosen.spec.priority
            shape = SHAPES[profile_name]
        ranks = int(shape.get("nodes", 1))
        gpus = int(shape.get("gpus_per_node", 0))
        order = draw(st.permutations(names))
        hosts = [n for n in order if len(free[n]) >= gpus][:ranks]
        if len(hosts) < ranks:
            continue
        ordinal[model_name] = ordinal.get(model_name, 0) + 1
        replica_id = f"{model_name}-{ordinal[model_name]}"
        port = 8000 + number(draw, 0, 2)
        while any(port in ports[n] for n in hosts):
            port += 1
        origin: Literal["reconcile", "manual"] = "manual" if one_in(draw, 2) else "reconcile"
        age = pick(draw, (None, 5, 30, 90, 600))
        started = None if age is None else NOW - timedelta(minutes=age)
        dropped: set[int] = set()
        if ranks > 1 and one_in(draw, 2):
            dropped = {r for r in range(ranks) if one_in(draw, 2)}
            if len(dropped) == ranks:
                dropped.discard(number(draw, 0, ranks - 1))
        shards: list[TruthShard] = []
        for rank, node in enumerate(hosts):
            held = tuple(free[node][:gpus])
            if rank in dropped:
                continue
            free[node] = free[node][gpus:]
            ports[node].add(port)
            state = pick(draw, SHARD_STATES)
            shards.append(TruthShard(rank, node, held, state))
            records[node].append(
                shard(
                    replica_id,
                    model_name,
                    held,
                    rank,
                    profile=profile_name,
                    nodes=ranks,
                    port=port,
                    state=state,
                    origin=origin,
                    started=started,
                )
            )
        truth = TruthReplica(
            replica=replica_id,
            model=model_name,
            profile=profile_name,
            nodes=ranks,
            port=port,
            origin=origin,
            started=started,
            shards=tuple(shards),
            priority=priority,
            wanted=model is not None and profile_name != RETIRED_PROFILE,
            statuses=statuses,
        )
        if truth.present:
            replicas.append(truth)
    ledger: dict[str, Backoff] = {}
    for name in catalog.models:
        if not one_in(draw, 2):
            continue
        keys = [r.key for r in replicas if r.model == name and one_in(draw, 2)]
        ledger[name] = Backoff(
            failures=number(draw, 1, 4),
            until=NOW + pick(draw, BACKOFF_ENDS),
            counted=(*keys, f"{name}-9@?"),
        )
    specs = tuple(
        NodeSpec(
            name,
            "H100",
            GPUS_PER_NODE,
            nvswitch(),
            fabrics=FABRIC,
            shards=tuple(records[name]),
            cordoned="maintenance" if statuses[name] == "cordoned" else None,
            unreachable_for=UNREACHED_FOR[statuses[name]],
            listening=tuple(listening[name]),
        )
        for name in names
    )
    scenario = PlannerScenario(
        catalog=catalog,
        specs=specs,
        statuses=statuses,
        replicas=tuple(replicas),
        ledger=ledger,
        seed=number(draw, 0, 3),
    )
    return replace(scenario, notes=frozenset(features(scenario)))


def features(scenario: PlannerScenario) -> set[str]:
    """The hard cases a scenario holds, named for `event()` and the rate meta-test."""
    found: set[str] = set()
    for replica in scenario.replicas:
        if replica.nodes > 1 and replica.missing_ranks:
            found.add("multi-node replica missing a rank")
            if 0 in replica.missing_ranks:
                found.add("multi-node replica missing rank 0")
        if replica.nodes > 1 and not replica.missing_ranks:
            found.add("multi-node replica with every rank")
        status = {replica.statuses[s.node] for s in replica.present}
        if "unreachable" in status:
            found.add("replica on an Unreachable node")
        if "lost" in status:
            found.add("replica on a Lost node")
        if "cordoned" in status:
            found.add("replica on a Cordoned node")
        if replica.bucket == "unwanted":
            found.add("unwanted replica")
        if replica.bucket == "failed":
            found.add("failed replica")
            if replica.missing_ranks:
                found.add("failed replica missing a rank")
            if 0 in replica.missing_ranks:
                found.add("failed replica missing rank 0")
        if replica.origin == "manual":
            found.add("manual replica")
    for name, model in scenario.catalog.models.items():
        counted = len(scenario.counted(name))
        backoff = scenario.ledger.get(name)
        if model.replicas_min == model.replicas_max:
            found.add("model with min == max")
        if counted > model.replicas_min:
            found.add("scale-down")
            if any(r.origin == "manual" for r in scenario.counted(name)):
                found.add("scale-down with manual replicas")
            if counted > model.replicas_max:
                found.add("more than replicas.max running")
        if backoff is not None and backoff.until is not None:
            if backoff.waiting(NOW):
                found.add("active backoff")
            else:
                found.add("expired backoff")
                if counted < model.replicas_min and not scenario.new_failure(name):
                    found.add("short model with an expired backoff")
    if any(spec.listening for spec in scenario.specs):
        found.add("node listening on ports")
    return found
