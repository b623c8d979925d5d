"""The application context: what `ctl`'s own options say, for every command that follows.

Set once by the root command (cli/app.py) as `ctx.obj`, and passed to every operation:
how to reach the nodes, and where this fleet's state (facts cache, backoff ledger,
playbook logs) and host keys live.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from cli.cluster import DEFAULT_LOST_AFTER
from cli.edges.files import state_dir as default_state_dir
from cli.edges.lock import exclusive, fleet_lock_path
from cli.edges.ssh import SessionPool
from cli.edges.vault import Decrypt, VaultError, vault_decrypter
from cli.errors import InputError

KNOWN_HOSTS_NAME = ".known_hosts"


@dataclass(frozen=True)
class AppContext:
    known_hosts_file: Path | None = None  # default: .known_hosts in the inventory's directory
    connect_timeout: float = 10.0
    command_timeout: float = 30.0
    parallel: int = 32
    lost_after: timedelta = DEFAULT_LOST_AFTER
    state_dir: Path | None = None  # default: $XDG_STATE_HOME/modelfleet
    lock_timeout: float = 60.0  # how long a command waits for another one's fleet lock
    vault_password_file: Path | None = None  # opens vaulted variables files when given
    # The controller's: each node's SSH session kept from pass to pass (None: one a gather)
    sessions: SessionPool | None = None

    def decrypt(self) -> Decrypt | None:
        """How the inventory's vaulted files are opened: with the password file, or not
        (then they are skipped with a warning). A file it cannot open is bad input."""
        if self.vault_password_file is None:
            return None
        opener = vault_decrypter(self.vault_password_file)

        def decrypt(file: str, text: str) -> str:
            try:
                return opener(file, text)
            except VaultError as error:
                raise InputError.single(error.file, None, (), error.message) from None

        return decrypt

    @property
    def state(self) -> Path:
        return self.state_dir or default_state_dir()

    @property
    def logs(self) -> Path:
        """Where every playbook run leaves its log."""
        return self.state / "logs"

    @contextlib.contextmanager
    def fleet_lock(
        self, inventory_path: Path, command: str, waiting: Callable[[str], None]
    ) -> Iterator[None]:
        """Hold the fleet's lock (cli/edges/lock.py) while the block edits the inventory
        or changes the nodes; LockTimeoutError after `lock_timeout` seconds of waiting."""
        path = fleet_lock_path(inventory_path, self.state)
        with exclusive(path, timeout=self.lock_timeout, command=command, waiting=waiting):
            yield

    def known_hosts(self, inventory_path: Path) -> Path:
        if self.known_hosts_file is not None:
            return self.known_hosts_file
        # Imported here, not above: cli/app.py imports this module, and `ctl --help` must
        # not pay for the inventory loader (~0.15 s).
        from cli.inventory.load import inventory_base  # noqa: PLC0415

        # Hidden, so Ansible does not take it for an inventory source of the directory.
        return inventory_base(inventory_path) / KNOWN_HOSTS_NAME
