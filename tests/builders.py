"""Synthetic fleets, built from the real models (no mocks): Host + NodeFacts → Snapshot.

The one builder of nodes and facts for the unit and property tests and for the in-memory
benchmarks (scripts/bench/bench_place.py and bench_churn.py, which draw their fleets' shapes
at random and describe each node as a `NodeSpec`)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cli.catalog.load import Catalog, parse_catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import (
    Gpu,
    GpuProcess,
    HcaPort,
    Memory,
    ModelStore,
    NodeCertificate,
    NodeFacts,
    ReplicaLoad,
    ShardRecord,
    StoredWeights,
)
from cli.inventory.schema import Fabric, Host, HostVars

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
IDLE_USED_MIB = 4  # what nvidia-smi shows used on an idle GPU

GPU_NAMES = {
    "H100": "NVIDIA H100 80GB HBM3",
    "A100": "NVIDIA A100 80GB PCIe",
    "L40S": "NVIDIA L40S",
}


@dataclass
class NodeSpec:
    name: str
    gpu_class: str | None = None
    gpus: int = 0
    domains: Sequence[Sequence[int]] | None = None  # None: topology unknown
    memory_gib: float | None = 512
    ecc: Mapping[int, int] = field(default_factory=dict)
    foreign: Mapping[int, str] = field(default_factory=dict)  # GPU → process name
    shards: Sequence[ShardRecord] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    fabrics: Sequence[tuple[str, Sequence[str]]] = ()
    down_hcas: Sequence[str] = ()
    hcas_known: bool = True
    cordoned: str | None = None
    unreachable_for: timedelta | None = None
    gpus_known: bool = True
    listening: Sequence[int] = ()  # ports something listens on (None reported when empty)
    gpu_memory_mib: int | None = 81559  # memory.total of each GPU (an 80 GB H100's)
    gpu_memory_of: Mapping[int, int | None] = field(default_factory=dict)  # per GPU, if other
    gpu_used_of: Mapping[int, int] = field(default_factory=dict)  # MiB used, if not idle's 4
    store: ModelStore | None = None  # the model store; None: not reported
    certificate: NodeCertificate | None = None  # its TLS certificate; None: plain HTTP
    load: Sequence[ReplicaLoad] | None = None  # its replicas' load; None: not reported


def nvswitch(count: int = 8) -> list[list[int]]:
    return [list(range(count))]


def pairs(count: int) -> list[list[int]]:
    return [[i, i + 1] for i in range(0, count, 2)]


def singletons(count: int) -> list[list[int]]:
    return [[i] for i in range(count)]


def shard(
    replica: str,
    model: str,
    gpus: Iterable[int],
    rank: int = 0,
    memory_gib: float | None = None,
    *,
    profile: str = "p",
    nodes: int = 1,
    port: int = 8000,
    state: str = "running",
    origin: str = "reconcile",
    started: datetime | None = None,
    source: str | None = None,
) -> ShardRecord:
    return ShardRecord.model_validate(
        {
            "source": source,
            "replica": replica,
            "model": model,
            "profile": profile,
            "rank": rank,
            "nodes": nodes,
            "gpus": tuple(gpus),
            "port": port,
            "engine": "vllm",
            "memory_gib": memory_gib,
            "state": state,
            "origin": origin,
            "started": started,
        }
    )


def host(spec: NodeSpec) -> Host:
    return Host(
        name=spec.name,
        groups=("all",),
        address=spec.name,
        vars=HostVars(
            labels=dict(spec.labels),
            fabrics=tuple(Fabric(name=n, hcas=tuple(h), rate_gbps=400) for n, h in spec.fabrics),
            cordoned=spec.cordoned,
        ),
    )


def facts(spec: NodeSpec) -> NodeFacts:
    gpus = None
    processes = None
    if spec.gpus_known:
        name = GPU_NAMES.get(spec.gpu_class or "", spec.gpu_class or "")
        gpus = tuple(
            Gpu(
                index=i,
                uuid=f"GPU-{spec.name}-{i}",
                name=name,
                memory_total_mib=spec.gpu_memory_of.get(i, spec.gpu_memory_mib),
                memory_used_mib=spec.gpu_used_of.get(i, IDLE_USED_MIB),
                ecc_uncorrected=spec.ecc.get(i, 0),
            )
            for i in range(spec.gpus)
        )
        processes = tuple(
            GpuProcess(gpu_uuid=f"GPU-{spec.name}-{i}", pid=4000 + i, process_name=process)
            for i, process in spec.foreign.items()
        )
    hcas = None
    if spec.hcas_known:
        hcas = tuple(
            HcaPort(
                hca=h,
                port=1,
                state="DOWN" if h in spec.down_hcas else "ACTIVE",
                rate_gbps=400,
                link_layer="InfiniBand",
            )
            for _, fabric_hcas in spec.fabrics
            for h in fabric_hcas
        )
    reached: datetime | None = NOW
    error = None
    if spec.unreachable_for is not None:
        reached, error = NOW - spec.unreachable_for, "timed out after 10 s"
    memory = None
    if spec.memory_gib is not None:
        memory = Memory(total_mib=int(spec.memory_gib * 1024))
    return NodeFacts(
        gathered_at=NOW,
        last_reached=reached,
        error=error,
        unreachable_since=reached if error is not None else None,  # watched since
        memory=memory,
        gpus=gpus,
        gpu_processes=processes,
        nvlink_domains=None if spec.domains is None else tuple(tuple(d) for d in spec.domains),
        hcas=hcas,
        shards=tuple(spec.shards),
        listening_ports=tuple(spec.listening) if spec.listening else None,
        model_store=spec.store,
        certificate=spec.certificate,
        replica_load=None if spec.load is None else tuple(spec.load),
    )


GB = 1_000_000_000
STORE_PATH = "/var/lib/modelfleet/models"


def store(free_gb: float, total_gb: float = 1000, **held_gb: float) -> ModelStore:
    """A model store at the default path, `free_gb` free of `total_gb`, holding complete
    each source given as `name=size_gb` (the name as hf://org/NAME)."""
    weights = tuple(
        StoredWeights(source=f"hf://org/{name}", bytes=int(size * GB))
        for name, size in held_gb.items()
    )
    return ModelStore(
        path=STORE_PATH,
        present=True,
        measured=STORE_PATH,
        total_bytes=int(total_gb * GB),
        free_bytes=int(free_gb * GB),
        weights=weights,
    )


def snapshot(*specs: NodeSpec) -> Snapshot:
    return build_snapshot(
        [host(s) for s in specs], {s.name: facts(s) for s in specs}, NOW, gpu_class
    )


def catalog(text: str) -> Catalog:
    return parse_catalog(textwrap.dedent(text), "catalog.yaml")


def hgx(name: str, **kwargs: object) -> NodeSpec:
    return NodeSpec(name, "H100", 8, nvswitch(), **kwargs)  # type: ignore[arg-type]
