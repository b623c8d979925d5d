"""docs/metrics.md as an operator follows it: its commands run, its scrape configuration
and ctl's files checked by Debian's own promtool."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ctl import ROOT, ctl

DOC = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="no promtool: Debian's prometheus package (apt-get install prometheus)"
)


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC, re.MULTILINE | re.DOTALL)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_documented_targets_command_prints_the_documented_groups() -> None:
    command = next(b for b in blocks("sh") if b.startswith("ctl targets"))
    program, *args = shlex.split(command)
    assert program == "ctl"
    done = ctl(*args)
    assert done.returncode == 1, done.stderr  # l40s-2 did not answer, as the doc says
    assert "l40s-2" in done.stderr
    shown = json.loads(blocks("json")[0])
    assert json.loads(done.stdout) == shown


@needs_promtool
def test_the_documented_scrape_configuration_is_one_prometheus_takes(tmp_path: Path) -> None:
    config = next(b for b in blocks("yaml") if "file_sd_configs" in b)
    targets = ctl("targets", "--catalog", "examples/catalog.yaml", "--inventory",
                  "examples/inventory", "--facts", "examples/facts")  # fmt: skip
    (tmp_path / "targets.json").write_text(targets.stdout)
    (tmp_path / "ca.pem").write_text("")
    # promtool reads the file_sd file too: every group, target and label name checked.
    config = config.replace(
        "/var/lib/prometheus/modelfleet-targets.json", str(tmp_path / "targets.json")
    )
    config = config.replace("/etc/prometheus/modelfleet-ca.pem", str(tmp_path / "ca.pem"))
    (tmp_path / "prometheus.yml").write_text(config)
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
