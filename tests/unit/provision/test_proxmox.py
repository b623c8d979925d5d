"""The edge to Proxmox: where the token comes from, and failures said without secrets."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from cli.provision.api import ApiError, RelayError, UnreachableError
from cli.provision.plan import list_vms_call
from cli.provision.proxmox import (
    ENV_TOKEN_ID,
    ENV_TOKEN_SECRET,
    ProxmoxClient,
    Token,
    TokenError,
    load_token,
    token_file_warning,
)
from tests.fakes.proxmox import FakeProxmox, Fault, Knobs, Running, ThrowawayCA, running_fake

SECRET = "5f0c7a52-6b1e-4d2a-9d8e-0b7d1c2e3f41"


def test_the_token_comes_from_the_environment() -> None:
    token = load_token({ENV_TOKEN_ID: "automation@pve!ctl", ENV_TOKEN_SECRET: SECRET}, None)
    assert (token.user, token.name, token.secret) == ("automation@pve", "ctl", SECRET)
    assert SECRET not in repr(token)


def test_a_token_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"# ctl's token\nops@pam!provision={SECRET}\n", encoding="utf-8")
    token = load_token({ENV_TOKEN_ID: "other@pve!x", ENV_TOKEN_SECRET: "y"}, path)
    assert (token.token_id, token.secret) == ("ops@pam!provision", SECRET)


@pytest.mark.parametrize(
    ("env", "text", "message"),
    [
        ({}, None, "no Proxmox API token: set PROXMOX_TOKEN_ID"),
        ({ENV_TOKEN_ID: "automation@pve!ctl"}, None, "no Proxmox API token"),
        ({ENV_TOKEN_ID: "automation!ctl", ENV_TOKEN_SECRET: SECRET}, None, "user@realm!name"),
        ({ENV_TOKEN_ID: "automation@pve!ctl", ENV_TOKEN_SECRET: "a b"}, None, "blanks"),
        ({}, SECRET, "expected one line, user@realm!name=secret"),
        ({}, f"a@pve!b={SECRET}\nc@pve!d={SECRET}\n", "expected one line"),
        ({}, f"a@pve={SECRET}", "the token id must look like user@realm!name"),
    ],
)
def test_a_missing_or_malformed_token_is_said_without_its_secret(
    tmp_path: Path, env: dict[str, str], text: str | None, message: str
) -> None:
    path = None
    if text is not None:
        path = tmp_path / "token"
        path.write_text(text, encoding="utf-8")
    with pytest.raises(TokenError) as raised:
        load_token(env, path)
    assert message in str(raised.value)
    assert SECRET not in str(raised.value)


def test_an_unreadable_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenError, match="No such file or directory"):
        load_token({}, tmp_path / "missing")


def test_a_token_file_others_can_read_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"a@pve!b={SECRET}", encoding="utf-8")
    path.chmod(0o640)
    assert token_file_warning(path) == f"{path} can be read by others (mode 0640): chmod 600 {path}"
    path.chmod(0o600)
    assert token_file_warning(path) is None


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[Running]:
    yield from running_fake(tmp_path, Knobs(auth_failure_delay=0.0))


def client(pve: Running, *, secret: str | None = None, timeout: float = 5) -> ProxmoxClient:
    token = Token(pve.knobs.token_id, secret or pve.knobs.token_secret)
    return ProxmoxClient("127.0.0.1", pve.port, token, ca_cert=pve.ca_file, timeout=timeout)


def test_a_refusal_is_an_api_error_with_proxmoxs_text(pve: Running) -> None:
    with pytest.raises(ApiError) as raised:
        client(pve, secret="wrong").call(list_vms_call())
    error = raised.value
    assert (error.status, error.message, error.errors) == (401, "invalid token value!", {})
    assert str(error) == "GET /cluster/resources: 401 invalid token value!"


def test_a_server_too_slow_to_answer_is_unreachable_not_a_hang(pve: Running) -> None:
    pve.knobs.auth_failure_delay = 2.0
    with pytest.raises(UnreachableError) as raised:
        client(pve, secret="wrong", timeout=0.5).call(list_vms_call())
    assert str(raised.value) == (
        f"https://127.0.0.1:{pve.port} did not answer GET /cluster/resources within 0.5 s"
    )


def test_nothing_listening_is_said_plainly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = ProxmoxClient("127.0.0.1", port, Token("a@pve!b", SECRET), timeout=2)
    with pytest.raises(UnreachableError) as raised:
        closed.call(list_vms_call())
    assert str(raised.value) == f"cannot connect to https://127.0.0.1:{port}: Connection refused"


def test_a_certificate_for_another_name_is_refused(tmp_path: Path) -> None:
    ca = ThrowawayCA.create()
    cert, key = ca.issue(tmp_path / "server", dns_names=("pve.invalid",), ips=())
    with FakeProxmox(cert, key, knobs=Knobs(auth_failure_delay=0.0)) as fake:
        ca_file = ca.write(tmp_path / "ca.pem")
        wrong_name = ProxmoxClient(
            "127.0.0.1", fake.port, Token("a@pve!b", SECRET), ca_cert=ca_file, timeout=2
        )
        with pytest.raises(UnreachableError) as raised:
            wrong_name.call(list_vms_call())
    assert "IP address mismatch, certificate is not valid for '127.0.0.1'" in str(raised.value)
    assert f"not signed by --ca-cert {ca_file}, or does not name this host" in str(raised.value)


def test_plain_http_on_the_port_is_a_tls_failure() -> None:
    class Plain(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Plain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        plain = ProxmoxClient("127.0.0.1", server.server_address[1], Token("a@pve!b", SECRET))
        with pytest.raises(UnreachableError) as raised:
            plain.call(list_vms_call())
    finally:
        server.shutdown()
        server.server_close()
    assert "TLS with https://127.0.0.1:" in str(raised.value)
    assert "wrong version number" in str(raised.value)


@pytest.mark.parametrize(
    ("status", "reason"),
    [(595, "No route to host"), (596, "Broken pipe"), (597, "Unexpected end-of-file"),
     (598, "Request cancelled by on_body"), (599, "Too many redirections")],
)  # fmt: skip
def test_pveproxys_59x_is_no_answer_not_a_refusal(pve: Running, status: int, reason: str) -> None:
    pve.knobs.faults = [Fault("GET", r"/cluster/resources", status, reason)]
    with pytest.raises(RelayError) as raised:
        client(pve).call(list_vms_call())
    error = raised.value
    assert isinstance(error, UnreachableError) and not isinstance(error, ApiError)
    assert (error.status, error.reason) == (status, reason)
    assert str(error) == (
        f"GET /cluster/resources: {status} {reason} (pveproxy could not relay the call to the node)"
    )


def test_a_4xx_stays_a_refusal(pve: Running) -> None:
    pve.knobs.faults = [Fault("GET", r"/cluster/resources", 403, "Permission check failed")]
    with pytest.raises(ApiError) as raised:
        client(pve).call(list_vms_call())
    assert (raised.value.status, raised.value.message) == (403, "Permission check failed")


def test_a_dropped_connection_is_unreachable(pve: Running) -> None:
    pve.knobs.faults = [Fault("GET", r"/cluster/resources", None)]
    with pytest.raises(UnreachableError) as raised:
        client(pve).call(list_vms_call())
    assert not isinstance(raised.value, RelayError)
    assert str(raised.value).startswith(f"cannot connect to https://127.0.0.1:{pve.port}: ")
