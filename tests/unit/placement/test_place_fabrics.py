"""Multi-node replicas and fabrics (docs/placement.md): which fabric wins when several
could hold the replica, which nodes may join one, and the words of every fabric refusal.
"""

from __future__ import annotations

from collections.abc import Mapping

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.inventory.schema import Host
from cli.placement.explain import assumption_lines, summarize_attempt
from cli.placement.place import ReplicaPlacement, place
from cli.placement.reasons import Blocking, Constraint
from tests.builders import NOW, NodeSpec, catalog, facts, hgx, host, snapshot


def nodes_profile(nodes: int, memory: str = "") -> Catalog:
    return catalog(
        f"""\
        models:
          ds:
            source: hf://org/ds
            profiles:
              - {{name: x{8 * nodes}, priority: 1, engine: sglang, gpu_class: H100,
                 gpus_per_node: 8, nodes: {nodes}, tensor_parallel: {8 * nodes}{memory}}}
        """
    )


X16 = nodes_profile(2)


def one(models: Catalog, fleet: Snapshot) -> ReplicaPlacement:
    (placement,) = place(models, fleet, ["ds"]).placements
    return placement


def messages(placement: ReplicaPlacement) -> dict[str, str]:
    return {r.node: r.message for r in placement.rejections}


IB = [("ib", ["mlx5_0"])]


# --- which fabric ---------------------------------------------------------------------


def rated(spec: NodeSpec, rate: float | None) -> Host:
    """The builders' host, its fabrics declared at `rate` Gb/s (None: not declared)."""
    base = host(spec)
    fabrics = tuple(f.model_copy(update={"rate_gbps": rate}) for f in base.vars.fabrics)
    return base.model_copy(update={"vars": base.vars.model_copy(update={"fabrics": fabrics})})


def fleet_rated(rates: Mapping[str, tuple[str, float | None]]) -> Snapshot:
    """node → (its one fabric, that fabric's rate): 8 free H100 each."""
    specs = [hgx(name, fabrics=[(fabric, ["mlx5_0"])]) for name, (fabric, _) in rates.items()]
    return build_snapshot(
        [rated(s, rates[s.name][1]) for s in specs],
        {s.name: facts(s) for s in specs},
        NOW,
        gpu_class,
    )


def test_of_two_fabrics_with_as_many_free_gpus_the_faster_one_wins() -> None:
    fleet = fleet_rated(
        {
            "hgx-1": ("ib-a", 200),
            "hgx-2": ("ib-a", 200),
            "hgx-3": ("ib-b", 400),
            "hgx-4": ("ib-b", 400),
        }
    )
    placement = one(X16, fleet)
    assert [(s.node, s.fabric) for s in placement.shards] == [("hgx-3", "ib-b"), ("hgx-4", "ib-b")]


def test_a_fabric_rate_not_declared_counts_below_any_declared_one() -> None:
    # ib-a's group is as fast as its slowest node: hgx-1 declares nothing, that is 0.
    fleet = fleet_rated(
        {
            "hgx-1": ("ib-a", None),
            "hgx-2": ("ib-a", 400),
            "hgx-3": ("ib-b", 0.5),
            "hgx-4": ("ib-b", 0.5),
        }
    )
    placement = one(X16, fleet)
    assert [(s.node, s.fabric) for s in placement.shards] == [("hgx-3", "ib-b"), ("hgx-4", "ib-b")]


def test_a_node_with_one_dead_fabric_joins_on_its_live_one() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=IB),
        hgx("hgx-2", fabrics=[("ib", ["mlx5_0"]), ("roce", ["mlx5_1"])], down_hcas=["mlx5_1"]),
    )
    placement = one(X16, fleet)
    assert [(s.node, s.fabric, s.hcas) for s in placement.shards] == [
        ("hgx-1", "ib", ("mlx5_0",)),
        ("hgx-2", "ib", ("mlx5_0",)),
    ]
    assert placement.rejections == ()


def test_a_multi_node_replica_on_a_node_of_unknown_memory_says_what_it_assumed() -> None:
    models = nodes_profile(2, memory=", min_memory_gb: 100")
    fleet = snapshot(hgx("hgx-1", fabrics=IB, memory_gib=None), hgx("hgx-2", fabrics=IB))
    placement = one(models, fleet)
    assert [s.node for s in placement.shards] == ["hgx-1", "hgx-2"]
    assert [a.memory_unknown for a in placement.attempts] == [("hgx-1",)]
    assert assumption_lines(placement) == [
        "note: size of hf://org/ds unknown (no disk_gb, no node holds it): disk room not checked",
        "note: hgx-1 did not report its memory; assumed to hold 100 GB",
    ]


# --- refusals -----------------------------------------------------------------------------


def test_a_node_on_no_fabric_is_refused_as_hardware_even_when_others_take_the_replica() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=IB), hgx("hgx-2", fabrics=IB), hgx("hgx-3"))
    placement = one(X16, fleet)
    assert [s.node for s in placement.shards] == ["hgx-1", "hgx-2"]
    assert [(r.profile, r.node, r.constraint, r.blocking, r.message)
            for r in placement.rejections] == [
        ("x16", "hgx-3", Constraint.FABRIC, Blocking.HARDWARE,
         "is on no fabric; a multi-node replica needs one"),
    ]  # fmt: skip
    assert summarize_attempt(placement.attempts[0]) == (
        "x16: 2/3 nodes fit — 1 is on no fabric (hgx-3)"
    )


def test_two_nodes_on_no_fabric_are_on_no_fabric_in_the_plural() -> None:
    placement = one(X16, snapshot(hgx("hgx-1"), hgx("hgx-2")))
    assert summarize_attempt(placement.attempts[0]) == (
        "x16: 0/2 nodes fit — 2 are on no fabric (hgx-1, hgx-2)"
    )


def test_a_node_whose_hcas_are_all_down_names_each() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=[("ib", ["mlx5_0", "mlx5_1"])]),
        hgx("hgx-2", fabrics=[("ib", ["mlx5_0", "mlx5_1"])], down_hcas=["mlx5_0", "mlx5_1"]),
    )
    placement = one(X16, fleet)
    assert messages(placement)["hgx-2"] == "no active HCA on fabric ib (mlx5_0 DOWN, mlx5_1 DOWN)"
    assert summarize_attempt(placement.attempts[0]) == (
        "x16: 0/2 nodes fit — 1 has no 2-node fabric group (hgx-1), 1 has no active HCA "
        "(hgx-2: no active HCA on fabric ib (mlx5_0 DOWN, mlx5_1 DOWN)), "
        "no fabric joins 2 eligible nodes (ib: hgx-1 only)"
    )


def test_a_node_whose_every_fabric_is_dead_names_every_fabric() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=IB),
        hgx("hgx-2", fabrics=[("ib", ["mlx5_0"]), ("roce", ["mlx5_1"])],
            down_hcas=["mlx5_0", "mlx5_1"]),
    )  # fmt: skip
    placement = one(X16, fleet)
    assert messages(placement)["hgx-2"] == (
        "no active HCA on fabric ib (mlx5_0 DOWN), roce (mlx5_1 DOWN)"
    )


def test_a_fabric_short_of_nodes_names_the_node_s_companions_there() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=IB), hgx("hgx-2", fabrics=IB))
    assert messages(one(nodes_profile(3), fleet)) == {
        "hgx-1": "ib has 2 eligible node(s) (with hgx-2), needs 3 on one fabric",
        "hgx-2": "ib has 2 eligible node(s) (with hgx-1), needs 3 on one fabric",
    }
    fleet = snapshot(*(hgx(f"hgx-{i}", fabrics=IB) for i in (1, 2, 3)))
    assert messages(one(nodes_profile(4), fleet))["hgx-1"] == (
        "ib has 3 eligible node(s) (with hgx-2, hgx-3), needs 4 on one fabric"
    )


def test_a_node_on_two_fabrics_too_small_names_both() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=[("ib-a", ["mlx5_0"]), ("ib-b", ["mlx5_1"])]))
    assert messages(one(X16, fleet)) == {
        "hgx-1": "ib-a has 1 eligible node(s) (alone); ib-b has 1 eligible node(s) (alone), "
        "needs 2 on one fabric"
    }
