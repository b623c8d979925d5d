"""The backoff ledger on disk: one small JSON file per inventory in the state directory."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from cli.facts.cache import state_dir
from cli.reconcile.backoff import Backoff


def ledger_path(inventory: Path, root: Path | None = None) -> Path:
    key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
    return (root or state_dir()) / "backoff" / f"{key}.json"


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
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".ledger.")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        json.dump(data, stream, indent=2)
    Path(temporary).replace(path)
