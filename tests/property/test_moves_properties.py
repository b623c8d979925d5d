"""Moves that make room, on random churned fleets: a plan with moves never breaks a hard
constraint in any intermediate state, never leaves a model with fewer replicas than before
(so never below `replicas.min`), admits the replica it was made for, and when there is no
plan leaves the state as it was.

Each fleet is a function of one drawn seed (a few H100 and A100 nodes, some cordoned, some
GPUs held by other processes, then a churn of arrivals and departures placed by ctl
itself), so the meta-test below can count how often the hard cases come up: rooms made
with one move and with two, and refusals no plan can help.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.cluster.snapshot import Snapshot
from cli.placement.moves import Room, Running, make_room
from cli.placement.place import ReplicaPlacement, place_replica
from cli.placement.state import PlacementState
from tests.builders import NodeSpec, catalog, nvswitch, pairs, snapshot

MODELS = catalog(
    """\
    models:
      one:
        source: hf://org/one
        replicas: {min: 1, max: 8}
        profiles:
          - {name: a100, priority: 2, engine: vllm, gpu_class: A100, gpus_per_node: 1}
          - {name: h100, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      two:
        source: hf://org/two
        replicas: {min: 2, max: 8}
        profiles:
          - {name: h100x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      four:
        source: hf://org/four
        replicas: {min: 1, max: 8}
        profiles:
          - {name: h100x4, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 4}
          - {name: a100x4, priority: 1, engine: vllm, gpu_class: A100, gpus_per_node: 4}
      eight:
        source: hf://org/eight
        replicas: {min: 0, max: 8}
        profiles:
          - {name: h100x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}
    """
)
SMALL = ("one", "two", "four")


@dataclass
class Scenario:
    fleet: Snapshot
    arrivals: list[tuple[str, str]]  # (model, replica) in order
    departures: set[str]  # replicas that leave after every arrival
    waiting: str  # the model of the replica that does not fit

    def state(self) -> tuple[PlacementState, dict[str, ReplicaPlacement]]:
        """The churned state, the same every time it is built."""
        state = PlacementState(self.fleet)
        held: dict[str, ReplicaPlacement] = {}
        for model, replica in self.arrivals:
            placement = place_replica(MODELS.models[model], replica, state)
            if placement.placed:
                held[replica] = placement
        for replica in sorted(self.departures & set(held)):
            gone = held.pop(replica)
            assert gone.profile is not None
            state.release(replica, gone.profile, gone.shards)
        return state, held


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    specs = []
    for i in range(rng.randint(2, 4)):
        cordoned = "PSU" if rng.random() < 0.15 else None
        foreign = {g: "python3" for g in range(8) if rng.random() < 0.05}
        specs.append(
            NodeSpec(f"hgx-{i}", "H100", 8, nvswitch(), cordoned=cordoned, foreign=foreign)
        )
    for i in range(rng.randint(0, 2)):
        specs.append(NodeSpec(f"a100-{i}", "A100", 8, pairs(8)))
    arrivals = []
    for n in range(rng.randint(8, 20)):
        model = rng.choice(SMALL)
        arrivals.append((model, f"{model}-{n}"))
    departures = {replica for _, replica in arrivals if rng.random() < 0.3}
    return Scenario(snapshot(*specs), arrivals, departures, rng.choice(("eight", "four")))


def attempt(case: Scenario, limit: int) -> tuple[Room | None, PlacementState, list[Running]]:
    state, held = case.state()
    running = [
        Running(MODELS.models[p.model], p.replica, p.profile, p.shards[0])
        for p in held.values()
        if p.profile is not None
    ]
    room = make_room(MODELS.models[case.waiting], "waiting-1", state, running, limit)
    return room, state, running


def free_map(state: PlacementState) -> dict[str, list[int]]:
    return {n.name: sorted(state.free_gpus(n, c)) for n in state.nodes for c in ("H100", "A100")}


def staged_map(state: PlacementState) -> dict[str, list[str]]:
    """Per node, the models whose weights it holds or the run will have staged there."""
    sources = {name: model.profiles[0].source for name, model in MODELS.models.items()}
    return {n.name: [m for m, s in sources.items() if state.will_hold(n, s)] for n in state.nodes}


def refused(case: Scenario) -> bool:
    state, _ = case.state()
    return not place_replica(MODELS.models[case.waiting], "probe", state).placed


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31), limit=st.integers(1, 2))
def test_a_plan_keeps_every_hard_constraint_and_every_replica_at_every_step(
    seed: int, limit: int
) -> None:
    check_plan(seed, limit)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31), limit=st.integers(3, 4))
def test_a_plan_of_three_or_four_moves_keeps_them_too(seed: int, limit: int) -> None:
    check_plan(seed, limit)


def check_plan(seed: int, limit: int) -> None:
    case = scenario(seed)
    if not refused(case):
        return  # moves are for a replica that does not fit
    before_state, _ = case.state()
    before = free_map(before_state)
    staged = staged_map(before_state)
    room, after_state, running = attempt(case, limit)
    if room is None:
        assert free_map(after_state) == before  # every tried step taken back
        assert staged_map(after_state) == staged  # no weights left to stage
        return
    assert 1 <= len(room.moves) <= limit
    movable = {r.replica: r for r in running}
    # Replay the plan step by step on the churned state, checking each intermediate one.
    state, held = case.state()
    counts = Counter(p.model for p in held.values())
    floor = {m: min(counts[m], MODELS.models[m].replicas_min) for m in counts}
    for move in room.moves:
        source = movable[move.replica]  # a running single-node replica, as it ran
        assert move.source == source.shard and move.was is source.profile
        # The copy: its own profile, or (when no plan kept every profile) another of its model's.
        assert move.profile.model == source.profile.model
        assert move.target.node != move.source.node
        position = [n.name for n in state.nodes].index(move.target.node)
        node = state.nodes[position]
        # Hard constraints of the target: status (no cordon), class, health, free GPUs.
        assert state.static_rejections(move.profile)[position] is None
        spec = move.profile.spec
        assert spec.gpu_class is not None
        assert len(move.target.gpus) == spec.gpus_per_node
        assert set(move.target.gpus) <= set(state.free_gpus(node, spec.gpu_class))
        state.hold(move.replica, move.profile, (move.target,))  # make ...
        state.release(move.replica, move.was, (move.source,))  # ... before break
        # Never fewer replicas of any model than before the plan, so never below min.
        now = {m: sum(state.replica_counts(m).values()) for m in counts}
        assert all(now[m] >= counts[m] >= floor[m] for m in counts)
    # And then the waiting replica fits where the plan says, on free GPUs of its class.
    placement = room.placement
    assert placement.placed and placement.model == case.waiting
    assert placement.profile is not None and placement.profile.spec.gpu_class is not None
    for shard in placement.shards:
        node = next(n for n in state.nodes if n.name == shard.node)
        assert node.cordon is None
        assert set(shard.gpus) <= set(state.free_gpus(node, placement.profile.spec.gpu_class))
    state.hold(placement.replica, placement.profile, placement.shards)
    assert free_map(state) == free_map(after_state)  # make_room left this very state
    assert staged_map(state) == staged_map(after_state)  # nor staged what plans taken back did


def outcome(seed: int) -> str:
    case = scenario(seed)
    if not refused(case):
        return "fits"
    room = attempt(case, 2)[0]
    return "no room" if room is None else f"{len(room.moves)} moves"


def test_the_scenarios_reach_one_and_two_move_rooms_and_hopeless_refusals() -> None:
    found = Counter(outcome(seed) for seed in range(300))
    # 300 seeds gave 26, 10 and 132 when written: floors at about half.
    assert found["1 moves"] >= 13, found
    assert found["2 moves"] >= 5, found
    assert found["no room"] >= 60, found


def test_the_scenarios_reach_three_move_rooms_and_copies_on_another_profile() -> None:
    found: Counter[str] = Counter()
    for seed in range(300):
        case = scenario(seed)
        room = attempt(case, 3)[0] if refused(case) else None
        if room is not None:
            found[f"{len(room.moves)} moves"] += 1
            found["another profile"] += any(move.changes_profile for move in room.moves)
    # 300 seeds gave 4 rooms of three moves and 26 with a copy on another profile when
    # written: floors at about half.
    assert found["3 moves"] >= 2, found
    assert found["another profile"] >= 13, found
