"""A pytest plugin scripts/test loads (`-p tests.skip_summary`): at the very end, how many
tests were skipped and why, one line per reason, so that a green run on a machine without
containers, sshd or tmux does not pass for a full one. (.ci/run makes every skip a failure
instead: tests/conftest.py.)"""

from __future__ import annotations

from collections import Counter

import pytest


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report, pytest.TestReport) and not hasattr(report, "wasxfail")
    ]
    if not skipped:
        return
    reasons = Counter(_reason(report) for report in skipped)
    noun = "test" if len(skipped) == 1 else "tests"
    terminalreporter.write_sep("=", f"{len(skipped)} {noun} skipped, by reason", yellow=True)
    for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{count:>4} skipped: {reason}")
