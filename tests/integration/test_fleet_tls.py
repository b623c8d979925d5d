"""TLS from the router to every engine, on the real test fleet (issue 18).

Nodes 1 to 3 get a key and a certificate from a CA made here, in /etc/modelfleet/pki as
onboarding leaves them. Then, in steps:

1. `ctl reconcile` starts the catalog's replicas serving HTTPS and points the router on
   node-3 at them over https, with the CA to check them against;
2. `curl` to a shard's port fails TLS verification without the CA and succeeds with it;
   requests by name through the router are answered;
3. `ctl reconcile` beside the CA renews the nodes' certificates, two thirds through their
   lives, while clients ask the router for a vLLM model and a llama-server one: vLLM
   reloads its certificate, the next reconcile replaces the llama-server replica new copy
   first; not one request fails;
4. an impostor takes a replica's port — plain HTTP, then TLS with a certificate from
   another CA: `curl --cacert` refuses it and so does the router, which never gets an
   answer from it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
import urllib.error
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from cli.pki.certs import serial_hex
from cli.pki.paths import CA_PATH, NODE_CERT_PATH, NODE_KEY_PATH, PKI_DIR
from cli.pki.store import CertificateAuthority
from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import Ctl, ctl_on_standins
from tests.integration.test_fleet_routes import ROUTER, Client, ask, with_router
from tests.testfleet.router import stop_router
from tests.tlsfiles import NodeTls, issue, make_ca
from tests.unit.doubles.test_standin_tls import served_serial

pytestmark = pytest.mark.fleet

CHAT = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [assistant]
    replicas: {min: 1}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1,
         drain_seconds: 20}
"""
CATALOG = (
    CHAT
    + """\
  tiny:
    source: file:///srv/models/qwen2.5-0.5b-instruct-q8_0.gguf
    aliases: [small]
    replicas: {min: 1}
    profiles:
      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 2, threads: 2}
"""
)

IMPOSTOR = """\
import http.server, ssl, sys
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self._answer()
    def do_POST(self):
        self._answer()
    def _answer(self):
        print("impostor answered", self.path, flush=True)
        body = b'{"choices": [{"message": {"content": "impostor"}}], "data": []}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Answer)
if len(sys.argv) > 3:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def install_pki(fleet: LiveFleet, node: str, tls: NodeTls) -> None:
    """The node's files as cli/pki/node.py install leaves them: each written beside and
    renamed into place, the key first, modes 0600 and 0644."""
    for path, source, mode in (
        (NODE_KEY_PATH, tls.key, "600"),
        (NODE_CERT_PATH, tls.cert, "644"),
        (CA_PATH, tls.ca_pem, "644"),
    ):
        script = f"mkdir -p {PKI_DIR} && cat > {path}.new && chmod {mode} {path}.new"
        script += f" && mv -f {path}.new {path}"
        done = fleet.ssh(node, f"sh -c {shlex.quote(script)}", stdin=source.read_text())
        assert done.returncode == 0, done.stderr


def install_certificates_due(
    fleet: LiveFleet, ca: CertificateAuthority, directory: Path, nodes: Sequence[str]
) -> dict[str, NodeTls]:
    """Each node's certificate 40 minutes into a 50-minute life: valid, and past two thirds
    of it, so the next pass beside the CA renews it."""
    forty_minutes_ago = datetime.now(UTC) - timedelta(minutes=40)
    issued = {
        node: issue(ca, directory / node, node, (fleet.address(node),),
                    validity=timedelta(minutes=50), issued_at=forty_minutes_ago)
        for node in nodes
    }  # fmt: skip
    for node, tls in issued.items():
        install_pki(fleet, node, tls)
    return issued


def curl(url: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
         *options, url],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def node_serial(fleet: LiveFleet, node: str) -> str:
    """The serial of the certificate in the node's node.pem now."""
    pem = fleet.ssh(node, f"cat {NODE_CERT_PATH}").stdout.encode()
    return serial_hex(x509.load_pem_x509_certificate(pem))


def endpoints(ctl: Ctl) -> dict[str, str]:
    """model → the url of its one ready replica, from `ctl routes --json`."""
    routes = ctl("routes", "--json")
    assert routes.returncode == 0, routes.stdout + routes.stderr
    found = {}
    for model in json.loads(routes.stdout)["models"]:
        urls = [e["url"] for e in model["endpoints"]]
        assert len(urls) == 1, model
        found[model["model"]] = urls[0]
    return found


def test_the_router_reaches_every_engine_over_tls_through_a_renewal_and_refuses_impostors(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ca = make_ca(tmp_path / "ca", "fleet tls test")
    nodes = fleet.names[:3]
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    with_router(ctl, fleet)
    try:
        first = install_certificates_due(fleet, ca, tmp_path, nodes)

        # 1. Every replica serves HTTPS, and the router is told so.
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deploy_router.yml: exit 0" in result.stderr, result.stderr
        urls = endpoints(ctl)
        assert all(url.startswith("https://") for url in urls.values()), urls

        # 2. curl: no CA, no answer; the fleet's CA, an answer.
        health = urls["tiny"].removesuffix("/v1") + "/health"
        refused = curl(health)
        assert refused.returncode == 60, refused.stdout + refused.stderr  # peer cert unverified
        checked = curl(health, "--cacert", str(ca.cert_path))
        assert (checked.returncode, checked.stdout) == (0, "200"), checked.stderr
        assert ask(fleet, "assistant").startswith("chat answered from ")
        assert ask(fleet, "small").startswith("tiny answered from ")
        before = set(ctl.shards())
        tiny_before = {replica for replica in ctl.shards() if replica.startswith("tiny")}

        # 3. Renewed under clients: vLLM reloads, llama-server is replaced new copy first.
        clients = [Client(fleet, "assistant", seconds=120), Client(fleet, "small", seconds=120)]
        loops = [threading.Thread(target=client.run) for client in clients]
        for loop in loops:
            loop.start()
        time.sleep(2)
        # ctl beside the CA renews the certificates two thirds through their lives (each a
        # CSR on its node); the engines that reload do, and the next pass replaces the rest.
        renewing = run_ctl(
            *ctl.arguments("reconcile"),
            env=ctl.environment | {"MODELFLEET_CA_DIR": str(ca.directory)},
            timeout=600,
        )
        renewed = {node: node_serial(fleet, node) for node in nodes}
        time.sleep(3)  # past the refresher's batch of changes
        result = ctl("reconcile")
        time.sleep(2)
        for client in clients:
            client.stop.set()
        for loop in loops:
            loop.join(timeout=60)
        report = "; ".join(
            f"{c.model}: {c.sent} sent, {len(c.failures)} failed {c.failures[:3]}" for c in clients
        )
        print(report)
        assert renewing.returncode == 0, renewing.stdout + renewing.stderr
        for node in nodes:
            assert renewed[node] != first[node].serial, renewing.stdout
            said = renewing.stdout + renewing.stderr
            assert f"renewed {node}: certificate {renewed[node]}" in said, said
        assert result.returncode == 0, result.stdout + result.stderr
        assert "serves the node's certificate from before its renewal" in result.stdout
        assert all(client.failures == [] for client in clients), report
        assert all(client.sent >= 10 for client in clients), report
        shards = ctl.shards()
        for replica, placed in shards.items():
            node, record = next((n, r) for n, r in placed if r.rank == 0)
            served = served_serial(record.port or 0, ca.cert_path, fleet.address(node))
            assert served == renewed[node], (replica, record)
            if replica.startswith("tiny"):  # a new replica, started on the renewed one
                assert record.certificate == renewed[node], (replica, record)
            else:  # vLLM kept its process and reloaded
                assert replica in before, (replica, before)
        assert not tiny_before & set(shards), shards

        # 4. An impostor on tiny's port: plain HTTP, then another CA's certificate.
        urls = endpoints(ctl)
        (tiny_replica,) = [r for r in shards if r.startswith("tiny")]
        tiny_node, tiny_record = next((n, r) for n, r in shards[tiny_replica] if r.rank == 0)
        assert tiny_record.unit is not None and tiny_record.port is not None
        address = fleet.address(tiny_node)
        other = make_ca(tmp_path / "other-ca", "impostor")
        fake = issue(other, tmp_path / "impostor", tiny_node, (address,))
        for kind in ("plain", "other-ca"):
            stopped = fleet.ssh(tiny_node, "systemctl", "stop", tiny_record.unit)
            assert stopped.returncode == 0, stopped.stderr
            script = "cat > /tmp/impostor.py; mkdir -p /tmp/impostor"
            args = [address, str(tiny_record.port)]
            if kind == "other-ca":
                fleet.ssh(tiny_node, "sh -c 'cat > /tmp/impostor/key.pem'",
                          stdin=fake.key.read_text())  # fmt: skip
                fleet.ssh(tiny_node, "sh -c 'cat > /tmp/impostor/cert.pem'",
                          stdin=fake.cert.read_text())  # fmt: skip
                args += ["/tmp/impostor/cert.pem", "/tmp/impostor/key.pem"]
            fleet.ssh(tiny_node, f"sh -c {shlex.quote(script)}", stdin=IMPOSTOR)
            run = (
                "systemd-run --unit modelfleet-test-impostor --collect python3 /tmp/impostor.py "
                + " ".join(shlex.quote(a) for a in args)
            )
            started = fleet.ssh(tiny_node, run)
            assert started.returncode == 0, started.stderr
            time.sleep(1)
            try:
                impostor_health = urls["tiny"].removesuffix("/v1") + "/health"
                checked = curl(impostor_health, "--cacert", str(ca.cert_path))
                assert checked.returncode != 0 and checked.stdout != "200", (kind, checked)
                with pytest.raises(urllib.error.HTTPError):
                    ask(fleet, "small", timeout=60)
                journal = fleet.ssh(
                    tiny_node, "journalctl", "--unit", "modelfleet-test-impostor",
                    "--no-pager", "--output", "cat",
                )  # fmt: skip
                assert "impostor answered /v1" not in journal.stdout, (kind, journal.stdout)
            finally:
                fleet.ssh(tiny_node, "systemctl", "stop", "modelfleet-test-impostor")
        # The next pass sees the replica's unit down and rebuilds it, checked over TLS.
        time.sleep(1)
        rebuilt = ctl("reconcile")
        assert rebuilt.returncode in (0, 1), rebuilt.stdout + rebuilt.stderr
    finally:
        stop_router(fleet, ROUTER)
        ctl.catalog.write_text("models: {}\n")
        ctl("reconcile", "--yes")
        for node in nodes:
            fleet.ssh(node, f"rm -rf {PKI_DIR}")
