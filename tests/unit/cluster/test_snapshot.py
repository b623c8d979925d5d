"""Building the Snapshot (cli/cluster/snapshot.py): what each node view takes from the
inventory and the facts — reachability under the snapshot's lost_after, the what-if nodes
only the facts know, GPU names, classes and why a GPU is unusable, fabric ports — and how
with_shards and release recount GPUs and memory.

Written against survivors of the mutation run: the fields were built, but no test read
them back (a dropped lost_after, a what-if node's variables, the fabric rate, ...).
"""

from __future__ import annotations

from datetime import timedelta

from cli.cluster.snapshot import (
    FabricView,
    Reachability,
    build_snapshot,
    release,
    with_shards,
)
from cli.facts.gpuclass import gpu_class
from cli.facts.model import GpuProcess, HcaPort, NodeFacts
from cli.inventory.schema import Fabric, HostVars
from tests.builders import NOW, NodeSpec, facts, host, shard, snapshot


def unreached(name: str, minutes: int) -> NodeSpec:
    return NodeSpec(name, unreachable_for=timedelta(minutes=minutes))


def test_the_snapshots_lost_after_decides_when_an_inventory_node_is_lost() -> None:
    spec = unreached("node-1", 30)
    fleet = build_snapshot([host(spec)], {"node-1": facts(spec)}, NOW, gpu_class,
                           lost_after=timedelta(minutes=20))  # fmt: skip
    assert fleet.lost_after == timedelta(minutes=20)
    node = fleet.node("node-1")
    assert (node.reachability, node.unreachable_reason) == (
        Reachability.LOST,
        "timed out after 10 s",
    )


def test_within_lost_after_an_unreached_node_is_only_unreachable() -> None:
    spec = unreached("node-1", 30)
    fleet = build_snapshot([host(spec)], {"node-1": facts(spec)}, NOW, gpu_class,
                           lost_after=timedelta(minutes=40))  # fmt: skip
    assert fleet.node("node-1").reachability is Reachability.UNREACHABLE


def test_an_inventory_node_without_facts_is_unreachable_until_gathered() -> None:
    fleet = build_snapshot([host(NodeSpec("node-1"))], {}, NOW, gpu_class)
    node = fleet.node("node-1")
    assert (node.reachability, node.unreachable_reason) == (
        Reachability.UNREACHABLE,
        "no facts gathered yet",
    )
    assert (node.last_reached, node.notes, node.gpus, node.in_inventory) == (None, (), None, True)


def test_a_node_never_reached_and_without_an_error_says_so() -> None:
    node_facts = NodeFacts(gathered_at=NOW)
    fleet = build_snapshot([host(NodeSpec("node-1"))], {"node-1": node_facts}, NOW, gpu_class)
    node = fleet.node("node-1")
    assert (node.reachability, node.unreachable_reason) == (
        Reachability.UNREACHABLE,
        "not reached; never reached",
    )


def test_a_reached_node_keeps_when_it_was_reached_and_the_probes_notes() -> None:
    spec = unreached("node-1", 5)
    node_facts = facts(spec).model_copy(update={"notes": ("no nvidia-smi",)})
    fleet = build_snapshot([host(spec)], {"node-1": node_facts}, NOW, gpu_class)
    node = fleet.node("node-1")
    assert node.last_reached == NOW - timedelta(minutes=5)
    assert node.notes == ("no nvidia-smi",)


def test_facts_of_nodes_not_in_the_inventory_are_what_if_nodes_in_name_order() -> None:
    specs = [NodeSpec("node-10"), NodeSpec("node-2"), NodeSpec("node-1")]
    what_if = {"node-10": HostVars(labels={"rack": "r9"})}
    fleet = build_snapshot([host(specs[2])], {s.name: facts(s) for s in specs}, NOW,
                           gpu_class, what_if_vars=what_if)  # fmt: skip
    assert [(n.name, n.in_inventory) for n in fleet.nodes] == [
        ("node-1", True),
        ("node-2", False),
        ("node-10", False),
    ]
    assert fleet.node("node-2").in_inventory is False
    assert fleet.node("node-10").labels == {"rack": "r9"}
    assert fleet.node("node-2").labels == {}


def test_a_what_if_node_is_lost_by_the_snapshots_lost_after_too() -> None:
    spec = unreached("spare-1", 30)
    fleet = build_snapshot([], {"spare-1": facts(spec)}, NOW, gpu_class,
                           lost_after=timedelta(minutes=20))  # fmt: skip
    assert fleet.node("spare-1").reachability is Reachability.LOST


def test_a_gpu_view_carries_the_name_the_total_and_the_inventorys_class_override() -> None:
    spec = NodeSpec("node-1", "L40S", 2)
    node_facts = facts(spec)
    fleet = build_snapshot(
        [host(spec).model_copy(update={"vars": HostVars(gpu_classes={"NVIDIA L40S": "L40S-48"})})],
        {"node-1": node_facts},
        NOW,
        gpu_class,
    )
    gpus = fleet.node("node-1").gpus
    assert gpus is not None
    assert [(g.index, g.name, g.gpu_class, g.memory_total_mib) for g in gpus] == [
        (0, "NVIDIA L40S", "L40S-48", 81559),
        (1, "NVIDIA L40S", "L40S-48", 81559),
    ]


def gpus_of(node_facts: NodeFacts) -> list[tuple[int, str | None, str | None]]:
    fleet = build_snapshot([host(NodeSpec("node-1"))], {"node-1": node_facts}, NOW, gpu_class)
    gpus = fleet.node("node-1").gpus
    assert gpus is not None
    return [(g.index, g.unusable, g.held_by) for g in gpus]


def test_one_ecc_error_is_written_in_the_singular_two_in_the_plural() -> None:
    spec = NodeSpec("node-1", "H100", 3, ecc={0: 1, 1: 2})
    assert gpus_of(facts(spec)) == [
        (0, "1 uncorrected ECC error", None),
        (1, "2 uncorrected ECC errors", None),
        (2, None, None),
    ]


def test_a_gpu_in_mig_mode_is_unusable_and_one_without_mig_or_with_it_off_is_not() -> None:
    node_facts = facts(NodeSpec("node-1", "A100", 3))
    assert node_facts.gpus is not None
    modes = (True, False, None)
    node_facts = node_facts.model_copy(
        update={
            "gpus": tuple(
                gpu.model_copy(update={"mig_enabled": mode})
                for gpu, mode in zip(node_facts.gpus, modes, strict=True)
            )
        }
    )
    assert gpus_of(node_facts) == [(0, "MIG mode enabled", None), (1, None, None), (2, None, None)]


def test_foreign_processes_are_named_by_pid_and_program_all_of_them() -> None:
    spec = NodeSpec("node-1", "H100", 2)
    node_facts = facts(spec).model_copy(
        update={
            "gpu_processes": (
                GpuProcess(gpu_uuid="GPU-node-1-0", pid=311, process_name="/usr/bin/python3"),
                GpuProcess(gpu_uuid="GPU-node-1-0", pid=312, process_name="/opt/my env/bin/ray"),
                GpuProcess(gpu_uuid="GPU-node-1-1", pid=313, process_name="ollama"),
            )
        }
    )
    assert gpus_of(node_facts) == [
        (0, "pid 311 python3, pid 312 ray", None),
        (1, "pid 313 ollama", None),
    ]


def test_processes_on_a_gpu_our_shard_holds_are_the_shards_own() -> None:
    spec = NodeSpec("node-1", "H100", 2, shards=[shard("m-1", "m", [1])], foreign={1: "vllm"})
    assert gpus_of(facts(spec)) == [(0, None, None), (1, None, "m-1")]


def fabric_views(hcas: tuple[HcaPort, ...] | None) -> tuple[FabricView, ...]:
    spec = NodeSpec("node-1")
    node_host = host(spec).model_copy(
        update={
            "vars": HostVars(
                fabrics=(
                    Fabric(name="ib-a", hcas=("mlx5_0", "mlx5_1"), rate_gbps=400),
                    Fabric(name="ib-b", hcas=("mlx5_2", "mlx5_3"), rate_gbps=200),
                )
            )
        }
    )
    node_facts = facts(spec).model_copy(update={"hcas": hcas})
    return (
        build_snapshot([node_host], {"node-1": node_facts}, NOW, gpu_class).node("node-1").fabrics
    )


def test_fabrics_with_unknown_ports_keep_their_declared_hcas_and_rates() -> None:
    assert fabric_views(None) == (
        FabricView("ib-a", ("mlx5_0", "mlx5_1"), None, 400),
        FabricView("ib-b", ("mlx5_2", "mlx5_3"), None, 200),
    )


def test_a_fabric_says_which_hcas_are_down_in_what_state_or_absent() -> None:
    ports = (
        HcaPort(hca="mlx5_0", port=1, state="ACTIVE"),
        HcaPort(hca="mlx5_1", port=1, state="DOWN"),
        HcaPort(hca="mlx5_1", port=2, state="INIT"),
        HcaPort(hca="mlx5_2", port=1, state="ACTIVE"),
    )
    assert fabric_views(ports) == (
        FabricView("ib-a", ("mlx5_0", "mlx5_1"), ("mlx5_0",), 400, ("mlx5_1 DOWN/INIT",)),
        FabricView("ib-b", ("mlx5_2", "mlx5_3"), ("mlx5_2",), 200, ("mlx5_3 absent",)),
    )


def test_with_shards_on_a_node_that_did_not_report_gpus_keeps_them_unknown() -> None:
    fleet = snapshot(NodeSpec("node-1", gpus_known=False))
    node = with_shards(fleet.node("node-1"), [shard("m-1", "m", [], memory_gib=None)])
    assert node.gpus is None
    assert (node.memory_reserved_gib, [s.replica for s in node.shards]) == (0.0, ["m-1"])


def test_release_frees_the_gpus_and_memory_of_the_stopped_replicas_only() -> None:
    fleet = snapshot(
        NodeSpec("node-1", "H100", 2, shards=[shard("a-1", "a", [0], memory_gib=40),
                                             shard("b-1", "b", [1], memory_gib=None)]),
        NodeSpec("node-2", "H100", 1, shards=[shard("c-1", "c", [0], memory_gib=16)]),
    )  # fmt: skip
    after = release(fleet, ["a-1"])
    node = after.node("node-1")
    assert node.memory_reserved_gib == 0.0
    assert node.gpus is not None
    assert [(g.index, g.held_by) for g in node.gpus] == [(0, None), (1, "b-1")]
    assert after.node("node-2") == fleet.node("node-2")
    assert after.node("node-2").memory_reserved_gib == 16.0
