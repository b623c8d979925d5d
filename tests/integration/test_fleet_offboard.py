"""A node's whole life past serving, on the real test fleet (issue 18): onboarded with the
fleet's CA, serving TLS behind the router, `ctl offboard-node` under a client, its
certificate then refused by the router, and onboarded again.

1. nodes 1 to 3 are onboarded (`ctl onboard-node`: a CA made here, host keys pinned);
   `ctl reconcile` starts chat and tiny over TLS and the router on node-3;
2. `ctl offboard-node` on chat's node while a client asks the router for chat: not one
   request fails; the inventory differs from before by exactly the node's lines; its key is
   gone from the node, its host key from known_hosts, its serial in the CA's CRL;
3. the router refuses the revoked certificate: its own LiteLLM, with its trust bundle,
   asking an engine started on the offboarded node with that node's old key and
   certificate, is refused in the handshake, while the same engine with a certificate the
   CA has not revoked is answered;
4. `ctl onboard-node` takes the node back, with a new certificate.
"""

from __future__ import annotations

import difflib
import re
import shlex
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from cli.inventory.load import load_inventory
from cli.pki.paths import NODE_CERT_PATH, NODE_KEY_PATH, PKI_DIR
from cli.pki.store import init_ca, revoked_serials
from cli.routes.litellm import ROUTER_TRUST
from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import Ctl, ctl_on_standins
from tests.integration.test_fleet_routes import ROUTER, Client, with_router
from tests.integration.test_fleet_tls import CHAT
from tests.integration.test_onboard import ensure_openssl, host_key_fingerprint
from tests.integration.test_router_crl import ASK
from tests.testfleet.router import stop_router
from tests.tlsfiles import issue

pytestmark = pytest.mark.fleet

ROUTER_PYTHON = "/opt/modelfleet/router/venv/bin/python"
IMPOSTOR_PORT = 8990


def run(ctl: Ctl, ca_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """ctl ARGS on the test's inventory, where the CA is."""
    env = ctl.environment | {"MODELFLEET_CA_DIR": str(ca_dir)}
    return run_ctl(*args, "--inventory", str(ctl.inventory), env=env, timeout=600)


def node_lines(text: str, node: str) -> list[str]:
    """The lines of an inventory that are `node`'s: each `NODE:` key and what is indented
    under it."""
    lines = text.splitlines()
    found: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        indent = len(line) - len(line.lstrip())
        index += 1
        if line.strip() not in (f"{node}:", f"{node}: null"):
            continue
        found.append(line)
        while index < len(lines) and len(lines[index]) - len(lines[index].lstrip()) > indent:
            found.append(lines[index])
            index += 1
    return found


def onboard(ctl: Ctl, ca_dir: Path, fleet: LiveFleet, node: str, *extra: str) -> str:
    result = run(
        ctl, ca_dir,
        "onboard-node", node, "--host", fleet.address(node), "--identity", str(fleet.key),
        "--expect-host-key", host_key_fingerprint(fleet, node), "--group", "gpu", *extra,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


def serve_with(fleet: LiveFleet, node: str, key: str, cert: str, unit: str) -> None:
    """A stand-in vLLM on `node` serving TLS with these files (paths on the node)."""
    command = (
        f"systemd-run --unit {unit} --collect vllm serve /models/tiny --host"
        f" {fleet.address(node)} --port {IMPOSTOR_PORT} --served-model-name tiny"
        f" --ssl-keyfile {key} --ssl-certfile {cert}"
    )
    started = fleet.ssh(node, command)
    assert started.returncode == 0, started.stderr
    time.sleep(3)


def router_asks(fleet: LiveFleet, node: str) -> str:
    """The router's own Python (LiteLLM, the CRL check, its trust bundle) asks the engine
    on `node`; its one-line verdict."""
    url = f"https://{fleet.address(node)}:{IMPOSTOR_PORT}/v1"
    script = ASK.replace("shim.TRUST_BUNDLE = sys.argv[1]\nshim.install()\n", "")
    done = fleet.ssh(
        ROUTER,
        f"LITELLM_LOCAL_MODEL_COST_MAP=True {ROUTER_PYTHON} - {shlex.quote(ROUTER_TRUST)}"
        f" {shlex.quote(url)}",
        stdin=script, timeout=120,
    )  # fmt: skip
    return (done.stdout.strip().splitlines() or [done.stderr.strip()[-500:]])[-1]


def test_a_node_is_offboarded_under_a_client_its_certificate_refused_and_onboarded_again(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    nodes = fleet.names[:3]
    ca = init_ca(tmp_path / "ca", "offboarding test", datetime.now(UTC))
    ctl = ctl_on_standins(fleet, tmp_path, CHAT)
    with_router(ctl, fleet)
    try:
        # 1. Onboarded, serving TLS behind the router.
        for node in nodes:
            ensure_openssl(fleet, node)
            fleet.ssh(node, f"rm -rf {PKI_DIR}")
            onboard(ctl, ca.directory, fleet, node, "--labels", "role=inference")
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        (chat,) = [placed for replica, placed in ctl.shards().items() if replica.startswith("chat")]
        node = chat[0][0]
        assert chat[0][1].certificate is not None
        old_key = fleet.ssh(node, f"cat {NODE_KEY_PATH}").stdout
        old_cert = fleet.ssh(node, f"cat {NODE_CERT_PATH}").stdout
        inventory_before = (ctl.inventory / "hosts.yml").read_text()
        known_before = (ctl.inventory / ".known_hosts").read_text()

        # 2. Offboarded under a client asking for chat through the router.
        client = Client(fleet, "assistant", seconds=180)
        loop = threading.Thread(target=client.run)
        loop.start()
        time.sleep(2)
        offboarded = run(ctl, ca.directory, "offboard-node", node, "--catalog", str(ctl.catalog))
        time.sleep(2)
        client.stop.set()
        loop.join(timeout=60)
        report = f"{client.sent} sent, {len(client.failures)} failed {client.failures[:3]}"
        print(report + "\n" + offboarded.stdout + offboarded.stderr)
        assert offboarded.returncode == 0, offboarded.stdout + offboarded.stderr
        assert client.failures == [] and client.sent >= 10, report
        inventory_after = (ctl.inventory / "hosts.yml").read_text()
        diff = [
            line
            for line in difflib.ndiff(inventory_before.splitlines(), inventory_after.splitlines())
            if line.startswith(("- ", "+ "))
        ]
        # Exactly the node's lines gone, and nothing else changed.
        assert [line[2:] for line in diff] == node_lines(inventory_before, node), diff
        assert all(line.startswith("- ") for line in diff), diff
        assert node not in yaml.safe_load(inventory_after)["all"]["hosts"]
        assert fleet.address(node) in known_before
        assert fleet.address(node) not in (ctl.inventory / ".known_hosts").read_text()
        assert fleet.ssh(node, f"test -e {NODE_KEY_PATH}").returncode == 1
        serial = re.search(r"certificate revoked: serial ([0-9a-f]+)", offboarded.stdout)
        assert serial and serial.group(1) in revoked_serials(ca.directory), offboarded.stdout
        again = run(ctl, ca.directory, "offboard-node", node, "--catalog", str(ctl.catalog))
        assert again.returncode == 0 and "already offboarded" in again.stdout, again.stdout

        # 3. The router refuses the revoked certificate, and takes one that is not revoked.
        fleet.ssh(node, "sh -c 'mkdir -p /tmp/old && cat > /tmp/old/key.pem'", stdin=old_key)
        fleet.ssh(node, "sh -c 'cat > /tmp/old/cert.pem'", stdin=old_cert)
        serve_with(fleet, node, "/tmp/old/key.pem", "/tmp/old/cert.pem", "modelfleet-test-old")
        try:
            verdict = router_asks(fleet, node)
            assert verdict.startswith("REFUSED") and "certificate revoked" in verdict, verdict
        finally:
            fleet.ssh(node, "systemctl", "stop", "modelfleet-test-old")
        fresh = issue(ca, tmp_path / "fresh", node, (fleet.address(node),))
        fleet.ssh(node, "sh -c 'mkdir -p /tmp/fresh && cat > /tmp/fresh/key.pem'",
                  stdin=fresh.key.read_text())  # fmt: skip
        fleet.ssh(node, "sh -c 'cat > /tmp/fresh/cert.pem'", stdin=fresh.cert.read_text())
        serve_with(fleet, node, "/tmp/fresh/key.pem", "/tmp/fresh/cert.pem", "modelfleet-test-new")
        try:
            verdict = router_asks(fleet, node)
            assert verdict.startswith("ANSWER tiny answered from "), verdict
        finally:
            fleet.ssh(node, "systemctl", "stop", "modelfleet-test-new")

        # 4. Onboarded again: back in the inventory with a new certificate.
        said = onboard(ctl, ca.directory, fleet, node, "--labels", "role=inference")
        issued = re.search(r"certificate issued.*?: serial ([0-9a-f]+)", said)
        assert issued and issued.group(1) != serial.group(1), said
        back = load_inventory(ctl.inventory).host(node)  # under group gpu, as asked
        assert back.address == fleet.address(node) and "gpu" in back.groups
        assert fleet.ssh(node, f"test -e {NODE_KEY_PATH}").returncode == 0
    finally:
        stop_router(fleet, ROUTER)
        ctl.catalog.write_text("models: {}\n")
        ctl("reconcile", "--yes")
        for node in nodes:
            fleet.ssh(node, f"rm -rf {PKI_DIR} /tmp/old /tmp/fresh")
