"""A real OpenSSH server on loopback for tests: its own host key, config and port.

Not a mock: the gatherer talks to the sshd this machine would run, on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


def missing_reason() -> str | None:
    """Why a real sshd cannot run here, or None."""
    if not SSHD.exists():
        return "no /usr/sbin/sshd: install openssh-server (.ci/run does)"
    if shutil.which("ssh-keygen") is None:
        return "no ssh-keygen: install openssh-client"
    if os.geteuid() != 0:
        return "sshd with privilege separation needs root here"
    return None


def keygen(path: Path) -> str:
    """An ed25519 key at `path`; its public line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
    )
    return path.with_suffix(".pub").read_text().strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Sshd:
    address: str
    port: int
    host_key_line: str  # "ssh-ed25519 AAAA… comment"
    client_key: Path
    directory: Path

    def known_hosts_line(self) -> str:
        kind, blob = self.host_key_line.split()[:2]
        return f"[{self.address}]:{self.port} {kind} {blob}\n"

    def inventory(self, directory: Path, name: str) -> Path:
        """An inventory of one node, `name`, that is this sshd (logged in as root with the
        client key), and its known_hosts: `directory`, made here."""
        directory.mkdir()
        (directory / "hosts.yml").write_text(
            f"all:\n  hosts:\n    {name}:\n      ansible_host: {self.address}\n"
            f"      ansible_port: {self.port}\n      ansible_user: root\n"
            f"      ansible_ssh_private_key_file: {self.client_key}\n"
        )
        (directory / ".known_hosts").write_text(self.known_hosts_line())
        return directory


@contextmanager
def running_sshd(
    directory: Path,
    *,
    force_command: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> Iterator[Sshd]:
    """sshd on 127.0.0.1; `environment`: variables every session gets (sshd's SetEnv), e.g.
    MODELFLEET_PKI_DIR so that what a test's node reads and writes is a temporary
    directory, never this machine's /etc/modelfleet."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "host_ed25519"
    host_line = keygen(host_key)
    client_key = directory / "client_ed25519"
    client_line = keygen(client_key)
    (directory / "authorized_keys").write_text(client_line + "\n")
    port = free_port()
    config = directory / "sshd_config"
    lines = [
        f"ListenAddress 127.0.0.1:{port}",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        "PidFile none",
        "StrictModes no",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "LogLevel ERROR",
    ]
    if force_command:
        lines.append(f"ForceCommand {force_command}")
    if environment:
        lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in environment.items()))
    config.write_text("\n".join(lines) + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = (directory / "sshd.log").open("w")
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=log)
    try:
        _wait_for_port("127.0.0.1", port, process)
        yield Sshd("127.0.0.1", port, host_line, client_key, directory)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_for_port(address: str, port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {address}:{port}")


@contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP and then says nothing: a hung node, on loopback."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])
