"""pytest plugin for scripts/mutation: run a mutant's tests fastest first; optionally cap
the Hypothesis examples of each property test.

mutmut runs, for each mutant, the tests that reached the mutated function, with `-x`: the
first failure kills the mutant and ends the run. The unit tests take milliseconds, the
property tests seconds each, so trying the fast ones first kills most mutants in well under
a second instead of after a property test that happens to come first. The order changes how
soon a mutant dies, never whether it does: a survivor still runs every one of its tests.

The durations are the ones mutmut measured in its stats run (mutants/mutmut-stats.json,
read from the working directory mutmut runs pytest in); before that run there are none and
the order is pytest's.

MUTATION_MAX_EXAMPLES=N (scripts/mutation --max-examples N) caps every @given test at N
examples, whatever its own @settings say (a profile cannot: a test's explicit max_examples
wins over any profile). Under the derandomized `ci` examples this tries a shorter run of the
same kind of examples, so a capped run kills no more mutants than a full one: its score is a
lower bound, bought because a surviving mutant otherwise runs every property test in full.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import settings

STATS = Path("mutmut-stats.json")
CAP = "MUTATION_MAX_EXAMPLES"


def _durations() -> dict[str, float]:
    try:
        stats = json.loads(STATS.read_text())
    except (OSError, ValueError):
        return {}
    durations = stats.get("duration_by_test", {}) if isinstance(stats, dict) else {}
    return {str(k): float(v) for k, v in durations.items()}


def _cap(item: pytest.Item, cap: int) -> None:
    test = getattr(item, "obj", None)
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if isinstance(own, settings) and own.max_examples > cap:
        test._hypothesis_internal_use_settings = settings(own, max_examples=cap)  # type: ignore[union-attr]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    durations = _durations()
    if durations:
        items.sort(key=lambda item: durations.get(item.nodeid, math.inf))
    cap = os.environ.get(CAP)
    if cap:
        for item in items:
            _cap(item, int(cap))
