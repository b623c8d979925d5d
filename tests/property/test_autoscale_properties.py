"""Properties of the autoscaler (cli/reconcile/autoscale.py), pass after pass on a
simulated model whose replicas start at once and share the load evenly:

1. The count never leaves replicas.min..replicas.max, and moves by one at most a pass.
2. No flapping: under load that oscillates faster than the down window (a square wave
   whose period is at most down_seconds, sampled at least once a half-period), the count
   only ever moves one way: no scale-down undoes a scale-up, nor the reverse.
3. A scale-down comes only after down_seconds without a break in which the replicas
   that would remain were at or under the target; a scale-up only after up_seconds above.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.catalog.schema import Autoscale
from cli.facts.model import ReplicaLoad
from cli.reconcile.autoscale import Decision, Memory, decide
from tests.builders import NOW


def _run(
    policy: Autoscale, low: int, high: int, start: int, interval: int, load_at: list[float]
) -> list[tuple[int, Decision]]:
    """Each pass's time (s) and decision, the count following each decision at once."""
    count, memory = start, Memory()
    seen: list[tuple[int, Decision]] = []
    for step, total in enumerate(load_at):
        share = total / count
        loads = [ReplicaLoad(replica=f"r{i}", waiting=share) for i in range(count)]
        at = step * interval
        decision = decide("m", policy, low, high, count, 0, loads, memory,
                          NOW + timedelta(seconds=at))  # fmt: skip
        seen.append((at, decision))
        count, memory = decision.desired, decision.memory
    return seen


bounds = st.integers(0, 3).flatmap(lambda low: st.tuples(st.just(low), st.integers(low + 1, 6)))


@settings(max_examples=300, deadline=None)
@given(
    bounds=bounds,
    start=st.integers(0, 6),
    target=st.floats(0.5, 10),
    up=st.integers(0, 60),
    down_extra=st.integers(0, 600),
    interval=st.integers(1, 60),
    loads=st.lists(st.floats(0, 200), min_size=1, max_size=120),
)
def test_the_count_stays_within_min_and_max_and_moves_one_a_pass(
    bounds: tuple[int, int],
    start: int,
    target: float,
    up: int,
    down_extra: int,
    interval: int,
    loads: list[float],
) -> None:
    low, high = bounds
    start = min(max(start, low, 1), high)
    policy = Autoscale(signal="queue", target=target, up_seconds=up, down_seconds=up + down_extra)
    count = start
    for _, decision in _run(policy, low, high, start, interval, loads):
        assert low <= decision.desired <= high
        assert abs(decision.desired - count) <= 1
        count = decision.desired


@settings(max_examples=400, deadline=None)
@given(
    bounds=bounds,
    start=st.integers(1, 6),
    target=st.floats(0.5, 10),
    up=st.integers(0, 120),
    down=st.integers(1, 900),
    period_share=st.floats(0.05, 1.0),
    interval_share=st.floats(0.01, 1.0),
    high_load=st.floats(0, 100),
    low_load=st.floats(0, 100),
    passes=st.integers(10, 200),
)
def test_load_oscillating_faster_than_the_down_window_never_makes_the_count_flap(
    bounds: tuple[int, int],
    start: int,
    target: float,
    up: int,
    down: int,
    period_share: float,
    interval_share: float,
    high_load: float,
    low_load: float,
    passes: int,
) -> None:
    low, high = bounds
    start = min(max(start, low, 1), high)
    down = max(down, up)
    half = max(1, int(down * period_share) // 2)  # the period, 2 * half, is at most down
    interval = max(1, int(half * interval_share))  # every half-period is sampled
    policy = Autoscale(signal="queue", target=target, up_seconds=up, down_seconds=down)
    wave = [high_load if (step * interval // half) % 2 == 0 else low_load for step in range(passes)]
    directions = {
        decision.change for _, decision in _run(policy, low, high, start, interval, wave)
    } - {0}
    assert len(directions) <= 1, f"the count went both ways: {directions}"


@settings(max_examples=300, deadline=None)
@given(
    target=st.floats(0.5, 10),
    up=st.integers(0, 120),
    down_extra=st.integers(0, 600),
    interval=st.integers(1, 60),
    loads=st.lists(st.floats(0, 100), min_size=1, max_size=120),
)
def test_every_change_was_held_for_its_whole_window(
    target: float, up: int, down_extra: int, interval: int, loads: list[float]
) -> None:
    policy = Autoscale(signal="queue", target=target, up_seconds=up, down_seconds=up + down_extra)
    seen = _run(policy, 1, 5, 3, interval, loads)

    def same_side(decision: Decision, direction: int) -> bool:
        if decision.value is None:
            return False
        if direction > 0:
            return decision.value > target
        n = decision.replicas
        return n > 1 and decision.value * n / (n - 1) <= target

    for index, (at, decision) in enumerate(seen):
        if not decision.change:
            continue
        first = index  # the first pass of the unbroken run this change ends
        while first > 0:
            previous = seen[first - 1][1]
            if previous.change or not same_side(previous, decision.change):
                break
            first -= 1
        window = policy.up_seconds if decision.change > 0 else policy.down_seconds
        assert at - seen[first][0] >= window
