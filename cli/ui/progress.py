"""A progress bar on stderr while nodes are gathered, only when stderr is a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.ui.console import err
from cli.ui.safe import shown

ProgressCallback = Callable[[str, str | None], None]


@contextmanager
def gather_progress(total: int) -> Iterator[ProgressCallback | None]:
    if not err.is_terminal or total == 0:
        yield None
        return
    with Progress(
        TextColumn("gathering facts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}", markup=False),  # a node's name and error: text
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("gather", total=total, last="")

        def advance(name: str, error: str | None) -> None:
            progress.update(task, advance=1, last=shown(f"{name}: {error}" if error else name))

        yield advance
