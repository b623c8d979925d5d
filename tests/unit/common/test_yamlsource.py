"""Hostile files cost a line and exit 2, in time and memory bounded by their size.

Each construction is of a kind that broke a loader (issue 16): an alias bomb of a few
hundred bytes, 990 levels of nesting, a binary file, a recursive alias, a file far bigger
than any real one. Each is fed to the inventory and facts loaders as they read a file, and
to the parser every loader uses; each must be refused with one problem naming the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from cli import yamlsource
from cli.catalog.load import load_catalog
from cli.errors import InputError
from cli.facts.store import load_facts_dir
from cli.inventory.load import load_inventory
from cli.yamlsource import MAX_SOURCE_BYTES, decode_source, parse_yaml


def alias_bomb(levels: int = 8) -> str:
    """`a` lists ten x; each next level lists the one before ten times: 10**levels values."""
    names = [chr(ord("a") + level) for level in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x, x]"]
    for previous, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    return "\n".join(lines) + "\n"


HOSTILE: dict[str, tuple[bytes, str]] = {
    "alias bomb": (
        alias_bomb().encode(),
        ":6: its aliases expand to more than 1,000,000 values: refused as an alias bomb",
    ),
    "deep nesting": (b"all: " + b"[" * 990 + b"]" * 990 + b"\n", ":1: nested more than 64 deep"),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe", ": not UTF-8 text (byte 9): a binary file?"),
    "NUL byte": (b"all:\n  hosts:\n    a\x00b:\n", ":3: holds a NUL byte: a binary file?"),
    "recursive alias": (
        b"all: &a\n  children: *a\n",
        ":1: an alias refers to a value that holds it",
    ),
}


def test_the_alias_bomb_is_a_few_hundred_bytes() -> None:
    assert len(alias_bomb()) < 500


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_parse_yaml_refuses_it_with_one_problem(kind: str) -> None:
    content, message = HOSTILE[kind]

    with pytest.raises(InputError) as raised:
        parse_yaml(decode_source(content, "f.yml"), "f.yml")

    assert [str(problem) for problem in raised.value.problems] == [f"f.yml{message}"]


def inventory(path: Path) -> object:
    return load_inventory(path)


def facts(path: Path) -> object:
    return load_facts_dir(path.parent)


LOADERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "inventory": ("hosts.yml", inventory),
    "facts": ("hgx-1.json", facts),
    "catalog": ("catalog.yaml", load_catalog),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_every_file_loader_refuses_it_naming_the_file(
    tmp_path: Path, kind: str, loader: str
) -> None:
    name, load = LOADERS[loader]
    content, message = HOSTILE[kind]
    path = tmp_path / name
    path.write_bytes(content)

    with pytest.raises(InputError) as raised:
        load(path)

    assert [str(problem) for problem in raised.value.problems] == [f"{path}{message}"]


def test_a_file_over_the_limit_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    with path.open("wb") as file:
        file.write(b"# " + b"x" * (MAX_SOURCE_BYTES + 100) + b"\n")

    with pytest.raises(InputError) as raised:
        load_inventory(path)

    assert [str(problem) for problem in raised.value.problems] == [
        f"{path}: {MAX_SOURCE_BYTES + 1} bytes: more than 16 MiB"
    ]


def test_a_wide_alias_bomb_is_counted_with_each_node_looked_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2,000 aliases of a 2,000-item list: 4,000,000 values, from 4,000 distinct nodes. Each
    # alias of a node already counted must cost nothing more: listing the list's children
    # again for every alias made a 1 MB bomb of this shape take 60 s
    # (scripts/bench/bench_hostile_node.py bomb; 1.3 s once each node is looked at once).
    width = 2000
    text = f"m: &a [{', '.join(['x'] * width)}]\nn: [{', '.join(['*a'] * width)}]\n"
    listed: list[int] = []
    children = yamlsource._children

    def counting(node: object) -> list[object]:
        found = children(node)  # type: ignore[arg-type]
        listed.append(len(found))
        return found  # type: ignore[return-value]

    monkeypatch.setattr(yamlsource, "_children", counting)
    with pytest.raises(InputError) as raised:
        parse_yaml(text, "f.yml")

    assert [str(p) for p in raised.value.problems] == [
        "f.yml:2: its aliases expand to more than 1,000,000 values: refused as an alias bomb"
    ]
    assert sum(listed) <= 4 * (2 * width + 4)  # each node's children listed a few times
