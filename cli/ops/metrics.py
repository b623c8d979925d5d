"""What ctl tells Prometheus: the scrape targets of a fleet, and the files it keeps current.

`fleet_targets` is `ctl targets`' derivation, `pass_view` a reconcile pass's (the targets
and figures as the pass leaves the fleet; cli/routes/targets.py and figures.py decide);
`Publisher` writes them after each pass of the controller. Each file is rewritten
atomically and only when its bytes differ, so that Prometheus's file watch and the textfile
collector only ever see a whole file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from cli.catalog.load import Catalog
from cli.edges.files import atomic_write
from cli.ops.fleet import Fleet
from cli.reconcile.apply import Outcome
from cli.reconcile.planner import Plan
from cli.routes.figures import PassView, Totals, pass_figures, textfile
from cli.routes.table import RouteTable, route_table
from cli.routes.targets import TargetGroup, file_sd, scrape_targets


def fleet_targets(
    catalog: Catalog, fleet: Fleet, table: RouteTable | None = None
) -> list[TargetGroup]:
    """`table`: the routes as they are now (default: as the fleet's snapshot has them)."""
    addresses, _ = fleet.serving
    if table is None:
        table = route_table(catalog, fleet.snapshot, addresses)
    ports = {h.name: h.vars.modelfleet_node_exporter_port for h in fleet.inventory.hosts}
    return scrape_targets(table, fleet.snapshot, addresses, ports)


def pass_view(catalog: Catalog, fleet: Fleet, plan: Plan, outcome: Outcome | None) -> PassView:
    """The targets and figures as a pass leaves the fleet: what it stopped withdrawn, what
    it started (and verified) in; `outcome` None: a pass that changed nothing."""
    addresses, _ = fleet.serving
    # Out of the routers: what it stopped, and what it could only withdraw (on lost nodes).
    withdrawn = (
        frozenset([*outcome.stopped, *outcome.withdrawn_lost, *outcome.stopped_but_lost])
        if outcome
        else frozenset()
    )
    started = set(outcome.started) if outcome else set()
    table = route_table(
        catalog,
        fleet.snapshot,
        addresses,
        withdrawn=withdrawn,
        started=[s for s in plan.starts if s.replica in started],
    )
    return PassView(tuple(fleet_targets(catalog, fleet, table)), pass_figures(table, plan))


def file_sd_text(groups: list[TargetGroup] | tuple[TargetGroup, ...]) -> str:
    return json.dumps(file_sd(list(groups)), indent=2) + "\n"


def write_if_changed(path: Path, text: str) -> bool:
    """Put `text` at `path` unless it is there already; whether it was written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write(path, text)
    return True


def unwritable_file(path: Path) -> str | None:
    """Why ctl could not keep `path` current; None when its directory takes new files."""
    directory = path.parent
    if not directory.is_dir():
        return f"{path}: no directory {directory}"
    try:
        atomic_write(directory / f".{path.name}.check", b"", 0o600).unlink()
    except OSError as error:
        return f"{path}: its directory is not writable: {error.strerror or error}"
    return None


@dataclass
class Publisher:
    """The controller's files for Prometheus: the file_sd file (`targets`) and the textfile
    collector's file (`textfile`), either None when not asked for; the counters of the
    passes so far."""

    targets: Path | None = None
    textfile: Path | None = None
    totals: Totals = field(default_factory=Totals)

    def publish(
        self, view: PassView | None, seconds: float, exit_code: int, ended: datetime
    ) -> list[str]:
        """After a pass: each file written (the targets only when the pass saw the fleet:
        a pass that did not keeps the last list); why each could not be, one line each."""
        self.totals = self.totals.add(None if view is None else view.figures)
        problems = []
        if self.targets is not None and view is not None:
            problems += _write(self.targets, file_sd_text(view.targets))
        if self.textfile is not None:
            figures = None if view is None else view.figures
            text = textfile(seconds, exit_code, ended, figures, self.totals)
            problems += _write(self.textfile, text)
        return problems


def _write(path: Path, text: str) -> list[str]:
    try:
        write_if_changed(path, text)
    except OSError as error:
        return [f"could not write {path}: {error.strerror or error}"]
    return []
