"""Errors about the operator's input: each names the file, the line and the key path."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KeyPath = tuple[str | int, ...]


def format_path(path: KeyPath) -> str:
    """`('models', 'qwen', 'profiles', 1, 'name')` → `models.qwen.profiles[1].name`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = part
    return text


def near_miss(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` when one of `choices` is close to `word`, else ``."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


@dataclass(frozen=True)
class InputProblem:
    """One thing wrong with one key of one input file."""

    file: str
    line: int | None
    path: KeyPath
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        key = format_path(self.path)
        return f"{where}: {key}: {self.message}" if key else f"{where}: {self.message}"


class InputError(Exception):
    """Bad input: one or more problems, each printed on a line; exit code 2, nothing changed."""

    def __init__(self, problems: Sequence[InputProblem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda p: (p.file, p.line or 0, str(p.path))))
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, file: str, line: int | None, path: KeyPath, message: str) -> InputError:
        return cls([InputProblem(file, line, path, message)])
