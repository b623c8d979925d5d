"""`ctl keys list`: the teams' keys as a table (never a key: ctl keeps none)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.table import Table

from cli.routes.keys import TeamKey
from cli.ui.tables import Cell, Column, fitted_table


def key_state(key: TeamKey, now: datetime) -> str:
    if key.revoked is not None:
        return "revoked"
    return "expired" if key.expired(now) else "valid"


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _day(value: datetime | None) -> str:
    return "never" if value is None else value.strftime("%Y-%m-%d %H:%M")


def keys_table(keys: Sequence[TeamKey], now: datetime, width: int | None = None) -> Table:
    columns = [Column(h) for h in ("ID", "TEAM", "MODELS", "RPM", "TPM", "PARALLEL")]
    columns += [Column("CREATED"), Column("EXPIRES"), Column("STATE")]
    rows = [
        [
            Cell.of(key.key_id),
            Cell.of(key.team),
            Cell(("all",) if key.models is None else key.models or ("-",)),
            Cell.of(_limit(key.rpm)),
            Cell.of(_limit(key.tpm)),
            Cell.of(_limit(key.max_parallel)),
            Cell.of(_day(key.created)),
            Cell.of(_day(key.expires)),
            Cell.of(key_state(key, now)),
        ]
        for key in keys
    ]
    return fitted_table(columns, rows, width)
