"""Tables fitted to the terminal: the widest column folds first, between whole tokens; a
token is cut (with an ellipsis) only when nothing can fold any more, never broken in two."""

from __future__ import annotations

import io
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from cli.cluster.snapshot import Snapshot
from cli.ui.tables import Cell, Column, fit_widths, nodes_table
from tests import builders as b


def rendered(table: Table, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines()]


def busy_fleet() -> Snapshot:
    labels = {"role": "inference", "zone": "eu-west-1a", "rack": "r12"}
    shards = [
        b.shard("big-1", "big", range(4), rank=1, nodes=2),
        b.shard("chat-2", "chat", [4]),
        b.shard("embed-1", "embed", [5]),
    ]
    return b.snapshot(
        b.hgx("node-1", labels=labels, shards=shards, fabrics=[("ib-a", ["mlx5_0", "mlx5_1"])]),
        b.hgx("node-2", labels={"role": "inference"}),
    )


def test_a_cell_folds_between_tokens_keeping_its_commas() -> None:
    cell = Cell.of("big-1/1, chat-2/0, embed-1/0")
    assert cell.width == 28
    assert cell.floor == 9  # "chat-2/0," with its comma; "embed-1/0", the last, has none
    assert cell.fold(28) == "big-1/1, chat-2/0, embed-1/0"
    assert cell.fold(27) == "big-1/1, chat-2/0,\nembed-1/0"
    assert cell.fold(17) == "big-1/1,\nchat-2/0,\nembed-1/0"


def test_a_token_wider_than_its_column_is_cut_with_an_ellipsis() -> None:
    assert Cell.of("role=inference").fold(9) == "role=inf…"
    assert Cell.of("a, role=inference").fold(9) == "a,\nrole=inf…"


def test_a_fallback_chain_folds_after_its_arrow() -> None:
    cell = Cell(("mistral-small-24b", "llama-3.1-8b"), separator=" → ")
    assert cell.fold(40) == "mistral-small-24b → llama-3.1-8b"
    assert cell.fold(25) == "mistral-small-24b →\nllama-3.1-8b"


def test_one_token_a_line_cells_do_not_fold() -> None:
    cell = Cell.of("http://a:8000/v1\nhttp://bb:8000/v1", separator="\n")
    assert cell.width == 17
    assert cell.fold(17) == "http://a:8000/v1\nhttp://bb:8000/v1"


def test_a_table_that_fits_keeps_its_natural_widths() -> None:
    columns = [Column("A"), Column("B")]
    rows = [[Cell.of("x, y"), Cell.of("long-token")]]
    assert fit_widths(columns, rows, 80) == [4, 10]


def test_the_widest_column_folds_first() -> None:
    columns = [Column("NAME"), Column("LABELS"), Column("SHARDS")]
    rows = [[Cell.of("n1"), Cell.of("a=1, b=2"), Cell.of("big-1/0, chat-2/0, embed-1/0")]]
    # natural: 4 + 8 + 28 + 2 gaps of 2 = 44; at 40 only SHARDS, the widest, gives way.
    assert fit_widths(columns, rows, 40) == [4, 8, 18]
    # at 30 SHARDS is one token a line (9, its floor); LABELS still fits whole.
    assert fit_widths(columns, rows, 30) == [4, 8, 9]
    # at 22 LABELS folds too (down to its header), then SHARDS, the widest, is cut.
    assert fit_widths(columns, rows, 22) == [4, 6, 8]


def test_cutting_starts_only_when_nothing_can_fold_and_spares_a_kept_column() -> None:
    columns = [Column("N"), Column("URL", keep=True), Column("X")]
    rows = [[Cell.of("qwen2.5-coder-14b"), Cell.of("http://hgx-4:8000/v1"), Cell.of("ok")]]
    # floors 17 + 20 + 3 + gaps 4 = 44; at 40 the name, not the kept URL, is cut.
    assert fit_widths(columns, rows, 40) == [14, 20, 2]


def test_nodes_at_80_columns_fold_whole_tokens_and_fit() -> None:
    lines = rendered(nodes_table(busy_fleet(), 80), 80)
    assert max(len(line) for line in lines) <= 80
    header = ["NAME", "STATUS", "CERT", "GPUS", "MEM", "FABRICS", "LABELS", "SHARDS"]
    assert lines[0].split() == header
    words = {w for line in lines[1:] for w in line.split()}
    # every token whole: no `role=inferen` / `ce` halves
    tokens = {"rack=r12,", "role=inference,", "zone=eu-west-1a", "big-1/1,", "chat-2/0,"}
    assert tokens <= words
    assert "embed-1/0" in words
    assert not [w for w in words if w.endswith("…")]


def test_nodes_at_160_columns_is_one_line_a_node() -> None:
    lines = rendered(nodes_table(busy_fleet(), 160), 160)
    assert len(lines) == 3
    assert "rack=r12, role=inference, zone=eu-west-1a" in lines[1]
    assert "big-1/1, chat-2/0, embed-1/0" in lines[1]


tokens = st.text(alphabet="abcdefghij-=/.", min_size=1, max_size=14)
cells = st.lists(tokens, min_size=1, max_size=4).map(lambda ts: Cell(tuple(ts)))


@settings(max_examples=60)
@given(
    rows=st.lists(st.lists(cells, min_size=3, max_size=3), min_size=1, max_size=5),
    width=st.integers(min_value=20, max_value=160),
)
def test_a_fitted_table_never_breaks_a_token_while_it_can_fold(
    rows: list[list[Cell]], width: int
) -> None:
    columns = [Column("AA"), Column("BB"), Column("CC")]
    widths = fit_widths(columns, rows, width)
    floors = [max([2, *(row[i].floor for row in rows)]) for i in range(3)]
    if sum(floors) + 4 <= width:
        assert sum(widths) + 4 <= width
        for row in rows:
            for cell, column_width in zip(row, widths, strict=True):
                folded = cell.fold(column_width)
                assert "…" not in folded
                pieces = [re.sub(r",$", "", line) for line in folded.split("\n")]
                assert ", ".join(pieces) == ", ".join(cell.tokens)
    assert all(w >= 2 for w in widths)
