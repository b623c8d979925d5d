"""Options shared by the commands, each with its environment variable."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CatalogOption = Annotated[
    Path,
    typer.Option(
        "--catalog",
        envvar="MODELFLEET_CATALOG",
        help="The catalog of models (YAML).",
        show_default=True,
    ),
]
InventoryOption = Annotated[
    Path,
    typer.Option(
        "--inventory",
        "-i",
        envvar="MODELFLEET_INVENTORY",
        help="The Ansible inventory: a YAML file or a directory.",
        show_default=True,
    ),
]
FactsOption = Annotated[
    Path | None,
    typer.Option(
        "--facts",
        envvar="MODELFLEET_FACTS",
        help="Read node facts from this snapshot directory (one NAME.json per node).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (docs/json.md).")]

DEFAULT_CATALOG = Path("catalog.yaml")
DEFAULT_INVENTORY = Path("inventory")
