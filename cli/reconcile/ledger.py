"""The backoff ledger and the autoscaler's memory on disk: one small JSON file each per
inventory in the state directory."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from cli.edges.files import atomic_write, state_dir, state_key
from cli.names import file_in
from cli.reconcile.autoscale import Memory
from cli.reconcile.backoff import Backoff
from cli.regularfile import read_regular_file


def ledger_path(inventory: Path, root: Path | None = None) -> Path:
    return (root or state_dir()) / "backoff" / f"{state_key(inventory)}.json"


# Far above a real ledger: a few hundred bytes per model the catalog has.
MAX_LEDGER_BYTES = 16 * 1024 * 1024


class _NotALedgerError(ValueError):
    pass


def load_ledger(path: Path) -> tuple[dict[str, Backoff], str | None]:
    """The ledger, and a warning when it could not be read: then it is empty, and the
    pass writes it afresh (only clocks are lost). Missing is no warning: never written."""
    return _load(path, MAX_LEDGER_BYTES, _entry, "backoff ledger")


Entry = TypeVar("Entry")


def _load(
    path: Path, limit: int, entry: Callable[[object], Entry], what: str
) -> tuple[dict[str, Entry], str | None]:
    """A JSON object of model → entry; empty, with a warning saying why, when unreadable."""
    try:
        data = json.loads(read_regular_file(path, limit, follow_symlinks=False))
        if not isinstance(data, dict):
            raise _NotALedgerError("not a JSON object")
        return {str(model): entry(value) for model, value in data.items()}, None
    except FileNotFoundError:
        return {}, None
    except OSError as error:
        why = error.strerror or type(error).__name__
    except (ValueError, KeyError, TypeError) as error:
        why = str(error) if isinstance(error, _NotALedgerError) else f"not a {what}"
    return {}, f"ignoring unreadable {what} {path} ({why}): it is written afresh"


def _entry(entry: object) -> Backoff:
    if not isinstance(entry, dict):
        raise _NotALedgerError("an entry is not a JSON object")
    failures, until, counted = entry["failures"], entry.get("until"), entry.get("counted", [])
    if not isinstance(failures, int) or isinstance(failures, bool) or failures < 0:
        raise _NotALedgerError("failures is not a count")
    when = None
    if until is not None:
        when = datetime.fromisoformat(until) if isinstance(until, str) else None
        if when is None or when.utcoffset() is None:
            # A naive time cannot be compared with the clock's: it crashed the planner.
            raise _NotALedgerError("until is not a time with its UTC offset")
    if not isinstance(counted, list) or not all(isinstance(key, str) for key in counted):
        raise _NotALedgerError("counted is not a list of texts")
    return Backoff(failures=failures, until=when, counted=tuple(counted))


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


# --------------------------------------------------------------------------- the autoscaler's


def scale_memory_path(inventory: Path, root: Path | None = None) -> Path:
    return file_in((root or state_dir()) / "autoscale", state_key(inventory), ".json")


# Two times per autoscaled model: far below this however large the catalog.
MAX_SCALE_MEMORY_BYTES = 4 * 1024 * 1024


def load_scale_memory(path: Path) -> tuple[dict[str, Memory], str | None]:
    """The autoscaler's memory, and a warning when it could not be read: then it is
    empty, and every window starts again (no decision is made early, only later)."""
    return _load(path, MAX_SCALE_MEMORY_BYTES, _memory, "autoscaler memory")


def _time(value: object) -> datetime | None:
    if value is None:
        return None
    when = datetime.fromisoformat(value) if isinstance(value, str) else None
    if when is None or when.utcoffset() is None:
        raise _NotALedgerError("a time is not a time with its UTC offset")
    return when


def _memory(entry: object) -> Memory:
    if not isinstance(entry, dict):
        raise _NotALedgerError("an entry is not a JSON object")
    return Memory(above_since=_time(entry.get("above_since")),
                  below_since=_time(entry.get("below_since")))  # fmt: skip


def save_scale_memory(path: Path, memory: Mapping[str, Memory]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {
        model: {
            "above_since": m.above_since.isoformat() if m.above_since else None,
            "below_since": m.below_since.isoformat() if m.below_since else None,
        }
        for model, m in sorted(memory.items())
    }
    atomic_write(path, json.dumps(data, indent=2), 0o600)
