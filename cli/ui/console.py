"""Where output goes: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from rich.console import Console, RenderableType

from cli.errors import InputError

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_BAD_INPUT = 2


def _piped_width() -> int | None:
    """None (the terminal's) on a terminal or when COLUMNS says; piped, 100 columns, so
    piped output reads as the docs show it."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return 100


out = Console(highlight=False, emoji=False, soft_wrap=False, width=_piped_width())
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)


def print_table(table: RenderableType) -> None:
    """A table without the trailing blanks rich pads its last column with."""
    with out.capture() as captured:
        out.print(table)
    for line in captured.get().splitlines():
        sys.stdout.write(line.rstrip() + "\n")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True)
    raise SystemExit(code)


@contextmanager
def input_errors() -> Iterator[None]:
    """Bad input: every problem on its own line on stderr, exit code 2."""
    try:
        yield
    except InputError as error:
        for problem in error.problems:
            err.print(f"[bold red]error:[/] {rich_escape(str(problem))}", markup=True)
        raise SystemExit(EXIT_BAD_INPUT) from None


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """Lines of at most `width` columns where words allow, continued under `indent`."""
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def print_lines(lines: list[str]) -> None:
    """Plain lines as they are: already wrapped, never cropped, no markup read."""
    for line in lines:
        out.print(rich_escape(line), overflow="ignore", crop=False)


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 model`, `2 models`, `0 aliases`: the count and the word that goes with it."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def rich_escape(text: str) -> str:
    return text.replace("[", "\\[")
