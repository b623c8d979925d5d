"""The fleet's lock for a command that edits the inventory or changes the nodes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer


@contextlib.contextmanager
def lock_timeout_exits() -> Iterator[None]:
    """Another ctl still holding the lock after --lock-timeout: that said on stderr, exit
    code 1, nothing changed."""
    from cli.commands.inputs import say_waiting
    from cli.edges.lock import LockTimeoutError
    from cli.ui import console

    try:
        yield
    except LockTimeoutError as error:
        say_waiting(f"error: {error}")
        raise SystemExit(console.EXIT_INCOMPLETE) from None


@contextlib.contextmanager
def fleet_lock(context: typer.Context, inventory: Path) -> Iterator[None]:
    """Run the block holding the lock of `inventory`'s fleet (cli/edges/lock.py).

    Another ctl holding it: a line on stderr naming it, then wait up to ctl's
    --lock-timeout; still held then: that said on stderr, exit code 1, nothing changed."""
    from cli.commands.inputs import app_context, holder, say_waiting

    with (
        lock_timeout_exits(),
        app_context(context).fleet_lock(inventory, holder(), waiting=say_waiting),
    ):
        yield
