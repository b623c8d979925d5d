"""Staging progress as read from a node (cli/ops/staging.py): a node's file is untrusted,
and a reading is said again only when its bar moved or its state changed."""

from __future__ import annotations

import pytest

from cli.ops.staging import ProgressLines, Reading, parse_reading, progress_line


def test_a_progress_line_as_the_module_writes_it_is_read() -> None:
    text = '{"bytes": 4200000000, "total": 10500000000, "state": "running", "message": ""}'
    assert parse_reading("node-1", "hf://o/m", text) == Reading(
        "node-1", "hf://o/m", 4_200_000_000, 10_500_000_000, "running"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1, 2]",
        '{"bytes": -1, "total": 5, "state": "running"}',
        '{"bytes": 1.5, "total": 5, "state": "running"}',
        '{"bytes": true, "total": 5, "state": "running"}',
        '{"bytes": 1, "total": "5", "state": "running"}',
        '{"bytes": 1, "total": 5, "state": "\\u001b[31mpwned"}',
        '{"bytes": 1, "total": 5}',
        '{"bytes": 1180591620717411303425, "total": null, "state": "running"}',
    ],
)
def test_anything_else_a_node_writes_is_no_reading(text: str) -> None:
    assert parse_reading("node-1", "hf://o/m", text) is None


def test_the_bar_shows_bytes_of_the_total_and_the_end_state() -> None:
    running = Reading("node-1", "hf://o/m", 4_200_000_000, 10_500_000_000, "running")
    assert progress_line(running) == (
        "  staging hf://o/m on node-1: [########............] 40% 4.2 of 10.5 GB"
    )
    done = Reading("node-1", "hf://o/m", 10_500_000_000, 10_500_000_000, "done")
    assert progress_line(done).endswith("[####################] 100% 10.5 of 10.5 GB, done")
    unknown = Reading("node-2", "https://x/m.gguf", 1_000_000_000, None, "running")
    assert progress_line(unknown) == (
        "  staging https://x/m.gguf on node-2: 1.0 GB (size not known yet)"
    )


def test_a_reading_is_said_again_only_when_its_bar_moved_or_its_state_changed() -> None:
    said: list[str] = []
    lines = ProgressLines(said.append)
    for done in (0, 100, 400, 420, 449, 450, 1000):  # 420 and 449: the bar did not move
        lines(Reading("n", "s", done, 1000, "running"))
    lines(Reading("n", "s", 1000, 1000, "done"))
    lines(Reading("m", "s", 0, 1000, "running"))  # another node: its own bar
    assert [line.split("] ")[1] for line in said] == [
        "0% 0.0 of 0.0 GB", "10% 0.0 of 0.0 GB", "40% 0.0 of 0.0 GB", "45% 0.0 of 0.0 GB",
        "100% 0.0 of 0.0 GB", "100% 0.0 of 0.0 GB, done", "0% 0.0 of 0.0 GB",
    ]  # fmt: skip
