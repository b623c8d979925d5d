"""The controller's files for Prometheus (docs/metrics.md): `--prometheus-sd` kept equal to
`ctl targets` and rewritten only when it changes, `--metrics-textfile` after every pass,
both whole at every moment, on a real `ctl reconcile --watch` process."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.ctl import ctl
from tests.integration.test_controller import EXAMPLES, catalog_file, dry_watch

__all__ = ["catalog_file"]  # the fixture, used here by name

FLEET = ("--inventory", str(EXAMPLES / "inventory"), "--facts", str(EXAMPLES / "facts"))


def wait_for_passes(textfile: Path, passes: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = textfile.read_text() if textfile.exists() else ""
        if f"modelfleet_passes_total {passes}\n" in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"no pass {passes} in {textfile}")


def test_the_controller_keeps_the_targets_and_its_figures_current(
    tmp_path: Path, catalog_file: Path
) -> None:
    targets, figures = tmp_path / "targets.json", tmp_path / "ctl.prom"
    controller = dry_watch(
        tmp_path, catalog_file, "--prometheus-sd", str(targets), "--metrics-textfile",
        str(figures),
    )  # fmt: skip
    try:
        first = wait_for_passes(figures, 1)
        printed = ctl("targets", "--catalog", str(catalog_file), *FLEET)
        assert json.loads(targets.read_text()) == json.loads(printed.stdout)
        written = targets.stat()
        assert 'modelfleet_replicas{model="llama-3.1-8b",state="ready"} 1' in first
        assert 'modelfleet_replicas_refused{model="deepseek-v3"} 1' in first
        assert "modelfleet_pass_exit_code 1" in first
        second = wait_for_passes(figures, 2)
        assert 'modelfleet_refusals_total{model="deepseek-v3"} 2' in second
        # Nothing changed: the targets file is the one written at the first pass.
        assert (targets.stat().st_ino, targets.stat().st_mtime_ns) == (
            written.st_ino, written.st_mtime_ns,
        )  # fmt: skip
        # A catalog that does not load: the pass plans nothing; the targets stay as they
        # were, the figures say the pass and its exit code, and no per-model gauge.
        good = catalog_file.read_text()
        catalog_file.write_text(good + "models: {}\n")
        passes = int(re.findall(r"^modelfleet_passes_total (\d+)$", figures.read_text(), re.M)[0])
        bad = wait_for_passes(figures, passes + 2)
        assert "modelfleet_pass_exit_code 2" in bad
        assert "modelfleet_replicas{" not in bad
        assert json.loads(targets.read_text()) == json.loads(printed.stdout)
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    finally:
        controller.kill()
    if shutil.which("promtool"):
        for text in (first, second, bad):
            checked = subprocess.run(
                ["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                timeout=60, check=False,
            )  # fmt: skip
            assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--prometheus-sd", "t.json"), "kept by the controller: with --watch"),
        (("--watch", "--metrics-textfile", "nowhere/ctl.prom"), "no directory"),
    ],
)
def test_files_ctl_cannot_keep_are_bad_input_before_any_pass(
    tmp_path: Path, options: tuple[str, ...], said: str
) -> None:
    done = ctl(
        "reconcile", "--dry-run", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET,
        *(o.replace("nowhere", str(tmp_path / "nowhere")) for o in options),
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert "pass 1" not in done.stdout
