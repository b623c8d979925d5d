"""The backoff ledger on disk: one small JSON file per inventory in the state directory."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from cli.edges.files import atomic_write, state_dir, state_key
from cli.reconcile.backoff import Backoff


def ledger_path(inventory: Path, root: Path | None = None) -> Path:
    return (root or state_dir()) / "backoff" / f"{state_key(inventory)}.json"


def load_ledger(path: Path) -> dict[str, Backoff]:
    """The ledger, or an empty one when it is missing or unreadable (only clocks are lost)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {
            model: Backoff(
                failures=int(entry["failures"]),
                until=datetime.fromisoformat(entry["until"]) if entry.get("until") else None,
                counted=tuple(entry.get("counted", ())),
            )
            for model, entry in data.items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def save_ledger(path: Path, ledger: Mapping[str, Backoff]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {
        model: {
            "failures": b.failures,
            "until": b.until.isoformat() if b.until else None,
            # The last few suffice to count each failure once.
            "counted": list(b.counted[-20:]),
        }
        for model, b in sorted(ledger.items())
    }
    atomic_write(path, json.dumps(data, indent=2), 0o600)
