"""Node output is untrusted input (issue 16, item 1): shard records a node cannot back up
are invalid shards, never stopped, never routed to, their GPUs unusable. Pure."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from cli.cluster.snapshot import checked
from cli.cluster.trust import catalog_problem, record_problem
from cli.cluster.views import gpu_counts, node_notes, nodes_json
from cli.facts.model import ShardRecord
from cli.reconcile.planner import plan
from cli.routes.litellm import deployment, render
from cli.routes.table import ReplicaRoute, State, route_table
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, snapshot

MODELS = catalog(
    """\
    models:
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: h100x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)
ADDRESSES = {"hgx-2": "10.0.0.2", "cpu-1": "10.0.1.1"}


def real(**kwargs: object) -> object:
    return shard("big-1", "big", [0], profile="h100x1", port=8000, **kwargs)  # type: ignore[arg-type]


def test_a_cpu_node_claiming_a_gpu_replica_is_neither_counted_nor_routed() -> None:
    fleet = snapshot(
        hgx("hgx-2", shards=[real(started=NOW - timedelta(hours=1))]),
        NodeSpec(
            "cpu-1",
            shards=[shard("big-7", "big", [], profile="h100x1", started=NOW - timedelta(days=30))],
        ),
    )
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    assert the_plan.drains == ()
    assert the_plan.stops == ()
    assert the_plan.running == {"big": ("big-1",)}
    table = route_table(MODELS, fleet, ADDRESSES)
    assert [r.replica for r in table.deployments] == ["big-1"]
    assert "10.0.1.1" not in render(table)


def test_a_false_failed_rank_1_does_not_make_reconcile_stop_the_real_replica() -> None:
    fleet = snapshot(
        hgx("hgx-2", shards=[real()]),
        hgx("hgx-3", shards=[shard("big-1", "big", [0], 1, profile="h100x1", nodes=2,
                                   state="failed")]),
    )  # fmt: skip
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    assert the_plan.stops == ()
    assert the_plan.drains == ()
    assert the_plan.starts == ()
    assert the_plan.running == {"big": ("big-1",)}
    assert [r.replica for r in route_table(MODELS, fleet, ADDRESSES).deployments] == ["big-1"]


def test_a_replica_named_as_a_secret_reference_never_reaches_the_router() -> None:
    fleet = snapshot(
        hgx("hgx-2", shards=[shard("os.environ/LITELLM_MASTER_KEY", "big", [0],
                                   profile="h100x1")]),
    )  # fmt: skip
    table = route_table(MODELS, fleet, ADDRESSES)
    assert table.deployments == ()
    assert render(table).count("os.environ/") == 1  # the master key's own reference
    node = fleet.node("hgx-2")
    assert node.shards == ()
    assert [i.record.replica for i in node.invalid_shards] == ["os.environ/LITELLM_MASTER_KEY"]


@pytest.mark.parametrize("name", ["os.environ/LITELLM_MASTER_KEY", "oidc/google/x", "a b"])
def test_render_refuses_a_name_litellm_would_resolve(name: str) -> None:
    url = "http://10.0.0.2:8000/v1"
    as_replica = ReplicaRoute(name, "big", "h100x1", "vllm", "hgx-2", url, State.READY, "")
    as_model = ReplicaRoute("big-1", name, "h100x1", "vllm", "hgx-2", url, State.READY, "")
    for bad in (as_replica, as_model):
        with pytest.raises(ValueError, match="not a catalog name"):
            deployment(bad)


def test_an_invalid_shards_gpus_are_unusable_not_free_and_it_is_never_stopped() -> None:
    fleet = snapshot(hgx("hgx-2", shards=[shard("ghost-1", "big", [3, 99], profile="h100x1")]))
    node = fleet.node("hgx-2")
    assert node.shards == ()
    counts = gpu_counts(node)
    assert counts is not None and [(c.free, c.total) for c in counts] == [(7, 8)]
    # [3, 99]: GPU 99 does not exist, so nothing is believed; GPU 3 is claimed.
    assert node.gpus is not None
    assert node.gpus[3].unusable == "claimed by invalid shard ghost-1/0"


def test_claimed_existing_gpus_of_an_invalid_record_are_held_by_something_foreign() -> None:
    fleet = snapshot(hgx("hgx-2", shards=[shard("ghost-1", "big", [2, 3], profile="h100x1")]))
    seen = checked(fleet, MODELS).node("hgx-2")  # two GPUs for a one-GPU profile
    assert seen.shards == ()
    assert seen.gpus is not None
    assert [g.unusable for g in seen.gpus][:4] == [
        None, None, "claimed by invalid shard ghost-1/0", "claimed by invalid shard ghost-1/0"
    ]  # fmt: skip
    assert [g.held_by for g in seen.gpus][:4] == [None, None, None, None]
    counts = gpu_counts(seen)
    assert counts is not None and [(c.free, c.total) for c in counts] == [(6, 8)]
    the_plan = plan(MODELS, fleet, {}, ADDRESSES, random.Random(1))
    assert the_plan.stops == () and the_plan.drains == ()
    assert the_plan.running == {}
    assert not set(the_plan.starts[0].placement.shards[0].gpus) & {2, 3}
    assert route_table(MODELS, fleet, ADDRESSES).deployments == ()


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (shard("big-1", "big", [0], 2, profile="h100x1", nodes=2), "rank 2 is not below nodes 2"),
        (shard("big-1", "big", [0], profile="h100x1", port=0), "port 0 is not in 1-65535"),
        (shard("big-1", "big", [0], profile="h100x1", port=70000), "port 70000 is not in 1-65535"),
        (
            shard("big-1", "big", [0], profile="h100x1", memory_gib=float("nan")),
            "memory_gib nan is not a finite amount",
        ),
        (
            shard("big-1", "big", [0], profile="h100x1", nodes=10**12),
            "nodes 1000000000000 is more than 1024",
        ),
        (shard("big-1", "big", [0, 0], profile="h100x1"), "claims a GPU twice"),
        (
            shard("big-1", "big", [8], profile="h100x1"),
            "claims GPU 8, which the node does not have",
        ),
        (
            shard("big-1", "\x1b]52;c;aGk=\x07", [0], profile="h100x1"),
            "is not a name the catalog could give",
        ),
    ],
)
def test_a_malformed_record_is_an_invalid_shard_noted_by_node(record: object, why: str) -> None:
    fleet = snapshot(hgx("hgx-2", shards=[record]))
    node = fleet.node("hgx-2")
    assert node.shards == ()
    assert len(node.invalid_shards) == 1
    assert why in node.invalid_shards[0].reason
    notes = node_notes(node)
    assert any(n.startswith("invalid shard 'big-1' rank") and why in n for n in notes)
    assert "shard records checked without a catalog: model, profile and GPU class unchecked" in (
        notes
    )
    assert all("\x1b" not in n and "\x07" not in n for n in notes)
    entry = nodes_json(fleet)["nodes"][0]
    assert entry["shards"] == []
    assert why in entry["invalid_shards"][0]["reason"]
    assert entry["catalog_checked"] is False


def test_with_the_catalog_a_wrong_gpu_count_or_class_is_invalid() -> None:
    fleet = snapshot(
        hgx("hgx-2", shards=[shard("big-1", "big", [0, 1], profile="h100x1")]),
        NodeSpec("l40-1", "L40S", 2, shards=[shard("big-2", "big", [0], profile="h100x1")]),
    )
    the_plan = plan(MODELS, fleet, {}, ADDRESSES | {"l40-1": "10.0.0.9"}, random.Random(1))
    assert the_plan.stops == () and the_plan.drains == ()
    assert the_plan.running == {}
    table = route_table(MODELS, fleet, ADDRESSES | {"l40-1": "10.0.0.9"})
    assert table.deployments == ()
    assert fleet.node("hgx-2").shards[0].replica == "big-1"  # without the catalog: believed


def test_disagreeing_ranks_make_every_record_of_the_replica_invalid() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[shard("big-1", "big", [0], 0, profile="h100x1")]),
        hgx("hgx-2", shards=[shard("big-1", "big", [0], 0, profile="h100x1")]),
    )
    for name in ("hgx-1", "hgx-2"):
        node = fleet.node(name)
        assert node.shards == ()
        assert node.invalid_shards[0].reason == "rank 0 claimed on hgx-1 and hgx-2"
    the_plan = plan(MODELS, fleet, {}, {"hgx-1": "a", "hgx-2": "b"}, random.Random(1))
    assert the_plan.stops == () and the_plan.drains == ()


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/cluster/trust.py: the words each
# refusal gives and the bounds a well-formed record stays within.

H100S = dict.fromkeys(range(8), "H100")


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (shard("big 1", "big", [0], profile="h100x1"), "replica 'big 1'"),
        (shard("big-1", "big model", [0], profile="h100x1"), "model 'big model'"),
        (shard("big-1", "big", [0], profile="h100 x1"), "profile 'h100 x1'"),
    ],
)
def test_a_name_no_catalog_could_give_is_refused_naming_its_field(
    record: ShardRecord, why: str
) -> None:
    assert record_problem(record, H100S) == f"{why} is not a name the catalog could give"


def test_a_record_at_each_bound_without_a_catalog_is_believed() -> None:
    assert record_problem(shard("big-1", "big", [0], nodes=1024), H100S) is None
    assert record_problem(shard("big-1", "big", [0], port=1), H100S) is None
    assert record_problem(shard("big-1", "big", [0], port=65535), H100S) is None
    assert record_problem(shard("big-1", "big", [0], port=65536), H100S) == (
        "port 65536 is not in 1-65535"
    )


def test_the_gpus_a_record_claims_are_refused_with_their_words() -> None:
    assert record_problem(shard("big-1", "big", [3, 3]), H100S) == "claims a GPU twice"
    assert record_problem(shard("big-1", "big", [0]), None) == (
        "claims GPUs on a node that did not report its GPUs"
    )
    assert record_problem(shard("big-1", "big", range(8, 18)), H100S) == (
        "claims GPU 8, 9, 10, 11, 12, 13, 14, 15, which the node does not have"
    )


def test_with_the_catalog_the_gpu_count_and_every_wrong_class_are_said() -> None:
    models = catalog(
        """\
        models:
          big:
            source: hf://org/big
            replicas: {min: 1}
            profiles:
              - {name: h100x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
        """
    )
    mixed = {0: "L40S", 1: "A100", 2: "H100"}

    assert catalog_problem(shard("big-1", "big", [2], profile="h100x2"), models, mixed) == (
        "holds 1 GPUs; profile h100x2 takes 2 per node"
    )
    assert catalog_problem(shard("big-1", "big", [0, 1], profile="h100x2"), models, mixed) == (
        "GPU class A100, L40S is not profile h100x2's H100"
    )
