"""Options shared by the commands, each with its environment variable."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

CatalogOption = Annotated[
    Path,
    typer.Option("--catalog", envvar="MODELFLEET_CATALOG", help="The catalog of models (YAML)."),
]
InventoryOption = Annotated[
    Path,
    typer.Option(
        "--inventory",
        "-i",
        envvar="MODELFLEET_INVENTORY",
        help="The Ansible inventory: a YAML or INI file, or a directory.",
    ),
]
FactsOption = Annotated[
    Path | None,
    typer.Option(
        "--facts",
        envvar="MODELFLEET_FACTS",
        help="Read node facts from this snapshot directory instead of gathering them live.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (docs/json.md).")]

DEFAULT_CATALOG = Path("catalog.yaml")
DEFAULT_INVENTORY = Path("inventory")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d`."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise typer.BadParameter(f"'{text}' is not a duration like 90s, 30m, 2h or 1d")
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


CaDirOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-dir",
        envvar="MODELFLEET_CA_DIR",
        help="The CA's directory (default: $XDG_CONFIG_HOME/modelfleet/ca,"
        " else ~/.config/modelfleet/ca).",
    ),
]
