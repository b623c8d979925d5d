"""The model store section: the store's path, its filesystem, and the weights stored complete."""

from __future__ import annotations

import json
from typing import Final

from pydantic import ValidationError

from cli.facts.model import (
    ModelStore,
    StoredWeights,
    store_directory,
)
from cli.facts.parse import (
    FactsParseError,
    _count_rows,
    _first_error,
    _Line,
    _lines,
    _no_constant,
    _quote,
    _required_int,
)

# --------------------------------------------------------------------------- the model store

SECTION_MODEL_STORE: Final = "model store"
MAX_STORED: Final = 4096  # sources stored complete on one node
MAX_MARKER_CHARS: Final = 4096  # the probe reads at most this much of a marker
MAX_STORE_PATH: Final = 1024
MAX_STORE_BYTES: Final = 1 << 70  # a filesystem, or a source, of more than 1 ZiB is no real one
# Bad lines past this many are counted in one note, not given one each: a hostile node
# printing a million of them costs one line of notes, not a million.
MAX_STORE_NOTES: Final = 20
_BLOCK_SIZES: Final = 1 << 30  # statfs f_bsize is a power of two, far below a GiB


def parse_model_store(text: str) -> tuple[ModelStore, list[str]]:
    """The `model-store` section (cli/facts/probe.sh), its statfs having succeeded: the
    store and its filesystem, and a note for each line that is not believed.

    The `store` and `filesystem` lines are required: without them the section is refused
    whole (FactsParseError). A marker line that cannot be read is left out with a note: the
    source is then not counted as stored, which costs a download, never a wrong answer.
    """
    _count_rows(text, SECTION_MODEL_STORE, "lines", MAX_STORED + 2)
    store: tuple[str, bool, str] | None = None
    sizes: tuple[int, int] | None = None
    weights: dict[str, StoredWeights] = {}
    notes: list[str] = []

    def bad(line: _Line, problem: str) -> None:
        notes.append(f"{SECTION_MODEL_STORE} line {line.number}: {problem}")

    for line in _lines(text):
        kind, _, rest = line.text.partition("\t")
        fields = rest.split("\t")
        if kind == "store" and store is None:
            store = _store_line(line, fields)
        elif kind == "filesystem" and sizes is None:
            sizes = _filesystem_line(line, fields)
        elif kind == "complete":
            try:
                stored = _marker_line(line, fields)
            except FactsParseError as error:
                bad(line, error.message)
                continue
            if stored.source in weights:
                bad(line, f"{_quote(stored.source)} is stored twice")
                continue
            weights[stored.source] = stored
        else:
            bad(line, f"unexpected line {_quote(line.text)}")
    if store is None:
        raise FactsParseError(SECTION_MODEL_STORE, 0, "no 'store' line")
    if sizes is None:
        raise FactsParseError(SECTION_MODEL_STORE, 0, "no 'filesystem' line")
    if len(notes) > MAX_STORE_NOTES:
        notes[MAX_STORE_NOTES:] = [
            f"{SECTION_MODEL_STORE}: {len(notes) - MAX_STORE_NOTES} more lines not believed"
        ]
    path, present, measured = store
    total, free = sizes
    model = ModelStore(
        path=path,
        present=present,
        measured=measured,
        total_bytes=total,
        free_bytes=free,
        weights=tuple(weights.values()),
    )
    return model, notes


def _store_path(value: str, line: _Line) -> str:
    if not value.startswith("/") or len(value) > MAX_STORE_PATH or not value.isprintable():
        raise FactsParseError(
            SECTION_MODEL_STORE, line.number, f"{_quote(value)} is not an absolute path"
        )
    return value


def _store_line(line: _Line, fields: list[str]) -> tuple[str, bool, str]:
    """`store PATH present`, or `store PATH absent PARENT` (PARENT measured instead)."""
    if len(fields) == 2 and fields[1] == "present":
        path = _store_path(fields[0], line)
        return path, True, path
    if len(fields) == 3 and fields[1] == "absent":
        return _store_path(fields[0], line), False, _store_path(fields[2], line)
    raise FactsParseError(
        SECTION_MODEL_STORE,
        line.number,
        f"expected 'store PATH present' or 'store PATH absent PARENT', got {_quote(line.text)}",
    )


def _filesystem_line(line: _Line, fields: list[str]) -> tuple[int, int]:
    """`filesystem BLOCK_SIZE BLOCKS AVAILABLE` (stat -f's %S %b %a) → total and free bytes."""
    if len(fields) != 3:
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"expected 'filesystem BLOCK_SIZE BLOCKS AVAILABLE', got {_quote(line.text)}",
        )
    number = line.number
    block = _required_int(fields[0], SECTION_MODEL_STORE, number, "block size", _BLOCK_SIZES)
    blocks = _required_int(fields[1], SECTION_MODEL_STORE, number, "blocks")
    available = _required_int(fields[2], SECTION_MODEL_STORE, number, "available blocks")
    if available > blocks:
        raise FactsParseError(
            SECTION_MODEL_STORE, number, f"{available} blocks available of {blocks}"
        )
    if block * blocks > MAX_STORE_BYTES:
        raise FactsParseError(SECTION_MODEL_STORE, number, "a filesystem of more than 1 ZiB")
    return block * blocks, block * available


def _marker_line(line: _Line, fields: list[str]) -> StoredWeights:
    """`complete DIRECTORY MARKER`: a marker's JSON (a StoredWeights), which must name the
    source whose directory (store_directory) it is in."""
    if len(fields) != 2:
        raise FactsParseError(
            SECTION_MODEL_STORE, line.number, "expected 'complete DIRECTORY MARKER'"
        )
    directory, body = fields
    if len(body) >= MAX_MARKER_CHARS:
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"the marker in {_quote(directory)} is longer than {MAX_MARKER_CHARS:,} characters",
        )
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"the marker in {_quote(directory)} is not JSON: {error.msg}",
        ) from None
    except (ValueError, RecursionError) as error:
        raise FactsParseError(
            SECTION_MODEL_STORE, line.number, f"the marker in {_quote(directory)}: {error}"
        ) from None
    try:
        stored = StoredWeights.model_validate(data)
    except ValidationError as error:
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"the marker in {_quote(directory)}: {_first_error(error)}",
        ) from None
    if stored.bytes > MAX_STORE_BYTES:
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"the marker in {_quote(directory)} says {stored.bytes} bytes, more than 1 ZiB",
        )
    if directory != store_directory(stored.source):
        raise FactsParseError(
            SECTION_MODEL_STORE,
            line.number,
            f"the marker in {_quote(directory)} names {_quote(stored.source)}, whose"
            f" directory is {_quote(store_directory(stored.source))}",
        )
    return stored
