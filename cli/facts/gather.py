"""Gather facts over SSH: one exec of the probe per node, all nodes in parallel.

Host keys are checked against the fleet's known_hosts and never added: a key we were not
told to trust is refused with its fingerprint, a changed one with both. One hung node costs
at most its connect timeout plus its command timeout; the others are not held up. The
session itself (pinned keys, timeouts, bounded output) is cli.edges.ssh's, as onboarding's.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cli.edges import local, ssh

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_COMMAND_TIMEOUT = 30.0
DEFAULT_PARALLEL = 32


@dataclass(frozen=True)
class Target:
    """Where and how to reach one node, as the inventory says."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    model_store: str | None = None  # modelfleet_model_store; None: the probe's default
    refused: str | None = None  # why ctl's SSH does not try it (Host.ssh_refusal)
    local: bool = False  # ansible_connection: local: the probe runs here, as a local process
    proxy: ssh.Proxy | None = None  # a ProxyJump or ProxyCommand on the way there


@dataclass(frozen=True)
class Attempt:
    name: str
    output: str | None  # the probe's stdout when the node answered
    error: str | None  # why it did not, in one line
    seconds: float


def probe_script() -> str:
    """The probe's text, sent to each node on stdin: nothing is installed there."""
    return resources.files("cli.facts").joinpath("probe.sh").read_text(encoding="utf-8")


def probe_command(target: Target) -> str:
    """`sh -s`, the script on stdin; the model store its argument (probe.sh reads $1)."""
    if target.model_store is None:
        return "sh -s"
    return f"sh -s -- {shlex.quote(target.model_store)}"


def gather(
    targets: Sequence[Target],
    known_hosts: Path,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    parallel: int = DEFAULT_PARALLEL,
    on_done: Callable[[Attempt], None] | None = None,
    sessions: ssh.SessionPool | None = None,
) -> list[Attempt]:
    """Run the probe on every target; results in the targets' order. With `sessions`, each
    node's session is kept for the next gather (the controller's passes), and the sessions
    of nodes not gathered now are closed."""
    host_keys = ssh.load_known_hosts(known_hosts)
    script = probe_script().encode()
    kept = ssh.SessionPool(0) if sessions is None else sessions  # 0: each closed after use
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
                kept,
            ): target
            for target in targets
        }
        for future in as_completed(futures):
            attempt = future.result()
            results[attempt.name] = attempt
            if on_done is not None:
                on_done(attempt)
    kept.prune()
    return [results[target.name] for target in targets]


def _probe_one(
    target: Target,
    host_keys: ssh.KnownHosts,
    known_hosts: Path,
    script: bytes,
    connect_timeout: float,
    command_timeout: float,
    sessions: ssh.SessionPool,
) -> Attempt:
    started = time.monotonic()
    if target.refused is not None:
        return Attempt(target.name, None, target.refused, time.monotonic() - started)
    if target.local:
        return _probe_here(target, script, command_timeout, started)
    pinned = ssh.keys_for(host_keys, target.address, target.port)
    try:
        key_file = Path(target.key_file).expanduser() if target.key_file else None
        output = sessions.run(
            target.address, target.port, target.user, key_file, pinned, connect_timeout,
            probe_command(target), script, command_timeout, limit=ssh.MAX_OUTPUT,
            proxy=target.proxy, known=host_keys,
        ).stdout  # fmt: skip
    except Exception as error:  # every failure becomes the node's reason
        reason = describe_failure(error, target, known_hosts, connect_timeout)
        return Attempt(target.name, None, reason, time.monotonic() - started)
    text = output.decode("utf-8", errors="replace")
    return Attempt(target.name, text, None, time.monotonic() - started)


def _probe_here(target: Target, script: bytes, command_timeout: float, started: float) -> Attempt:
    """The probe run on this machine, as Ansible's local connection runs a host's tasks."""
    try:
        output = local.run_local(
            shlex.split(probe_command(target)), script, command_timeout, limit=ssh.MAX_OUTPUT
        )
    except (ssh.CommandTimeoutError, ssh.OutputLimitError, OSError) as error:
        reason = (
            f"the local probe could not run: {error.strerror}"
            if isinstance(error, OSError)
            else describe_failure(error, target, Path(), 0)
        )
        return Attempt(target.name, None, reason, time.monotonic() - started)
    text = output.decode("utf-8", errors="replace")
    return Attempt(target.name, text, None, time.monotonic() - started)


def describe_failure(
    error: BaseException, target: Target, known_hosts: Path, connect_timeout: float
) -> str:
    """One line an operator can act on."""
    if isinstance(error, ssh.CommandTimeoutError):
        return "timed out running the probe"
    if isinstance(error, ssh.OutputLimitError):
        return f"the probe printed more than {ssh.MAX_OUTPUT // (1024 * 1024)} MiB: facts not read"
    return ssh.describe_failure(
        error, target.address, target.port, target.user, known_hosts, connect_timeout
    )
