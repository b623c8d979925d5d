"""Gather facts over SSH: one exec of the probe per node, all nodes in parallel.

Host keys are checked against the fleet's known_hosts and never added: a key we were not
told to trust is refused with its fingerprint, a changed one with both. One hung node costs
at most its connect timeout plus its command timeout; the others are not held up.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import paramiko

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_COMMAND_TIMEOUT = 30.0
DEFAULT_PARALLEL = 32
_CHUNK = 65536


@dataclass(frozen=True)
class Target:
    """Where and how to reach one node, as the inventory says."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None


@dataclass(frozen=True)
class Attempt:
    name: str
    output: str | None  # the probe's stdout when the node answered
    error: str | None  # why it did not, in one line
    seconds: float


def probe_script() -> str:
    """The probe's text, sent to each node on stdin: nothing is installed there."""
    return resources.files("cli.facts").joinpath("probe.sh").read_text(encoding="utf-8")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form: SHA256:base64 without padding."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def gather(
    targets: Sequence[Target],
    known_hosts: Path,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    parallel: int = DEFAULT_PARALLEL,
    on_done: Callable[[Attempt], None] | None = None,
) -> list[Attempt]:
    """Run the probe on every target; results in the targets' order."""
    host_keys = paramiko.HostKeys()
    if known_hosts.exists():
        host_keys.load(str(known_hosts))
    script = probe_script()
    results: dict[str, Attempt] = {}
    workers = max(1, min(parallel, len(targets)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gather") as pool:
        futures = {
            pool.submit(
                _probe_one,
                target,
                host_keys,
                known_hosts,
                script,
                connect_timeout,
                command_timeout,
            ): target
            for target in targets
        }
        for future in as_completed(futures):
            attempt = future.result()
            results[attempt.name] = attempt
            if on_done is not None:
                on_done(attempt)
    return [results[target.name] for target in targets]


def _probe_one(
    target: Target,
    host_keys: paramiko.HostKeys,
    known_hosts: Path,
    script: str,
    connect_timeout: float,
    command_timeout: float,
) -> Attempt:
    started = time.monotonic()
    try:
        output = _run(target, host_keys, script, connect_timeout, command_timeout)
    except Exception as error:  # every failure becomes the node's reason
        reason = describe_failure(error, target, known_hosts, connect_timeout)
        return Attempt(target.name, None, reason, time.monotonic() - started)
    return Attempt(target.name, output, None, time.monotonic() - started)


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Never trust a key that is not in known_hosts; carry the one offered, to show it."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        del client
        raise UnknownHostKeyError(hostname, key)


class UnknownHostKeyError(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"{hostname} not in known_hosts")
        self.key = key


class ProbeTimeoutError(Exception):
    """The node answered but the probe did not finish in time."""


def _run(
    target: Target,
    host_keys: paramiko.HostKeys,
    script: str,
    connect_timeout: float,
    command_timeout: float,
) -> str:
    client = paramiko.SSHClient()
    # Keys come from our known_hosts only, in memory: nothing is ever written back. Only
    # this host's entry: copying every entry into every client costs O(fleet²).
    entry = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
    for key_type, key in (host_keys.lookup(entry) or {}).items():
        client.get_host_keys().add(entry, key_type, key)
    client.set_missing_host_key_policy(_Refuse())
    sock = socket.create_connection((target.address, target.port), timeout=connect_timeout)
    try:
        # Small writes both ways (auth, session open): without this, Nagle and delayed
        # ACKs add tens of milliseconds per round trip.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(
            hostname=target.address,
            port=target.port,
            sock=sock,
            username=target.user,
            key_filename=str(Path(target.key_file).expanduser()) if target.key_file else None,
            timeout=connect_timeout,
            banner_timeout=connect_timeout,
            auth_timeout=connect_timeout,
            allow_agent=True,
            look_for_keys=target.key_file is None,
        )
        return _exec(client, script, command_timeout)
    finally:
        client.close()
        sock.close()


def _exec(client: paramiko.SSHClient, script: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    transport = client.get_transport()
    if transport is None:
        raise paramiko.SSHException("no transport after connect")
    channel = transport.open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command("sh -s")
    channel.sendall(script.encode())
    channel.shutdown_write()
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProbeTimeoutError
        channel.settimeout(remaining)
        try:
            chunk = channel.recv(_CHUNK)
        except TimeoutError:
            raise ProbeTimeoutError from None
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def describe_failure(
    error: BaseException, target: Target, known_hosts: Path, connect_timeout: float
) -> str:
    """One line an operator can act on."""
    if isinstance(error, paramiko.BadHostKeyException):
        return (
            f"host key mismatch: known_hosts ({known_hosts}) has {fingerprint(error.expected_key)},"
            f" the node offered {fingerprint(error.key)}; refused"
        )
    if isinstance(error, UnknownHostKeyError):
        return (
            f"host key not in {known_hosts}: the node offered {fingerprint(error.key)}; "
            "check it and add it (ctl onboard-node does)"
        )
    if isinstance(error, paramiko.AuthenticationException):
        user = target.user or "the local user"
        return f"authentication failed for user {user}"
    if isinstance(error, ProbeTimeoutError):
        return "timed out running the probe"
    if isinstance(error, TimeoutError | socket.timeout):
        return f"timed out after {connect_timeout:g} s"
    if isinstance(error, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused on port {target.port}"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve {target.address}"
    # A port that accepts and then says nothing: paramiko reports the banner wait, or,
    # when the auth step notices first, that the session it expected never started.
    if isinstance(error, paramiko.SSHException) and (
        "banner" in str(error).lower() or str(error) == "No existing session"
    ):
        return f"no SSH answer within {connect_timeout:g} s"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__
