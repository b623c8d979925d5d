"""Names in the order people number them: node-2 before node-10, wherever ctl lists nodes."""

from __future__ import annotations

from cli.cluster import name_order
from cli.placement.place import place
from tests.builders import hgx, snapshot
from tests.unit.placement.test_place import one_model


def test_digit_runs_compare_as_numbers_and_the_rest_as_text() -> None:
    names = ["node-10", "node-2", "gpu-b12", "node-1", "gpu-b1", "node-1a", "node-02", "hgx"]
    assert sorted(names, key=name_order) == [
        "gpu-b1", "gpu-b12", "hgx", "node-1", "node-1a", "node-02", "node-2", "node-10",
    ]  # fmt: skip


def test_a_snapshot_lists_its_nodes_in_number_order() -> None:
    fleet = snapshot(*(hgx(f"hgx-{n}") for n in (10, 2, 1, 11, 9)))
    assert [node.name for node in fleet.nodes] == ["hgx-1", "hgx-2", "hgx-9", "hgx-10", "hgx-11"]


def test_refusals_name_nodes_in_number_order() -> None:
    models = one_model("{name: a100, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 1}")
    fleet = snapshot(*(hgx(f"hgx-{n}") for n in (10, 2, 1)))
    (placement,) = place(models, fleet, ["m"]).placements
    assert [r.node for r in placement.rejections] == ["hgx-1", "hgx-2", "hgx-10"]


def test_between_equal_nodes_the_first_in_number_order_wins() -> None:
    models = one_model("{name: h100, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}")
    (placement,) = place(models, snapshot(hgx("hgx-10"), hgx("hgx-2")), ["m"]).placements
    assert [s.node for s in placement.shards] == ["hgx-2"]
