"""Backoff after failures, carried on the model: it survives the replica it came from.

Pure: the clock and the randomness are arguments. The ledger is a small JSON file in the
state directory (cli/reconcile/ledger.py); deleting it only resets the clocks.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

BASE_DELAY = timedelta(seconds=30)
MAX_DELAY = timedelta(minutes=30)


@dataclass(frozen=True)
class Backoff:
    failures: int = 0
    until: datetime | None = None  # no new replica of the model before this
    counted: tuple[str, ...] = ()  # failed replicas already counted, so each counts once

    def waiting(self, now: datetime) -> bool:
        return self.until is not None and now < self.until


def delay_bounds(failures: int) -> tuple[timedelta, timedelta]:
    """Exponential in the failures, capped; the wait is drawn between half and all of it."""
    full = min(BASE_DELAY * (2 ** max(0, failures - 1)), MAX_DELAY)
    return full / 2, full


def failure_key(replica: str, started: datetime | None) -> str:
    """Names one life of a replica: an id can come back after its replica was destroyed."""
    return f"{replica}@{started.isoformat() if started else '?'}"


def jitter(key: str, failures: int) -> float:
    """A fraction in [0, 1) that depends only on the failure (its `failure_key`) and the
    model's count: a dry run and the pass that follows draw the same wait, and replicas
    that failed together still spread out."""
    digest = hashlib.sha256(f"{key}#{failures}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def after_failure(
    backoff: Backoff, replica: str, now: datetime, rng: random.Random | None = None
) -> Backoff:
    """One more failure of the model, unless this one (a `failure_key`) was already counted.

    The jitter keeps models that failed together (a switch rebooting) from all coming back
    in the same second. Without `rng` it is `jitter(replica, failures)`: the same inputs,
    the same plan.
    """
    if replica in backoff.counted:
        return backoff
    failures = backoff.failures + 1
    low, high = delay_bounds(failures)
    draw = jitter(replica, failures) if rng is None else rng.random()
    wait = low + (high - low) * draw
    return Backoff(failures, now + wait, (*backoff.counted, replica))
