"""A node whose probe prints 100 MB: ctl stops reading at 8 MiB, stays small, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ctl import ROOT, ctl_environment
from tests.sshd import missing_reason, running_sshd

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

# Runs ctl and prints its exit code, its own peak RSS (KiB) and its output as JSON: the
# wrapper's only child is ctl, so RUSAGE_CHILDREN counts nothing else.
WRAPPER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": done.returncode, "peak_kib": peak, "out": done.stdout + done.stderr}))
"""


def test_a_probe_that_prints_100_mb_costs_ctl_8_mib_and_a_note(tmp_path: Path) -> None:
    command = "head -c 100000000 /dev/zero | tr '\\0' x"
    with running_sshd(tmp_path / "sshd", force_command=command) as server:
        inventory = server.inventory(tmp_path / "inventory", "hostile")
        wrapper = subprocess.run(
            [sys.executable, "-c", WRAPPER, sys.executable, "-m", "cli", "--timeout", "60",
             "nodes", "--inventory", str(inventory)],
            capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
            env=ctl_environment({"XDG_STATE_HOME": str(tmp_path / "state")}),
        )  # fmt: skip
    result = json.loads(wrapper.stdout)
    assert result["code"] == 1, result["out"]
    assert "hostile: unreachable: the probe printed more than 8 MiB: facts not read" in " ".join(
        result["out"].split()
    ), result["out"]
    assert result["peak_kib"] < 300 * 1024, result
