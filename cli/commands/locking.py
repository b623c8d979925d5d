"""The fleet's lock for a command that edits the inventory or changes the nodes."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import typer


@contextlib.contextmanager
def fleet_lock(context: typer.Context, inventory: Path) -> Iterator[None]:
    """Run the block holding the lock of `inventory`'s fleet (cli/edges/lock.py).

    Another ctl holding it: a line on stderr naming it, then wait up to ctl's
    --lock-timeout; still held then: that said on stderr, exit code 1, nothing changed."""
    from cli.commands.inputs import app_context
    from cli.edges.lock import LockTimeoutError
    from cli.ui import console
    from cli.ui.safe import shown

    def say(line: str) -> None:  # the holder's command line, from the lock file: text only
        console.err.print(shown(line), markup=False, highlight=False)

    command = shlex.join(["ctl", *sys.argv[1:]])
    try:
        with app_context(context).fleet_lock(inventory, command, waiting=say):
            yield
    except LockTimeoutError as error:
        say(f"error: {error}")
        raise SystemExit(console.EXIT_INCOMPLETE) from None
