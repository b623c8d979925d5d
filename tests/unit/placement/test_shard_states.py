"""Shard states from the facts to what `ctl nodes`, its JSON and the routes say.

Issue 13, finding 3: after node-2 restarted, `ctl nodes` still listed `big-1/1, chat-2/0`
and 3/8 H100 free, though their units had failed. A failed shard's processes are gone:
it is shown as failed, holds no GPU and no memory, and serves nothing; a starting one
still holds what it was given but serves nothing yet.
"""

from __future__ import annotations

import json

from cli.cluster.views import gpu_counts, node_notes, nodes_json
from cli.placement.place import place, running_replicas
from cli.placement.state import PlacementState
from cli.routes.table import route_table
from cli.ui.tables import gpus_cell, shards_cell
from tests.builders import catalog, hgx, shard, snapshot

RESTARTED = snapshot(
    hgx(
        "node-2",
        shards=[
            shard("big-1", "big", range(4), 1, 64.0, profile="x8", nodes=2, state="failed"),
            shard("chat-2", "chat", [4], 0, 16.0, port=8001, state="failed"),
            shard("chat-3", "chat", [5], 0, 16.0, port=8002, state="starting"),
            shard("chat-4", "chat", [6], 0, 16.0, port=8003),
        ],
    )
)
NODE = RESTARTED.node("node-2")


def test_a_failed_shard_holds_no_gpu_and_no_memory_while_running_and_starting_ones_do() -> None:
    held = {gpu.index: gpu.held_by for gpu in NODE.gpus or ()}
    assert held == {
        0: None, 1: None, 2: None, 3: None, 4: None, 5: "chat-3", 6: "chat-4", 7: None,
    }  # fmt: skip
    assert NODE.memory_reserved_gib == 32.0  # chat-3 and chat-4, 16 GB each
    assert [(c.free, c.total) for c in gpu_counts(NODE) or ()] == [(6, 8)]
    assert gpus_cell(NODE) == "6/8 H100"


def test_every_shard_is_still_listed_with_its_state_unless_it_runs() -> None:
    assert [s.replica for s in NODE.shards] == ["big-1", "chat-2", "chat-3", "chat-4"]
    assert shards_cell(NODE) == "big-1/1 failed, chat-2/0 failed, chat-3/0 starting, chat-4/0"


def test_each_failed_shard_gets_a_note_naming_the_gpus_it_no_longer_holds() -> None:
    assert node_notes(NODE) == [
        "shard big-1/1 failed: GPU 0, 1, 2, 3 no longer held",
        "shard chat-2/0 failed: GPU 4 no longer held",
    ]


def test_a_failed_cpu_shard_is_noted_without_gpus() -> None:
    cpu = snapshot(hgx("node-1", shards=[shard("tiny-1", "tiny", [], state="failed")]))
    assert node_notes(cpu.node("node-1")) == ["shard tiny-1/0 failed"]


def test_the_json_carries_each_shards_state_and_no_holder_for_a_failed_ones_gpus() -> None:
    (document,) = json.loads(json.dumps(nodes_json(RESTARTED)))["nodes"]
    assert [(s["replica"], s["rank"], s["state"]) for s in document["shards"]] == [
        ("big-1", 1, "failed"),
        ("chat-2", 0, "failed"),
        ("chat-3", 0, "starting"),
        ("chat-4", 0, "running"),
    ]
    assert [g["held_by"] for g in document["gpus"]] == [
        None, None, None, None, None, "chat-3", "chat-4", None,
    ]  # fmt: skip
    assert document["gpu_counts"] == [{"class": "H100", "free": 6, "total": 8}]
    assert document["memory_reserved_gib"] == 32.0


def test_placement_may_use_the_gpus_a_failed_shard_left_but_not_a_starting_ones() -> None:
    state = PlacementState(RESTARTED)
    assert state.free_gpus(NODE, "H100") == [0, 1, 2, 3, 4, 7]


MODELS = catalog(
    """\
    models:
      chat:
        source: hf://org/chat
        replicas: {min: 1}
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)


def test_only_the_running_shard_is_routed() -> None:
    table = route_table(MODELS, RESTARTED, {"node-2": "10.0.0.2"})
    (chat,) = [route for route in table.models if route.model == "chat"]
    states = {r.replica: (r.state.value, r.ready) for r in chat.replicas}
    assert states == {
        "chat-2": ("failed", False),
        "chat-3": ("starting", False),
        "chat-4": ("ready", True),
    }


def test_a_failed_shards_gpu_with_a_process_still_on_it_is_unusable_not_free() -> None:
    lingering = snapshot(
        hgx("node-1", foreign={3: "/opt/venv/bin/python3"},
            shards=[shard("big-1", "big", range(4), state="failed")]),
    ).node("node-1")  # fmt: skip
    gpus = {gpu.index: (gpu.held_by, gpu.unusable) for gpu in lingering.gpus or ()}
    assert gpus[2] == (None, None)
    assert gpus[3] == (None, "pid 4003 python3")
    assert gpus_cell(lingering) == "7/8 H100"


def test_a_replica_whose_units_all_failed_is_not_running_but_keeps_its_name() -> None:
    # chat-2 failed, chat-3 starts, chat-4 runs; big-1's only shard here failed.
    assert running_replicas(RESTARTED) == {"chat": ("chat-3", "chat-4")}

    run = place(MODELS, RESTARTED, ["chat"])

    assert run.running == {"chat": ("chat-3", "chat-4")}
    assert [placement.replica for placement in run.placements] == ["chat-5"]
