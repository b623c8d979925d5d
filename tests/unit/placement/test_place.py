"""Placement, case by case: which node, which GPUs, and the reason for every refusal."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.placement.constraints import NODE_CONSTRAINTS, ORDER, constraint_table
from cli.placement.explain import assumption_lines, summarize_attempt
from cli.placement.place import PlacementRun, ReplicaPlacement, Verdict, place, spread_limit
from cli.placement.reasons import Blocking, Constraint
from tests.builders import (
    NOW,
    NodeSpec,
    catalog,
    facts,
    hgx,
    host,
    pairs,
    shard,
    singletons,
    snapshot,
)

H100X8 = """\
models:
  big:
    source: hf://org/big
    profiles:
      - {name: tp8, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 8}
      - {name: tp4, priority: 50, engine: vllm, gpu_class: H100, gpus_per_node: 4}
"""


def one_model(profile: str, replicas: int = 1) -> Catalog:
    """A catalog of one model `m` with one profile, written as a YAML flow mapping."""
    return catalog(
        f"""\
        models:
          m:
            source: hf://org/m
            replicas: {{min: {replicas}}}
            profiles:
              - {profile}
        """
    )


def one(models: Catalog, fleet: Snapshot, name: str | None = None) -> ReplicaPlacement:
    run = place(models, fleet, [name or next(iter(models.models))])
    assert len(run.placements) == 1
    return run.placements[0]


def messages(placement: ReplicaPlacement) -> dict[tuple[str, str], str]:
    return {(r.profile, r.node): r.message for r in placement.rejections}


def test_the_highest_priority_profile_that_fits_wins() -> None:
    placement = one(catalog(H100X8), snapshot(hgx("hgx-1")))
    assert placement.profile is not None and placement.profile.name == "tp8"
    assert placement.shards[0].gpus == tuple(range(8))
    assert [a.profile.name for a in placement.attempts] == ["tp8"]


def test_a_lower_profile_is_used_when_the_higher_one_does_not_fit() -> None:
    fleet = snapshot(hgx("hgx-1", shards=[shard("other-1", "other", [0, 1, 2])]))
    placement = one(catalog(H100X8), fleet)
    assert placement.profile is not None and placement.profile.name == "tp4"
    assert placement.shards[0].gpus == (3, 4, 5, 6)
    assert messages(placement)[("tp8", "hgx-1")] == (
        "5 of 8 H100 free, needs 8 (GPU 0-2 held by other-1)"
    )


def test_a_tensor_parallel_pair_stays_inside_one_nvlink_bridge() -> None:
    models = one_model(
        "{name: a100x2, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 2}"
    )
    # GPU 1 is taken, so the lowest free indices (0, 2) would cross PCIe.
    fleet = snapshot(NodeSpec("a100-1", "A100", 4, pairs(4), shards=[shard("x-1", "x", [1])]))
    placement = one(models, fleet)
    assert placement.shards[0].gpus == (2, 3)
    assert placement.shards[0].note == "one NVLink domain"


def test_a_single_gpu_takes_the_lowest_free_index_whatever_the_nvlink_pairs() -> None:
    models = one_model("{name: one, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 1}")
    fleet = snapshot(NodeSpec("a100-1", "A100", 4, pairs(4), shards=[shard("x-1", "x", [2])]))
    placement = one(models, fleet)
    # A group of one needs no domain: GPU 0 of the untouched pair, not GPU 3 beside GPU 2.
    assert (placement.shards[0].gpus, placement.shards[0].note) == ((0,), "")


def test_of_two_nvlink_domains_that_hold_the_group_the_one_with_fewest_free_wins() -> None:
    models = one_model("{name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}")
    # Two domains of four; GPU 4 is held, so the second has 3 free and the first 4.
    fleet = snapshot(NodeSpec("hgx-1", "H100", 8, [[0, 1, 2, 3], [4, 5, 6, 7]],
                              shards=[shard("x-1", "x", [4])]))  # fmt: skip
    placement = one(models, fleet)
    assert (placement.shards[0].gpus, placement.shards[0].note) == ((5, 6), "one NVLink domain")


def test_without_a_known_topology_the_lowest_free_indices_are_taken() -> None:
    models = one_model(
        "{name: a100x2, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 2}"
    )
    fleet = snapshot(NodeSpec("a100-1", "A100", 4, None, shards=[shard("x-1", "x", [1])]))
    placement = one(models, fleet)
    assert placement.shards[0].gpus == (0, 2)
    assert placement.shards[0].note == "NVLink topology unknown"


def test_a_group_too_big_for_any_domain_spans_them_and_says_so() -> None:
    models = one_model(
        "{name: a100x4, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 4}"
    )
    placement = one(models, snapshot(NodeSpec("a100-1", "A100", 4, pairs(4))))
    assert placement.shards[0].gpus == (0, 1, 2, 3)
    assert placement.shards[0].note == "1 tensor-parallel group spans NVLink domains"


def test_a_node_whose_domain_holds_the_group_beats_one_where_it_would_span() -> None:
    models = one_model("{name: x2, priority: 1, engine: vllm, gpu_class: L40S, gpus_per_node: 2}")
    fleet = snapshot(
        NodeSpec("a-pcie", "L40S", 2, singletons(2)),
        NodeSpec("b-bridged", "L40S", 4, pairs(4)),
    )
    assert one(models, fleet).shards[0].node == "b-bridged"


def test_single_node_replicas_fill_partly_used_nodes_first() -> None:
    models = one_model("{name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}")
    fleet = snapshot(
        hgx("hgx-1"),
        hgx("hgx-2", shards=[shard("o-1", "o", range(4))]),
        hgx("hgx-3", shards=[shard("o-2", "o", range(2))]),
    )
    placement = one(models, fleet)
    assert (placement.shards[0].node, placement.shards[0].gpus) == ("hgx-2", (4, 5))


def test_replicas_of_one_model_spread_over_nodes_when_they_can() -> None:
    models = one_model(
        "{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}", replicas=2
    )
    run = place(models, snapshot(hgx("hgx-1"), hgx("hgx-2")))
    assert [p.shards[0].node for p in run.placements] == ["hgx-1", "hgx-2"]


def test_replicas_are_placed_one_at_a_time_and_never_share_a_gpu() -> None:
    models = one_model(
        "{name: x4, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 4}", replicas=3
    )
    run = place(models, snapshot(hgx("hgx-1")))
    placed = [p.shards[0].gpus for p in run.placements if p.placed]
    assert placed == [(0, 1, 2, 3), (4, 5, 6, 7)]
    last = run.placements[2]
    assert not last.placed and last.verdict is Verdict.NOT_NOW
    assert (
        messages(last)[("x4", "hgx-1")]
        == "0 of 8 H100 free, needs 4 (GPU 0-3 held by m-1; GPU 4-7 held by m-2)"
    )


MULTI = """\
models:
  ds:
    source: hf://org/ds
    profiles:
      - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8, nodes: 2,
         tensor_parallel: 16}
"""


def test_a_multi_node_replica_stays_on_one_fabric_with_its_active_hcas() -> None:
    east = [("ib-east", ["mlx5_0", "mlx5_1"])]
    west = [("ib-west", ["mlx5_0", "mlx5_1"])]
    fleet = snapshot(
        hgx("hgx-1", fabrics=east),
        hgx("hgx-2", fabrics=west),
        hgx("hgx-3", fabrics=west, down_hcas=["mlx5_1"]),
    )
    placement = one(catalog(MULTI), fleet)
    assert [(s.node, s.rank, s.fabric, s.hcas) for s in placement.shards] == [
        ("hgx-2", 0, "ib-west", ("mlx5_0", "mlx5_1")),
        ("hgx-3", 1, "ib-west", ("mlx5_0",)),
    ]


def test_a_multi_node_replica_takes_the_emptiest_of_three_nodes() -> None:
    fabric = [("ib", ["mlx5_0"])]
    models = catalog(
        """\
        models:
          ds:
            source: hf://org/ds
            profiles:
              - {name: x4, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2, nodes: 2,
                 tensor_parallel: 4}
        """
    )
    fleet = snapshot(
        hgx("hgx-1", fabrics=fabric, shards=[shard("o-1", "o", [0, 1])]),  # 6 free
        hgx("hgx-2", fabrics=fabric),  # 8 free
        hgx("hgx-3", fabrics=fabric, shards=[shard("o-2", "o", [0])]),  # 7 free
    )
    placement = one(models, fleet)
    assert [(s.node, s.rank, s.gpus) for s in placement.shards] == [
        ("hgx-2", 0, (0, 1)),
        ("hgx-3", 1, (1, 2)),
    ]


def test_a_multi_node_replica_takes_the_fabric_whose_nodes_have_most_free_gpus() -> None:
    east, west = [("ib-east", ["mlx5_0"])], [("ib-west", ["mlx5_0"])]
    four = MULTI.replace("gpus_per_node: 8", "gpus_per_node: 4")
    models = catalog(four.replace("tensor_parallel: 16", "tensor_parallel: 8"))
    fleet = snapshot(
        hgx("hgx-1", fabrics=east, shards=[shard("o-1", "o", [0, 1])]),  # 6 free
        hgx("hgx-2", fabrics=east, shards=[shard("o-2", "o", [0, 1])]),  # 6 free
        hgx("hgx-3", fabrics=west, shards=[shard("o-3", "o", [0])]),  # 7 free
        hgx("hgx-4", fabrics=west),  # 8 free
    )
    placement = one(models, fleet)
    assert [(s.node, s.rank, s.fabric) for s in placement.shards] == [
        ("hgx-4", 0, "ib-west"),
        ("hgx-3", 1, "ib-west"),
    ]


def test_nodes_on_two_fabrics_are_never_combined() -> None:
    fleet = snapshot(
        hgx("hgx-1", fabrics=[("ib-east", ["mlx5_0"])]),
        hgx("hgx-2", fabrics=[("ib-west", ["mlx5_0"])]),
    )
    placement = one(catalog(MULTI), fleet)
    assert not placement.placed
    assert placement.verdict is Verdict.NEVER
    assert messages(placement)[("x16", "hgx-1")] == (
        "ib-east has 1 eligible node(s) (alone), needs 2 on one fabric"
    )
    assert summarize_attempt(placement.attempts[0]) == (
        "x16: 0/2 nodes fit — 2 have no 2-node fabric group (hgx-1, hgx-2), "
        "no fabric joins 2 eligible nodes (ib-east: hgx-1 only; ib-west: hgx-2 only)"
    )


def test_a_node_whose_fabric_hcas_are_all_down_cannot_join() -> None:
    fabric = [("ib-east", ["mlx5_0"])]
    fleet = snapshot(
        hgx("hgx-1", fabrics=fabric),
        hgx("hgx-2", fabrics=fabric, down_hcas=["mlx5_0"]),
    )
    placement = one(catalog(MULTI), fleet)
    assert messages(placement)[("x16", "hgx-2")] == "no active HCA on fabric ib-east (mlx5_0 DOWN)"
    assert placement.verdict is Verdict.BLOCKED


def test_unknown_hca_state_lets_a_node_join_with_its_declared_hcas() -> None:
    fabric = [("ib-east", ["mlx5_0", "mlx5_1"])]
    fleet = snapshot(hgx("hgx-1", fabrics=fabric), hgx("hgx-2", fabrics=fabric, hcas_known=False))
    placement = one(catalog(MULTI), fleet)
    assert {s.node: s.hcas for s in placement.shards}["hgx-2"] == ("mlx5_0", "mlx5_1")


CPU = """\
models:
  coder:
    source: file:///srv/coder.gguf
    profiles:
      - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 24,
         node_selector: {role: coding}}
"""


def test_a_small_node_is_refused_with_its_memory_and_the_need() -> None:
    fleet = snapshot(NodeSpec("cpu-small", memory_gib=8, labels={"role": "coding"}))
    placement = one(catalog(CPU), fleet)
    assert messages(placement)[("cpu", "cpu-small")] == "has 8 GB of memory, needs 24"
    assert placement.rejections[0].constraint is Constraint.MEMORY
    assert placement.verdict is Verdict.NEVER


def test_a_node_with_exactly_the_memory_asked_for_fits() -> None:
    fleet = snapshot(NodeSpec("cpu-24", memory_gib=24, labels={"role": "coding"}))
    placement = one(catalog(CPU), fleet)
    assert [s.node for s in placement.shards] == ["cpu-24"]
    assert placement.rejections == ()


def test_a_node_left_with_exactly_the_memory_asked_for_fits() -> None:
    fleet = snapshot(
        NodeSpec("cpu-48", memory_gib=48, labels={"role": "coding"},
                 shards=[shard("a-1", "a", [], memory_gib=24)]),
    )  # fmt: skip
    placement = one(catalog(CPU), fleet)
    assert [s.node for s in placement.shards] == ["cpu-48"]
    assert placement.rejections == ()


def test_a_node_that_did_not_report_memory_is_used_and_the_assumption_said() -> None:
    fleet = snapshot(NodeSpec("cpu-old", memory_gib=None, labels={"role": "coding"}))
    placement = one(catalog(CPU), fleet)
    assert placement.shards[0].node == "cpu-old"
    assert placement.attempts[0].memory_unknown == ("cpu-old",)
    assert assumption_lines(placement) == [
        "note: cpu-old did not report its memory; assumed to hold 24 GB",
    ]


def test_memory_reserved_by_running_shards_counts() -> None:
    fleet = snapshot(
        NodeSpec(
            "cpu-big",
            memory_gib=64,
            labels={"role": "coding"},
            shards=[shard("a-1", "a", [], memory_gib=24), shard("b-1", "b", [], memory_gib=24)],
        )
    )
    placement = one(catalog(CPU), fleet)
    assert messages(placement)[("cpu", "cpu-big")] == (
        "has 64 GB of memory, 48 reserved by our shards, needs 24"
    )
    assert placement.verdict is Verdict.NOT_NOW


def test_a_label_mismatch_names_both_labels() -> None:
    fleet = snapshot(
        NodeSpec("cpu-1", memory_gib=64, labels={"role": "general"}),
        NodeSpec("cpu-2", memory_gib=64),
    )
    found = messages(one(catalog(CPU), fleet))
    assert found[("cpu", "cpu-1")] == "label role=general, needs role=coding"
    assert found[("cpu", "cpu-2")] == "no label role, needs role=coding"


def test_a_cpu_model_prefers_a_node_without_gpus() -> None:
    fleet = snapshot(
        hgx("a-gpu", labels={"role": "coding"}),
        NodeSpec("b-cpu", memory_gib=64, labels={"role": "coding"}),
    )
    assert one(catalog(CPU), fleet).shards[0].node == "b-cpu"


def test_cordoned_unreachable_and_lost_nodes_are_refused_with_their_reason() -> None:
    fleet = snapshot(
        hgx("hgx-1", cordoned="PSU fan failing"),
        hgx("hgx-2", unreachable_for=timedelta(minutes=7)),
        hgx("hgx-3", unreachable_for=timedelta(hours=3)),
    )
    placement = one(catalog(H100X8), fleet)
    found = messages(placement)
    assert found[("tp8", "hgx-1")] == "cordoned: PSU fan failing"
    assert found[("tp8", "hgx-2")] == "unreachable: timed out after 10 s"
    assert found[("tp8", "hgx-3")] == "lost: timed out after 10 s"
    assert placement.verdict is Verdict.BLOCKED
    assert {r.blocking for r in placement.rejections} == {Blocking.CONDITION}


def test_a_gpu_with_ecc_errors_or_a_foreign_process_is_not_free() -> None:
    fleet = snapshot(hgx("hgx-1", ecc={2: 2}, foreign={5: "python3"}))
    placement = one(catalog(H100X8), fleet)
    assert messages(placement)[("tp8", "hgx-1")] == (
        "6 of 8 H100 usable, needs 8 (GPU 2: 2 uncorrected ECC errors; GPU 5: pid 4005 python3)"
    )
    assert placement.shards[0].gpus == (0, 1, 3, 4)


TP8 = "{name: tp8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}"


def test_one_gpu_short_for_a_faulty_gpu_is_refused_as_a_condition() -> None:
    placement = one(one_model(TP8), snapshot(hgx("hgx-1", ecc={2: 2})))
    assert not placement.placed and placement.verdict is Verdict.BLOCKED
    (rejection,) = placement.rejections
    assert (rejection.constraint, rejection.blocking, rejection.message) == (
        Constraint.GPUS,
        Blocking.CONDITION,
        "7 of 8 H100 usable, needs 8 (GPU 2: 2 uncorrected ECC errors)",
    )


def test_one_gpu_short_for_a_gpu_our_shard_holds_is_refused_as_capacity() -> None:
    placement = one(one_model(TP8), snapshot(hgx("hgx-1", shards=[shard("o-1", "o", [2])])))
    assert not placement.placed and placement.verdict is Verdict.NOT_NOW
    (rejection,) = placement.rejections
    assert (rejection.constraint, rejection.blocking, rejection.message) == (
        Constraint.GPUS,
        Blocking.CAPACITY,
        "7 of 8 H100 free, needs 8 (GPU 2 held by o-1)",
    )


def test_a_gpu_class_mismatch_names_what_the_node_has() -> None:
    fleet = snapshot(
        NodeSpec("l40s-1", "L40S", 4, singletons(4)),
        NodeSpec("cpu-1"),
        NodeSpec("blind", "H100", 8, gpus_known=False),
    )
    placement = one(catalog(H100X8), fleet)
    found = messages(placement)
    assert found[("tp8", "l40s-1")] == "has L40S GPUs, needs H100"
    assert found[("tp8", "cpu-1")] == "has no GPUs, needs H100"
    assert found[("tp8", "blind")] == "did not report its GPUs, needs H100"
    assert placement.verdict is Verdict.BLOCKED


def test_a_model_that_no_node_could_ever_hold_is_never() -> None:
    placement = one(catalog(H100X8), snapshot(NodeSpec("l40s-1", "L40S", 4, singletons(4))))
    assert placement.verdict is Verdict.NEVER
    assert {r.blocking for r in placement.rejections} == {Blocking.HARDWARE}


def test_the_summary_counts_reasons_and_names_the_best_candidate() -> None:
    fleet = snapshot(
        NodeSpec("l40s-1", "L40S", 4, singletons(4)),
        NodeSpec("l40s-2", "L40S", 4, singletons(4)),
        hgx("hgx-1", shards=[shard("o-1", "o", [0, 1])]),
        hgx("hgx-2", shards=[shard("o-2", "o", [0, 1, 2])]),
        hgx("hgx-3", cordoned="PSU fan failing"),
    )
    models = catalog(H100X8.replace("gpus_per_node: 4}", "gpus_per_node: 8, nodes: 1}"))
    placement = one(models, fleet)
    assert summarize_attempt(placement.attempts[0]) == (
        "tp8: 0/5 nodes fit — 2 have L40S GPUs (l40s-1, l40s-2), 2 have too few free H100 "
        "(best: hgx-1, 6 of 8 free), 1 cordoned (hgx-3: PSU fan failing)"
    )


def test_place_all_counts_running_replicas_toward_the_minimum() -> None:
    models = one_model(
        "{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}", replicas=2
    )
    run: PlacementRun = place(models, snapshot(hgx("hgx-1", shards=[shard("m-1", "m", [0])])))
    assert run.running == {"m": ("m-1",)}
    assert [p.replica for p in run.placements] == ["m-2"]
    assert run.placements[0].shards[0].gpus == (1,)


def test_a_replica_on_a_lost_node_does_not_count_as_running() -> None:
    models = one_model("{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}")
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-1", "m", [0])], unreachable_for=timedelta(hours=2)),
        hgx("hgx-2"),
    )
    run = place(models, fleet)
    assert run.running == {}
    assert [(p.replica, p.shards[0].node) for p in run.placements] == [("m-2", "hgx-2")]


def test_gpu_memory_used_by_an_invisible_process_makes_the_gpu_unusable() -> None:
    node = hgx("hgx-1")
    fleet_facts = snapshot(node)
    gpu = fleet_facts.nodes[0].gpus
    assert gpu is not None and all(g.unusable is None for g in gpu)
    raw = facts(node)
    assert raw.gpus is not None
    busy = raw.model_copy(
        update={"gpus": (raw.gpus[0].model_copy(update={"memory_used_mib": 30000}), *raw.gpus[1:])}
    )
    view = build_snapshot([host(node)], {"hgx-1": busy}, NOW, gpu_class).nodes[0]
    assert view.gpus is not None
    assert view.gpus[0].unusable == "30000 MiB used by a process the probe cannot see"


@pytest.mark.parametrize(
    ("used_mib", "unusable"),
    [(1023, None), (1024, "1024 MiB used by a process the probe cannot see")],
    ids=["just-under-1-GiB", "exactly-1-GiB"],
)
def test_one_gib_of_gpu_memory_used_unseen_makes_a_gpu_unusable(
    used_mib: int, unusable: str | None
) -> None:
    node = hgx("hgx-1")
    raw = facts(node)
    assert raw.gpus is not None
    busy = raw.model_copy(
        update={"gpus": (raw.gpus[0].model_copy(update={"memory_used_mib": used_mib}),
                         *raw.gpus[1:])}
    )  # fmt: skip
    view = build_snapshot([host(node)], {"hgx-1": busy}, NOW, gpu_class).nodes[0]
    assert view.gpus is not None
    assert [g.unusable for g in view.gpus[:2]] == [unusable, None]


def test_a_model_of_many_replicas_puts_at_most_a_quarter_on_a_node_while_others_have_room() -> None:
    models = one_model(
        "{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}", replicas=8
    )
    run = place(models, snapshot(hgx("hgx-1"), hgx("hgx-2"), hgx("hgx-3"), hgx("hgx-4")))
    nodes = [p.shards[0].node for p in run.placements]
    assert sorted(nodes) == ["hgx-1"] * 2 + ["hgx-2"] * 2 + ["hgx-3"] * 2 + ["hgx-4"] * 2
    # Once every node holds its quarter, best fit packs instead of spreading further.
    run = place(models, snapshot(hgx("hgx-1"), hgx("hgx-2")))
    assert [p.shards[0].node for p in run.placements].count("hgx-1") == 6


def test_the_spread_limit_is_a_quarter_of_replicas_max_rounded_up() -> None:
    def limit(maximum: int) -> int:
        models = catalog(
            f"""\
            models:
              m:
                source: hf://org/m
                replicas: {{min: 0, max: {maximum}}}
                profiles:
                  - {{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}}
            """
        )
        return spread_limit(models.models["m"])

    assert [limit(n) for n in (0, 1, 4, 5, 8, 9)] == [1, 1, 1, 2, 2, 3]


def test_a_node_takes_replicas_up_to_the_spread_limit_exactly_then_others_do() -> None:
    models = one_model(
        "{name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}", replicas=5
    )
    run = place(models, snapshot(hgx("hgx-1"), hgx("hgx-2"), hgx("hgx-3"), hgx("hgx-4")))
    # replicas.max 5: a quarter rounded up is 2; best fit packs each node to 2, no further.
    nodes = [p.shards[0].node for p in run.placements]
    assert nodes == ["hgx-1", "hgx-1", "hgx-2", "hgx-2", "hgx-3"]


def test_every_constraint_code_is_checked_once_in_the_documented_order() -> None:
    # The list is the order a node is refused in and explanations count in; a code with no
    # check, or checked twice, would be a constraint the docs promise and nothing holds.
    assert [str(code) for code in ORDER] == [
        "node-status", "node-selector", "memory", "gpu-class", "gpu-memory", "gpus", "disk",
        "fabric",
    ]  # fmt: skip
    assert sorted(ORDER) == sorted(Constraint)
    assert all(c.static is not None or c.capacity is not None for c in NODE_CONSTRAINTS)


A100_80 = """\
models:
  m:
    source: hf://org/m
    profiles:
      - {name: a100x4, priority: 10, engine: vllm, gpu_class: A100, gpus_per_node: 4,
         gpu_memory_gb: 80}
"""
A100_40GB_MIB = 40960  # nvidia-smi's memory.total of an A100-SXM4-40GB: 42.9 GB
A100_80GB_MIB = 81920  # an A100 80GB: 85.9 GB


def test_a_profile_asking_80_gb_per_gpu_is_refused_on_40_gb_a100s_as_never() -> None:
    small = NodeSpec("a100-40", "A100", 4, pairs(4), gpu_memory_mib=A100_40GB_MIB)
    placement = one(catalog(A100_80), snapshot(small))
    assert placement.profile is None and placement.verdict is Verdict.NEVER
    [refusal] = placement.rejections
    assert (refusal.constraint, refusal.blocking) == (Constraint.GPU_MEMORY, Blocking.HARDWARE)
    assert refusal.message == "GPU 0-3 have 42.9 GB, needs 80"
    assert summarize_attempt(placement.attempts[0]) == (
        "a100x4: 0/1 nodes fit — 1 has A100 GPUs under 80 GB (a100-40)"
    )


def test_80_gb_cards_fit_an_80_gb_ask_though_they_report_less_than_80_gib() -> None:
    # An "80GB" H100 reports 81,559 MiB: 79.6 GiB, but 85.5 GB of 10^9 bytes.
    fleet = snapshot(
        NodeSpec("a100-40", "A100", 4, pairs(4), gpu_memory_mib=A100_40GB_MIB),
        NodeSpec("a100-80", "A100", 4, pairs(4), gpu_memory_mib=A100_80GB_MIB),
    )
    placement = one(catalog(A100_80), fleet)
    assert [s.node for s in placement.shards] == ["a100-80"]
    h100 = one_model("{name: p, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1,"
                     " gpu_memory_gb: 80}")  # fmt: skip
    assert one(h100, snapshot(hgx("hgx-1"))).placed


def test_only_the_gpus_with_the_memory_asked_are_given_and_unknown_memory_passes() -> None:
    mixed = NodeSpec(
        "mixed", "A100", 6, singletons(6), gpu_memory_mib=A100_80GB_MIB,
        gpu_memory_of={0: A100_40GB_MIB, 3: A100_40GB_MIB, 5: None},
    )  # fmt: skip
    placement = one(catalog(A100_80), snapshot(mixed))
    assert placement.shards[0].gpus == (1, 2, 4, 5)
    # One 80 GB GPU short, and one of those held by us: not now, not never.
    taken = NodeSpec(
        "mixed", "A100", 6, singletons(6), gpu_memory_mib=A100_80GB_MIB,
        gpu_memory_of={0: A100_40GB_MIB, 3: A100_40GB_MIB},
        shards=[shard("x-1", "x", [1])],
    )  # fmt: skip
    placement = one(catalog(A100_80), snapshot(taken))
    assert placement.verdict is Verdict.NOT_NOW
    [refusal] = placement.rejections
    assert refusal.constraint is Constraint.GPUS
    assert refusal.message == "3 of 4 A100 free, needs 4 (GPU 1 held by x-1)"


def test_three_big_gpus_of_four_for_a_four_gpu_ask_is_a_memory_refusal() -> None:
    node = NodeSpec(
        "a100", "A100", 4, pairs(4), gpu_memory_mib=A100_80GB_MIB,
        gpu_memory_of={2: A100_40GB_MIB},
    )  # fmt: skip
    [refusal] = one(catalog(A100_80), snapshot(node)).rejections
    assert refusal.message == "GPU 2 has 42.9 GB, needs 80"


def test_the_docs_constraint_table_is_the_list_row_for_row() -> None:
    table = constraint_table().splitlines()
    assert table[:2] == ["| code | holds when | example message |", "|---|---|---|"]
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| `node-status`", "| `node-selector`", "| `memory`", "| `gpu-class`",
        "| `gpu-memory`", "| `gpus`", "| `disk`", "| `fabric`",
    ]  # fmt: skip
    assert table[-1] == (
        "| `fabric` | multi-node: the nodes share a fabric with an ACTIVE HCA on each"
        " | `no active HCA on fabric ib-east (mlx5_0 DOWN)` |"
    )
    assert constraint_table().endswith("|\n")
