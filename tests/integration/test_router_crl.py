"""LiteLLM itself, with the CRL check the routers get (playbooks/files/
modelfleet_router_tls.py), asking a stand-in vLLM serving TLS with a node certificate: it
answers while the trust bundle holds the CA alone or a CRL of other serials, and is refused
in the handshake once the CRL lists the engine's own certificate.

LiteLLM runs from its own virtualenv (tests/integration/litellm_env.py), as on a router:
`litellm.ssl_verify` set to the bundle, as `litellm_settings.ssl_verify` sets it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from cli.pki.revocation import CertRecord, build_crl
from tests.integration.litellm_env import litellm_environment, litellm_venv
from tests.tlsfiles import NodeTls, issue, make_ca
from tests.unit.doubles.test_standin_engine import (
    LOCALHOST,
    Engines,
    free_port,
    vllm_args,
    wait_for,
)
from tests.unit.doubles.test_standin_tls import https_ok

SHIM_DIR = Path(__file__).resolve().parents[2] / "playbooks" / "files"
ASK = """\
import sys
import modelfleet_router_tls as shim
shim.TRUST_BUNDLE = sys.argv[1]
shim.install()
import litellm
litellm.ssl_verify = sys.argv[1]
try:
    answer = litellm.completion(
        model="hosted_vllm/tiny", api_base=sys.argv[2], api_key="none", num_retries=0,
        messages=[{"role": "user", "content": "hello"}], timeout=20,
    )
except Exception as error:
    print("REFUSED", repr(error)[:2000])
    sys.exit(1)
print("ANSWER", answer.choices[0].message.content)
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[NodeTls, str]]:
    tls = issue(make_ca(tmp_path / "ca"), tmp_path / "pki")
    root = tmp_path / "engines"
    root.mkdir()
    engines = Engines(root)
    port = free_port()
    try:
        engines.start("vllm", vllm_args(port, "--ssl-keyfile", str(tls.key), "--ssl-certfile",
                                         str(tls.cert)), port)  # fmt: skip
        wait_for("https /health", lambda: https_ok(port, tls.ca_pem))
        yield tls, f"https://{LOCALHOST}:{port}/v1"
    finally:
        engines.close()


def ask(bundle: Path, url: str) -> subprocess.CompletedProcess[str]:
    venv = litellm_venv()
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", ASK, str(bundle), url],
        capture_output=True, text=True, timeout=300, check=False,
        env=litellm_environment(PYTHONPATH=str(SHIM_DIR)),
    )  # fmt: skip


def bundle(tmp_path: Path, tls: NodeTls, revoked: tuple[str, ...] | None) -> Path:
    """The router's trust bundle: the CA, and a CRL of `revoked` (None: no CRL yet)."""
    text = tls.ca_pem.read_bytes()
    if revoked is not None:
        records = [CertRecord(serial, "node-1", datetime.now(UTC)) for serial in revoked]
        crl = build_crl(tls.ca.key, tls.ca.cert, records, datetime.now(UTC), 1)
        text += crl.public_bytes(serialization.Encoding.PEM)
    path = tmp_path / "trust.pem"
    path.write_bytes(text)
    return path


def test_litellm_with_the_routers_crl_check_refuses_a_revoked_engine_certificate_only(
    engine: tuple[NodeTls, str], tmp_path: Path
) -> None:
    tls, url = engine
    for revoked in (None, ("1234abcd",)):
        answered = ask(bundle(tmp_path, tls, revoked), url)
        assert answered.returncode == 0, answered.stdout + answered.stderr[-3000:]
        assert answered.stdout.startswith("ANSWER tiny answered from "), answered.stdout

    refused = ask(bundle(tmp_path, tls, ("1234abcd", tls.serial)), url)
    assert refused.returncode == 1, refused.stdout + refused.stderr[-3000:]
    assert "certificate revoked" in refused.stdout, refused.stdout


def test_a_crl_left_from_another_ca_is_not_checked_rather_than_refusing_every_engine(
    engine: tuple[NodeTls, str], tmp_path: Path
) -> None:
    """A CA made again leaves the routers the old CA's list until ctl runs beside the new
    one: OpenSSL would refuse every engine against it, so it is said and not used."""
    tls, url = engine
    other = make_ca(tmp_path / "other-ca", "old")
    records = [CertRecord(tls.serial, "node-1", datetime.now(UTC))]
    stale = build_crl(other.key, other.cert, records, datetime.now(UTC), 7)
    path = tmp_path / "trust.pem"
    path.write_bytes(tls.ca_pem.read_bytes() + stale.public_bytes(serialization.Encoding.PEM))
    answered = ask(path, url)
    assert answered.stdout.startswith("ANSWER tiny answered from "), answered.stdout
    assert "its CRL is not its CA's (a CA made again?): revocations not checked" in (
        answered.stderr
    ), answered.stderr[-2000:]
