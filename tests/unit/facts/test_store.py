"""The model store as the probe reports it: its filesystem, the weights stored complete,
and every line a node should not have printed a note, never a traceback (docs/facts.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cli.facts.gather import Target, probe_command
from cli.facts.model import NodeFacts, StoredWeights, store_directory
from cli.facts.parse import FactsParseError
from cli.facts.probe import facts_from_probe, split_sections
from cli.facts.sections.store import MAX_STORE_NOTES, parse_model_store
from cli.inventory.schema import HostVars
from tests.builders import NOW
from tests.ctl import ROOT
from tests.unit.facts.test_probe_output import probe_output, section

PROBE = ROOT / "cli" / "facts" / "probe.sh"
SOURCE = "hf://Qwen/Qwen2.5-Coder-14B-Instruct"
STORE = "/var/lib/modelfleet/models"


def marker(source: str, size: int, directory: str | None = None) -> str:
    body = json.dumps({"source": source, "bytes": size})
    return f"complete\t{directory or store_directory(source)}\t{body}\n"


STATFS = "filesystem\t4096\t244140625\t19531250\n"  # 1,000 GB, 80 GB free


def test_the_directory_of_a_source_is_readable_and_unique_by_digest() -> None:
    assert store_directory(SOURCE).startswith("hf-Qwen-Qwen2.5-Coder-14B-Instruct-")
    assert store_directory("hf://a/b-c") != store_directory("hf://a-b/c")
    assert store_directory(SOURCE) == store_directory(SOURCE)  # the staging step relies on it
    assert "/" not in store_directory("file:///srv/models/q.gguf")


def test_a_store_with_weights_becomes_sizes_and_sources() -> None:
    text = f"store\t{STORE}\tpresent\n{marker(SOURCE, 29_500_000_000)}{STATFS}"
    store, notes = parse_model_store(text)
    assert notes == []
    assert store.path == STORE and store.present and store.measured == STORE
    assert store.total_bytes == 1_000_000_000_000
    assert store.free_bytes == 80_000_000_000
    assert store.weights == (StoredWeights(source=SOURCE, bytes=29_500_000_000),)
    assert store.holds(SOURCE) and not store.holds("hf://other/model")


def test_a_store_not_made_yet_is_measured_on_its_nearest_parent() -> None:
    store, notes = parse_model_store(f"store\t{STORE}\tabsent\t/var/lib\n{STATFS}")
    assert (store.present, store.measured, store.weights, notes) == (False, "/var/lib", (), [])


@pytest.mark.parametrize(
    ("line", "note"),
    [
        (
            "complete\tjunk-dir\tnot json",
            "model store line 2: the marker in 'junk-dir' is not JSON: Expecting value",
        ),
        (
            marker(SOURCE, 5, directory="elsewhere").strip(),
            f"model store line 2: the marker in 'elsewhere' names {SOURCE!r}, whose directory"
            f" is {store_directory(SOURCE)!r}",
        ),
        (
            f"complete\t{store_directory(SOURCE)}\t" + json.dumps({"source": SOURCE}),
            f"model store line 2: the marker in {store_directory(SOURCE)!r}: bytes: Field required",
        ),
        (
            f"complete\t{store_directory(SOURCE)}\t" + json.dumps({"source": SOURCE, "bytes": -1}),
            f"model store line 2: the marker in {store_directory(SOURCE)!r}: bytes: Input should"
            " be greater than or equal to 0",
        ),
        (
            f"complete\t{store_directory(SOURCE)}\t" + '{"source": "x", "bytes": ' + "9" * 5000,
            f"model store line 2: the marker in {store_directory(SOURCE)!r} is longer than 4,096"
            " characters",
        ),
        (
            f"complete\t{store_directory(SOURCE)}\t"
            + json.dumps({"source": SOURCE, "bytes": 10**30}),
            f"model store line 2: the marker in {store_directory(SOURCE)!r} says {10**30} bytes,"
            " more than 1 ZiB",
        ),
        ("rm -rf /", "model store line 2: unexpected line 'rm -rf /'"),
    ],
)
def test_a_marker_that_cannot_be_believed_is_a_note_and_not_a_stored_source(
    line: str, note: str
) -> None:
    store, notes = parse_model_store(f"store\t{STORE}\tpresent\n{line}\n{STATFS}")
    assert store.weights == ()
    assert notes == [note]


def test_a_flood_of_bad_lines_costs_a_bounded_number_of_notes() -> None:
    junk = "".join(f"complete\td{i}\t{{}}\n" for i in range(500))
    store, notes = parse_model_store(f"store\t{STORE}\tpresent\n{junk}{STATFS}")
    assert store.weights == ()
    assert len(notes) == MAX_STORE_NOTES + 1
    assert notes[-1] == "model store: 480 more lines not believed"


def test_a_list_longer_than_its_cap_is_refused_whole() -> None:
    junk = "complete\td\t{}\n" * 5000
    with pytest.raises(FactsParseError, match="model store: reported 5002 lines, more than 4,098"):
        parse_model_store(f"store\t{STORE}\tpresent\n{junk}{STATFS}")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (STATFS, "model store: no 'store' line"),
        (f"store\t{STORE}\tpresent\n", "model store: no 'filesystem' line"),
        (
            f"store\trelative/path\tpresent\n{STATFS}",
            "model store line 1: 'relative/path' is not an absolute path",
        ),
        (
            f"store\t{STORE}\tpresent\nfilesystem\t4096\t10\t11\n",
            "model store line 2: 11 blocks available of 10",
        ),
        (
            f"store\t{STORE}\tpresent\nfilesystem\t4096\t{'9' * 40}\t1\n",
            f"model store line 2: blocks '{'9' * 40}' is out of range (at most"
            " 999,999,999,999,999,999)",
        ),
    ],
)
def test_a_store_section_without_its_figures_is_refused(text: str, error: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_model_store(text)
    assert str(raised.value) == error


def test_the_store_is_part_of_the_nodes_facts_and_a_failed_statfs_is_a_note() -> None:
    good = probe_output(
        **{"model-store": section("model-store", f"store\t{STORE}\tpresent\n{STATFS}")}
    )
    facts = facts_from_probe(good, NOW)
    assert facts.model_store is not None and facts.model_store.free_bytes == 80_000_000_000
    failed = probe_output(
        **{
            "model-store": section(
                "model-store",
                f"store\t{STORE}\tpresent\nstat: cannot read file system information for"
                f" '{STORE}': Permission denied\n",
                1,
            )
        }
    )
    facts = facts_from_probe(failed, NOW)
    assert facts.model_store is None
    assert facts.notes == (
        f"model store: stat -f failed (exit 1): stat: cannot read file system information"
        f" for '{STORE}': Permission denied",
    )
    # A probe from before the store says nothing of it: unknown, without a note.
    assert facts_from_probe(probe_output(), NOW).model_store is None


def test_facts_with_a_store_round_trip_through_json() -> None:
    text = probe_output(
        **{
            "model-store": section(
                "model-store", f"store\t{STORE}\tpresent\n{marker(SOURCE, 7)}{STATFS}"
            )
        }
    )
    facts = facts_from_probe(text, NOW)
    assert NodeFacts.model_validate_json(facts.model_dump_json()) == facts


def run_probe(tmp_path: Path, store: Path) -> str:
    shards = tmp_path / "no-shards"  # never this machine's own records
    done = subprocess.run(
        ["sh", "-s", "--", str(store)],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        env={**os.environ, "MODELFLEET_SHARD_DIR": str(shards), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    return done.stdout


def test_the_real_probe_reports_a_store_and_its_complete_weights(tmp_path: Path) -> None:
    store = tmp_path / "models"
    done = store / store_directory(SOURCE)
    done.mkdir(parents=True)
    (done / "model.safetensors").write_bytes(b"x" * 100)
    (done / ".modelfleet-complete").write_text(
        json.dumps({"source": SOURCE, "bytes": 100, "completed": "2026-12-04T10:00:00+00:00"})
        + "\n"
    )
    partial = store / store_directory("hf://org/downloading")
    partial.mkdir()  # no marker: a download not finished is not stored
    (partial / "part.safetensors").write_bytes(b"y")
    output = run_probe(tmp_path, store)
    facts = facts_from_probe(output, NOW)
    assert facts.model_store is not None, facts.notes
    assert facts.model_store.path == str(store) and facts.model_store.present
    assert [w.source for w in facts.model_store.weights] == [SOURCE]
    stat = os.statvfs(tmp_path)
    assert facts.model_store.total_bytes == stat.f_frsize * stat.f_blocks
    # Free space moves as other work writes; the same filesystem, within a GB.
    assert abs(facts.model_store.free_bytes - stat.f_frsize * stat.f_bavail) < 10**9
    assert not [n for n in facts.notes if n.startswith("model store")]


def test_the_real_probe_measures_the_parent_of_a_store_not_made_yet(tmp_path: Path) -> None:
    output = run_probe(tmp_path, tmp_path / "not" / "yet" / "models")
    store = split_sections(output)["model-store"]
    assert store.status == 0
    facts = facts_from_probe(output, NOW)
    assert facts.model_store is not None
    assert (facts.model_store.present, facts.model_store.measured) == (False, str(tmp_path))


def test_the_inventorys_store_reaches_the_probe_as_its_argument() -> None:
    assert probe_command(Target("n", "10.0.0.1")) == "sh -s"
    assert probe_command(Target("n", "10.0.0.1", model_store="/data/models")) == (
        "sh -s -- /data/models"
    )


@pytest.mark.parametrize("path", ["relative/models", "/data/my models", "/data/$(reboot)", "/a;b"])
def test_a_store_path_the_shell_would_read_otherwise_is_refused_at_load(path: str) -> None:
    with pytest.raises(ValueError, match="modelfleet_model_store"):
        HostVars.model_validate({"modelfleet_model_store": path})


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/facts/sections/store.py: the bounds
# the examples above stepped around, and the wording of each refusal.

ZIB = 1 << 70


def store_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_model_store(text)
    return str(raised.value)


def marker_notes(line: str) -> list[str]:
    store, notes = parse_model_store(f"store\t{STORE}\tpresent\n{line}\n{STATFS}")
    assert store.weights == ()
    return notes


@pytest.mark.parametrize(
    ("filesystem", "error"),
    [
        (
            "filesystem\t4096\t10",
            r"expected 'filesystem BLOCK_SIZE BLOCKS AVAILABLE', got 'filesystem\t4096\t10'",
        ),
        ("filesystem\tx\t10\t1", "block size 'x' is not a whole number"),
        (
            f"filesystem\t{1 << 31}\t10\t1",
            f"block size '{1 << 31}' is out of range (at most 1,073,741,824)",
        ),
        ("filesystem\t4096\t10\t-1", "available blocks '-1' is not a whole number"),
        (f"filesystem\t{1 << 30}\t{(1 << 40) + 1}\t0", "a filesystem of more than 1 ZiB"),
    ],
    ids=["three-fields", "block-size-word", "block-size-2gib", "available-negative", "over-1zib"],
)
def test_a_filesystem_line_no_statfs_prints_is_refused_naming_its_line(
    filesystem: str, error: str
) -> None:
    text = f"store\t{STORE}\tpresent\n{filesystem}\n"
    assert store_error(text) == f"model store line 2: {error}"


def test_a_full_filesystem_of_exactly_1_zib_with_all_of_it_free_is_believed() -> None:
    store, notes = parse_model_store(
        f"store\t{STORE}\tpresent\nfilesystem\t{1 << 30}\t{1 << 40}\t{1 << 40}\n"
    )
    assert (store.total_bytes, store.free_bytes, notes) == (ZIB, ZIB, [])


def test_a_complete_line_without_its_marker_is_a_note() -> None:
    notes = marker_notes(f"complete\t{store_directory(SOURCE)}")
    assert notes == ["model store line 2: expected 'complete DIRECTORY MARKER'"]


def test_a_marker_of_4095_characters_is_read_and_one_the_probe_may_have_cut_is_not() -> None:
    def line(length: int) -> str:
        body = json.dumps({"source": SOURCE, "bytes": 5})
        return f"complete\t{store_directory(SOURCE)}\t{body[:-1].ljust(length - 1)}}}"

    store, notes = parse_model_store(f"store\t{STORE}\tpresent\n{line(4095)}\n{STATFS}")
    assert (store.weights, notes) == ((StoredWeights(source=SOURCE, bytes=5),), [])

    assert marker_notes(line(4096)) == [
        f"model store line 2: the marker in {store_directory(SOURCE)!r} is longer than 4,096"
        " characters"
    ]


def test_a_marker_saying_nan_bytes_is_a_note_naming_the_constant() -> None:
    line = f"complete\t{store_directory(SOURCE)}\t" + json.dumps(
        {"source": SOURCE, "bytes": float("nan")}
    )
    assert marker_notes(line) == [
        f"model store line 2: the marker in {store_directory(SOURCE)!r}: NaN is not a number"
        " a record may hold"
    ]


def test_a_marker_of_exactly_1_zib_is_believed() -> None:
    store, notes = parse_model_store(f"store\t{STORE}\tpresent\n{marker(SOURCE, ZIB)}{STATFS}")
    assert (store.weights, notes) == ((StoredWeights(source=SOURCE, bytes=ZIB),), [])


def test_a_source_marked_twice_is_a_note_and_the_markers_after_it_still_count() -> None:
    other = "hf://Qwen/Qwen2.5-7B-Instruct"
    text = (
        f"store\t{STORE}\tpresent\n{marker(SOURCE, 5)}{marker(SOURCE, 6)}{marker(other, 7)}{STATFS}"
    )
    store, notes = parse_model_store(text)
    assert store.weights == (
        StoredWeights(source=SOURCE, bytes=5),
        StoredWeights(source=other, bytes=7),
    )
    assert notes == [f"model store line 3: {SOURCE!r} is stored twice"]


def test_twenty_bad_lines_are_twenty_notes_with_no_count() -> None:
    junk = "".join(f"junk {i}\n" for i in range(MAX_STORE_NOTES))
    _, notes = parse_model_store(f"store\t{STORE}\tpresent\n{junk}{STATFS}")
    assert notes == [f"model store line {i + 2}: unexpected line 'junk {i}'" for i in range(20)]


@pytest.mark.parametrize(
    ("store", "error"),
    [
        (f"store\t/{'m' * 1023}\tpresent", None),
        (f"store\t/{'m' * 1024}\tpresent", f"'/{'m' * 56}...' is not an absolute path"),
        ("store\t/srv/mo\x1bdels\tpresent", r"'/srv/mo\x1bdels' is not an absolute path"),
        ("store\tmodels\tabsent\t/var/lib", "'models' is not an absolute path"),
        (f"store\t{STORE}\tabsent\tvar/lib", "'var/lib' is not an absolute path"),
    ],
    ids=["1024-characters", "1025-characters", "escape", "relative-store", "relative-parent"],
)
def test_a_store_path_is_absolute_printable_and_at_most_1024_characters(
    store: str, error: str | None
) -> None:
    text = f"{store}\n{STATFS}"
    if error is None:
        assert parse_model_store(text)[0].path == store.split("\t")[1]
    else:
        assert store_error(text) == f"model store line 1: {error}"
