"""The stand-in engines serve TLS as the real ones do with the node's key and certificate
(the flags of cli/engines/specs.py), refuse what the real ones refuse, and vLLM and SGLang
reload a renewed certificate; ctl's health check (playbooks/library/modelfleet_verify.py)
believes only a server whose certificate the fleet's CA signed for its address."""

from __future__ import annotations

import functools
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.playbook_modules import load_playbook_module
from tests.tlsfiles import NodeTls, issue, make_ca
from tests.unit.doubles.test_standin_engine import (
    LOCALHOST,
    Engines,
    free_port,
    sglang_args,
    vllm_args,
    wait_for,
)

verify = load_playbook_module("modelfleet_verify")


def served_serial(port: int, ca: Path, host: str = LOCALHOST) -> str:
    """The serial of the certificate the server presents, verified against `ca` for `host`."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        peer = tls.getpeercert() or {}
    return str(peer["serialNumber"]).lower().lstrip("0")


class HandshakeCounter:
    """A client that makes TLS handshakes with the server back to back while it is entered,
    keeping every failure's reason."""

    def __init__(self, port: int, ca: Path) -> None:
        self.port, self.ca = port, ca
        self.succeeded = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                served_serial(self.port, self.ca)
            except (OSError, ValueError) as error:
                self.failed.append(str(error))
            else:
                self.succeeded += 1

    def __enter__(self) -> HandshakeCounter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def serves(port: int, tls: NodeTls, serial: str) -> bool:
    return served_serial(port, tls.ca_pem) == serial


def https_ok(port: int, ca: Path) -> bool:
    status, _, _ = verify.get(f"https://{LOCALHOST}:{port}/health", str(ca))
    return bool(status == 200)


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    root = tmp_path / "engines"
    root.mkdir()
    fleet = Engines(root)
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def node_tls(tmp_path: Path) -> NodeTls:
    return issue(make_ca(tmp_path / "ca"), tmp_path / "pki")


def tls_args(tls: NodeTls, key_option: str = "--ssl-keyfile",
             cert_option: str = "--ssl-certfile") -> list[str]:  # fmt: skip
    return [key_option, str(tls.key), cert_option, str(tls.cert)]


def test_vllm_serves_https_that_verifies_against_the_ca_and_nothing_else(
    engines: Engines, node_tls: NodeTls, tmp_path: Path
) -> None:
    port = free_port()
    vllm = engines.start("vllm", vllm_args(port, *tls_args(node_tls)), port)
    wait_for("https /health", lambda: https_ok(port, node_tls.ca_pem))
    assert served_serial(port, node_tls.ca_pem) == node_tls.serial
    ok, why = verify.serving(f"https://{LOCALHOST}:{port}", "tiny", str(node_tls.ca_pem),
                             node_tls.serial)  # fmt: skip
    assert (ok, why) == (True, "")

    # Another CA's certificate: no answer at all, as far as the check is concerned.
    other = make_ca(tmp_path / "other-ca", "other")
    status, why, _ = verify.get(f"https://{LOCALHOST}:{port}/health", str(other.cert_path))
    assert status is None and why.startswith("TLS: "), why
    # Plain HTTP to a TLS port is not served.
    status, _, _ = verify.get(f"http://{LOCALHOST}:{port}/health")
    assert status != 200
    # The right CA but another certificate than the node's: refused by serial.
    ok, why = verify.serving(f"https://{LOCALHOST}:{port}", "tiny", str(node_tls.ca_pem), "abc")
    assert not ok and why == f"presents certificate {node_tls.serial}, not the node's abc"
    assert "tls-handshake-failed" in vllm.event_names()  # the other CA's client gave up


def test_a_plain_http_server_is_no_answer_at_an_https_health_url(
    engines: Engines, node_tls: NodeTls
) -> None:
    port = free_port()
    vllm = engines.start("vllm", vllm_args(port), port)
    vllm.wait_healthy()
    ok, why = verify.serving(f"https://{LOCALHOST}:{port}", "tiny", str(node_tls.ca_pem))
    assert not ok and why.startswith("/health: "), why


def test_vllm_with_ssl_refresh_serves_a_renewed_certificate_without_a_restart(
    engines: Engines, node_tls: NodeTls, tmp_path: Path
) -> None:
    port = free_port()
    args = vllm_args(port, *tls_args(node_tls), "--enable-ssl-refresh")
    vllm = engines.start("vllm", args, port)
    wait_for("https /health", lambda: https_ok(port, node_tls.ca_pem))
    handshakes = HandshakeCounter(port, node_tls.ca_pem)
    with handshakes:
        for _ in range(3):
            serial = issue(node_tls.ca, tmp_path / "pki").serial
            wait_for("the renewed certificate", functools.partial(serves, port, node_tls, serial))
    # The real server reloads on the event loop that starts every handshake, so no client
    # ever meets a certificate without its key: neither may the stand-in's.
    assert handshakes.failed == [], handshakes.failed[:3]
    assert handshakes.succeeded > 0
    assert vllm.process.poll() is None
    assert vllm.event_names().count("tls-reloaded") >= 3


def test_without_ssl_refresh_the_old_certificate_is_served_until_a_restart(
    engines: Engines, node_tls: NodeTls, tmp_path: Path
) -> None:
    port = free_port()
    llama = engines.start(
        "llama-server",
        ["-m", "models/tiny.gguf", "--host", LOCALHOST, "--port", str(port), "--alias",
         "tiny", *tls_args(node_tls, "--ssl-key-file", "--ssl-cert-file")],
        port,
    )  # fmt: skip
    wait_for("https /health", lambda: https_ok(port, node_tls.ca_pem))
    issue(node_tls.ca, tmp_path / "pki")
    time.sleep(2.5)  # past a watcher's batch, had there been one
    assert served_serial(port, node_tls.ca_pem) == node_tls.serial
    assert "tls-reloaded" not in llama.event_names()


def test_llama_server_with_only_one_of_the_two_files_serves_plain_http(
    engines: Engines, node_tls: NodeTls
) -> None:
    port = free_port()
    llama = engines.start(
        "llama-server",
        ["-m", "models/tiny.gguf", "--host", LOCALHOST, "--port", str(port), "--alias",
         "tiny", "--ssl-key-file", str(node_tls.key)],
        port,
    )  # fmt: skip
    llama.wait_healthy()  # plain http


def test_sglang_refuses_half_a_tls_configuration_before_it_starts(
    engines: Engines, node_tls: NodeTls
) -> None:
    port = free_port()
    done = engines.run("sglang", sglang_args(port, "--ssl-keyfile", str(node_tls.key)))
    assert done.returncode == 1
    assert "--ssl-keyfile requires --ssl-certfile to be specified as well." in done.stderr
    missing = engines.run(
        "sglang", sglang_args(port, "--ssl-keyfile", "/nonexistent/key", "--ssl-certfile",
                              str(node_tls.cert))
    )  # fmt: skip
    assert missing.returncode == 1
    assert "SSL key file not found: '/nonexistent/key'" in missing.stderr


def test_sglang_with_its_ca_fails_its_own_warm_up_for_a_certificate_not_naming_that_host(
    engines: Engines, tmp_path: Path
) -> None:
    """Why ctl never passes SGLang --ssl-ca-certs: its warm-up verifies its own
    certificate for the host it listens on (127.0.0.1 for 0.0.0.0)."""
    ca = make_ca(tmp_path / "ca")
    elsewhere = issue(ca, tmp_path / "pki", "node-1", ("127.0.1.1",))
    port = free_port()
    args = sglang_args(port, *tls_args(elsewhere), "--ssl-ca-certs", str(ca.cert_path))
    sglang = engines.start("sglang", args, port)
    assert sglang.process.wait(timeout=30) == 1
    assert "warm-up request failed" in str(sglang.event("fatal")["reason"])


@pytest.mark.parametrize("built_with_ssl", [True, False])
def test_llama_server_built_without_openssl_refuses_the_tls_files_and_exits_1(
    engines: Engines, node_tls: NodeTls, tmp_path: Path, built_with_ssl: bool
) -> None:
    # tools/server/server.cpp: without CPPHTTPLIB_OPENSSL_SUPPORT, "Server is built without
    # SSL support" and exit 1; the project's build has it, and serves HTTPS.
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"llama_server_ssl": built_with_ssl}), encoding="utf-8")
    port = free_port()
    llama = engines.start(
        "llama-server",
        ["-m", "models/tiny.gguf", "--host", LOCALHOST, "--port", str(port), "--alias",
         "tiny", *tls_args(node_tls, "--ssl-key-file", "--ssl-cert-file")],
        port,
        env={"MODELFLEET_STANDIN_CONFIG": str(config)},
    )  # fmt: skip
    if built_with_ssl:
        wait_for("https /health", lambda: https_ok(port, node_tls.ca_pem))
        assert llama.process.poll() is None
    else:
        assert llama.process.wait(timeout=10) == 1
        assert "Server is built without SSL support" in llama.log_path.read_text()
