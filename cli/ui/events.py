"""The controller's log (`ctl reconcile --watch`): one line per event on stdout, which
systemd sends to the journal. `text` for people; `json` for machines, one object a line
(docs/controller.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cli.ui.safe import shown

LOG_FORMATS = ("text", "json")


def event_logger(log_format: str) -> Callable[[str, dict[str, Any]], None]:
    def log(kind: str, fields: dict[str, Any]) -> None:
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if log_format == "json":
            line = json.dumps({"time": when, "event": kind, **fields}, default=str)
        else:
            line = f"{when} {shown(event_text(kind, fields))}"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return log


def event_text(kind: str, fields: dict[str, Any]) -> str:
    """An event in one line of words."""
    if kind == "pass-started":
        return f"pass {fields['pass']} started"
    if kind == "pass":
        said = [
            f"pass {fields['pass']} done in {fields['seconds']:.1f} s, exit {fields['exit_code']}"
        ]
        if fields["error"]:
            said.append(f"error: {fields['error']}")
        said.append("did: " + ("; ".join(fields["did"]) or "nothing"))
        if fields["could_not"]:
            said.append("could not: " + "; ".join(fields["could_not"]))
        if fields["left_undone"]:
            said.append("left undone: " + "; ".join(fields["left_undone"]))
        return " — ".join(said)
    if kind == "stopping":
        return f"{fields['signal']} received: stopping once the step under way is done"
    if kind == "stopped":
        by = f" on {fields['signal']}" if fields["signal"] else ""
        return f"controller stopped{by} after {fields['passes']} pass(es)"
    if kind == "aborted":
        return f"a second {fields['signal']}: aborted at once"
    return f"{kind}: " + "; ".join(f"{key} {value}" for key, value in fields.items())
