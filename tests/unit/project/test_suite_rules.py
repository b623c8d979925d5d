"""The rules the suite holds itself to, tested like any other behaviour."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ctl import ROOT

SKIPPING = """
import pytest

def test_skips_at_run_time():
    pytest.skip("no sshd here")

@pytest.mark.skipif(True, reason="no systemd-nspawn here")
def test_skipped_by_its_mark():
    pass

def test_runs():
    pass

@pytest.mark.xfail(strict=True, reason="a known bug, recorded")
def test_a_known_bug():
    assert False
"""


def run_pytest(directory: Path, require_all: str | None) -> subprocess.CompletedProcess[str]:
    (directory / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport\n")
    (directory / "test_skipping.py").write_text(SKIPPING)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    if require_all is not None:
        env["MODELFLEET_TESTS_REQUIRE_ALL"] = require_all
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(directory), str(directory)],
        capture_output=True, text=True, cwd=directory, env=env, timeout=60, check=False,
    )  # fmt: skip


def test_a_skip_is_a_skip_on_a_developers_machine(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in result.stdout


def test_under_ci_every_skip_fails_with_its_reason(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "1")
    assert result.returncode == 1, result.stdout
    assert "no sshd here" in result.stdout
    assert "no systemd-nspawn here" in result.stdout
    assert "skipped" not in result.stdout.splitlines()[-1]
    assert "1 passed" in result.stdout.splitlines()[-1]
    assert "1 xfailed" in result.stdout.splitlines()[-1]  # an expected failure stays one


def test_ci_sets_the_variable() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "export MODELFLEET_TESTS_REQUIRE_ALL=1" in ci
