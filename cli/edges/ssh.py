"""The one SSH session ctl opens to a node: gathering facts and onboarding both use it.

Host keys: a session accepts only the keys it is given (the fleet's known_hosts lines for
the node, or the one key pinned at onboarding) and never adds one. A key of another type
is refused with `UnknownHostKeyError`, which carries it so that its fingerprint can be
shown; a different key of a known type is paramiko's BadHostKeyException.

`offered_host_key` is onboarding's first contact: a connection that runs the key exchange
and nothing else, so the node proves it holds the key it offers while we send no user
name, no key and no command. Only once that key is trusted does `connect` log in, pinned
to it.

Timeouts: `connect_timeout` bounds each step of the login (TCP connect, banner, key
exchange, authentication); `timeout` in `execute` is one deadline for the whole command
(open, send, output, exit status). Output is bounded (`MAX_OUTPUT` per stream). Waiting
for output blocks on the channel's descriptor in a selector: nothing polls.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import logging
import os
import re
import selectors
import shlex
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from cli.edges.files import atomic_write

DEFAULT_PORT = 22

# Every failure becomes the node's one-line reason (describe_failure). Left to Python's
# last-resort handler, paramiko's transport threads would print their own tracebacks on
# stderr, late, with a node's words in them: a long-running controller showed them.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# Bytes per stream: a probe prints some kilobytes (a 1,024-GPU node well under 1 MiB). The
# read stops here, so a node that prints forever costs ctl this much memory and no more.
MAX_OUTPUT = 8 * 1024 * 1024
_CHUNK = 65536
# Host key algorithms by the key type a known_hosts line names.
_FAMILY = {"rsa-sha2-512": "ssh-rsa", "rsa-sha2-256": "ssh-rsa"}


class NodeError(Exception):
    """The node could not be reached, or did not do what was asked (exit code 1)."""


class UnknownHostKeyError(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"{hostname} not in known_hosts")
        self.key = key


class CommandTimeoutError(Exception):
    """The node answered but the command did not finish in time."""


class OutputLimitError(Exception):
    """The command printed more than we read."""


@dataclass(frozen=True)
class Result:
    status: int  # -1 when the node closed the channel without one (a signal)
    stdout: bytes
    stderr: bytes

    def error_line(self) -> str:
        text = (
            self.stderr.decode("utf-8", "replace").strip()
            or self.stdout.decode("utf-8", "replace").strip()
        )
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.status}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form: SHA256:base64 without padding."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """The name a known_hosts line gives the node: `[address]:port` unless on port 22."""
    return address if port == DEFAULT_PORT else f"[{address}]:{port}"


class KnownHosts:
    """The lines of a known_hosts file, looked up by name as OpenSSH and paramiko do (hashed
    names too), but through an index: paramiko's HostKeys scans every line for each name,
    and checks each line it loads against every line before it, so a gather over 2,000
    nodes spent seconds in it (scripts/bench/bench_scale.py)."""

    def __init__(self, entries: Sequence[paramiko.hostkeys.HostKeyEntry] = ()) -> None:
        self._plain: dict[str, list[tuple[int, paramiko.PKey]]] = {}
        self._hashed: list[tuple[int, str, paramiko.PKey]] = []
        for order, entry in enumerate(entries):
            if entry.key is None:
                continue
            for name in entry.hostnames:
                if name.startswith("|1|"):
                    self._hashed.append((order, name, entry.key))
                else:
                    self._plain.setdefault(name, []).append((order, entry.key))

    @classmethod
    def read(cls, path: Path) -> KnownHosts:
        """The file's lines as paramiko's HostKeys.load reads them: blank lines, comments and
        lines it cannot parse skipped (one whose key is not base64 too, which paramiko's
        load raises on)."""
        entries = []
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, raw in enumerate(lines, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
                except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey):
                    continue
                if entry is not None:
                    entries.append(entry)
        return cls(entries)

    def lookup(self, name: str) -> list[paramiko.PKey]:
        """The keys for `name`, the first of each key type in the file's order, as
        paramiko's HostKeys.lookup gives them."""
        found = list(self._plain.get(name, ()))
        for order, hashed, key in self._hashed:
            if name == hashed or (
                not name.startswith("|1|")
                and hmac.compare_digest(paramiko.HostKeys.hash_host(name, hashed), hashed)
            ):
                found.append((order, key))
        first: dict[str, paramiko.PKey] = {}
        for _, key in sorted(found, key=lambda pair: pair[0]):
            first.setdefault(key.get_name(), key)
        return list(first.values())


def load_known_hosts(known_hosts: Path) -> KnownHosts:
    """Every line of the fleet's known_hosts (none when the file is missing)."""
    return KnownHosts.read(known_hosts) if known_hosts.exists() else KnownHosts()


def keys_for(host_keys: KnownHosts, address: str, port: int) -> list[paramiko.PKey]:
    """The keys `host_keys` holds for this address and port (hashed lines too)."""
    return host_keys.lookup(known_hosts_name(address, port))


def known_keys(known_hosts: Path, address: str, port: int) -> list[paramiko.PKey]:
    """The keys the fleet's known_hosts holds for this address and port; raises NodeError."""
    try:
        return keys_for(load_known_hosts(known_hosts), address, port)
    except OSError as error:
        raise NodeError(f"cannot read {known_hosts}: {error.strerror}") from None


def add_known_host(known_hosts: Path, address: str, port: int, key: paramiko.PKey) -> None:
    """Append the node's key to the fleet's known_hosts, keeping every line already there."""
    old = known_hosts.read_bytes() if known_hosts.exists() else b""
    mode = known_hosts.stat().st_mode & 0o7777 if known_hosts.exists() else 0o644
    if old and not old.endswith(b"\n"):
        old += b"\n"
    line = f"{known_hosts_name(address, port)} {key.get_name()} {key.get_base64()}\n"
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(known_hosts, old + line.encode(), mode)


# --- the session ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    """A jump host a session goes through (OpenSSH's ProxyJump), logged in to as `ssh -J`
    does: its own user (default the operator's) and the operator's keys (ssh-agent's,
    ~/.ssh/id_*), never the node's -i key; its own host key pinned from the same known_hosts."""

    address: str
    port: int = DEFAULT_PORT
    user: str | None = None

    @property
    def name(self) -> str:
        return known_hosts_name(self.address, self.port)


@dataclass(frozen=True)
class Proxy:
    """How the TCP stream to a node is made, when not straight: through jump hosts
    (ProxyJump), or by a local command whose stdin and stdout are the stream (ProxyCommand)."""

    jump: tuple[Hop, ...] = ()
    command: str | None = None


class ProxyError(Exception):
    """A jump host or a proxy command failed: which, and the error it met."""

    def __init__(self, via: str, error: BaseException, address: str, port: int) -> None:
        super().__init__(via)
        self.via = via
        self.error = error
        self.address = address
        self.port = port


_JUMP = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:@\s\[\]]+))"
    r"(?::(?P<port>\d{1,5}))?$"
)


def parse_proxy_jump(spec: str) -> tuple[Hop, ...]:
    """OpenSSH's ProxyJump value, `[user@]host[:port]` hops joined by commas (also in the
    form `ssh://[user@]host[:port]`); ValueError for one that is not."""
    hops = []
    for part in spec.split(","):
        text = part.strip().removeprefix("ssh://")
        match = _JUMP.match(text)
        port = int(match.group("port")) if match and match.group("port") else DEFAULT_PORT
        if match is None or not 1 <= port <= 65535:
            raise ValueError(f"ProxyJump {spec!r}: {part.strip()!r} is not [user@]host[:port]")
        hops.append(Hop(match.group("v6") or match.group("host"), port, match.group("user")))
    return tuple(hops)


def proxy_command_line(command: str, address: str, port: int, user: str | None) -> str:
    """A ProxyCommand with OpenSSH's tokens expanded: %h the node's address, %p its port,
    %r the user, %n the host as given, %% a %."""
    values = {"h": address, "n": address, "p": str(port), "r": user or getpass.getuser()}
    values["%"] = "%"
    return re.sub(r"%(.)", lambda m: values.get(m.group(1), m.group(0)), command)


class _Client(paramiko.SSHClient):
    """A session that closes the jump hosts' sessions it goes through with its own."""

    def __init__(self) -> None:
        super().__init__()
        self.hops: list[paramiko.SSHClient] = []

    def close(self) -> None:
        super().close()
        for hop in reversed(self.hops):
            hop.close()


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Never trust a key we were not given; carry the one offered, to show it."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        del client
        raise UnknownHostKeyError(hostname, key)


def login(
    address: str,
    port: int,
    user: str | None,
    key_file: Path | None,
    host_keys: Sequence[paramiko.PKey],
    connect_timeout: float,
    proxy: Proxy | None = None,
    known: KnownHosts | None = None,
) -> paramiko.SSHClient:
    """Log in, accepting only `host_keys` from the node; the caller closes the client.
    Raises what paramiko or the socket raise (`describe_failure` turns it into a line), or
    ProxyError naming the jump host or command that failed. `proxy`: the way there, as
    OpenSSH's ProxyJump and ProxyCommand; each jump host's key is one of `known`'s."""
    hops: list[paramiko.SSHClient] = []
    try:
        sock = _stream(address, port, user, connect_timeout, proxy, known, hops)
    except BaseException:
        for hop in reversed(hops):
            hop.close()
        raise
    client = _Client()
    client.hops = hops
    # In memory only: nothing is ever written back, and only this node's keys (copying
    # every known_hosts entry into every client costs O(fleet²)).
    name = known_hosts_name(address, port)
    for key in host_keys:
        client.get_host_keys().add(name, key.get_name(), key)
    client.set_missing_host_key_policy(_Refuse())
    try:
        client.connect(
            hostname=address,
            port=port,
            sock=sock,
            username=user,
            key_filename=str(key_file) if key_file is not None else None,
            timeout=connect_timeout,
            banner_timeout=connect_timeout,
            auth_timeout=connect_timeout,
            allow_agent=True,
            look_for_keys=key_file is None,
        )
    except BaseException:
        client.close()
        sock.close()
        raise
    return client


Stream = socket.socket | paramiko.Channel | paramiko.ProxyCommand


def _stream(
    address: str,
    port: int,
    user: str | None,
    timeout: float,
    proxy: Proxy | None,
    known: KnownHosts | None,
    hops: list[paramiko.SSHClient],
) -> Stream:
    """The byte stream the node's SSH session runs over: a TCP connection, a channel
    through the jump hosts (each logged in to, in turn, over the one before), or a proxy
    command's stdin and stdout."""
    if proxy is not None and proxy.command is not None:
        line = proxy_command_line(proxy.command, address, port, user)
        try:
            # As OpenSSH runs it: by the shell, the whole line one argument of `sh -c`.
            command = paramiko.ProxyCommand(f"sh -c {shlex.quote(line)}")
        except Exception as error:
            raise ProxyError(f"ProxyCommand {line!r}", error, address, port) from None
        command.settimeout(timeout)
        return command
    jump = proxy.jump if proxy is not None else ()
    previous: Stream | None = None
    nexts = [(hop.address, hop.port) for hop in jump[1:]] + [(address, port)]
    for hop, (next_address, next_port) in zip(jump, nexts, strict=False):
        pinned = keys_for(known, hop.address, hop.port) if known is not None else []
        try:
            sock = previous or _tcp(hop.address, hop.port, timeout)
            client = _Client()
            hops.append(client)
            for key in pinned:
                client.get_host_keys().add(hop.name, key.get_name(), key)
            client.set_missing_host_key_policy(_Refuse())
            client.connect(
                hostname=hop.address, port=hop.port, sock=sock, username=hop.user,
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                allow_agent=True, look_for_keys=True,
            )  # fmt: skip
            transport = client.get_transport()
            if transport is None:
                raise paramiko.SSHException("No existing session")
            previous = transport.open_channel(
                "direct-tcpip", (next_address, next_port), ("127.0.0.1", 0), timeout=timeout
            )
        except Exception as error:
            raise ProxyError(f"jump host {hop.name}", error, hop.address, hop.port) from None
    return previous or _tcp(address, port, timeout)


def _tcp(address: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((address, port), timeout=timeout)
    # Small writes both ways (auth, session open): without this, Nagle and delayed ACKs
    # add tens of milliseconds per round trip.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def execute(
    client: paramiko.SSHClient,
    command: str,
    stdin: bytes,
    timeout: float,
    limit: int = MAX_OUTPUT,
) -> Result:
    """Run `command` with `stdin`; its status and output, all within `timeout` seconds.

    Raises CommandTimeoutError, OutputLimitError (more than `limit` bytes on a stream), or
    what paramiko raises when the session fails.
    """
    deadline = time.monotonic() + timeout
    transport = client.get_transport()
    if transport is None:
        raise paramiko.SSHException("no transport after connect")
    channel = transport.open_session(timeout=timeout)
    try:
        channel.settimeout(timeout)
        channel.exec_command(command)
        channel.sendall(stdin)
        channel.shutdown_write()
        out, err = _read_all(channel, deadline, limit)
        if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
            raise CommandTimeoutError
        return Result(channel.recv_exit_status(), out, err)
    except TimeoutError:
        raise CommandTimeoutError from None
    finally:
        channel.close()


class SessionPool:
    """Logged-in sessions kept from one use to the next: the controller's passes log in to a
    node once, and again only when its connection broke or what it logs in with changed
    (address, port, user, key file, or the host keys it is pinned to: a session is only
    ever reused under the pins it was opened with). At most `capacity` are kept; past that
    a session is closed after its use, as without a pool. Thread-safe: the gathering's
    workers share one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.logins = 0  # sessions opened: the controller's tests and bench_scale read it
        self._sessions: dict[tuple[object, ...], paramiko.SSHClient] = {}
        self._used: set[tuple[object, ...]] = set()  # since the last prune
        self._lock = threading.Lock()

    def run(
        self,
        address: str,
        port: int,
        user: str | None,
        key_file: Path | None,
        host_keys: Sequence[paramiko.PKey],
        connect_timeout: float,
        command: str,
        stdin: bytes,
        timeout: float,
        limit: int = MAX_OUTPUT,
        proxy: Proxy | None = None,
        known: KnownHosts | None = None,
    ) -> Result:
        """`execute` on the node's kept session, else on a new login (kept after); `proxy`
        and `known` as `login` takes them (a session is kept per way there too).

        A kept session that fails (the node restarted, the connection dropped) is closed
        and the command run once more on a new login; a command that timed out or printed
        too much is not run again, and its session is not kept (its state is unknown)."""
        pins = tuple(sorted((key.get_name(), key.get_base64()) for key in host_keys))
        key = (address, port, user, None if key_file is None else str(key_file), pins, proxy)
        with self._lock:
            client = self._sessions.pop(key, None)
            self._used.add(key)
        if client is not None:
            transport = client.get_transport()
            if transport is not None and transport.is_active():
                try:
                    result = execute(client, command, stdin, timeout, limit)
                except (paramiko.SSHException, EOFError, OSError):
                    client.close()  # broken under us: log in again below
                except BaseException:
                    client.close()
                    raise
                else:
                    self._keep(key, client)
                    return result
            else:
                client.close()
        client = login(address, port, user, key_file, host_keys, connect_timeout, proxy, known)
        with self._lock:
            self.logins += 1
        try:
            result = execute(client, command, stdin, timeout, limit)
        except BaseException:
            client.close()
            raise
        self._keep(key, client)
        return result

    def _keep(self, key: tuple[object, ...], client: paramiko.SSHClient) -> None:
        with self._lock:
            if len(self._sessions) < self.capacity:
                self._sessions[key] = client
                return
        client.close()

    def prune(self) -> None:
        """Close the sessions not used since the last prune (a node gone from the
        inventory, or logged in to with other settings now)."""
        with self._lock:
            stale = [key for key in self._sessions if key not in self._used]
            closing = [self._sessions.pop(key) for key in stale]
            self._used.clear()
        for client in closing:
            client.close()

    def close(self) -> None:
        with self._lock:
            closing = list(self._sessions.values())
            self._sessions.clear()
        for client in closing:
            client.close()

    def __len__(self) -> int:
        return len(self._sessions)


def _read_all(channel: paramiko.Channel, deadline: float, limit: int) -> tuple[bytes, bytes]:
    """stdout and stderr until the node's EOF, waiting on the channel's descriptor (set by
    paramiko while either stream has data, and for good at EOF)."""
    out: list[bytes] = []
    err: list[bytes] = []
    sizes = {"stdout": 0, "stderr": 0}
    with selectors.DefaultSelector() as selector:
        selector.register(channel, selectors.EVENT_READ)
        while True:
            if channel.recv_ready():
                chunk, stream, chunks = channel.recv(_CHUNK), "stdout", out
            elif channel.recv_stderr_ready():
                chunk, stream, chunks = channel.recv_stderr(_CHUNK), "stderr", err
            elif channel.eof_received or channel.closed:
                return b"".join(out), b"".join(err)
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeoutError
                selector.select(remaining)
                continue
            sizes[stream] += len(chunk)
            if sizes[stream] > limit:
                raise OutputLimitError(f"the command printed more than {limit} bytes on {stream}")
            chunks.append(chunk)


def describe_failure(
    error: BaseException,
    address: str,
    port: int,
    user: str | None,
    known_hosts: Path,
    connect_timeout: float,
) -> str:
    """One line an operator can act on."""
    if isinstance(error, ProxyError):
        inner = describe_failure(
            error.error, error.address, error.port, None, known_hosts, connect_timeout
        )
        return f"through {error.via}: {inner}"
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
        return f"authentication failed for user {user or 'the local user'}"
    if isinstance(error, paramiko.SSHException) and "No authentication methods" in str(error):
        return (
            f"no key to log in as {user or 'the local user'} with (none given, none in"
            " ssh-agent or ~/.ssh)"
        )
    if isinstance(error, TimeoutError | socket.timeout):
        return f"timed out after {connect_timeout:g} s"
    if isinstance(error, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused on port {port}"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve {address}"
    # A port that accepts and then says nothing: paramiko reports the banner wait, or,
    # when the auth step notices first, that the session it expected never started.
    if isinstance(error, paramiko.SSHException) and (
        "banner" in str(error).lower() or str(error) == "No existing session"
    ):
        return f"no SSH answer within {connect_timeout:g} s"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__


# --- onboarding: first contact, a pinned login, scripts on stdin ----------------------------


def offered_host_key(
    address: str, port: int, timeout: float, prefer: Sequence[paramiko.PKey] = ()
) -> paramiko.PKey:
    """The host key the node proves it holds, from a key exchange with no authentication.

    `prefer`: keys already known for the node; their types are asked for first, as ssh
    does, so a node with several host keys shows the one known_hosts can compare.
    """
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except Exception as error:
        raise NodeError(_why(error, address, port, None, timeout)) from None
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
        raise NodeError(_why(error, address, port, None, timeout)) from None
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
    """Log in, accepting only `host_key` from the node; raises NodeError."""
    try:
        return login(address, port, user, key_file, [host_key], timeout)
    except (paramiko.BadHostKeyException, UnknownHostKeyError) as error:
        raise NodeError(
            f"the node's host key changed between the check and the login: it offered"
            f" {fingerprint(error.key)} after {fingerprint(host_key)}; refused"
        ) from None
    except Exception as error:
        raise NodeError(_why(error, address, port, user, timeout)) from None


def run(client: paramiko.SSHClient, script: str, timeout: float) -> Result:
    """Run a POSIX sh script on the node, sent on stdin (`sh -s`): its status and output."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise NodeError("the SSH connection closed")
    try:
        return execute(client, "sh -s", script.encode(), timeout)
    except CommandTimeoutError:
        raise NodeError(f"a command on the node did not finish within {timeout:g} s") from None
    except OutputLimitError as error:
        raise NodeError(str(error)) from None
    except (paramiko.SSHException, OSError) as error:
        raise NodeError(f"the SSH session failed: {error}") from None


def _why(error: BaseException, address: str, port: int, user: str | None, timeout: float) -> str:
    where = f"{address}:{port}"
    if isinstance(error, EOFError):
        return f"{where}: the connection closed during the SSH handshake"
    reason = describe_failure(error, address, port, user, Path(os.devnull), timeout)
    if f"port {port}" in reason:
        where = address
    return f"{where}: {reason}"
