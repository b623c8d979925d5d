"""The real llama-server on the test fleet, end to end: not the stand-in.

scripts/build_llama_server builds llama.cpp's server (the one llama-cpp-python 0.3.36
vendors) once per machine; this test puts it on node-1..node-3 at the path ctl's command
lines run (`llama-server`, found by systemd in /usr/local/bin), with the tiny random-weight
model (tests/models/tiny_gguf.py) at /srv/models/, and restores the stand-in afterwards:
every other fleet test installs its stand-ins itself. Through the real CLI, in steps, each
starting from the fleet the step before left:

1. `ctl reconcile` starts a chat and an embedding replica of the tiny model on the real
   server, waits for their health checks, and deploys the LiteLLM router (node-3) in front;
   a chat completion and an embeddings request by alias answer through the router;
2. `ctl drain` moves the chat replica off its node while a client asks for it by alias in a
   loop: not one request fails, and both replicas answered;
3. a llama-server killed with SIGKILL on its node is found failed by the next `ctl
   reconcile`, stopped, and rebuilt once its backoff has passed; it answers again;
4. an empty catalog stops everything.

And with TLS (issue 31, point 8): the real server started with the node's certificate,
checked by the router against the CA, and replaced new copy first when the certificate is
renewed, under a client that counts its requests.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cli.facts.model import store_directory
from cli.pki.paths import CA_PATH, NODE_CERT_PATH, NODE_KEY_PATH, PKI_DIR
from tests.ctl import ctl as run_ctl
from tests.fakes.hub import run_hub
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import CLEAN, Ctl, install_standin
from tests.integration.test_fleet_routes import KEY, PORT, ROUTER, with_router
from tests.integration.test_fleet_tls import curl, install_certificates_due, node_serial
from tests.models.llama_server import LlamaServer, installed_llama_server
from tests.models.tiny_gguf import write_tiny_llama
from tests.testfleet.router import stop_router
from tests.tlsfiles import make_ca
from tests.unit.doubles.test_standin_tls import served_serial

pytestmark = pytest.mark.fleet

MODEL_PATH = "/srv/models/tiny-llama.gguf"
CATALOG = f"""\
models:
  tiny:
    source: file://{MODEL_PATH}
    aliases: [small]
    replicas: {{min: 1}}
    profiles:
      - {{name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 1, threads: 1,
         context_length: 512}}
  tiny-embed:
    source: file://{MODEL_PATH}
    aliases: [embedder]
    replicas: {{min: 1}}
    profiles:
      - {{name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 1, threads: 1,
         args: ["--embeddings", "--pooling", "mean"]}}
"""
# What the stand-in's install leaves in place of llama-server once the test is done.
RESTORE = "cp /usr/local/bin/vllm /usr/local/bin/llama-server; rm -f " + MODEL_PATH


@pytest.fixture(scope="session")
def llama_build() -> LlamaServer:
    try:
        return installed_llama_server()
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def tiny_model(llama_build: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-model")
    return write_tiny_llama(llama_build.vocabulary("llama-spm"), directory / "tiny-llama.gguf")


def _put(fleet: LiveFleet, node: str, path: str, content: bytes, mode: str) -> None:
    script = f"set -e; install -d {shlex.quote(str(Path(path).parent))};"
    script += f" cat > {path}.new; chmod {mode} {path}.new; mv {path}.new {path}"
    subprocess.run(
        fleet.ssh_command(node, f"sh -c {shlex.quote(script)}"),
        input=content, check=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def real_llama_nodes(
    fleet_exclusive: LiveFleet, llama_build: LlamaServer, tiny_model: Path
) -> Iterator[LiveFleet]:
    """node-1..3 with the stand-ins, then the real llama-server and the model; afterwards
    the stand-in is llama-server again."""
    fleet = fleet_exclusive
    install_standin(fleet)
    binary, model = llama_build.binary.read_bytes(), tiny_model.read_bytes()
    digest = hashlib.sha256(binary).hexdigest()
    for node in fleet.names[:3]:
        _put(fleet, node, "/usr/local/bin/llama-server", binary, "755")
        _put(fleet, node, MODEL_PATH, model, "644")
        installed = fleet.ssh(node, "sha256sum", "/usr/local/bin/llama-server")
        assert installed.stdout.split()[:1] == [digest], installed.stdout + installed.stderr
    try:
        yield fleet
    finally:
        for node in fleet.names[:3]:
            fleet.ssh(node, CLEAN + RESTORE, timeout=60)


def _request(
    fleet: LiveFleet, path: str, body: dict[str, object], timeout: float = 60
) -> tuple[dict[str, object], str]:
    """A request through the router: the answer, and the replica LiteLLM says answered."""
    request = urllib.request.Request(
        f"http://{fleet.address(ROUTER)}:{PORT}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        replica = response.headers.get("x-litellm-model-id", "")
        return json.loads(response.read()), replica


def chat(fleet: LiveFleet, model: str, timeout: float = 60) -> tuple[str, str]:
    answer, replica = _request(
        fleet, "/v1/chat/completions",
        {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]},
        timeout,
    )  # fmt: skip
    choices = answer["choices"]
    assert isinstance(choices, list)
    return str(choices[0]["message"]["content"]), replica


@dataclass
class Client:
    """Chat requests through the router one after another until stopped (or `most` sent,
    or `seconds` passed), each on a new connection."""

    fleet: LiveFleet
    model: str
    most: int = 2000
    seconds: float = 300
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    answered_by: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        while not self.stop.is_set() and self.sent < self.most and time.monotonic() < deadline:
            started = time.monotonic()
            self.sent += 1
            try:
                _, replica = chat(self.fleet, self.model, timeout=30)
            except (OSError, urllib.error.URLError) as error:
                self.failures.append(f"request {self.sent}: {error}")
            else:
                self.answered_by[replica] = self.answered_by.get(replica, 0) + 1
            self.slowest = max(self.slowest, time.monotonic() - started)
            time.sleep(0.05)


def _of(model: str, replica: str) -> bool:
    return re.fullmatch(rf"{re.escape(model)}-\d+", replica) is not None


def _replica(ctl: Ctl, model: str) -> tuple[str, str, str, int]:
    """model's one replica: its id, node, unit and port."""
    ((replica, shards),) = [(r, s) for r, s in ctl.shards().items() if _of(model, r)]
    ((node, record),) = shards
    return replica, node, str(record.unit), record.port or 0


def _direct(
    fleet: LiveFleet, node: str, port: int, path: str, ca: Path | None = None
) -> tuple[int, str]:
    """A GET to a replica itself: over HTTPS, checked against `ca`, when given."""
    scheme, context = (
        ("https", ssl.create_default_context(cafile=str(ca))) if ca else ("http", None)
    )
    url = f"{scheme}://{fleet.address(node)}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_real_llama_server_serves_drains_and_is_rebuilt_through_ctl(
    real_llama_nodes: LiveFleet, tmp_path: Path
) -> None:
    fleet = real_llama_nodes
    ctl = Ctl(fleet, tmp_path, CATALOG)
    with_router(ctl, fleet)
    began = time.monotonic()
    try:
        # 1. Both replicas start on the real server, pass their health checks, and answer
        #    by alias through the router.
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deploy_router.yml: exit 0" in result.stderr, result.stderr
        print(f"reconcile: {time.monotonic() - began:.0f} s\n{result.stdout}")
        chat_id, chat_node, _, chat_port = _replica(ctl, "tiny")
        embed_id, embed_node, _, embed_port = _replica(ctl, "tiny-embed")
        # The real server: llama.cpp's /health and /props, and no stand-in's /debug page.
        assert _direct(fleet, chat_node, chat_port, "/health") == (200, '{"status":"ok"}')
        status, props = _direct(fleet, chat_node, chat_port, "/props")
        assert status == 200 and MODEL_PATH in props, props
        assert _direct(fleet, chat_node, chat_port, "/debug/standin")[0] == 404
        text, replica = chat(fleet, "small")
        assert replica == chat_id
        assert isinstance(text, str)
        answer, replica = _request(
            fleet, "/v1/embeddings", {"model": "embedder", "input": "hello there"}
        )
        assert replica == embed_id
        data = answer["data"]
        assert isinstance(data, list)
        assert len(data[0]["embedding"]) == 64  # the tiny model's width
        assert _direct(fleet, embed_node, embed_port, "/health")[0] == 200

        # 2. Drain the chat replica's node while a client asks by alias: not one fails.
        client = Client(fleet, "small")
        loop = threading.Thread(target=client.run)
        loop.start()
        time.sleep(2)
        started = time.monotonic()
        result = ctl("drain", chat_node)
        moved_in = time.monotonic() - started
        time.sleep(2)
        client.stop.set()
        loop.join(timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        moved_id, moved_node, moved_unit, _ = _replica(ctl, "tiny")
        report = (
            f"drain: {client.sent} requests during a {moved_in:.0f} s move,"
            f" {len(client.failures)} failed, answered by {client.answered_by},"
            f" slowest {client.slowest:.1f} s"
        )
        print(report)
        assert moved_node != chat_node and moved_id != chat_id, result.stdout
        assert client.failures == [], report
        assert set(client.answered_by) == {chat_id, moved_id}, report
        assert client.sent >= 20, report
        uncordoned = run_ctl("uncordon", chat_node, "--inventory", str(ctl.inventory))
        assert uncordoned.returncode == 0, uncordoned.stderr

        # 3. SIGKILL the llama-server process: the next reconcile fails the replica and,
        #    after its backoff, rebuilds it.
        pid = fleet.ssh(moved_node, "systemctl", "show", "-P", "MainPID", moved_unit)
        assert pid.returncode == 0 and int(pid.stdout) > 0, pid.stdout + pid.stderr
        command = fleet.ssh(moved_node, "cat", f"/proc/{int(pid.stdout)}/comm").stdout.strip()
        assert command == "llama-server"
        fleet.ssh(moved_node, "kill", "-9", pid.stdout.strip()).check_returncode()
        time.sleep(2)
        result = ctl("reconcile")
        assert re.search(rf"stop +{moved_id} +.*failed", result.stdout), result.stdout
        assert re.search(r"wait +tiny +backoff after 1 failure", result.stdout), result.stdout
        assert not [r for r in ctl.shards() if _of("tiny", r)]
        rebuilt_id = ""
        for _ in range(5):  # the first backoff is at most 30 s
            time.sleep(11)
            result = ctl("reconcile")
            # Exit 1 is the documented "something still waits": a pass can land on the
            # backoff's last second ("until …, in 0 s") and must then wait, not start.
            waiting = re.search(r"wait +tiny +backoff", result.stdout)
            assert result.returncode == (1 if waiting else 0), result.stdout + result.stderr
            started_now = re.search(r"started (tiny-\d+)", result.stdout)
            if started_now:
                rebuilt_id = started_now.group(1)
                break
        assert rebuilt_id, result.stdout
        assert rebuilt_id != moved_id  # a new replica (the drained one's id may come back)
        text, replica = chat(fleet, "small")
        assert replica == rebuilt_id
        print(f"kill -9: rebuilt as {rebuilt_id}; the whole test {time.monotonic() - began:.0f} s")

        # 4. An empty catalog: nothing of ours left running.
        ctl.catalog.write_text("models: {}\n")
        result = ctl("reconcile", "--yes")
        assert ctl.shards() == {}, result.stdout + result.stderr
    finally:
        stop_router(fleet, ROUTER)


def test_the_real_llama_server_starts_on_weights_staged_from_http_and_a_move_stages_them_again(
    real_llama_nodes: LiveFleet, tiny_model: Path, tmp_path: Path
) -> None:
    """Issue 15's end to end: an http:// GGUF is downloaded into the node's model store by
    the staging step, with a progress line, and the real llama-server loads the local
    copy (`-m`); drained, the replica's weights go to its new node before it starts."""
    fleet = real_llama_nodes
    root = tmp_path / "hub"
    (root / "files").mkdir(parents=True)
    (root / "files" / "tiny-llama.gguf").write_bytes(tiny_model.read_bytes())
    size = tiny_model.stat().st_size
    with run_hub(root, bytes_per_second=max(size / 5, 1.0)) as hub:
        source = f"{hub.endpoint}/files/tiny-llama.gguf"
        catalog = (
            "models:\n  tiny:\n"
            f"    source: {source}\n"
            "    profiles:\n"
            "      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 1, threads: 1,\n"
            "         context_length: 512}\n"
        )
        ctl = Ctl(fleet, tmp_path / "ctl", catalog)
        settings = ctl.inventory / "group_vars" / "all.yml"
        settings.write_text(settings.read_text().replace(
            "modelfleet_stage_weights: false", "modelfleet_stage_weights: true"
        ))  # fmt: skip
        staged = f"/var/lib/modelfleet/models/{store_directory(source)}/tiny-llama.gguf"
        try:
            result = ctl("reconcile")
            assert result.returncode == 0, result.stdout + result.stderr
            assert re.search(rf"^  staging {re.escape(source)} on node-\d: \[", result.stderr, re.M)
            assert "started tiny-1" in result.stdout
            _, node, unit, port = _replica(ctl, "tiny")
            exec_start = fleet.ssh(node, "systemctl", "show", "-p", "ExecStart", "--value", unit)
            assert f" -m {staged} " in exec_start.stdout, exec_start.stdout
            assert _direct(fleet, node, port, "/health") == (200, '{"status":"ok"}')
            assert hub.bytes_sent == size

            moved = ctl("drain", node)
            assert moved.returncode == 0, moved.stdout + moved.stderr
            _, new_node, _, new_port = _replica(ctl, "tiny")
            assert new_node != node
            assert _direct(fleet, new_node, new_port, "/health")[0] == 200
            assert hub.bytes_sent == 2 * size  # staged on its new node, before it started
        finally:
            for name in fleet.names[:3]:
                fleet.ssh(name, "rm", "-rf", "/var/lib/modelfleet/models", timeout=60)


TINY_ONLY = CATALOG.split("  tiny-embed:", maxsplit=1)[0]


def test_the_real_llama_server_serves_the_nodes_certificate_and_is_replaced_after_a_renewal(
    real_llama_nodes: LiveFleet, tmp_path: Path
) -> None:
    """Issue 31, point 8, in one pass of a client through the router:

    1. with a certificate on every node, `ctl reconcile` starts the real llama-server with
       `--ssl-key-file`/`--ssl-cert-file`; it serves the node's certificate, which curl
       refuses without the CA and takes with it, and the router reaches it over https,
       checking it against the CA;
    2. ctl beside the CA renews the certificates (two thirds through their lives) while a
       client asks the router in a loop; llama-server reads its certificate once, so the
       next pass replaces the replica new copy first: not one request fails, and the new
       replica serves the renewed certificate.
    """
    fleet = real_llama_nodes
    nodes = fleet.names[:3]
    ca = make_ca(tmp_path / "ca", "real llama-server tls test")
    ctl = Ctl(fleet, tmp_path, TINY_ONLY)
    with_router(ctl, fleet)
    began = time.monotonic()
    try:
        first = install_certificates_due(fleet, ca, tmp_path, nodes)

        # 1. The real server, on the node's certificate, checked by the router.
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deploy_router.yml: exit 0" in result.stderr, result.stderr
        replica, node, unit, port = _replica(ctl, "tiny")
        exec_start = fleet.ssh(node, "systemctl", "show", "-p", "ExecStart", "--value", unit)
        tls_options = f" --ssl-key-file {NODE_KEY_PATH} --ssl-cert-file {NODE_CERT_PATH} "
        assert tls_options in exec_start.stdout, exec_start.stdout
        url = f"https://{fleet.address(node)}:{port}/health"
        refused = curl(url)
        assert refused.returncode == 60, refused.stdout + refused.stderr  # peer cert unverified
        assert curl(url, "--cacert", str(ca.cert_path)).stdout == "200"
        assert _direct(fleet, node, port, "/health", ca.cert_path) == (200, '{"status":"ok"}')
        status, props = _direct(fleet, node, port, "/props", ca.cert_path)  # llama.cpp's own
        assert status == 200 and MODEL_PATH in props, props
        assert served_serial(port, ca.cert_path, fleet.address(node)) == first[node].serial
        routes = ctl("routes", "--json")
        (model,) = json.loads(routes.stdout)["models"]
        assert [e["url"] for e in model["endpoints"]] == [
            f"https://{fleet.address(node)}:{port}/v1"
        ], routes.stdout
        # The router's relay to the replica checks it against the fleet's CA, for its node.
        relay = fleet.ssh(ROUTER, "cat", "/etc/modelfleet/router/haproxy.cfg").stdout
        checked = f" {fleet.address(node)}:{port} check ssl verify required ca-file {CA_PATH}"
        assert f"{checked} verifyhost {node} " in relay, relay
        assert chat(fleet, "small")[1] == replica
        print(f"started on TLS, router deployed: {time.monotonic() - began:.0f} s")

        # 2. Renewed under a client: the replica is replaced new copy first.
        client = Client(fleet, "small")
        loop = threading.Thread(target=client.run)
        loop.start()
        time.sleep(2)
        renewing = run_ctl(
            *ctl.arguments("reconcile"),
            env=ctl.environment | {"MODELFLEET_CA_DIR": str(ca.directory)},
            timeout=600,
        )
        renewed = {name: node_serial(fleet, name) for name in nodes}
        print(f"renewed: {time.monotonic() - began:.0f} s")
        replaced = ctl("reconcile")
        time.sleep(2)
        client.stop.set()
        loop.join(timeout=60)
        new_replica, new_node, _, new_port = _replica(ctl, "tiny")
        report = (
            f"renewal: {client.sent} requests, {len(client.failures)} failed"
            f" {client.failures[:3]}, answered by {client.answered_by},"
            f" slowest {client.slowest:.1f} s; the whole test {time.monotonic() - began:.0f} s"
        )
        print(report)
        assert renewing.returncode == 0, renewing.stdout + renewing.stderr
        said = renewing.stdout + renewing.stderr
        for name in nodes:
            assert renewed[name] != first[name].serial, said
            assert f"renewed {name}: certificate {renewed[name]}" in said, said
        assert replaced.returncode == 0, replaced.stdout + replaced.stderr
        assert "serves the node's certificate from before its renewal" in replaced.stdout
        assert new_replica != replica, replaced.stdout
        assert client.failures == [], report
        assert set(client.answered_by) == {replica, new_replica}, report
        assert client.sent >= 20, report
        ((_, record),) = ctl.shards()[new_replica]
        assert record.certificate == renewed[new_node]
        served = served_serial(new_port, ca.cert_path, fleet.address(new_node))
        assert served == renewed[new_node]
        assert chat(fleet, "small")[1] == new_replica
    finally:
        # The replicas go with real_llama_nodes' clean-up; the certificates here.
        stop_router(fleet, ROUTER)
        for name in nodes:
            fleet.ssh(name, f"rm -rf {PKI_DIR}")
