"""SSH to a node being onboarded: its host key first, unauthenticated; then a pinned login.

`offered_host_key` opens a connection, runs the key exchange and nothing else: the node
proves it holds the host key it offers, and we have sent no user name, no key, no
command. Only once that key is trusted (confirmed by the operator, or already in the
fleet's known_hosts) does `connect` log in, on a new connection that accepts exactly that
key (paramiko's RejectPolicy for any other).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from cli.edges.files import atomic_write
from cli.facts.gather import Target, describe_failure, fingerprint

DEFAULT_PORT = 22
_CHUNK = 65536
# Host key algorithms by the key type a known_hosts line names.
_FAMILY = {"rsa-sha2-512": "ssh-rsa", "rsa-sha2-256": "ssh-rsa"}


class NodeError(Exception):
    """The node could not be reached, or did not do what was asked (exit code 1)."""


@dataclass(frozen=True)
class Result:
    status: int
    stdout: bytes
    stderr: bytes

    def error_line(self) -> str:
        text = (
            self.stderr.decode("utf-8", "replace").strip()
            or self.stdout.decode("utf-8", "replace").strip()
        )
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.status}"


def known_hosts_name(address: str, port: int) -> str:
    """The name a known_hosts line gives the node: `[address]:port` unless on port 22."""
    return address if port == DEFAULT_PORT else f"[{address}]:{port}"


def known_keys(known_hosts: Path, address: str, port: int) -> list[paramiko.PKey]:
    """The keys the fleet's known_hosts holds for this address and port (hashed lines too)."""
    if not known_hosts.exists():
        return []
    host_keys = paramiko.HostKeys()
    try:
        host_keys.load(str(known_hosts))
    except OSError as error:
        raise NodeError(f"cannot read {known_hosts}: {error.strerror}") from None
    found = host_keys.lookup(known_hosts_name(address, port))
    return [] if found is None else list(found.values())


def add_known_host(known_hosts: Path, address: str, port: int, key: paramiko.PKey) -> None:
    """Append the node's key to the fleet's known_hosts, keeping every line already there."""
    old = known_hosts.read_bytes() if known_hosts.exists() else b""
    mode = known_hosts.stat().st_mode & 0o7777 if known_hosts.exists() else 0o644
    if old and not old.endswith(b"\n"):
        old += b"\n"
    line = f"{known_hosts_name(address, port)} {key.get_name()} {key.get_base64()}\n"
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(known_hosts, old + line.encode(), mode)


def offered_host_key(
    address: str, port: int, timeout: float, prefer: Sequence[paramiko.PKey] = ()
) -> paramiko.PKey:
    """The host key the node proves it holds, from a key exchange with no authentication.

    `prefer`: keys already known for the node; their types are asked for first, as ssh
    does, so a node with several host keys shows the one known_hosts can compare.
    """
    target = Target(address, address, port)
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except Exception as error:
        raise NodeError(_why(error, target, timeout)) from None
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        transport.handshake_timeout = timeout
        families = {key.get_name() for key in prefer}
        if families:
            options = transport.get_security_options()
            types = list(options.key_types)
            first = [t for t in types if _FAMILY.get(t, t) in families]
            options.key_types = first + [t for t in types if t not in first]
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except Exception as error:
        raise NodeError(_why(error, target, timeout)) from None
    finally:
        transport.close()


def connect(
    address: str,
    port: int,
    user: str,
    key_file: Path | None,
    host_key: paramiko.PKey,
    timeout: float,
) -> paramiko.SSHClient:
    """Log in, accepting only `host_key` from the node."""
    client = paramiko.SSHClient()
    client.get_host_keys().add(known_hosts_name(address, port), host_key.get_name(), host_key)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            hostname=address,
            port=port,
            username=user,
            key_filename=str(key_file) if key_file is not None else None,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=True,
            look_for_keys=key_file is None,
        )
    except Exception as error:
        client.close()
        if isinstance(error, paramiko.BadHostKeyException):
            raise NodeError(
                f"the node's host key changed between the check and the login: it offered"
                f" {fingerprint(error.key)} after {fingerprint(error.expected_key)}; refused"
            ) from None
        raise NodeError(_why(error, Target(address, address, port, user), timeout)) from None
    return client


def run(client: paramiko.SSHClient, script: str, timeout: float) -> Result:
    """Run a POSIX sh script on the node, sent on stdin (`sh -s`): its status and output."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise NodeError("the SSH connection closed")
    deadline = time.monotonic() + timeout
    try:
        channel = transport.open_session(timeout=timeout)
        channel.exec_command("sh -s")
        channel.sendall(script.encode())
        channel.shutdown_write()
        out: list[bytes] = []
        err: list[bytes] = []
        while True:
            if channel.recv_ready():
                out.append(channel.recv(_CHUNK))
            elif channel.recv_stderr_ready():
                err.append(channel.recv_stderr(_CHUNK))
            elif channel.exit_status_ready():
                break
            elif time.monotonic() > deadline:
                channel.close()
                raise NodeError(f"a command on the node did not finish within {timeout:g} s")
            else:
                time.sleep(0.005)
        status = channel.recv_exit_status()
        channel.close()
    except (paramiko.SSHException, OSError) as error:
        raise NodeError(f"the SSH session failed: {error}") from None
    return Result(status, b"".join(out), b"".join(err))


def _why(error: BaseException, target: Target, timeout: float) -> str:
    where = f"{target.address}:{target.port}"
    if isinstance(error, EOFError):
        return f"{where}: the connection closed during the SSH handshake"
    reason = describe_failure(error, target, Path(os.devnull), timeout)
    if f"port {target.port}" in reason:
        where = target.address
    return f"{where}: {reason}"
