"""scripts/mutation_harmless.toml names survivors that still exist in the code.

An entry whose function was renamed or whose line was rewritten would explain nothing:
scripts/mutation reports it as stale only after a full run (tens of minutes). This holds
each entry to the source at once: the file is mutated by scripts/mutation, the function is
in it, and the original line is in that function.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def mutation_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


MUTATION = mutation_script()
ENTRIES = MUTATION.load_harmless(ROOT / MUTATION.HARMLESS)
MUTATED = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"][
    "only_mutate"
]


def test_the_list_has_entries_each_with_a_reason() -> None:
    assert ENTRIES
    assert all(len(entry.why) >= 20 for entry in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.file}:{e.function}")
def test_each_entry_names_a_line_of_a_mutated_function(entry: Any) -> None:
    path = ROOT / entry.file
    assert any(path.match(pattern) for pattern in MUTATED), f"{path} is not mutated"
    source = path.read_text(encoding="utf-8")
    cls, _, name = entry.function.rpartition(".")
    span = MUTATION.function_span(ast.parse(source), name, cls or None)
    assert span is not None, f"no function {entry.function} in {entry.file}"
    body = [line.strip() for line in source.splitlines()[span[0] - 1 : span[1]]]
    first = entry.line.splitlines()[0]
    assert first in body, f"{entry.function} has no line {first!r}"
