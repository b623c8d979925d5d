"""A replica the run held can leave again (PlacementState.release): its GPUs, memory and
place in the spread count come back, and placement after it sees exactly that."""

from __future__ import annotations

import pytest

from cli.placement.place import place_replica
from cli.placement.state import PlacementState
from tests.builders import NodeSpec, catalog, hgx, snapshot

MODELS = catalog(
    """\
    models:
      big:
        source: hf://org/big
        replicas: {min: 1}
        profiles:
          - {name: h100x8, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8}
      small:
        source: hf://org/small
        replicas: {min: 1, max: 8}
        profiles:
          - {name: h100x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      cpu:
        source: file:///srv/cpu.gguf
        replicas: {min: 1}
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 40}
    """
)


def test_a_released_replica_frees_its_gpus_for_the_next_one() -> None:
    state = PlacementState(snapshot(hgx("hgx-1")))
    small = place_replica(MODELS.models["small"], "small-1", state)
    assert small.placed
    assert not place_replica(MODELS.models["big"], "big-1", state).placed
    assert small.profile is not None
    state.release("small-1", small.profile, small.shards)
    assert state.replica_counts("small") == {}
    big = place_replica(MODELS.models["big"], "big-2", state)
    assert [s.gpus for s in big.shards] == [(0, 1, 2, 3, 4, 5, 6, 7)]


def test_a_released_replica_frees_its_memory() -> None:
    state = PlacementState(snapshot(NodeSpec("cpu-1", memory_gib=64)))
    first = place_replica(MODELS.models["cpu"], "cpu-1", state)
    assert first.placed and first.profile is not None
    assert not place_replica(MODELS.models["cpu"], "cpu-2", state).placed
    state.release("cpu-1", first.profile, first.shards)
    assert state.reserved_gib(state.nodes[0]) == 0
    assert place_replica(MODELS.models["cpu"], "cpu-3", state).placed


def test_releasing_gpus_another_replica_holds_is_refused() -> None:
    state = PlacementState(snapshot(hgx("hgx-1")))
    small = place_replica(MODELS.models["small"], "small-1", state)
    assert small.profile is not None
    with pytest.raises(AssertionError, match="GPU 0 of hgx-1 is not small-2's"):
        state.release("small-2", small.profile, small.shards)
