"""The `disk` constraint and the preference for nodes that hold the weights: messages,
blocking and verdicts word for word (docs/placement.md)."""

from __future__ import annotations

from dataclasses import replace

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot
from cli.placement.explain import assumption_lines, refusal_lines, summarize_attempt
from cli.placement.place import ReplicaPlacement, Verdict, place
from cli.placement.reasons import Blocking, Constraint
from tests.builders import NodeSpec, catalog, hgx, nvswitch, shard, snapshot, store

SEVENTY_B = """\
models:
  m:
    source: hf://org/m
    replicas: {min: 1, max: 4}
    profiles:
      - {name: x4, priority: 10, engine: vllm, gpu_class: H100, gpus_per_node: 4, disk_gb: 140}
  other:
    source: hf://org/other
    profiles:
      - {name: x4, priority: 10, engine: vllm, gpu_class: H100, gpus_per_node: 4, disk_gb: 140}
  unsized:
    source: hf://org/unsized
    profiles:
      - {name: x4, priority: 10, engine: vllm, gpu_class: H100, gpus_per_node: 4}
  wide:
    source: hf://org/m
    profiles:
      - {name: x2n, priority: 10, engine: vllm, gpu_class: H100, gpus_per_node: 8, nodes: 2,
         pipeline_parallel: 2,
         disk_gb: 140}
"""
MODELS = catalog(SEVENTY_B)


def one(fleet: Snapshot, model: str = "m", models: Catalog = MODELS) -> ReplicaPlacement:
    (placement,) = place(models, fleet, [model]).placements
    return placement


def refused(fleet: Snapshot, model: str = "m") -> tuple[ReplicaPlacement, str, Blocking]:
    placement = one(fleet, model)
    assert placement.profile is None
    [rejection] = placement.rejections
    assert rejection.constraint is Constraint.DISK
    return placement, rejection.message, rejection.blocking


def test_room_taken_by_weights_of_ours_in_use_is_not_now() -> None:
    loads_old = [shard("old-1", "old", [7], source="hf://org/old")]  # the weights are in use
    placement, message, blocking = refused(
        snapshot(hgx("hgx-1", store=store(80, old=95), shards=loads_old))
    )
    assert message == (
        "has 80 GB free in /var/lib/modelfleet/models, needs 140; weights stored there hold 95 GB"
    )
    assert (blocking, placement.verdict) == (Blocking.CAPACITY, Verdict.NOT_NOW)
    assert summarize_attempt(placement.attempts[0]) == (
        "x4: 0/1 nodes fit — 1 has too little free disk for the weights (hgx-1: has 80 GB free"
        " in /var/lib/modelfleet/models, needs 140; weights stored there hold 95 GB)"
    )


def test_weights_no_shard_loads_count_as_room_the_staging_step_makes() -> None:
    # nothing on hgx-1 loads hf://org/old: staging evicts it (least recently used first)
    placement = one(snapshot(hgx("hgx-1", store=store(80, old=95))))
    assert [s.node for s in placement.shards] == ["hgx-1"]
    # a shard whose record does not say what it loads: nothing is known unused
    unknown = [shard("old-1", "old", [7])]
    placement, _, blocking = refused(
        snapshot(hgx("hgx-1", store=store(80, old=95), shards=unknown))
    )
    assert blocking is Blocking.CAPACITY


def test_room_taken_by_other_files_is_blocked() -> None:
    placement, message, blocking = refused(snapshot(hgx("hgx-1", store=store(80, old=20))))
    assert message == (
        "has 80 GB free in /var/lib/modelfleet/models, needs 140; weights stored there hold"
        " 20 GB, other files the rest"
    )
    assert (blocking, placement.verdict) == (Blocking.CONDITION, Verdict.BLOCKED)


def test_a_filesystem_too_small_for_the_weights_is_never() -> None:
    placement, message, blocking = refused(snapshot(hgx("hgx-1", store=store(100, 100))))
    assert message == "has a 100 GB filesystem for /var/lib/modelfleet/models, needs 140"
    assert (blocking, placement.verdict) == (Blocking.HARDWARE, Verdict.NEVER)
    assert refusal_lines(placement) == [
        "not x4 (priority 10): 0/1 nodes fit — 1 has disks under 140 GB (hgx-1)"
    ]


def test_a_node_that_did_not_report_its_store_is_blocked_not_taken_to_have_room() -> None:
    placement, message, blocking = refused(snapshot(hgx("hgx-1")))
    assert message == "did not report its model store, needs 140 GB"
    assert (blocking, placement.verdict) == (Blocking.CONDITION, Verdict.BLOCKED)


def test_weights_stored_complete_need_no_room_at_all() -> None:
    placement = one(snapshot(hgx("hgx-1", store=store(0, 140, m=140))))
    assert [s.node for s in placement.shards] == ["hgx-1"]
    assert assumption_lines(placement) == []


def test_a_size_unknown_passes_and_is_said_not_taken_as_zero() -> None:
    placement = one(snapshot(hgx("hgx-1", store=store(0, 10))), "unsized")
    assert [s.node for s in placement.shards] == ["hgx-1"]
    assert placement.attempts[0].weights_bytes is None
    assert assumption_lines(placement) == [
        "note: size of hf://org/unsized unknown (no disk_gb, no node holds it): disk room not"
        " checked"
    ]


def test_without_disk_gb_the_size_a_node_reports_is_the_need() -> None:
    holder = NodeSpec("cpu-1", store=store(0, 500, unsized=300))  # holds it, has no GPUs
    placement = one(snapshot(holder, hgx("hgx-1", store=store(250))), "unsized")
    assert placement.profile is None
    assert placement.attempts[0].weights_bytes == 300_000_000_000
    assert [r.message for r in placement.rejections if r.node == "hgx-1"] == [
        "has 250 GB free in /var/lib/modelfleet/models, needs 300; weights stored there hold"
        " 0 GB, other files the rest"
    ]


def test_two_replicas_of_one_source_on_a_node_need_its_room_once() -> None:
    node = hgx("hgx-1", store=store(150))
    run = place(MODELS, snapshot(node), ["m", "m", "other"])
    first, third, second = run.placements  # in rounds: m, other, then m again
    assert [p.shards[0].node for p in (first, second)] == ["hgx-1", "hgx-1"]
    assert third.model == "other" and third.profile is None
    [rejection] = third.rejections
    assert rejection.message == (
        "has 10 GB free in /var/lib/modelfleet/models once this run's 140 GB are staged,"
        " needs 140; weights stored there hold 0 GB"
    )
    assert (rejection.blocking, third.verdict) == (Blocking.CAPACITY, Verdict.NOT_NOW)


def test_every_node_of_a_multi_node_replica_needs_the_room() -> None:
    fabric = [("ib", ["mlx5_0"])]
    roomy = hgx("hgx-1", fabrics=fabric, store=store(500))
    short = hgx("hgx-2", fabrics=fabric, store=store(100, old=10))
    placement = one(snapshot(roomy, short), "wide")
    assert placement.profile is None
    assert [(r.node, r.constraint) for r in placement.rejections] == [
        ("hgx-1", Constraint.FABRIC),
        ("hgx-2", Constraint.DISK),
    ]
    both = snapshot(roomy, hgx("hgx-2", fabrics=fabric, store=store(0, m=140)))
    assert sorted(s.node for s in one(both, "wide").shards) == ["hgx-1", "hgx-2"]


def test_among_nodes_that_fit_equally_the_one_holding_the_weights_wins() -> None:
    fleet = snapshot(hgx("hgx-1", store=store(500)), hgx("hgx-2", store=store(500, m=140)))
    assert [s.node for s in one(fleet).shards] == ["hgx-2"]
    # Best fit still comes first: a fuller node wins over one that holds the weights.
    fuller = NodeSpec("hgx-0", "H100", 4, nvswitch(4), store=store(500))
    fleet = snapshot(fuller, hgx("hgx-2", store=store(500, m=140)))
    assert [s.node for s in one(fleet).shards] == ["hgx-0"]


def test_a_multi_node_replica_takes_the_equally_empty_nodes_that_hold_the_weights() -> None:
    fabric = [("ib", ["mlx5_0"])]
    nodes = [
        hgx(f"hgx-{i}", fabrics=fabric, store=store(500, **({"m": 140} if i >= 2 else {})))
        for i in range(1, 4)
    ]
    placement = one(snapshot(*nodes), "wide")
    assert [s.node for s in placement.shards] == ["hgx-2", "hgx-3"]


def test_a_file_source_is_read_where_it_is_and_needs_no_room_in_the_store() -> None:
    local = catalog(
        """\
        models:
          gguf:
            source: file:///srv/models/q.gguf
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp, disk_gb: 9}
        """
    )
    placement = one(snapshot(NodeSpec("cpu-1")), "gguf", local)  # no store reported
    assert [s.node for s in placement.shards] == ["cpu-1"]
    assert placement.attempts[0].weights_bytes == 0
    assert assumption_lines(placement) == []


def test_weights_an_engine_fetches_itself_need_no_room_in_the_store() -> None:
    own = catalog(
        """\
        models:
          gguf:
            source: hf://org/m-GGUF
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp, disk_gb: 9}
        """
    )
    # llama-server -hf picks one quantisation into its own cache: nothing is staged
    placement = one(snapshot(NodeSpec("cpu-1")), "gguf", own)  # no store reported
    assert [s.node for s in placement.shards] == ["cpu-1"]
    assert placement.attempts[0].weights_bytes == 0


def test_a_node_that_does_not_stage_weights_is_not_judged_by_its_store() -> None:
    full = snapshot(hgx("hgx-1", store=store(80, old=20)))
    assert one(full).profile is None  # as above: blocked by other files
    (node,) = full.nodes
    own_caches = replace(full, nodes=(replace(node, stages_weights=False),))
    placement = one(own_caches)  # modelfleet_stage_weights: false — the engine fetches
    assert [s.node for s in placement.shards] == ["hgx-1"]
