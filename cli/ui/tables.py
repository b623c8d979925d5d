"""Rich tables for `ctl nodes` and `ctl catalog check`."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from cli.catalog.load import Catalog
from cli.cluster import views
from cli.cluster.snapshot import NodeView, Snapshot, Status
from cli.facts.model import NodeFacts
from cli.placement.filters import gb

STATUS_STYLE = {
    Status.READY: "green",
    Status.CORDONED: "yellow",
    Status.UNREACHABLE: "red",
    Status.LOST: "bold red",
}


def gpus_cell(node: NodeView) -> str:
    counts = views.gpu_counts(node)
    if counts is None:
        return "?"
    if not counts:
        return "-"
    return ", ".join(f"{c.free}/{c.total} {c.gpu_class}" for c in counts)


def memory_cell(node: NodeView) -> str:
    # An old probe that says nothing is not a small machine: "-", never 0.
    if node.memory_total_gib is None:
        return "-"
    return (
        gb(node.memory_total_gib) if node.memory_total_gib < 10 else f"{node.memory_total_gib:.0f}"
    )


def fabrics_cell(node: NodeView) -> str:
    parts = []
    for fabric in node.fabrics:
        if fabric.active_hcas is None:
            parts.append(f"{fabric.name} ?/{len(fabric.hcas)}")
        else:
            parts.append(f"{fabric.name} {len(fabric.active_hcas)}/{len(fabric.hcas)}")
    return ", ".join(parts) or "-"


def labels_cell(node: NodeView) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "-"


def shards_cell(node: NodeView) -> str:
    if not node.shards:
        return "-"
    return ", ".join(f"{s.replica}/{s.rank}" for s in node.shards)


def nodes_table(snapshot: Snapshot) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "STATUS", "GPUS", "MEM", "FABRICS", "LABELS", "SHARDS"):
        table.add_column(
            column,
            justify="right" if column == "MEM" else "left",
            overflow="fold",
            no_wrap=column in ("NAME", "STATUS", "MEM"),
        )
    for node in snapshot.nodes:
        status = node.status
        table.add_row(
            node.name,
            f"[{STATUS_STYLE[status]}]{status.value}[/]",
            gpus_cell(node),
            memory_cell(node),
            fabrics_cell(node),
            labels_cell(node),
            shards_cell(node),
        )
    return table


def node_notes(snapshot: Snapshot) -> list[str]:
    return [f"{node.name}: {note}" for node in snapshot.nodes for note in views.node_notes(node)]


def catalog_table(catalog: Catalog) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("MODEL", "ALIASES", "REPLICAS", "PROFILES (priority order)", "FALLBACKS"):
        table.add_column(column)
    for model in catalog.models.values():
        profiles = ", ".join(
            f"{p.name}({p.spec.gpus_per_node}×{p.spec.gpu_class}×{p.spec.nodes})"
            if p.spec.uses_gpus
            else f"{p.name}(cpu)"
            for p in model.profiles
        )
        table.add_row(
            model.name,
            ",".join(model.aliases) or "-",
            f"{model.replicas_min}..{model.replicas_max}",
            profiles,
            " → ".join(model.fallbacks) or "-",
        )
    return table


def facts_table(snapshot: Snapshot, facts: Mapping[str, NodeFacts]) -> Table:
    """What each node said this time: reached or why not, and the gist of its facts."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "REACHED", "PROBE", "GPUS", "MEM", "HCAS", "SHARDS", "NOTES"):
        table.add_column(column, overflow="fold")
    for node in snapshot.nodes:
        node_facts = facts.get(node.name)
        if node_facts is None:
            continue
        reached = "yes" if node_facts.error is None else f"[red]no[/]: {node_facts.error}"
        active = sum(1 for port in node_facts.hcas or () if port.active)
        hcas = "?" if node_facts.hcas is None else f"{active}/{len(node_facts.hcas)} active"
        table.add_row(
            node.name,
            reached,
            node_facts.probe_version or "-",
            gpus_cell(node),
            memory_cell(node),
            hcas,
            str(len(node_facts.shards)),
            "; ".join(node_facts.notes) or "-",
        )
    return table
