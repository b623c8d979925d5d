"""Settings every test process shares.

Hypothesis runs under one of two profiles, chosen by HYPOTHESIS_PROFILE:

- `ci` (the default): derandomized, so a property catches a bug on every run or on none,
  never by the luck of a seed; the examples come from the test's code alone.
- `explore`: random seeds, for a developer hunting new counterexamples by hand
  (`HYPOTHESIS_PROFILE=explore scripts/test tests/property`); what it finds is then
  written down as an explicit `@example` so the `ci` profile keeps it.

A test's own `@settings` may set how many examples it needs, never `derandomize`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "explore",
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
