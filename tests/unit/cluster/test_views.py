"""What `ctl nodes` says about a node: GPU counts per class, the notes, the JSON document.

cli/cluster/views.py was reached by no unit or property test (mutation testing found its
142 mutants all untested); `ctl nodes` is what an operator reads first, so every field and
note is pinned here with literal values, on views built by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cli.cluster.snapshot import FabricView, GpuView, NodeView, Reachability, Snapshot
from cli.cluster.views import GpuCount, gpu_counts, node_notes, nodes_json
from cli.facts.model import ModelStore, ShardRecord, StoredWeights

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
REACHED = datetime(2024, 6, 1, 11, 58, tzinfo=UTC)


def gpu(
    index: int,
    gpu_class: str = "H100",
    unusable: str | None = None,
    held_by: str | None = None,
) -> GpuView:
    return GpuView(
        index=index,
        name=f"NVIDIA {gpu_class}",
        gpu_class=gpu_class,
        memory_total_mib=81559,
        unusable=unusable,
        held_by=held_by,
    )


def node(
    name: str = "node-1",
    *,
    reachability: Reachability = Reachability.READY,
    cordon: str | None = None,
    unreachable_reason: str | None = None,
    gpus: tuple[GpuView, ...] | None = (),
    fabrics: tuple[FabricView, ...] = (),
    memory_total_gib: float | None = 512.0,
    in_inventory: bool = True,
    notes: tuple[str, ...] = (),
) -> NodeView:
    return NodeView(
        name=name,
        reachability=reachability,
        cordon=cordon,
        unreachable_reason=unreachable_reason,
        last_reached=REACHED,
        labels={"rack": "r1"},
        memory_total_gib=memory_total_gib,
        memory_reserved_gib=48.0,
        gpus=gpus,
        nvlink_domains=(frozenset({1, 0}),),
        fabrics=fabrics,
        shards=(),
        in_inventory=in_inventory,
        notes=notes,
    )


# --- gpu_counts ---------------------------------------------------------------------------


def test_gpu_counts_are_per_class_in_class_order_free_meaning_usable_and_not_held() -> None:
    view = node(
        gpus=(
            gpu(0, "H100"),
            gpu(1, "H100", held_by="llama-r1"),
            gpu(2, "H100", unusable="2 uncorrected ECC errors"),
            gpu(3, "A100"),
            gpu(4, "A100"),
            gpu(5, "L40S", unusable="used by pid 77", held_by="llama-r2"),
        )
    )
    assert gpu_counts(view) == [
        GpuCount("A100", free=2, total=2),
        GpuCount("H100", free=1, total=3),
        GpuCount("L40S", free=0, total=1),
    ]


def test_a_node_that_did_not_report_its_gpus_has_no_counts_and_one_without_gpus_has_none() -> None:
    assert gpu_counts(node(gpus=None)) is None
    assert gpu_counts(node(gpus=())) == []


# --- node_notes ---------------------------------------------------------------------------


def test_a_healthy_ready_node_has_no_notes() -> None:
    assert node_notes(node(gpus=(gpu(0),))) == []


def test_every_note_in_its_order() -> None:
    view = node(
        reachability=Reachability.UNREACHABLE,
        cordon="disk swap, ticket 42",
        unreachable_reason="ssh: connection refused",
        gpus=(gpu(0), gpu(1, unusable="2 uncorrected ECC errors"), gpu(3, unusable="fell off")),
        fabrics=(
            FabricView("ib-a", ("mlx5_0",), None, None),
            FabricView(
                "ib-b",
                ("mlx5_0", "mlx5_1", "mlx5_2"),
                ("mlx5_0",),
                200.0,
                down=("mlx5_1 DOWN", "mlx5_2 INIT"),
            ),
            FabricView("ib-c", ("mlx5_3",), ("mlx5_3",), 400.0),
        ),
        memory_total_gib=None,
        in_inventory=False,
        notes=("probe: nvidia-smi timed out",),
    )
    assert node_notes(view) == [
        "cordoned: disk swap, ticket 42",
        "unreachable: ssh: connection refused",
        "GPU 1: 2 uncorrected ECC errors",
        "GPU 3: fell off",
        "fabric ib-a: HCA state unknown",
        "fabric ib-b: mlx5_1 DOWN, mlx5_2 INIT",
        "what-if node: in the facts snapshot, not in the inventory",
        "probe: nvidia-smi timed out",
    ]


def test_a_lost_node_says_lost_with_its_reason() -> None:
    view = node(reachability=Reachability.LOST, unreachable_reason="last reached 3 h ago")
    assert node_notes(view) == ["lost: last reached 3 h ago"]


def test_only_a_ready_node_is_told_off_for_not_reporting_its_memory() -> None:
    assert node_notes(node(memory_total_gib=None)) == ["did not report its memory"]
    unreachable = node(reachability=Reachability.UNREACHABLE, memory_total_gib=None)
    assert node_notes(unreachable) == []
    assert node_notes(node(memory_total_gib=0.0)) == []


def test_a_node_that_did_not_report_its_gpus_has_no_gpu_notes() -> None:
    assert node_notes(node(gpus=None)) == []


# --- nodes_json ---------------------------------------------------------------------------


def test_the_json_document_names_its_format_time_and_every_field_of_a_node() -> None:
    shard = ShardRecord(
        replica="llama-r1",
        model="llama",
        profile="tp2",
        rank=0,
        gpus=(0, 1),
        port=8001,
        engine="vllm",
        memory_gib=48.0,
    )
    ready = NodeView(
        name="node-2",
        reachability=Reachability.READY,
        cordon="maintenance",
        unreachable_reason=None,
        last_reached=REACHED,
        labels={"rack": "r1", "zone": "a"},
        memory_total_gib=512.0,
        memory_reserved_gib=48.0,
        gpus=(gpu(0, held_by="llama-r1"), gpu(1, held_by="llama-r1"), gpu(2, unusable="ECC")),
        nvlink_domains=(frozenset({2, 0, 1}), frozenset({3})),
        fabrics=(FabricView("ib-a", ("mlx5_1", "mlx5_0"), ("mlx5_0",), 400.0, ("mlx5_1 DOWN",)),),
        shards=(shard,),
        model_store=ModelStore(
            path="/data/models",
            present=True,
            measured="/data/models",
            total_bytes=2_000_000_000_000,
            free_bytes=500_000_000_000,
            weights=(StoredWeights(source="hf://org/llama", bytes=141_000_000_000),),
        ),
    )
    silent = NodeView(
        name="node-10",
        reachability=Reachability.UNREACHABLE,
        cordon=None,
        unreachable_reason="timed out",
        last_reached=None,
        labels={},
        memory_total_gib=None,
        memory_reserved_gib=0.0,
        gpus=None,
        nvlink_domains=None,
        fabrics=(FabricView("ib-b", ("mlx5_0",), None, None),),
        shards=(),
        in_inventory=False,
    )
    document = nodes_json(Snapshot(now=NOW, nodes=(ready, silent)))
    assert document == {
        "format": "modelfleet.nodes/v1",
        "at": "2024-06-01T12:00:00+00:00",
        "nodes": [
            {
                "name": "node-2",
                "status": "Cordoned",
                "reachability": "Ready",
                "cordoned": "maintenance",
                "unreachable_reason": None,
                "last_reached": "2024-06-01T11:58:00+00:00",
                "in_inventory": True,
                "memory_gib": 512.0,
                "memory_reserved_gib": 48.0,
                "gpu_counts": [{"class": "H100", "free": 0, "total": 3}],
                "gpus": [
                    {
                        "index": 0,
                        "name": "NVIDIA H100",
                        "class": "H100",
                        "memory_total_mib": 81559,
                        "held_by": "llama-r1",
                        "unusable": None,
                    },
                    {
                        "index": 1,
                        "name": "NVIDIA H100",
                        "class": "H100",
                        "memory_total_mib": 81559,
                        "held_by": "llama-r1",
                        "unusable": None,
                    },
                    {
                        "index": 2,
                        "name": "NVIDIA H100",
                        "class": "H100",
                        "memory_total_mib": 81559,
                        "held_by": None,
                        "unusable": "ECC",
                    },
                ],
                "gpus_lost": 0,
                "nvlink_domains": [[0, 1, 2], [3]],
                "fabrics": [
                    {
                        "name": "ib-a",
                        "hcas": ["mlx5_1", "mlx5_0"],
                        "active_hcas": ["mlx5_0"],
                        "rate_gbps": 400.0,
                    }
                ],
                "labels": {"rack": "r1", "zone": "a"},
                "model_store": {
                    "path": "/data/models",
                    "present": True,
                    "measured": "/data/models",
                    "total_bytes": 2_000_000_000_000,
                    "free_bytes": 500_000_000_000,
                    "weights": [
                        {
                            "source": "hf://org/llama",
                            "bytes": 141_000_000_000,
                            "completed": None,
                            "architectures": [],
                        }
                    ],
                },
                "shards": [
                    {
                        "replica": "llama-r1",
                        "model": "llama",
                        "profile": "tp2",
                        "rank": 0,
                        "nodes": 1,
                        "gpus": [0, 1],
                        "hcas": [],
                        "port": 8001,
                        "engine": "vllm",
                        "started": None,
                        "memory_gib": 48.0,
                        "unit": None,
                        "origin": "reconcile",
                        "source": None,
                        "state": "running",
                        "certificate": None,
                        "listen": None,
                    }
                ],
                "certificate": None,
                "notes": [
                    "cordoned: maintenance",
                    "GPU 2: ECC",
                    "fabric ib-a: mlx5_1 DOWN",
                ],
            },
            {
                "name": "node-10",
                "status": "Unreachable",
                "reachability": "Unreachable",
                "cordoned": None,
                "unreachable_reason": "timed out",
                "last_reached": None,
                "in_inventory": False,
                "memory_gib": None,
                "memory_reserved_gib": 0.0,
                "gpu_counts": None,
                "gpus": None,
                "gpus_lost": 0,
                "nvlink_domains": None,
                "fabrics": [
                    {"name": "ib-b", "hcas": ["mlx5_0"], "active_hcas": None, "rate_gbps": None}
                ],
                "labels": {},
                "model_store": None,
                "shards": [],
                "certificate": None,
                "notes": [
                    "unreachable: timed out",
                    "fabric ib-b: HCA state unknown",
                    "what-if node: in the facts snapshot, not in the inventory",
                ],
            },
        ],
    }


# --- Snapshot.node --------------------------------------------------------------------------


def test_a_snapshot_finds_a_node_by_name_and_names_the_one_it_lacks() -> None:
    first, second = node("node-2"), node("node-10")
    fleet = Snapshot(now=NOW, nodes=(first, second))
    assert fleet.node("node-10") is second
    assert fleet.node("node-2") is first
    with pytest.raises(KeyError) as missing:
        fleet.node("node-3")
    assert missing.value.args == ("node-3",)
