"""The facts cache reads back what it wrote, and ignores any file it cannot trust.

It is ctl's own file, but it sits in a directory anyone with the account can write, and a
crash or a full disk can leave it short: a bad file costs a warning, never the command.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.facts import cache as cache_module
from cli.facts.cache import FactsCache
from cli.facts.store import facts_json, save_facts
from tests.builders import facts, hgx


def cache_with(tmp_path: Path, name: str, content: bytes) -> FactsCache:
    cache = FactsCache(tmp_path / "hosts.yml", tmp_path / "state")
    cache.save({"hgx-1": facts(hgx("hgx-1"))})
    (cache.directory / f"{name}.json").write_bytes(content)
    return cache


def test_what_the_cache_saves_it_loads_unchanged(tmp_path: Path) -> None:
    cache = FactsCache(tmp_path / "hosts.yml", tmp_path / "state")
    saved = {"hgx-1": facts(hgx("hgx-1")), "hgx-2": facts(hgx("hgx-2"))}
    cache.save(saved)

    loaded, warnings = cache.load()

    assert loaded == saved
    assert warnings == []
    assert (cache.directory / "hgx-1.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"name": "hgx-2", "gpus": [', "not facts: Invalid JSON: EOF while parsing a list"),
        (b"\xff\xfe\x00binary", "not facts: Invalid JSON: expected value"),
        (b"[" * 5000 + b"]" * 5000, "not facts: Invalid JSON: recursion limit exceeded"),
        (b'{"name": "hgx-2"}', "not facts: gathered_at: Field required"),
        (b"[]", "not facts: Input should be an object"),
    ],
    ids=["truncated", "binary", "nested", "incomplete", "not an object"],
)
def test_a_file_that_is_not_facts_is_ignored_with_a_warning(
    tmp_path: Path, content: bytes, why: str
) -> None:
    cache = cache_with(tmp_path, "hgx-2", content)

    loaded, warnings = cache.load()

    assert sorted(loaded) == ["hgx-1"]
    assert len(warnings) == 1
    path = cache.directory / "hgx-2.json"
    assert warnings[0].startswith(f"ignoring unreadable cache file {path}: {why}")


def test_a_value_of_the_wrong_type_names_its_key(tmp_path: Path) -> None:
    written = facts_json(facts(hgx("hgx-2")))
    assert '"total_mib": 524288' in written
    wrong = written.replace('"total_mib": 524288', '"total_mib": "lots"')
    cache = cache_with(tmp_path, "hgx-2", wrong.encode())

    loaded, warnings = cache.load()

    assert sorted(loaded) == ["hgx-1"]
    assert warnings[0].endswith(
        "hgx-2.json: not facts: memory.total_mib: Input should be a valid integer,"
        " unable to parse string as an integer"
    )


def test_a_file_too_big_for_a_node_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "MAX_CACHE_FILE_BYTES", 1000)
    cache = cache_with(tmp_path, "hgx-2", b" " * 1001)

    loaded, warnings = cache.load()

    assert sorted(loaded) == []  # hgx-1's own file is over 1000 bytes too
    path = cache.directory / "hgx-2.json"
    assert f"ignoring unreadable cache file {path}: 1001 bytes, more than the 1000" in warnings[1]


def test_the_cache_is_written_whole_but_not_synced_and_a_snapshot_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    cache = FactsCache(tmp_path / "hosts.yml", tmp_path / "state")
    # 2,000 nodes' files synced one by one were most of a controller pass's writes
    # (scripts/bench/bench_scale.py); the cache is learned again by the next gather.
    cache.save({f"hgx-{i}": facts(hgx(f"hgx-{i}")) for i in range(1, 4)})
    assert synced == []
    assert set(cache.load()[0]) == {"hgx-1", "hgx-2", "hgx-3"}
    assert not list(cache.directory.glob(".*.tmp"))  # each put in place whole, by rename
    save_facts(tmp_path / "snapshot", "hgx-1", facts(hgx("hgx-1")))  # ctl facts --save
    assert len(synced) == 2  # the file, then its directory's new name
