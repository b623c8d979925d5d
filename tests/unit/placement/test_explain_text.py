"""The lines `ctl place` prints under a placement: where each shard went (shard_text, with
device lists folded by format_devices), the profiles refused first (refusal_lines) and what
was taken on trust (assumption_lines).

Mutation testing found these reached by no test (format_devices, shard_text,
refusal_lines) or reached without their words checked (assumption_lines).
"""

from __future__ import annotations

from cli.catalog.load import Catalog
from cli.placement.explain import assumption_lines, refusal_lines, shard_text
from cli.placement.gpus import format_devices
from cli.placement.place import ReplicaPlacement, place
from cli.placement.state import ShardPlacement
from tests.builders import NodeSpec, catalog, nvswitch, snapshot

# --- format_devices, shard_text -----------------------------------------------------------


def test_devices_with_one_stem_fold_their_indices() -> None:
    assert format_devices(("mlx5_0", "mlx5_2", "mlx5_3")) == "mlx5_0,2-3"
    assert format_devices(("mlx5_1", "mlx5_0")) == "mlx5_0-1"
    assert format_devices(("mlx5_0",)) == "mlx5_0"
    assert format_devices(()) == ""
    # only digits are the index: a letter before them stays in the stem
    assert format_devices(("hcaX0", "hcaX1")) == "hcaX0-1"


def test_stems_keep_their_first_order_and_names_without_an_index_come_last() -> None:
    names = ("eth", "123", "mlx5_0", "ib1", "ib2", "mlx4_3")
    assert format_devices(names) == "mlx5_0,ib1-2,mlx4_3,eth,123"


def test_a_shard_line_gives_node_gpus_note_and_hcas_each_only_when_there() -> None:
    full = ShardPlacement("hgx-3", 0, (0, 1, 2, 3), ("mlx5_0", "mlx5_2"), "ib", "one NVLink domain")
    assert shard_text(full) == "hgx-3  GPU 0-3 (one NVLink domain)  mlx5_0,2"
    assert shard_text(ShardPlacement("cpu-1", 0, (), (), None)) == "cpu-1"
    assert shard_text(ShardPlacement("hgx-1", 1, (4, 6), (), None)) == "hgx-1  GPU 4,6"
    assert shard_text(ShardPlacement("hgx-2", 0, (), ("mlx5_1",), "ib")) == "hgx-2  mlx5_1"


# --- refusal_lines, assumption_lines ------------------------------------------------------

MODELS: Catalog = catalog(
    """\
    models:
      m:
        source: hf://org/m
        replicas: {min: 1}
        profiles:
          - {name: x8, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 8}
          - {name: big-mem, priority: 70, engine: vllm, gpu_class: H100, gpus_per_node: 2,
             min_memory_gb: 2000}
      plain:
        source: hf://org/plain
        replicas: {min: 1}
        profiles:
          - {name: x1, priority: 5, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)


def placed(*specs: NodeSpec, model: str = "m") -> ReplicaPlacement:
    (placement,) = place(MODELS, snapshot(*specs), [model]).placements
    return placement


def node(name: str, gpus: int, memory_gib: float | None = 512, **kwargs: object) -> NodeSpec:
    return NodeSpec(name, "H100", gpus, nvswitch(gpus), memory_gib=memory_gib, **kwargs)  # type: ignore[arg-type]


def test_each_refused_profile_gets_a_line_with_its_priority_and_reasons() -> None:
    placement = placed(node("a-1", 4, None), node("a-2", 4, cordoned="swap"), node("a-3", 2))
    assert placement.profile is not None and placement.profile.name == "big-mem"
    assert refusal_lines(placement) == [
        "not x8 (priority 100): 0/3 nodes fit — 2 have fewer than 8 H100 (a-1: has 4 H100, "
        "needs 8; a-3: has 2 H100, needs 8), 1 cordoned (a-2: swap)"
    ]


def test_a_placement_whose_first_profile_fits_has_no_refusals() -> None:
    assert refusal_lines(placed(node("a-1", 8))) == []


def test_only_a_chosen_node_that_did_not_report_its_memory_is_noted() -> None:
    placement = placed(node("a-1", 4, None), node("a-4", 4, None))
    assert [s.node for s in placement.shards] == ["a-1"]
    assert [a.memory_unknown for a in placement.attempts] == [(), ("a-1", "a-4")]
    assert assumption_lines(placement) == [
        "note: size of hf://org/m unknown (no disk_gb, no node holds it): disk room not checked",
        "note: a-1 did not report its memory; assumed to hold 2000 GB",
    ]


def test_no_note_when_the_node_reported_its_memory_or_the_profile_asks_for_none() -> None:
    for placement in (placed(node("a-1", 4, 4096)), placed(node("a-1", 4, None), model="plain")):
        assert [line for line in assumption_lines(placement) if "memory;" in line] == []


def test_an_unplaced_replica_assumes_nothing() -> None:
    placement = placed(node("a-1", 1, None))
    assert placement.profile is None
    assert assumption_lines(placement) == []
