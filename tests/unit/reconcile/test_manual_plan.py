"""`ctl place`'s plan (planner.plan_manual): one more replica per model asked for, marked
manual, on ports and addresses the nodes can serve.

plan_manual was reached by no unit or property test (mutation testing: its 45 mutants all
untested), though `ctl place` writes exactly what it returns onto the nodes.
"""

from __future__ import annotations

import json

from cli.catalog.load import Catalog
from cli.reconcile.planner import Start, plan_manual
from tests.builders import NOW, catalog, hgx, shard, snapshot

MODELS: Catalog = catalog(
    """\
    models:
      small:
        source: hf://org/small
        replicas: {min: 1, max: 3}
        profiles:
          - {name: x2, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
    """
)
FABRIC = [("ib", ["mlx5_0", "mlx5_1"])]


def exec_start(unit_text: str) -> str:
    (line,) = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    return line


def test_each_model_asked_for_gets_one_manual_replica_and_what_does_not_fit_is_unplaced() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("small-1", "small", [0, 1], profile="x2")], listening=[8000]),
        hgx("hgx-2"),
    )
    result = plan_manual(
        MODELS, fleet, ["small", "big", "small"], {"hgx-1": "10.0.0.1"}, {"hgx-2": "10.9.9.2"}
    )
    assert result.now == NOW
    assert (result.stops, result.drains, result.waits, result.leaves) == ((), (), (), ())
    assert [u.replica for u in result.unplaced] == ["big-1"]  # no fabric: no two-node replica
    assert [(s.replica, s.model, s.profile.name, s.reason) for s in result.starts] == [
        ("small-2", "small", "x2", "asked for by ctl place"),
        ("small-3", "small", "x2", "asked for by ctl place"),
    ]
    second, third = result.starts
    assert [(f.node, f.rank, f.port) for f in second.files] == [("hgx-2", 0, 8000)]
    # hgx-1 has 8000 taken (its own shard, and something listening): the next port
    assert [(f.node, f.rank, f.port) for f in third.files] == [("hgx-1", 0, 8001)]
    # the health check goes to the node's address, or its name when it has none
    assert second.leader.health_url == "http://hgx-2:8000"
    assert third.leader.health_url == "http://10.0.0.1:8001"
    # the engine listens where the inventory says, else on every address
    assert '"--host" "10.9.9.2" "--port" "8000"' in exec_start(second.leader.unit_text)
    assert '"--host" "0.0.0.0" "--port" "8001"' in exec_start(third.leader.unit_text)
    assert json.loads(third.leader.record_text) == {
        "engine": "vllm",
        "gpus": [2, 3],
        "hcas": [],
        "memory_gib": None,
        "model": "small",
        "nodes": 1,
        "origin": "manual",
        "port": 8001,
        "profile": "x2",
        "rank": 0,
        "replica": "small-3",
        "source": "hf://org/small",
        "started": "2026-11-30T09:00:00+00:00",
        "unit": "modelfleet-small-3-rank0.service",
    }


def test_a_two_node_manual_replica_has_one_port_its_hcas_and_rank_0s_address_as_master() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=FABRIC), hgx("hgx-2", fabrics=FABRIC))
    result = plan_manual(MODELS, fleet, ["big"], {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2"})
    assert result.unplaced == ()
    (start,) = result.starts
    assert isinstance(start, Start)
    assert (start.replica, start.profile.name) == ("big-1", "x16")
    assert [(f.node, f.rank, f.port, f.unit) for f in start.files] == [
        ("hgx-1", 0, 8000, "modelfleet-big-1-rank0.service"),
        ("hgx-2", 1, 8000, "modelfleet-big-1-rank1.service"),
    ]
    assert start.leader.health_url == "http://10.0.0.1:8000"
    assert start.workers[0].health_url is None
    # the weights are staged on both nodes first, in their stores
    assert [(j.node, j.source, j.store, j.directory) for j in start.stage] == [
        (node, "hf://org/big", "/var/lib/modelfleet/models", "hf-org-big-319dccb366ec")
        for node in ("hgx-1", "hgx-2")
    ]
    for rank, files in enumerate(start.files):
        assert exec_start(files.unit_text) == (
            'ExecStart="python3" "-m" "sglang.launch_server" "--model-path" '
            '"/var/lib/modelfleet/models/hf-org-big-319dccb366ec" '
            '"--host" "0.0.0.0" "--port" "8000" "--served-model-name" "big" "--tp-size" "16" '
            '"--enable-metrics" '
            f'"--nnodes" "2" "--node-rank" "{rank}" "--dist-init-addr" "10.0.0.1:18000"'
        )
        assert 'HF_HUB_OFFLINE="1"' in files.env_text.splitlines()  # loads from disk, offline
        assert 'NCCL_IB_HCA="=mlx5_0,mlx5_1"' in files.env_text.splitlines()
        record = json.loads(files.record_text)
        assert (record["origin"], record["hcas"], record["nodes"], record["rank"]) == (
            "manual",
            ["mlx5_0", "mlx5_1"],
            2,
            rank,
        )


def test_a_master_without_an_address_is_reached_by_its_name() -> None:
    fleet = snapshot(hgx("hgx-1", fabrics=FABRIC), hgx("hgx-2", fabrics=FABRIC))
    (start,) = plan_manual(MODELS, fleet, ["big"], {}).starts
    assert '"--dist-init-addr" "hgx-1:18000"' in exec_start(start.workers[0].unit_text)
    assert start.leader.health_url == "http://hgx-1:8000"


def test_asking_for_nothing_plans_nothing() -> None:
    result = plan_manual(MODELS, snapshot(hgx("hgx-1")), [], {})
    assert result.empty
    assert (result.starts, result.unplaced) == ((), ())
