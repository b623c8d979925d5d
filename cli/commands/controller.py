"""`ctl reconcile --watch`'s wiring: the controller loop (cli/ops/controller.py) around the
command's own pass, its log on stdout, and the checks made once before the first pass."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import typer

from cli.inventory.load import Decrypt
from cli.ops.controller import STOP, Aborted, PassRecord, lasting_sessions, unwritable, watch
from cli.ops.metrics import Publisher, unwritable_file


def run_controller(
    context: typer.Context,
    one_pass: Callable[[PassRecord], int],
    interval: float,
    dry_run: bool,
    log_format: str,
    catalog: Path,
    inventory: Path,
    publisher: Publisher,
) -> int:
    """Passes until a signal asks for a stop (0), or a second one aborts (128 + it);
    after each, `publisher` writes the files for Prometheus it was asked for."""
    from cli.commands.inputs import app_context
    from cli.ui import console
    from cli.ui.events import event_logger

    options = app_context(context)
    why = unwritable(options.state)
    if why is not None:
        console.fail(f"{why}; point XDG_STATE_HOME at a directory ctl may write")
    for path in (publisher.targets, publisher.textfile):
        why = None if path is None else unwritable_file(path)
        if why is not None:
            console.fail(why)
    log = event_logger(log_format)

    def checked_pass(record: PassRecord) -> int:
        problem = input_problem(options.decrypt(), catalog, inventory)
        if problem is not None:  # a bad edit: said, nothing changed, read again next pass
            record.error = problem
            console.err.print(f"error: {problem}; nothing changed", markup=False)
            return console.EXIT_BAD_INPUT
        if log_format == "text":
            return one_pass(record)
        # For machines, the pass's own words are in its record: its lines for people go.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return one_pass(record)

    # Each node's SSH session lasts from pass to pass: the passes read the context's pool.
    sessions = lasting_sessions()
    context.obj = replace(options, sessions=sessions)

    def published(record: PassRecord, ended: datetime) -> list[str]:
        code = record.exit_code if record.exit_code is not None else console.EXIT_INCOMPLETE
        return publisher.publish(record.view, record.seconds or 0.0, code, ended)

    STOP.install()
    try:
        return watch(checked_pass, interval, options.state, dry_run, log, after=published)
    except Aborted as aborted:
        log("aborted", {"signal": str(aborted)})
        return 128 + aborted.signum
    finally:
        sessions.close()


def input_problem(decrypt: Decrypt | None, catalog: Path, inventory: Path) -> str | None:
    """Why the catalog or the inventory does not load now, in one line; None when both do."""
    from cli.catalog.load import load_catalog
    from cli.edges.templating import render_template
    from cli.errors import InputError
    from cli.inventory.load import load_inventory

    try:
        load_catalog(catalog)
        load_inventory(inventory, decrypt, render=render_template)
    except InputError as error:
        return "; ".join(str(problem) for problem in error.problems)
    return None
