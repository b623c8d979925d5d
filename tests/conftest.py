"""Settings every test process shares.

Hypothesis runs under one of three profiles, chosen by HYPOTHESIS_PROFILE:

- `ci` (the default): derandomized, so a property catches a bug on every run or on none,
  never by the luck of a seed; the examples come from the test's code alone.
- `mutation`: `ci` without shrinking, for scripts/mutation: a mutant is killed by the first
  failing example, and shrinking it would only spend the run's time; the examples tried are
  the same as under `ci`, so a mutant `ci` kills, `mutation` kills.
- `explore`: random seeds, for a developer hunting new counterexamples by hand
  (`HYPOTHESIS_PROFILE=explore scripts/test tests/property`); what it finds is then
  written down as an explicit `@example` so the `ci` profile keeps it.

A test's own `@settings` may set how many examples it needs, never `derandomize`.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "mutation",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
settings.register_profile(
    "explore",
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Under CI a test that cannot run is a failure, not a skip: a green run must mean the fleet,
# sshd, ansible and openssl tests ran. .ci/run sets this; a developer's machine without
# containers may leave it unset and see the skips listed with their reasons.
REQUIRE_ALL = "MODELFLEET_TESTS_REQUIRE_ALL"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # An expected failure (xfail) is reported as skipped too: it ran, and stays as it is.
    expected_failure = hasattr(report, "wasxfail")
    if report.skipped and not expected_failure and os.environ.get(REQUIRE_ALL) == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, and {REQUIRE_ALL}=1 forbids it: {reason}"
    return report
