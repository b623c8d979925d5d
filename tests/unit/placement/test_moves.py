"""Moves that make room (cli/placement/moves.py), on fleets small enough to check by hand:
the fewest moves, then the fewest GPUs reloaded; never a multi-node replica, never off or
onto a cordoned node; and a state left exactly as it was when no plan works."""

from __future__ import annotations

from cli.catalog.load import Catalog
from cli.facts.model import ShardRecord
from cli.placement.explain import placement_json
from cli.placement.moves import Running, _plans, make_room, movable, rooms_for
from cli.placement.place import Verdict, place, place_replica
from cli.placement.state import PlacementState, ShardPlacement
from cli.ui.placement import render_run
from tests.builders import NodeSpec, catalog, hgx, pairs, shard, snapshot

MODELS = catalog(
    """\
    models:
      big:
        source: hf://org/big
        replicas: {min: 0}
        profiles:
          - {name: h100x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}
      small:
        source: hf://org/small
        replicas: {min: 1, max: 16}
        profiles:
          - {name: h100x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      mid:
        source: hf://org/mid
        replicas: {min: 1, max: 16}
        profiles:
          - {name: h100x4, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 4}
      wide:
        source: hf://org/wide
        replicas: {min: 1}
        profiles:
          - {name: h100-2x4, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 4,
             nodes: 2, tensor_parallel: 8}
      huge:
        source: hf://org/huge
        replicas: {min: 0}
        profiles:
          - {name: h100-2x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
      coder:
        source: hf://org/coder
        replicas: {min: 0, max: 16}
        profiles:
          - {name: h100x4, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 4}
          - {name: a100x4, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 4}
      tiny:
        source: hf://org/tiny
        replicas: {min: 0, max: 16}
        profiles:
          - {name: h100, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      fat:
        source: hf://org/fat
        replicas: {min: 0}
        profiles:
          - {name: h100x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8,
             min_memory_gb: 400}
      lean:
        source: file:///srv/lean.gguf
        replicas: {min: 0, max: 64}
        profiles:
          - {name: q4, priority: 1, engine: llama.cpp, min_memory_gb: 16}
      heavy:
        source: file:///srv/heavy.gguf
        replicas: {min: 0, max: 64}
        profiles:
          - {name: q4, priority: 1, engine: llama.cpp, min_memory_gb: 96}
    """
)


def small(replica: str, *gpus: int) -> object:
    return shard(replica, "small", gpus, profile="h100x2")


def mid(replica: str, first: int) -> object:
    return shard(replica, "mid", range(first, first + 4), profile="h100x4")


def room_for_big(models: Catalog, *nodes: object, limit: int = 2) -> tuple[list[str], str]:
    fleet = snapshot(*nodes)  # type: ignore[arg-type]
    state = PlacementState(fleet)
    assert not place_replica(models.models["big"], "big-0", state).placed
    room = make_room(models.models["big"], "big-1", state, movable(models, fleet), limit)
    if room is None:
        return [], "-"
    moves = [f"{m.replica} {m.source.node} {m.source.gpus} → {m.target.node} {m.target.gpus}"
             for m in room.moves]  # fmt: skip
    return moves, room.placement.shards[0].node


def test_one_move_frees_a_node_for_an_eight_gpu_replica() -> None:
    moves, node = room_for_big(
        MODELS,
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", shards=[small("small-2", 0, 1), mid("mid-1", 2)]),
    )  # fmt: skip
    assert moves == ["small-1 hgx-1 (0, 1) → hgx-2 (6, 7)"]
    assert node == "hgx-1"


def test_the_cheaper_of_two_single_moves_wins() -> None:
    # hgx-1 frees with the 2-GPU replica moved, hgx-2 with the 4-GPU one: 2 GPUs reloaded.
    moves, node = room_for_big(
        MODELS,
        hgx("hgx-1", shards=[mid("mid-1", 0)]),
        hgx("hgx-2", shards=[small("small-1", 0, 1)]),
        hgx("hgx-3", shards=[small("small-2", 0, 1), mid("mid-2", 2)]),
    )  # fmt: skip
    assert moves == ["small-1 hgx-2 (0, 1) → hgx-3 (6, 7)"]
    assert node == "hgx-2"


def test_two_replicas_on_one_node_move_when_one_is_not_enough() -> None:
    nodes = (
        hgx("hgx-1", shards=[small("small-1", 0, 1), small("small-2", 2, 3)]),
        hgx("hgx-2", shards=[mid("mid-1", 0), small("small-3", 4, 5)]),
        hgx("hgx-3", shards=[mid("mid-2", 0), small("small-4", 4, 5)]),
    )
    moves, node = room_for_big(MODELS, *nodes)
    # Freeing hgx-2 instead (mid-1 to hgx-1, small-3 to hgx-3) reloads 6 GPUs, not 4.
    assert moves == ["small-1 hgx-1 (0, 1) → hgx-2 (6, 7)", "small-2 hgx-1 (2, 3) → hgx-3 (6, 7)"]
    assert node == "hgx-1"
    assert room_for_big(MODELS, *nodes, limit=1) == ([], "-")


FOREIGN = "python3"


def test_three_replicas_move_off_one_node_when_the_limit_allows_three() -> None:
    # hgx-1 frees only with all three of its replicas gone, to hgx-2's and hgx-3's last
    # GPUs (other processes hold the rest).
    nodes = (
        hgx("hgx-1", shards=[small(f"small-{n}", 2 * n - 2, 2 * n - 1) for n in (1, 2, 3)]),
        hgx("hgx-2", foreign=dict.fromkeys(range(4), FOREIGN)),
        hgx("hgx-3", foreign=dict.fromkeys(range(6), FOREIGN)),
    )  # fmt: skip
    assert room_for_big(MODELS, *nodes, limit=2) == ([], "-")
    moves, node = room_for_big(MODELS, *nodes, limit=3)
    assert sorted(m.split(" → ")[0] for m in moves) == [
        "small-1 hgx-1 (0, 1)",
        "small-2 hgx-1 (2, 3)",
        "small-3 hgx-1 (4, 5)",
    ]
    assert node == "hgx-1"


def test_a_multi_node_replica_gets_two_nodes_cleared_of_two_replicas_each() -> None:
    fabric = [("ib-a", ["mlx5_0"])]
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1), small("small-2", 2, 3)], fabrics=fabric),
        hgx("hgx-2", shards=[small("small-3", 0, 1), small("small-4", 2, 3)], fabrics=fabric),
        hgx("hgx-3"),  # on no fabric: room for the small ones
    )
    state = PlacementState(fleet)
    huge = MODELS.models["huge"]
    assert make_room(huge, "huge-1", state, movable(MODELS, fleet), limit=3) is None
    room = make_room(huge, "huge-1", state, movable(MODELS, fleet), limit=4)
    assert room is not None
    assert sorted(m.replica for m in room.moves) == ["small-1", "small-2", "small-3", "small-4"]
    assert {m.target.node for m in room.moves} == {"hgx-3"}
    assert [s.node for s in room.placement.shards] == ["hgx-1", "hgx-2"]
    assert [state.held_by(node, "H100") for node in state.nodes] == [
        {"huge-1": list(range(8))},
        {"huge-1": list(range(8))},
        {f"small-{n}": [2 * n - 2, 2 * n - 1] for n in (1, 2, 3, 4)},
    ]


def test_a_chain_moves_one_replica_out_of_the_way_of_another() -> None:
    # mid-1 can leave hgx-1 only for hgx-2, once small-1 left it for hgx-3's last two GPUs
    # (other processes hold the rest of hgx-2 and hgx-3).
    moves, node = room_for_big(
        MODELS,
        hgx("hgx-1", shards=[mid("mid-1", 0)]),
        hgx("hgx-2", shards=[small("small-1", 4, 5)], foreign=dict.fromkeys(range(4), FOREIGN)),
        hgx("hgx-3", foreign=dict.fromkeys(range(6), FOREIGN)),
    )
    assert moves == [
        "small-1 hgx-2 (4, 5) → hgx-3 (6, 7)",
        "mid-1 hgx-1 (0, 1, 2, 3) → hgx-2 (4, 5, 6, 7)",
    ]
    assert node == "hgx-1"


def test_a_multi_node_replica_gets_a_node_freed_for_each_rank() -> None:
    fabric = [("ib-a", ["mlx5_0"])]
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1)], fabrics=fabric),
        hgx("hgx-2", shards=[small("small-2", 0, 1)], fabrics=fabric),
        hgx("hgx-3", shards=[mid("mid-1", 0)]),  # on no fabric: room for the small ones
    )
    state = PlacementState(fleet)
    room = make_room(MODELS.models["huge"], "huge-1", state, movable(MODELS, fleet))
    assert room is not None
    assert [(m.replica, m.target.node, m.target.gpus) for m in room.moves] == [
        ("small-1", "hgx-3", (4, 5)),
        ("small-2", "hgx-3", (6, 7)),
    ]
    assert [s.node for s in room.placement.shards] == ["hgx-1", "hgx-2"]


def test_a_moved_copy_takes_another_profile_only_when_its_own_fits_nowhere() -> None:
    coder = shard("coder-1", "coder", range(4), profile="h100x4")
    a100 = NodeSpec("a100-1", "A100", 8, pairs(8))
    # Only the A100 node has room for coder-1's copy: it moves there as a100x4.
    fleet = snapshot(
        hgx("hgx-1", shards=[coder]), hgx("hgx-2", foreign=dict.fromkeys(range(6), FOREIGN)), a100
    )
    run = place(MODELS, fleet, ["big"])
    room = rooms_for(run, MODELS, fleet)["big-1"]
    [move] = room.moves
    assert (move.was.name, move.profile.name, move.target.node) == ("h100x4", "a100x4", "a100-1")
    assert "  fits on hgx-1 after moving coder-1 (hgx-1 GPU 0-3 → a100-1 GPU 0-3 as a100x4)" in (
        render_run(run, 200, {"big-1": room})
    )
    assert placement_json(run, {}, {"big-1": room})["rooms"]["big-1"]["moves"][0]["profile"] == (
        "a100x4"
    )
    # With room on another H100 node, the copy keeps its profile.
    fleet = snapshot(
        hgx("hgx-1", shards=[coder]), hgx("hgx-2", foreign=dict.fromkeys(range(4), FOREIGN)), a100
    )
    [move] = rooms_for(place(MODELS, fleet, ["big"]), MODELS, fleet)["big-1"].moves
    assert (move.profile.name, move.target.node) == ("h100x4", "hgx-2")


def test_a_multi_node_replica_never_moves() -> None:
    wide = [shard("wide-1", "wide", (0, 1, 2, 3), rank, profile="h100-2x4", nodes=2)
            for rank in (0, 1)]  # fmt: skip
    fabric = [("ib-a", ["mlx5_0"])]
    assert room_for_big(
        MODELS,
        hgx("hgx-1", shards=[wide[0]], fabrics=fabric),
        hgx("hgx-2", shards=[wide[1]], fabrics=fabric),
        # Room for one rank, were ranks movable: hgx-1 would then be free.
        hgx("hgx-3", foreign=dict.fromkeys(range(4), FOREIGN)),
    )[0] == []  # fmt: skip


def test_nothing_moves_onto_or_off_a_cordoned_node() -> None:
    # Onto: hgx-2's free GPUs are behind a cordon.
    assert room_for_big(
        MODELS,
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", cordoned="PSU", shards=[small("small-2", 0, 1)]),
    ) == ([], "-")  # fmt: skip
    # Off: freeing the cordoned node would admit nothing there anyway, and it is not moved.
    fleet = snapshot(hgx("hgx-1", cordoned="PSU", shards=[small("small-1", 0, 1)]))
    assert movable(MODELS, fleet) == []


def test_no_plan_leaves_the_state_as_it_was() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", shards=[mid("mid-1", 0), mid("mid-2", 4)]),
    )  # fmt: skip
    state = PlacementState(fleet)
    before = {n.name: state.free_gpus(n, "H100") for n in state.nodes}
    assert make_room(MODELS.models["big"], "big-1", state, movable(MODELS, fleet)) is None
    assert {n.name: state.free_gpus(n, "H100") for n in state.nodes} == before
    assert state.replica_counts("small") == {"hgx-1": 1}
    # What a placement then finds is what it found before the attempt.
    assert place_replica(MODELS.models["small"], "small-2", state).shards[0].gpus == (2, 3)


def test_place_dry_run_says_which_moves_would_admit_a_replica_that_does_not_fit() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", shards=[small("small-2", 0, 1), mid("mid-1", 2)]),
    )
    run = place(MODELS, fleet, ["big", "big"])
    rooms = rooms_for(run, MODELS, fleet)
    # The first fits nowhere; one move makes room for it; none for the second as well,
    # since the first plan took what room there was.
    assert [p.verdict for p in run.placements] == [Verdict.NOT_NOW, Verdict.NOT_NOW]
    assert list(rooms) == ["big-1"]
    lines = render_run(run, 200, rooms)
    at = lines.index("  fits on hgx-1 after moving small-1 (hgx-1 GPU 0-1 → hgx-2 GPU 6-7)")
    assert lines[at - 1].startswith("  not h100x8 (priority 1): 0/2 nodes fit")
    assert not any(line.startswith("  fits on") for line in lines[at + 1 :])


def test_place_json_carries_the_moves_of_each_room() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", shards=[small("small-2", 0, 1), mid("mid-1", 2)]),
    )
    run = place(MODELS, fleet, ["big"])
    assert placement_json(run, {}, rooms_for(run, MODELS, fleet))["rooms"] == {
        "big-1": {
            "moves": [
                {
                    "replica": "small-1",
                    "model": "small",
                    "from": {"node": "hgx-1", "gpus": [0, 1]},
                    "to": {"node": "hgx-2", "gpus": [6, 7]},
                    "profile": "h100x2",
                }
            ],
            "gpus_reloaded": 2,
            "profile": "h100x8",
            "shards": [{"node": "hgx-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}],
        }
    }


def lean(replica: str) -> ShardRecord:
    return shard(replica, "lean", (), memory_gib=16, profile="q4")


def test_cpu_replicas_move_to_free_memory_for_a_larger_one() -> None:
    # cpu-1 has 80 GiB free of 128, cpu-2 48: one 16 GiB replica off cpu-1 makes 96.
    fleet = snapshot(
        NodeSpec("cpu-1", memory_gib=128, shards=[lean("lean-1"), lean("lean-2"), lean("lean-3")]),
        NodeSpec("cpu-2", memory_gib=128, shards=[lean(f"lean-{n}") for n in range(4, 9)]),
    )
    run = place(MODELS, fleet, ["heavy"])
    room = rooms_for(run, MODELS, fleet)["heavy-1"]
    assert [(m.replica, m.source.node, m.target.node) for m in room.moves] == [
        ("lean-1", "cpu-1", "cpu-2")
    ]
    assert [s.node for s in room.placement.shards] == ["cpu-1"]
    assert room.gpus_reloaded == 0


def test_a_node_one_gpu_short_frees_with_one_move() -> None:
    moves, node = room_for_big(
        MODELS,
        hgx("hgx-1", shards=[shard("tiny-1", "tiny", (0,), profile="h100")]),
        hgx("hgx-2", shards=[mid("mid-1", 0)]),
    )
    assert moves == ["tiny-1 hgx-1 (0,) → hgx-2 (4,)"]
    assert node == "hgx-1"


def test_equal_plans_go_by_replica_name() -> None:
    # Either node frees with one 2-GPU move: small-1's, the first by name, is tried first.
    moves, node = room_for_big(
        MODELS,
        hgx("hgx-1", shards=[small("small-2", 0, 1)]),
        hgx("hgx-2", shards=[small("small-1", 0, 1)]),
        hgx("hgx-3", shards=[mid("mid-1", 0)]),
    )
    assert moves == ["small-1 hgx-2 (0, 1) → hgx-3 (4, 5)"]
    assert node == "hgx-2"


def test_plans_are_the_fewest_replicas_off_a_node_and_alike_ones_once() -> None:
    # hgx-1: two 2-GPU replicas of one profile and a 4-GPU one; 8 GPUs wanted.
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1), small("small-2", 2, 3), mid("mid-1", 4)]),
        hgx("hgx-2", shards=[small("small-3", 0, 1)]),
    )
    state = PlacementState(fleet)
    running = movable(MODELS, fleet)
    (profile,) = MODELS.models["big"].profiles

    def plans(limit: int) -> list[list[str]]:
        return [[r.replica for r, _ in plan] for plan in _plans(profile, state, running, limit)]

    # hgx-2 frees with small-3 alone, or with small-3 after another replica makes way for
    # it (chains); hgx-1 only with all three (small-1 standing for small-2 as well, never
    # both orders), and no plan that a smaller one contains.
    chains = [["small-1", "small-3"], ["small-2", "small-3"], ["mid-1", "small-3"]]
    assert plans(2) == [["small-3"], *chains]
    assert plans(3) == [["small-3"], *chains, ["mid-1", "small-1", "small-2"]]
    # hgx-1 alone short of 2 GPUs: either small would do, and one is tried.
    fleet = snapshot(hgx("hgx-1", shards=[small("small-1", 0, 1), small("small-2", 2, 3)]))
    state = PlacementState(fleet)
    running = movable(MODELS, fleet)
    assert [[r.replica for r, _ in p] for p in _plans(profile, state, running, 3)] == [
        ["small-1", "small-2"]
    ]
    # 6 of 8 free: lacking 2 GPUs, small-1 alone, not small-1 with mid-1.
    fleet = snapshot(hgx("hgx-1", shards=[small("small-1", 0, 1)]))
    running = movable(MODELS, fleet)
    assert [
        [r.replica for r, _ in p] for p in _plans(profile, PlacementState(fleet), running, 3)
    ] == [["small-1"]]


def test_rooms_count_the_runs_placements_and_each_others_moves() -> None:
    fleet = snapshot(
        hgx("hgx-1", shards=[small("small-1", 0, 1)]),
        hgx("hgx-2", shards=[small("small-2", 0, 1)]),
        hgx("hgx-3", shards=[mid("mid-1", 0)]),
        hgx("hgx-4", shards=[mid("mid-2", 0)]),
    )
    # small-3 is placed (hgx-3 GPU 4-5); two 8-GPU replicas are not.
    run = place(MODELS, fleet, ["small", "big", "big"])
    assert [p.verdict for p in run.placements] == [
        Verdict.PLACED, Verdict.NOT_NOW, Verdict.NOT_NOW,
    ]  # fmt: skip
    assert run.placements[0].shards[0].gpus == (4, 5)
    rooms = rooms_for(run, MODELS, fleet)
    # Each frees a node: the first's move onto what small-3 left of hgx-3, the second's
    # (another replica) onto hgx-4.
    assert {r: [(m.replica, m.target.node, m.target.gpus) for m in room.moves]
            for r, room in rooms.items()} == {
        "big-1": [("small-1", "hgx-3", (6, 7))],
        "big-2": [("small-2", "hgx-4", (4, 5))],
    }  # fmt: skip
    room = rooms["big-1"]
    assert room.placement.replica == "big-1" and room.placement.verdict is Verdict.PLACED
    assert [a.profile.name for a in room.placement.attempts] == ["h100x8"]


def test_a_plan_whose_replica_still_does_not_fit_is_taken_back() -> None:
    # Moving small-1 (or mid-1) frees a node's GPUs, but not the 400 GiB fat asks: a shard
    # of a model the catalog no longer has holds 200 of 512 on each. Nothing stays moved.
    fleet = snapshot(
        hgx(
            "hgx-1", shards=[small("small-1", 0, 1), shard("other-1", "other", (), memory_gib=200)]
        ),
        hgx("hgx-2", shards=[mid("mid-1", 0), shard("other-2", "other", (), memory_gib=200)]),
    )
    state = PlacementState(fleet)

    def held() -> dict[str, object]:
        sources = ("hf://org/small", "hf://org/mid")
        return {
            n.name: (state.free_gpus(n, "H100"), [state.will_hold(n, s) for s in sources])
            for n in state.nodes
        }

    before = held()
    assert make_room(MODELS.models["fat"], "fat-1", state, movable(MODELS, fleet)) is None
    assert held() == before  # the GPUs, and no copy's weights left to stage
    assert state.replica_counts("small") == {"hgx-1": 1}


def test_only_running_single_node_replicas_of_known_profiles_move() -> None:
    wide = shard("wide-1", "wide", (0, 1), 0, profile="h100-2x4", nodes=2)
    fleet = snapshot(
        hgx("hgx-1", cordoned="PSU", shards=[small("small-1", 0, 1)]),
        hgx(
            "hgx-2",
            shards=[
                wide,  # over two nodes
                shard("stray-1", "stray", (2,), profile="p"),  # a model not in the catalog
                shard("small-2", "small", (3,), profile="h100x2", state="failed"),
                shard("small-3", "small", (4,), profile="gone"),  # a profile no longer there
                shard("small-4", "small", (5,), profile="h100x2", memory_gib=8),  # not its
                small("small-5", 6, 7),  # and one that moves, after all these
            ],
        ),
    )
    (profile,) = MODELS.models["small"].profiles
    assert movable(MODELS, fleet) == [
        Running(
            MODELS.models["small"], "small-5", profile, ShardPlacement("hgx-2", 0, (6, 7), (), None)
        )
    ]
