"""The teams' keys on the test fleet's router: the real LiteLLM that `ctl reconcile`
installs on node-3 (playbooks/deploy_router.yml), under gunicorn with its two workers,
behind HAProxy, in front of the stand-in engines (issue 32, point 5).

Two teams: `search` with `chat` only at 3 requests a minute, `ops` with every model. The
first is refused on `tiny`, answered 429 past its rate (each worker holding it to its
share), then revoked with `ctl keys revoke --apply` and refused at once; the second is
answered throughout, and still after the router is wiped and installed again.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import Ctl, ctl_on_standins
from tests.integration.test_fleet_routes import KEY, PORT, ROUTER, with_router
from tests.testfleet.router import ROUTER_ETC, prepare_router, stop_router

pytestmark = pytest.mark.fleet

CATALOG = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [assistant]
    replicas: {min: 1}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
  tiny:
    source: file:///srv/models/qwen2.5-0.5b-instruct-q8_0.gguf
    replicas: {min: 1}
    profiles:
      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 2, threads: 2}
"""


def status(fleet: LiveFleet, key: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}]})
    request = urllib.request.Request(
        f"http://{fleet.address(ROUTER)}:{PORT}/v1/chat/completions", data=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def keys(ctl: Ctl, *args: str, catalog: bool = True) -> subprocess.CompletedProcess[str]:
    inputs = ["--inventory", str(ctl.inventory)]
    if catalog:
        inputs += ["--catalog", str(ctl.catalog)]
    done = run_ctl("--timeout", "3", "keys", *args, *inputs, env=ctl.environment, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_two_teams_keys_on_the_fleets_router(fleet_exclusive: LiveFleet, tmp_path: Path) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    with_router(ctl, fleet)
    try:
        search = keys(ctl, "create", "search", "--models", "chat", "--rpm", "3").stdout.strip()
        ops = keys(ctl, "create", "ops", "--all").stdout.strip()
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deploy_router.yml: exit 0" in result.stderr, result.stderr

        assert status(fleet, search, "assistant") == 200
        assert status(fleet, search, "tiny") in (401, 403)
        # 3 a minute on a router of 2 workers, each counting alone: 1 each.
        answers = [status(fleet, search, "chat") for _ in range(4)]
        assert 429 in answers and answers.count(200) <= 2, answers
        for key in (ops, KEY):
            assert [status(fleet, key, m) for m in ("chat", "assistant", "tiny")] == [200] * 3

        search_id = search.split("-")[2]
        revoked = keys(ctl, "revoke", search_id, "--apply")
        assert "routers updated: node-3" in revoked.stderr, revoked.stderr
        assert status(fleet, search, "assistant") == 401
        assert status(fleet, ops, "assistant") == 200

        # The router wiped (its virtualenv, its configuration, its keys) and installed again.
        stop_router(fleet, ROUTER)
        wipe = f"rm -rf /opt/modelfleet/router {ROUTER_ETC}"
        subprocess.run(
            fleet.ssh_command(ROUTER, f"sh -c {shlex.quote(wipe)}"), check=True, timeout=120
        )
        prepare_router(fleet, ROUTER)
        again = ctl("routes", "--apply")
        assert again.returncode == 0, again.stdout + again.stderr
        assert status(fleet, ops, "tiny") == 200
        assert status(fleet, search, "assistant") == 401
        # Root's alone on the router, and the service's copy its user's alone.
        paths = [f"{ROUTER_ETC}/keys.json", "/run/modelfleet-router/keys.json",
                 "/run/modelfleet-router"]  # fmt: skip
        stat = shlex.join(["stat", "-c", "%a %U", *paths])  # one word each, through ssh
        done = subprocess.run(
            fleet.ssh_command(ROUTER, stat), capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        modes = done.stdout.split("\n")
        assert modes[0] == "600 root", modes
        assert modes[1].startswith("400 ") and modes[2].startswith("700 "), modes
        # The key reached no file on the router, nor ctl's logs (ansible.log among them).
        secret = ops.split("-", 3)[3]
        grep = shlex.join(["grep", "-rlF", "-e", secret, "/etc", "/run", "/var/log", "/opt"])
        found = subprocess.run(
            fleet.ssh_command(ROUTER, grep),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert found.stdout == "", found.stdout
        files = [path for path in ctl.state.rglob("*") if path.is_file()]
        assert [path for path in files if secret.encode() in path.read_bytes()] == []
    finally:
        # The replicas drained, the router stopped (installed it stays, like a disk).
        ctl.catalog.write_text("models: {}\n")
        ctl("reconcile", "--yes")
        stop_router(fleet, ROUTER)
