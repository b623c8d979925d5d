"""Where output goes: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook, RenderResult
from rich.markup import escape as markup_escape
from rich.segment import Segment
from rich.text import Text

from cli.errors import InputError
from cli.ui.safe import shown

if TYPE_CHECKING:
    from cli.edges.ansible import PlaybookRun

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_BAD_INPUT = 2


def _piped_width() -> int | None:
    """None (the terminal's) on a terminal or when COLUMNS says; piped, 100 columns, so
    piped output reads as the docs show it."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return 100


class _Shown:
    """A renderable's output with every control character in its text escaped (rich's own
    styles and cursor moves are not text: they pass)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control:
                yield segment
            else:
                yield Segment(shown(segment.text, keep_newlines=True), segment.style)


class _NoControlCharacters(RenderHook):
    """The last line of defence: whatever a print path forgot to pass through `shown`, no
    ESC, BEL or C1 character of its text reaches the terminal."""

    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Shown(renderable) for renderable in renderables]


out = Console(highlight=False, emoji=False, soft_wrap=False, width=_piped_width())
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
out.push_render_hook(_NoControlCharacters())
err.push_render_hook(_NoControlCharacters())


def _error(message: str) -> Text:
    """`error: MESSAGE`, the message as text: never read as markup, its controls escaped."""
    return Text.assemble(("error:", "bold red"), " ", shown(message))


def print_table(table: RenderableType) -> None:
    """A table without the trailing blanks rich pads its last column with."""
    with out.capture() as captured:
        out.print(table)
    for line in captured.get().splitlines():
        sys.stdout.write(line.rstrip() + "\n")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def warn(message: str) -> None:
    """`warning: MESSAGE` on stderr, the message as text."""
    err.print(f"warning: {rich_escape(message)}")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(_error(message))
    raise SystemExit(code)


@contextmanager
def input_errors() -> Iterator[None]:
    """Bad input: every problem on its own line on stderr, exit code 2."""
    try:
        yield
    except InputError as error:
        for problem in error.problems:
            err.print(_error(str(problem)))
        raise SystemExit(EXIT_BAD_INPUT) from None


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """Lines of at most `width` columns where words allow, continued under `indent`."""
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def print_lines(lines: list[str]) -> None:
    """Plain lines as they are: already wrapped, never cropped, no markup read."""
    for line in lines:
        out.print(Text(shown(line)), overflow="ignore", crop=False)


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 model`, `2 models`, `0 aliases`: the count and the word that goes with it."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def rich_escape(text: str) -> str:
    """`text` to put in a Rich markup string: its controls escaped, then its markup (`[red]`,
    `\\[red]`, `[link=…]`) escaped so it prints as written."""
    return markup_escape(shown(text))


def say_run(run: PlaybookRun) -> None:
    """One line on stderr per playbook run: how it ended and where its log is."""
    err.print(
        f"  {run.playbook}: exit {run.returncode}, {run.changed} change(s),"
        f" {run.seconds:.1f} s — log {run.log}"
    )
