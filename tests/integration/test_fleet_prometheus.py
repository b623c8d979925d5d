"""Debian's real Prometheus scrapes what ctl names (docs/metrics.md), on the test fleet: the
stand-in engines' /metrics through the controller's file_sd file, and ctl's own figures
through a real node exporter's textfile collector; the dashboard's queries return data.

The test fleet's nodes share the host's network (docs/testfleet.md), so each node's
exporter is a `prometheus-node-exporter` on the host listening on that node's address:
every node's probe sees the port listening, as a node's own exporter would be seen.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import LiveFleet
from tests.integration.test_controller import Controller
from tests.integration.test_fleet_reconcile import CLEAN, ctl_on_standins
from tests.integration.test_metrics_docs import dashboard_queries
from tests.sshd import free_port

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.skipif(
        shutil.which("prometheus") is None or shutil.which("prometheus-node-exporter") is None,
        reason="no prometheus or prometheus-node-exporter: apt-get install prometheus",
    ),
]

# One vLLM replica and one llama-server: two engines' metric names, scraped for real.
CATALOG = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    replicas: {min: 1}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
  tiny:
    source: file:///srv/models/qwen2.5-0.5b-instruct-q8_0.gguf
    replicas: {min: 1}
    profiles:
      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 2, threads: 2}
"""


def get(port: int, path: str, **query: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def until(what: str, check: Any, timeout: float = 90) -> Any:
    """`check()` once it is truthy, polled every half second."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as error:  # not listening yet
            last = error
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: still {last!r} after {timeout} s")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_prometheus_scrapes_every_target_ctl_names_and_the_dashboard_has_data(
    testfleet: LiveFleet, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    ctl = ctl_on_standins(testfleet, tmp_path, CATALOG)
    # No router: the targets name none (docs/metrics.md), and deploying one is not this test.
    hosts = ctl.inventory / "hosts.yml"
    inventory = yaml.safe_load(hosts.read_text())
    inventory["all"]["children"].pop("routers", None)
    hosts.write_text(yaml.safe_dump(inventory, sort_keys=False))
    exporter_port = free_port()
    with (ctl.inventory / "group_vars" / "all.yml").open("a") as group_vars:
        group_vars.write(f"modelfleet_node_exporter_port: {exporter_port}\n")
    # The controller's host is node-1's: only its exporter serves ctl's figures.
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    (tmp_path / "empty").mkdir()
    nodes = testfleet.nodes[:3]
    for node in nodes:
        served = textfiles if node is nodes[0] else tmp_path / "empty"
        processes.append(
            subprocess.Popen(
                [
                    "prometheus-node-exporter",
                    f"--web.listen-address={node.address}:{exporter_port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={served}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    for node in nodes:
        until(f"{node.name}'s exporter", lambda a=node.address: _answers(a, exporter_port), 30)

    targets = tmp_path / "targets.json"
    controller = Controller(
        ctl.state,
        *ctl.arguments(
            "reconcile", "--watch", "--interval", "5s", "--prometheus-sd", str(targets),
            "--metrics-textfile", str(textfiles / "modelfleet.prom"),
        ),
    )  # fmt: skip
    try:
        controller.wait_for("pass 1 done", timeout=300)
        named = json.loads(targets.read_text())
        kinds = sorted(group["labels"]["kind"] for group in named)
        assert kinds == ["node", "node", "node", "replica", "replica"], named
        engines = sorted(g["labels"]["engine"] for g in named if g["labels"]["kind"] == "replica")
        assert engines == ["llama.cpp", "vllm"]

        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": "modelfleet", "file_sd_configs": [{"files": [str(targets)]}]}
                    ],
                }
            )
        )
        processes.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

        def all_up() -> list[dict[str, Any]] | None:
            active = get(port, "/api/v1/targets")["data"]["activeTargets"]
            if len(active) == len(named) and all(t["health"] == "up" for t in active):
                return list(active)
            return None

        active = until("every target up", all_up)
        scraped = {t["labels"]["instance"] for t in active}
        assert scraped == {group["targets"][0] for group in named}

        def data(query: str) -> list[Any]:
            return list(get(port, "/api/v1/query", query=query)["data"]["result"])

        panels = {"queue": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
                  "kv": "vllm:kv_cache_usage_perc", "replicas": "sum by (state) (modelfleet_",
                  "pass duration": "modelfleet_pass_duration_seconds"}  # fmt: skip
        answered = {}
        for name, metric in panels.items():
            query = next(q for q in dashboard_queries() if metric in q)
            answered[name] = until(f"data for {query}", lambda q=query: data(q))
        queue = {series["metric"]["replica"] for series in answered["queue"]}
        assert len(queue) == 2  # both replicas, each engine's own name for its queue
        ready = [s for s in answered["replicas"] if s["metric"]["state"] == "ready"]
        assert ready and ready[0]["value"][1] == "2"
        controller.process.send_signal(signal.SIGTERM)
        code, _, err = controller.finish(timeout=120)
        assert code == 0, err
    finally:
        controller.kill()
        for node in nodes:
            testfleet.ssh(node.name, f"sh -c {shlex.quote(CLEAN)}", timeout=60)


def _answers(address: str, port: int) -> bool:
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as response:
        return bool(response.status == 200)
