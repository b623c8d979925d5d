"""What ctl tells Prometheus: the scrape targets of a fleet, and the files it keeps current.

`fleet_targets` is `ctl targets` and `--prometheus-sd`'s one derivation (cli/routes/
targets.py does the deciding); `write_if_changed` rewrites a file atomically only when its
bytes differ, so that Prometheus's file watch and the textfile collector see a whole file
and no needless change.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli.catalog.load import Catalog
from cli.edges.files import atomic_write
from cli.ops.fleet import Fleet
from cli.routes.table import route_table
from cli.routes.targets import TargetGroup, file_sd, scrape_targets


def fleet_targets(catalog: Catalog, fleet: Fleet) -> list[TargetGroup]:
    addresses, _ = fleet.serving
    table = route_table(catalog, fleet.snapshot, addresses)
    ports = {h.name: h.vars.modelfleet_node_exporter_port for h in fleet.inventory.hosts}
    return scrape_targets(table, fleet.snapshot, addresses, ports)


def file_sd_text(groups: list[TargetGroup]) -> str:
    return json.dumps(file_sd(groups), indent=2) + "\n"


def write_if_changed(path: Path, text: str) -> bool:
    """Put `text` at `path` unless it is there already; whether it was written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write(path, text)
    return True
