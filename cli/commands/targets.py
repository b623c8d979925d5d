"""`ctl targets`: what Prometheus should scrape, as file_sd JSON."""

from __future__ import annotations

import sys

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    FactsOption,
    InventoryOption,
)


def targets(
    context: typer.Context,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
    facts: FactsOption = None,
) -> None:
    """Print Prometheus file_sd JSON: every ready replica's metrics endpoint (its rank 0,
    labelled model, replica, node, engine; `__scheme__` https when it serves TLS) and each
    node's exporter where one listens (docs/metrics.md).

    Facts are gathered live over SSH unless --facts names a snapshot. Exit code 1 when a
    node could not be reached (its replicas are left out), 2 on bad input.
    """
    from cli.commands.inputs import read_catalog, read_fleet
    from cli.ops.metrics import file_sd_text, fleet_targets
    from cli.ui import console

    loaded = read_catalog(catalog)
    fleet = read_fleet(context, inventory, facts)
    sys.stdout.write(file_sd_text(fleet_targets(loaded, fleet)))
    unreached = fleet.partial or any(n.unreachable_reason for n in fleet.snapshot.nodes)
    raise SystemExit(console.EXIT_INCOMPLETE if unreached else console.EXIT_OK)
