"""`ctl place --dry-run --json` (docs/json.md, `modelfleet.placement/v1`): the whole
document, key by key, for the cases scripts read it for. Keys are a contract ("keys are
only ever added"), so each test compares the full document with a literal.
"""

from __future__ import annotations

from cli.placement.explain import placement_json
from cli.placement.place import place
from tests.builders import NodeSpec, catalog, hgx, shard, snapshot

FALLBACK = catalog(
    """\
    models:
      ds:
        source: hf://org/ds
        profiles:
          - {name: x16, priority: 100, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
          - {name: x8, priority: 50, engine: vllm, gpu_class: H100, gpus_per_node: 8}
    """
)


def test_a_replica_placed_by_its_second_profile_lists_both_attempts_and_every_refusal() -> None:
    fleet = snapshot(
        NodeSpec("cpu-1", shards=[shard("other-1", "other", [], memory_gib=8)]),
        hgx("hgx-1", fabrics=[("ib", ["mlx5_0"])]),
        hgx("hgx-2", fabrics=[("ib", ["mlx5_0"])], cordoned="PSU fan failing"),
    )
    run = place(FALLBACK, fleet, ["ds"])
    assert placement_json(run) == {
        "format": "modelfleet.placement/v1",
        "complete": True,
        "unreached": {},
        "running": {"other": ["other-1"]},
        "placements": [
            {
                "model": "ds",
                "replica": "ds-1",
                "placed": True,
                "profile": "x8",
                "verdict": "placed",
                "shards": [
                    {
                        "node": "hgx-1",
                        "rank": 0,
                        "gpus": [0, 1, 2, 3, 4, 5, 6, 7],
                        "hcas": [],
                        "fabric": None,
                        "note": "one NVLink domain",
                    }
                ],
                "attempts": [
                    {
                        "profile": "x16",
                        "priority": 100,
                        "fits": False,
                        "summary": "x16: 0/3 nodes fit — 1 cordoned (hgx-2: PSU fan failing), "
                        "1 has no GPUs (cpu-1), "
                        "1 has no 2-node fabric group (hgx-1), "
                        "no fabric joins 2 eligible nodes (ib: hgx-1 only)",
                        "memory_unknown": [],
                        "weights_bytes": None,
                    },
                    {
                        "profile": "x8",
                        "priority": 50,
                        "fits": True,
                        "summary": "x8: 1/3 nodes fit — 1 cordoned (hgx-2: PSU fan failing), "
                        "1 has no GPUs (cpu-1)",
                        "memory_unknown": [],
                        "weights_bytes": None,
                    },
                ],
                "rejections": [
                    {
                        "profile": "x16",
                        "node": "cpu-1",
                        "constraint": "gpu-class",
                        "blocking": "hardware",
                        "message": "has no GPUs, needs H100",
                    },
                    {
                        "profile": "x16",
                        "node": "hgx-1",
                        "constraint": "fabric",
                        "blocking": "hardware",
                        "message": "ib has 1 eligible node(s) (alone), needs 2 on one fabric",
                    },
                    {
                        "profile": "x16",
                        "node": "hgx-2",
                        "constraint": "node-status",
                        "blocking": "condition",
                        "message": "cordoned: PSU fan failing",
                    },
                    {
                        "profile": "x8",
                        "node": "cpu-1",
                        "constraint": "gpu-class",
                        "blocking": "hardware",
                        "message": "has no GPUs, needs H100",
                    },
                    {
                        "profile": "x8",
                        "node": "hgx-2",
                        "constraint": "node-status",
                        "blocking": "condition",
                        "message": "cordoned: PSU fan failing",
                    },
                ],
            }
        ],
        "rooms": {},
    }


def test_an_unplaced_replica_makes_the_answer_incomplete_even_with_every_node_reached() -> None:
    fleet = snapshot(NodeSpec("cpu-1"))
    run = place(FALLBACK, fleet, ["ds"])
    document = placement_json(run)
    assert document["complete"] is False
    assert document["unreached"] == {}
    (placement,) = document["placements"]
    assert (placement["placed"], placement["profile"], placement["verdict"]) == (
        False,
        None,
        "never",
    )
    assert placement["shards"] == []


def test_an_unreached_node_makes_a_fully_placed_answer_incomplete() -> None:
    run = place(FALLBACK, snapshot(hgx("hgx-1")), ["ds"])
    assert placement_json(run)["complete"] is True
    document = placement_json(run, {"hgx-9": "connection refused on port 22"})
    assert document["complete"] is False
    assert document["unreached"] == {"hgx-9": "connection refused on port 22"}


def test_a_multi_node_shard_carries_its_fabric_hcas_and_nvlink_note() -> None:
    fabric = [("ib", ["mlx5_0", "mlx5_1"])]
    fleet = snapshot(hgx("hgx-1", fabrics=fabric), hgx("hgx-2", fabrics=fabric))
    (placement,) = placement_json(place(FALLBACK, fleet, ["ds"]))["placements"]
    assert placement["profile"] == "x16"
    assert placement["shards"] == [
        {
            "node": "hgx-1",
            "rank": 0,
            "gpus": [0, 1, 2, 3, 4, 5, 6, 7],
            "hcas": ["mlx5_0", "mlx5_1"],
            "fabric": "ib",
            "note": "one NVLink domain",
        },
        {
            "node": "hgx-2",
            "rank": 1,
            "gpus": [0, 1, 2, 3, 4, 5, 6, 7],
            "hcas": ["mlx5_0", "mlx5_1"],
            "fabric": "ib",
            "note": "one NVLink domain",
        },
    ]
    assert placement["attempts"] == [
        {
            "profile": "x16",
            "priority": 100,
            "fits": True,
            "summary": "x16: 2/2 nodes fit",
            "memory_unknown": [],
            "weights_bytes": None,
        }
    ]


def test_a_cpu_shard_has_no_gpus_no_fabric_and_an_empty_note() -> None:
    models = catalog(
        """\
        models:
          coder:
            source: file:///srv/coder.gguf
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 24}
        """
    )
    (placement,) = placement_json(place(models, snapshot(NodeSpec("cpu-1")), ["coder"]))[
        "placements"
    ]
    assert placement["shards"] == [
        {"node": "cpu-1", "rank": 0, "gpus": [], "hcas": [], "fabric": None, "note": ""}
    ]
