"""docs/metrics.md as an operator follows it: its commands run, its scrape configuration
and ctl's files checked by Debian's own promtool."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from cli.engines.specs import ENGINE_SPECS
from cli.routes.figures import METRICS
from tests.ctl import ROOT, ctl
from tests.integration.test_controller import Controller

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


def test_the_documented_controller_command_writes_both_files(tmp_path: Path) -> None:
    (command,) = [b for b in blocks("sh") if b.startswith("ctl reconcile --watch")]
    program, *args = shlex.split(command)
    assert program == "ctl"
    targets, figures = tmp_path / "modelfleet-targets.json", tmp_path / "modelfleet.prom"
    args = [
        str(targets) if a == "/var/lib/prometheus/modelfleet-targets.json" else
        str(figures) if a == "/var/lib/prometheus/node-exporter/modelfleet.prom" else a
        for a in args
    ]  # fmt: skip
    assert str(targets) in args and str(figures) in args
    # On the example snapshot, planning only: one pass, then SIGTERM.
    controller = Controller(
        tmp_path / "state", *args, "--dry-run", "--interval", "1s", "--catalog",
        "examples/catalog.yaml", "--inventory", "examples/inventory", "--facts", "examples/facts",
    )  # fmt: skip
    try:
        controller.wait_for("pass 1 done")
        controller.process.send_signal(signal.SIGTERM)
        code, _, err = controller.finish()
    finally:
        controller.kill()
    assert code == 0, err
    assert json.loads(targets.read_text())
    assert "modelfleet_passes_total 1\n" in figures.read_text()


def test_the_figures_table_names_every_metric_ctl_writes_with_its_type() -> None:
    rows = re.findall(r"^\| `(modelfleet_[a-z_]+)` \| (gauge|counter) \|", DOC, re.MULTILINE)
    assert dict(rows) == {name: kind for name, (kind, _) in METRICS.items()}


DASHBOARD = ROOT / "examples" / "grafana" / "modelfleet.json"
# What a query may name besides functions and keywords: ctl's figures, the engine gauges
# the facts probe reads (cli/engines/specs.py), and Prometheus's own `up`.
KNOWN = {
    *METRICS,
    *(
        name
        for spec in ENGINE_SPECS.values()
        if spec.load_metrics is not None
        for name in (spec.load_metrics.running, spec.load_metrics.waiting, spec.load_metrics.kv_use)
        if name is not None
    ),
    "up",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "or", "and",
            "unless", "offset", "bool"}  # fmt: skip


def dashboard_queries() -> list[str]:
    """Every expr of every panel, Grafana's `$model` as the regular expression `All` gives."""
    document = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in document["panels"] for t in panel["targets"]]
    assert len(exprs) >= 7
    return [expr.replace("$model", ".*") for expr in exprs]


def metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)  # label matchers, ranges
    bare = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", bare)  # groupings
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(?=\s*(\(?))", bare):
        if match.group(1) != "(" and match.group(0) not in KEYWORDS:
            names.add(match.group(0))
    return names


def test_the_dashboard_names_only_metrics_ctl_writes_or_the_probe_reads() -> None:
    used = set().union(*(metric_names(expr) for expr in dashboard_queries()))
    assert used <= KNOWN, used - KNOWN
    # Every figure the issue asks the dashboard for is on it.
    for wanted in ("vllm:num_requests_waiting", "sglang:num_running_reqs",
                   "vllm:kv_cache_usage_perc", "modelfleet_pass_duration_seconds",
                   "modelfleet_replicas"):  # fmt: skip
        assert wanted in used
    # The reader is not blind: a name nobody writes is seen.
    assert metric_names("sum by (model) (rate(vllm:made_up{model=~'x'}[5m]))") == {"vllm:made_up"}


@needs_promtool
def test_every_dashboard_query_is_promql_prometheus_parses(tmp_path: Path) -> None:
    # promtool has no query parser of its own, but it parses each recording rule's expr.
    def rules_file(name: str, exprs: list[str]) -> str:
        rules = [{"record": f"dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]
        path = tmp_path / name
        path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
        return str(path)  # JSON is YAML

    checked = promtool("check", "rules", rules_file("rules.yml", dashboard_queries()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    broken = rules_file("broken.yml", ["sum by (model) (vllm:num_requests_waiting"])
    assert promtool("check", "rules", broken).returncode != 0
