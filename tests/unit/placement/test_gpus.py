"""Which node and which GPUs a single-node GPU replica gets (docs/placement.md, "Choosing
among the nodes that fit"): tensor-parallel groups inside NVLink domains, the order of
nodes by how well their topology holds the groups, and the note the output prints.
"""

from __future__ import annotations

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot
from cli.placement.place import place
from cli.placement.state import ShardPlacement
from tests.builders import NodeSpec, catalog, pairs, shard, singletons, snapshot


def one_profile(profile: str) -> Catalog:
    return catalog(
        f"""\
        models:
          m:
            source: hf://org/m
            profiles:
              - {profile}
        """
    )


def shard_of(models: Catalog, fleet: Snapshot) -> ShardPlacement:
    (placement,) = place(models, fleet, ["m"]).placements
    assert placement.placed
    (only,) = placement.shards
    return only


A100X2 = one_profile("{name: x2, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 2}")
# Four GPUs in two tensor-parallel pairs.
A100X4_TP2 = one_profile(
    "{name: x4, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 4, "
    "tensor_parallel: 2, pipeline_parallel: 2}"
)


# --- within a node ------------------------------------------------------------------------


def test_two_groups_each_go_into_an_nvlink_pair_and_both_are_given() -> None:
    only = shard_of(A100X4_TP2, snapshot(NodeSpec("a100-1", "A100", 4, pairs(4))))
    assert (only.gpus, only.note) == ((0, 1, 2, 3), "each group in one NVLink domain")


def test_two_groups_that_both_span_domains_are_counted_in_the_note() -> None:
    only = shard_of(A100X4_TP2, snapshot(NodeSpec("a100-1", "A100", 4, singletons(4))))
    assert (only.gpus, only.note) == ((0, 1, 2, 3), "2 tensor-parallel groups span NVLink domains")


def test_equally_good_domains_go_to_the_one_with_the_lowest_free_gpu() -> None:
    # Irregular cabling: every domain a pair, the first one {0, 5}.
    fleet = snapshot(NodeSpec("a100-1", "A100", 8, [[0, 5], [1, 2], [3, 4], [6, 7]]))
    only = shard_of(A100X2, fleet)
    assert (only.gpus, only.note) == ((0, 5), "one NVLink domain")


def test_a_node_whose_topology_lists_no_domain_still_takes_the_replica_and_says_so() -> None:
    # A facts file may say `nvlink_domains: []`: known, and no GPU in any NVLink domain.
    only = shard_of(A100X2, snapshot(NodeSpec("a100-1", "A100", 4, [])))
    assert (only.node, only.gpus, only.note) == (
        "a100-1",
        (0, 1),
        "1 tensor-parallel group spans NVLink domains",
    )


# --- between nodes: in a domain, then unknown topology, then spanning ------------------


def test_a_node_that_keeps_the_group_in_a_domain_beats_a_fuller_one_of_unknown_topology() -> None:
    fleet = snapshot(
        # a-unknown is the better fit (3 free against 4) and first by name.
        NodeSpec("a-unknown", "A100", 4, None, shards=[shard("o-1", "o", [3])]),
        NodeSpec("b-bridged", "A100", 4, pairs(4)),
    )
    only = shard_of(A100X2, fleet)
    assert (only.node, only.gpus, only.note) == ("b-bridged", (0, 1), "one NVLink domain")


def test_a_node_of_unknown_topology_beats_one_where_the_group_would_span() -> None:
    fleet = snapshot(
        NodeSpec("a-pcie", "A100", 2, singletons(2)),  # best fit: 2 free against 4
        NodeSpec("b-unknown", "A100", 4, None),
    )
    only = shard_of(A100X2, fleet)
    assert (only.node, only.gpus, only.note) == ("b-unknown", (0, 1), "NVLink topology unknown")


def test_of_two_nodes_of_unknown_topology_the_better_fit_wins() -> None:
    fleet = snapshot(
        NodeSpec("a-unknown", "A100", 4, None, shards=[shard("o-1", "o", [0])]),  # 3 free
        NodeSpec("b-unknown", "A100", 4, None),  # 4 free
    )
    only = shard_of(A100X2, fleet)
    assert (only.node, only.gpus, only.note) == ("a-unknown", (1, 2), "NVLink topology unknown")


def test_of_two_equal_nodes_of_unknown_topology_the_first_by_name_wins() -> None:
    fleet = snapshot(NodeSpec("gpu-2", "A100", 4, None), NodeSpec("gpu-10", "A100", 4, None))
    assert shard_of(A100X2, fleet).node == "gpu-2"
