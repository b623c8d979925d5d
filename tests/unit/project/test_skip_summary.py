"""scripts/test ends with how many tests were skipped and why, a line per reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SKIPPING = """\
import pytest

@pytest.mark.parametrize("i", range(3))
def test_needs_tmux(i):
    pytest.skip("tmux is not installed")

def test_needs_sshd():
    pytest.skip("no sshd")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

def test_runs():
    pass
"""


def run_with_summary(tmp_path: Path, text: str) -> str:
    (tmp_path / "test_some.py").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-p", "tests.skip_summary", "-c", "/dev/null", "--rootdir", str(tmp_path),
         str(tmp_path / "test_some.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    return done.stdout


def test_skips_are_counted_by_reason_at_the_end(tmp_path: Path) -> None:
    lines = run_with_summary(tmp_path, SKIPPING).splitlines()
    start = next(i for i, line in enumerate(lines) if "4 tests skipped, by reason" in line)
    assert lines[start + 1 : start + 3] == [
        "   3 skipped: tmux is not installed",
        "   1 skipped: no sshd",
    ]
    assert "1 passed, 4 skipped, 1 xfailed" in lines[start + 3]


def test_a_run_without_skips_adds_nothing(tmp_path: Path) -> None:
    output = run_with_summary(tmp_path, "def test_runs():\n    pass\n")
    assert "skipped" not in output


def test_scripts_test_loads_the_summary() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    assert '.venv/bin/python -m pytest -n 2 -p tests.skip_summary "$@"' in script.splitlines()
