"""The refusal line `ctl place --dry-run` prints per profile (docs/placement.md,
"Explanations and verdicts"), word for word: each constraint's countable phrase in the
singular and plural, which node is named as the best candidate, when node names and
their particulars are given, and the numbers inside each message.
"""

from __future__ import annotations

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.placement.explain import summarize_attempt
from cli.placement.place import ReplicaPlacement, place
from cli.placement.reasons import Constraint
from tests.builders import NOW, NodeSpec, catalog, facts, hgx, host, shard, singletons, snapshot


def one_profile(profile: str, model: str = "m") -> Catalog:
    return catalog(
        f"""\
        models:
          {model}:
            source: hf://org/{model}
            profiles:
              - {profile}
        """
    )


def refused(models: Catalog, fleet: Snapshot) -> ReplicaPlacement:
    (placement,) = place(models, fleet, [next(iter(models.models))]).placements
    return placement


def first_summary(models: Catalog, fleet: Snapshot) -> str:
    return summarize_attempt(refused(models, fleet).attempts[0])


X8 = one_profile("{name: x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}")
X2 = one_profile("{name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}")
CPU = one_profile(
    "{name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 24, node_selector: {role: coding}}"
)


# --- the count of one: the phrase's verb in the singular ---------------------------------


def test_one_node_short_of_free_gpus_has_too_few_in_the_singular() -> None:
    fleet = snapshot(hgx("hgx-1", shards=[shard("o-1", "o", [0, 1])]))
    assert first_summary(X8, fleet) == (
        "x8: 0/1 nodes fit — 1 has too few free H100 (best: hgx-1, 6 of 8 free)"
    )


def test_one_node_without_the_label_lacks_it() -> None:
    fleet = snapshot(NodeSpec("cpu-1", memory_gib=64))
    assert first_summary(CPU, fleet) == "cpu: 0/1 nodes fit — 1 lacks role=coding (cpu-1)"


def test_one_node_too_small_has_less_memory_than_needed() -> None:
    fleet = snapshot(NodeSpec("cpu-small", memory_gib=8, labels={"role": "coding"}))
    assert first_summary(CPU, fleet) == (
        "cpu: 0/1 nodes fit — 1 has less than 24 GB of memory (cpu-small)"
    )


def test_one_node_whose_memory_our_shards_reserve_says_how_much() -> None:
    fleet = snapshot(
        NodeSpec("cpu-big", memory_gib=64, labels={"role": "coding"},
                 shards=[shard("a-1", "a", [], memory_gib=48)]),
    )  # fmt: skip
    assert first_summary(CPU, fleet) == (
        "cpu: 0/1 nodes fit — 1 has too little unreserved memory "
        "(cpu-big: has 64 GB of memory, 48 reserved by our shards, needs 24)"
    )


def test_one_node_that_did_not_report_gpus_is_named_with_its_message() -> None:
    fleet = snapshot(NodeSpec("blind", "H100", 8, gpus_known=False))
    assert first_summary(X8, fleet) == (
        "x8: 0/1 nodes fit — 1 did not report GPUs (blind: did not report its GPUs, needs H100)"
    )


def test_one_node_with_a_faulty_gpu_names_the_fault_not_the_whole_message() -> None:
    placement = refused(X8, snapshot(hgx("hgx-1", ecc={2: 2})))
    assert summarize_attempt(placement.attempts[0]) == (
        "x8: 0/1 nodes fit — 1 has too few usable H100 (hgx-1: GPU 2: 2 uncorrected ECC errors)"
    )


def test_one_node_with_too_few_gpus_of_the_class_is_refused_by_that_profile() -> None:
    placement = refused(X8, snapshot(NodeSpec("hgx-small", "H100", 4, singletons(4))))
    assert [(r.profile, r.node, r.constraint, r.message) for r in placement.rejections] == [
        ("x8", "hgx-small", Constraint.GPUS, "has 4 H100, needs 8")
    ]
    assert summarize_attempt(placement.attempts[0]) == (
        "x8: 0/1 nodes fit — 1 has fewer than 8 H100 (hgx-small: has 4 H100, needs 8)"
    )


# --- the best candidate of a capacity group -------------------------------------------


def test_the_best_candidate_is_the_node_with_most_free_gpus_not_the_first_by_name() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("o-1", "o", [0, 1, 2])]),  # 5 free
        hgx("hgx-2", shards=[shard("o-2", "o", [0, 1])]),  # 6 free
    )
    assert first_summary(X8, fleet) == (
        "x8: 0/2 nodes fit — 2 have too few free H100 (best: hgx-2, 6 of 8 free)"
    )


def test_a_node_with_one_free_gpu_is_a_better_candidate_than_one_with_none() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("o-1", "o", range(8))]),  # 0 free
        hgx("hgx-2", shards=[shard("o-2", "o", range(7))]),  # 1 free
    )
    assert first_summary(X2, fleet) == (
        "x2: 0/2 nodes fit — 2 have too few free H100 (best: hgx-2, 1 of 8 free)"
    )


# --- naming nodes: up to two by name, more only counted --------------------------------


def test_more_than_two_nodes_of_one_reason_are_counted_without_names() -> None:
    fleet = snapshot(*(NodeSpec(f"l40s-{i}", "L40S", 4, singletons(4)) for i in (1, 2, 3)))
    assert first_summary(X8, fleet) == "x8: 0/3 nodes fit — 3 have L40S GPUs"


def test_a_profile_that_fits_everywhere_has_a_bare_head() -> None:
    placement = refused(X8, snapshot(hgx("hgx-1"), hgx("hgx-2")))
    assert summarize_attempt(placement.attempts[0]) == "x8: 2/2 nodes fit"


# --- the numbers inside messages ------------------------------------------------------


def test_a_fractional_memory_need_keeps_its_tenth() -> None:
    models = one_profile("{name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 24.5}")
    placement = refused(models, snapshot(NodeSpec("cpu-1", memory_gib=8)))
    assert [r.message for r in placement.rejections] == ["has 8 GB of memory, needs 24.5"]
    assert summarize_attempt(placement.attempts[0]) == (
        "cpu: 0/1 nodes fit — 1 has less than 24.5 GB of memory (cpu-1)"
    )


def test_free_gpus_short_names_the_holders_folded_and_the_faulty_gpus_too() -> None:
    models = one_profile("{name: x6, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 6}")
    # 7 usable (GPU 5 is faulty), 4 of those held: 3 free.
    fleet = snapshot(hgx("hgx-1", ecc={5: 2}, shards=[shard("o-1", "o", [0, 1, 2, 4])]))
    placement = refused(models, fleet)
    assert [r.message for r in placement.rejections] == [
        "3 of 8 H100 free, needs 6 (GPU 0-2,4 held by o-1; GPU 5: 2 uncorrected ECC errors)"
    ]


def mixed(name: str, **kwargs: object) -> Snapshot:
    """A node with two L40S (GPU 0-1) and two A100 (GPU 2-3)."""
    spec = NodeSpec(name, "L40S", 4, singletons(4), **kwargs)  # type: ignore[arg-type]
    raw = facts(spec)
    assert raw.gpus is not None
    gpus = tuple(
        g if g.index < 2 else g.model_copy(update={"name": "NVIDIA A100 80GB PCIe"})
        for g in raw.gpus
    )
    return build_snapshot(
        [host(spec)], {name: raw.model_copy(update={"gpus": gpus})}, NOW, gpu_class
    )


def test_a_node_with_two_gpu_classes_names_both() -> None:
    placement = refused(X8, mixed("mix-1"))
    assert [r.message for r in placement.rejections] == ["has A100, L40S GPUs, needs H100"]
    assert summarize_attempt(placement.attempts[0]) == (
        "x8: 0/1 nodes fit — 1 has A100, L40S GPUs (mix-1)"
    )


def test_a_faulty_gpu_of_another_class_is_not_named_among_the_free_shortfall() -> None:
    models = one_profile("{name: a2, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 2}")
    # GPU 0 (an L40S) has a fault and GPU 2 (an A100) is held: the A100s are short, and
    # the faulty L40S is no reason for that.
    fleet = mixed("mix-1", ecc={0: 1}, shards=[shard("o-1", "o", [2])])
    placement = refused(models, fleet)
    assert [r.message for r in placement.rejections] == [
        "1 of 2 A100 free, needs 2 (GPU 2 held by o-1)"
    ]


# --- multi-node: the fabric line only when the fabric is what refused -------------------

MULTI3 = one_profile(
    "{name: x24, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8, nodes: 3, "
    "tensor_parallel: 24}",
    model="ds",
)
MULTI2 = one_profile(
    "{name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8, nodes: 2, "
    "tensor_parallel: 16}",
    model="ds",
)


def test_a_multi_node_profile_refused_for_free_gpus_has_no_fabric_line() -> None:
    fabric = [("ib", ["mlx5_0"])]
    fleet = snapshot(
        hgx("hgx-1", fabrics=fabric, shards=[shard("o-1", "o", [0])]),
        hgx("hgx-2", fabrics=fabric, shards=[shard("o-2", "o", [0, 1])]),
    )
    assert first_summary(MULTI2, fleet) == (
        "x16: 0/2 nodes fit — 2 have too few free H100 (best: hgx-1, 7 of 8 free)"
    )


def test_the_fabric_line_lists_every_eligible_node_of_a_fabric_too_small() -> None:
    fabric = [("ib", ["mlx5_0"])]
    fleet = snapshot(hgx("hgx-1", fabrics=fabric), hgx("hgx-2", fabrics=fabric))
    assert first_summary(MULTI3, fleet) == (
        "x24: 0/2 nodes fit — 2 have no 3-node fabric group (hgx-1, hgx-2), "
        "no fabric joins 3 eligible nodes (ib: hgx-1, hgx-2 only)"
    )
