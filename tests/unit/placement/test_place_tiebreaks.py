"""The orders placement keeps when several nodes fit (docs/placement.md, "Choosing among
the nodes that fit"): the spread limit counting replicas already running, CPU replicas'
preferences, memory held by the run's own earlier replicas, and the order of `running`.
"""

from __future__ import annotations

from cli.catalog.load import Catalog
from cli.placement.place import Verdict, place
from tests.builders import NodeSpec, catalog, hgx, shard, snapshot


def cpu_model(replicas: int = 1) -> Catalog:
    return catalog(
        f"""\
        models:
          coder:
            source: file:///srv/coder.gguf
            replicas: {{min: {replicas}}}
            profiles:
              - {{name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 24}}
        """
    )


def nodes_of(models: Catalog, *specs: NodeSpec, ask: list[str] | None = None) -> list[str]:
    run = place(models, snapshot(*specs), ask)
    return [p.shards[0].node if p.placed else "-" for p in run.placements]


# --- the spread limit -------------------------------------------------------------------


def test_replicas_already_running_on_a_node_count_toward_its_spread_limit() -> None:
    models = catalog(
        """\
        models:
          m:
            source: hf://org/m
            replicas: {min: 0, max: 8}
            profiles:
              - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
        """
    )
    # replicas.max 8: at most 2 per node while another has room. hgx-1 already runs two,
    # so the better fit (6 free against 8) is passed over.
    running = [shard("m-1", "m", [0]), shard("m-2", "m", [1])]
    run = place(models, snapshot(hgx("hgx-1", shards=running), hgx("hgx-2")), ["m"])
    assert [(p.replica, p.shards[0].node, p.shards[0].gpus) for p in run.placements] == [
        ("m-3", "hgx-2", (0,))
    ]


def test_cpu_replicas_of_one_model_spread_over_nodes_before_best_fit() -> None:
    # replicas 2: a spread limit of 1. cpu-a is the better fit for both.
    found = nodes_of(
        cpu_model(replicas=2), NodeSpec("cpu-a", memory_gib=64), NodeSpec("cpu-b", memory_gib=128)
    )
    assert found == ["cpu-a", "cpu-b"]


# --- CPU replicas -------------------------------------------------------------------------


def test_a_cpu_replica_goes_to_a_node_without_gpus_even_when_a_gpu_node_fits_it_better() -> None:
    found = nodes_of(cpu_model(), hgx("a-gpu", memory_gib=64), NodeSpec("b-cpu", memory_gib=512))
    assert found == ["b-cpu"]


def test_a_cpu_replica_prefers_a_node_that_reported_its_memory() -> None:
    found = nodes_of(cpu_model(), NodeSpec("a-old", memory_gib=None), NodeSpec("b-new"))
    assert found == ["b-new"]


def test_memory_the_run_reserves_adds_to_what_running_shards_reserve() -> None:
    # 64 GB, 24 reserved: one more 24 GB replica fits (40 left), a second does not (16).
    fleet = snapshot(
        NodeSpec("cpu-1", memory_gib=64, shards=[shard("a-1", "a", [], memory_gib=24)])
    )
    run = place(cpu_model(), fleet, ["coder", "coder"])
    first, second = run.placements
    assert [s.node for s in first.shards] == ["cpu-1"]
    assert not second.placed and second.verdict is Verdict.NOT_NOW
    assert [r.message for r in second.rejections] == [
        "has 64 GB of memory, 48 reserved by our shards, needs 24"
    ]


# --- running ------------------------------------------------------------------------------


def test_running_replicas_are_listed_in_natural_order() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("m-10", "m", [0]), shard("m-2", "m", [1])]),
    )
    run = place(cpu_model(replicas=0), fleet)
    assert run.running == {"m": ("m-2", "m-10")}
