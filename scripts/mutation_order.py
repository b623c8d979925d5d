"""pytest plugin for scripts/mutation: run a mutant's tests fastest first.

mutmut runs, for each mutant, the tests that reached the mutated function, with `-x`: the
first failure kills the mutant and ends the run. The unit tests take milliseconds, the
property tests seconds each, so trying the fast ones first kills most mutants in well under
a second instead of after a property test that happens to come first. The order changes how
soon a mutant dies, never whether it does: a survivor still runs every one of its tests.

The durations are the ones mutmut measured in its stats run (mutants/mutmut-stats.json,
read from the working directory mutmut runs pytest in); before that run there are none and
the order is pytest's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


def _durations() -> dict[str, float]:
    try:
        stats = json.loads(STATS.read_text())
    except (OSError, ValueError):
        return {}
    durations = stats.get("duration_by_test", {}) if isinstance(stats, dict) else {}
    return {str(k): float(v) for k, v in durations.items()}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    durations = _durations()
    if durations:
        items.sort(key=lambda item: durations.get(item.nodeid, math.inf))
