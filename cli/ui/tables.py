"""Rich tables for `ctl nodes`, `ctl facts` and `ctl catalog check`, fitted to the terminal.

A cell is a list of tokens (`role=inference`, `4/4 A100`, `big-1/0`) joined by `, `. A table
wider than the terminal narrows its widest column first, folding its cells between whole
tokens; when no column can narrow further without breaking a token, the widest is cut with
an ellipsis. A token is never broken across lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from rich.table import Table
from rich.text import Text

from cli.catalog.load import Catalog, CatalogModel
from cli.cluster import views
from cli.cluster.snapshot import NodeView, Snapshot, Status
from cli.facts.model import NodeFacts
from cli.placement.constraints import BYTES_PER_GB, gb
from cli.ui.console import out
from cli.ui.safe import shown

GAP = 2  # columns between two columns
ELLIPSIS = "…"


@dataclass(frozen=True)
class Cell:
    """What a table cell says: tokens, never broken, joined by `separator` (`\\n`: one a line)."""

    tokens: tuple[str, ...]
    style: str = ""
    separator: str = ", "

    def __post_init__(self) -> None:
        # A token may come from a node or a file: its controls are escaped before it is
        # measured, and the cell is printed as a Text, so markup in it is never read.
        object.__setattr__(self, "tokens", tuple(shown(token) for token in self.tokens))

    @staticmethod
    def of(text: str, style: str = "", separator: str = ", ") -> Cell:
        return Cell(tuple(text.split(separator)) if text else ("",), style, separator)

    @property
    def width(self) -> int:
        if self.separator == "\n":
            return max(len(token) for token in self.tokens)
        return len(self.separator.join(self.tokens))

    def _mark(self, index: int) -> str:
        """What ends token `index` at a line's end: `,` of `, `, ` →` of ` → `; nothing
        after the last token."""
        return "" if index == len(self.tokens) - 1 else self.separator.rstrip()

    @property
    def floor(self) -> int:
        """The narrowest this cell folds to with no token broken (its comma included)."""
        return max(len(token) + len(self._mark(i)) for i, token in enumerate(self.tokens))

    def fold(self, width: int) -> str:
        """The cell's lines at `width` columns: whole tokens, each line's comma kept."""
        if self.separator == "\n":
            lines = list(self.tokens)
        else:
            lines = []
            line = ""
            for index, token in enumerate(self.tokens):
                if not line:
                    line = token
                elif len(line) + len(self.separator) + len(token) + len(self._mark(index)) <= width:
                    line += self.separator + token
                else:
                    lines.append(line + self._mark(index - 1))
                    line = token
            lines.append(line)
        return "\n".join(
            line if len(line) <= width else line[: max(width - 1, 0)] + ELLIPSIS for line in lines
        )


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    keep: bool = False  # cut last: what is copied from the table (an endpoint's URL)


def fit_widths(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """Each column's width so the table fits `width`: the widest column gives way first,
    folding between tokens down to its longest token; then, if it must, cutting tokens
    (a `keep` column last; never narrower than its header)."""
    headers = [column.header for column in columns]
    indexes = range(len(headers))
    widths = [max([len(headers[i]), *(row[i].width for row in rows)]) for i in indexes]
    floors = [max([len(headers[i]), *(row[i].floor for row in rows)]) for i in indexes]
    lowest = [len(header) for header in headers]
    kept = [floors[i] if columns[i].keep else lowest[i] for i in indexes]

    def folded(column: int, at: int) -> int:
        """The column's width once its cells are folded at `at`: its longest line."""
        lines = [line for row in rows for line in row[column].fold(at).split("\n")]
        return max([len(headers[column]), *(len(line) for line in lines)])

    for limit in (floors, kept, lowest):
        while sum(widths) + GAP * (len(widths) - 1) > width:
            narrowable = [i for i in indexes if widths[i] > limit[i]]
            if not narrowable:
                break
            widest = max(narrowable, key=lambda i: (widths[i], i))
            widths[widest] = max(limit[widest], folded(widest, widths[widest] - 1))
    return widths


def fitted_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    width: int | None = None,
    row_styles: Sequence[str] | None = None,
) -> Table:
    """A table of `rows` at most `width` columns wide (the terminal's by default)."""
    widths = fit_widths(columns, rows, out.width if width is None else width)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column, column_width in zip(columns, widths, strict=True):
        table.add_column(
            column.header,
            justify=column.justify,
            width=column_width,
            no_wrap=True,
            overflow="ellipsis",
        )
    for index, row in enumerate(rows):
        style = row_styles[index] if row_styles else ""
        table.add_row(
            *(Text(cell.fold(w), style=cell.style) for cell, w in zip(row, widths, strict=True)),
            style=style or None,
        )
    return table


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
    if not counts and not node.gpus_lost:
        return "-"
    if len(counts) == 1 and node.gpus_lost:  # one kind of GPU: the lost one is one of them
        (count,) = counts
        return f"{count.free}/{count.total + node.gpus_lost} {count.gpu_class}"
    cells = [f"{c.free}/{c.total} {c.gpu_class}" for c in counts]
    return ", ".join([*cells, f"{node.gpus_lost} lost"] if node.gpus_lost else cells)


def memory_cell(node: NodeView) -> str:
    # An old probe that says nothing is not a small machine: "-", never 0.
    if node.memory_total_gib is None:
        return "-"
    return figure(node.memory_total_gib)


def figure(value: float) -> str:
    """A size in a table: a decimal under 10, whole above (`7.8`, `2015`)."""
    return gb(value) if value < 10 else f"{value:.0f}"


def fabrics_cell(node: NodeView) -> str:
    parts = []
    for fabric in node.fabrics:
        if fabric.active_hcas is None:
            parts.append(f"{fabric.name} ?/{len(fabric.hcas)}")
        else:
            parts.append(f"{fabric.name} {len(fabric.active_hcas)}/{len(fabric.hcas)}")
    return ", ".join(parts) or "-"


def store_cell(node: NodeView) -> str:
    """The model store: free space, and how many sources it holds complete and their size
    (GB of 10^9 bytes, as disks are sold); `?` when the node did not report it."""
    store = node.model_store
    if store is None:
        return "?"
    text = f"{figure(store.free_bytes / BYTES_PER_GB)} GB free"
    if store.weights:
        text += f", {len(store.weights)} held ({figure(store.stored_bytes / BYTES_PER_GB)} GB)"
    if not store.present:
        text += ", not made yet"
    return text


def cert_cell(node: NodeView, now: datetime) -> str:
    """The node's certificate: the time it has left (`61d`, `5h`), `expired`, `invalid`
    when it cannot serve TLS for another reason (a note says which), `plain` when the node
    has none, `?` when the node was never reached."""
    cert = node.certificate
    if cert is None:
        return "?" if node.last_reached is None else "plain"
    left = cert.not_after - now
    if left <= timedelta(0):
        return "expired"
    if cert.problem is not None:
        return "invalid"
    if left >= timedelta(days=1):
        return f"{left.days}d"
    return f"{max(1, int(left.total_seconds() // 3600))}h"


def labels_cell(node: NodeView) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "-"


def shards_cell(node: NodeView) -> str:
    """REPLICA/RANK per shard, and its state when that is not running: `big-1/1 failed`."""
    if not node.shards:
        return "-"
    return ", ".join(
        f"{s.replica}/{s.rank}" + ("" if s.state == "running" else f" {s.state}")
        for s in node.shards
    )


NODE_COLUMNS = (
    Column("NAME"),
    Column("STATUS"),
    Column("CERT"),
    Column("GPUS"),
    Column("MEM", "right"),
    Column("FABRICS"),
    Column("LABELS"),
    Column("SHARDS"),
)


STORE_COLUMN = Column("STORE")


def nodes_table(snapshot: Snapshot, width: int | None = None, wide: bool = False) -> Table:
    """One row per node; `wide` adds the model store after MEM."""
    rows = []
    for node in snapshot.nodes:
        status = node.status
        row = [
            Cell.of(node.name),
            Cell.of(status.value, STATUS_STYLE[status]),
            Cell.of(cert_cell(node, snapshot.now)),
            Cell.of(gpus_cell(node)),
            Cell.of(memory_cell(node)),
            Cell.of(fabrics_cell(node)),
            Cell.of(labels_cell(node)),
            Cell.of(shards_cell(node)),
        ]
        if wide:
            row.insert(5, Cell.of(store_cell(node)))
        rows.append(row)
    columns: tuple[Column, ...] = NODE_COLUMNS
    if wide:
        columns = (*NODE_COLUMNS[:5], STORE_COLUMN, *NODE_COLUMNS[5:])
    return fitted_table(columns, rows, width)


def node_notes(snapshot: Snapshot) -> list[str]:
    return [
        f"{node.name}: {note}"
        for node in snapshot.nodes
        for note in views.node_notes(node, snapshot.now)
    ]


def catalog_table(catalog: Catalog, width: int | None = None) -> Table:
    headers = ["MODEL", "ALIASES", "REPLICAS", "PROFILES (priority order)", "FALLBACKS"]
    # Where each model's token comes from, never the token (the catalog holds none): a
    # column only for a catalog that names one, so one that needs none reads as before.
    tokens = {name: token_references(model) for name, model in catalog.models.items()}
    if any(tokens.values()):
        headers.append("TOKEN")
    columns = [Column(header) for header in headers]
    rows = []
    for model in catalog.models.values():
        profiles = tuple(
            f"{p.name}({p.spec.gpus_per_node}×{p.spec.gpu_class}×{p.spec.nodes})"
            if p.spec.uses_gpus
            else f"{p.name}(cpu)"
            for p in model.profiles
        )
        rows.append(
            [
                Cell.of(model.name),
                Cell(tuple(model.aliases) or ("-",), separator=","),
                Cell.of(f"{model.replicas_min}..{model.replicas_max}"),
                Cell(profiles),
                Cell(tuple(model.fallbacks) or ("-",), separator=" → "),
            ]
        )
        if len(headers) > len(rows[-1]):
            rows[-1].append(Cell(tokens[model.name] or ("-",)))
    return fitted_table(columns, rows, width)


def token_references(model: CatalogModel) -> tuple[str, ...]:
    """Where the model's profiles get their token: one reference (`$HF_TOKEN`) when they
    share it, else `profile: reference` for each profile that has one."""
    references = {p.name: p.token.reference for p in model.profiles if p.token is not None}
    if len(set(references.values())) <= 1:
        return tuple(set(references.values()))
    return tuple(f"{name}: {reference}" for name, reference in references.items())


def facts_table(
    snapshot: Snapshot, facts: Mapping[str, NodeFacts], width: int | None = None
) -> Table:
    """What each node said this time: reached or why not, and the gist of its facts."""
    headers = ("NAME", "REACHED", "PROBE", "GPUS", "MEM", "HCAS", "SHARDS", "NOTES")
    rows = []
    for node in snapshot.nodes:
        node_facts = facts.get(node.name)
        if node_facts is None:
            continue
        active = sum(1 for port in node_facts.hcas or () if port.active)
        hcas = "?" if node_facts.hcas is None else f"{active}/{len(node_facts.hcas)} active"
        rows.append(
            [
                Cell.of(node.name),
                Cell.of("yes")
                if node_facts.error is None
                else Cell.of(f"no: {node_facts.error}", "red", " "),
                Cell.of(node_facts.probe_version or "-"),
                Cell.of(gpus_cell(node)),
                Cell.of(memory_cell(node)),
                Cell.of(hcas),
                Cell.of(str(len(node_facts.shards))),
                Cell.of("; ".join(node_facts.notes) or "-", separator=" "),
            ]
        )
    return fitted_table([Column(h) for h in headers], rows, width)
