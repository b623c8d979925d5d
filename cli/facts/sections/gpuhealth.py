"""The GPU health sections: memory repairs pending, and fields nvidia-smi cannot read.

Each its own section: retired pages asked with the GPU query in one nvidia-smi run and read
as if asked apart (cli/facts/probe.py `gpu_queries`), or apart when a driver that does not
know a field refused that run (`Field "x" is not a valid field to query.`, exit 2), so an old
driver loses only this, said in a note; remapped rows are another query, always apart.

- `retired-pages`: `nvidia-smi --query-gpu=index,retired_pages.pending`: "Yes" when a page
  waits to be retired at the next driver reload (NVML's nvmlDeviceGetRetiredPagesPendingStatus;
  Kepler to Volta: Ampere and newer remap rows instead and print [N/A]).
- `remapped-rows`: `nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.pending,
  remapped_rows.failure`: "Yes"/"No" per GPU (NVML's nvmlDeviceGetRemappedRows: a pending
  remapping needs a GPU reset; a failure means the row could not be remapped).

A value nvidia-smi cannot give (`[N/A]`, `[Not Supported]`) is unknown, not "No". An error
of the GPU's (`ERR!`, `[GPU requires reset]`, `[GPU is lost]`) is a fault, in any field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cli.facts.parse import (
    GPU_FAULTS,
    MAX_GPUS,
    NOT_REPORTED,
    FactsParseError,
    _count_rows,
    _fields,
    _lines,
    _quote,
    _required_int,
)

SECTION_RETIRED_PAGES: Final = "nvidia-smi --query-gpu=index,retired_pages.pending"
SECTION_REMAPPED_ROWS: Final = (
    "nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure"
)
# Each section's columns after the GPU's key, and the Gpu field (cli/facts/model.py) each sets.
RETIRED_PAGES_COLUMNS: Final = {"retired_pages.pending": "retired_pages_pending"}
REMAPPED_ROWS_COLUMNS: Final = {
    "remapped_rows.pending": "remapped_rows_pending",
    "remapped_rows.failure": "remapped_rows_failure",
}
_YES_NO: Final[dict[str, bool]] = {"Yes": True, "No": False}
_NO_DEVICES: Final = "No devices were found"


@dataclass(frozen=True)
class GpuFlags:
    """One GPU's row: each field's Yes/No (None: not reported), and its faults."""

    values: dict[str, bool | None]
    faults: tuple[str, ...]


def parse_retired_pages(text: str) -> dict[int, GpuFlags]:
    """Rows of the `retired-pages` section: GPU index → its flags."""
    rows = _flag_rows(text, SECTION_RETIRED_PAGES, tuple(RETIRED_PAGES_COLUMNS))
    return {
        _required_int(key, SECTION_RETIRED_PAGES, line, "index", MAX_GPUS - 1): flags
        for key, (line, flags) in rows.items()
    }


def parse_remapped_rows(text: str) -> dict[str, GpuFlags]:
    """Rows of the `remapped-rows` section: GPU UUID → its flags."""
    rows = _flag_rows(text, SECTION_REMAPPED_ROWS, tuple(REMAPPED_ROWS_COLUMNS))
    return {key: flags for key, (_line, flags) in rows.items()}


def _flag_rows(text: str, section: str, fields: tuple[str, ...]) -> dict[str, tuple[int, GpuFlags]]:
    _count_rows(text, section, "GPUs", MAX_GPUS, skip=_NO_DEVICES)
    rows: dict[str, tuple[int, GpuFlags]] = {}
    for line in _lines(text):
        if line.text == _NO_DEVICES:
            continue
        key, *answers = _fields(line, section, 1 + len(fields))
        if not key or key in NOT_REPORTED:
            raise FactsParseError(section, line.number, f"GPU {_quote(key)} is no GPU")
        if key in rows:
            raise FactsParseError(section, line.number, f"GPU {key} given twice")
        values: dict[str, bool | None] = {}
        faults: list[str] = []
        for field, answer in zip(fields, answers, strict=True):
            if answer in GPU_FAULTS:
                faults.append(f"{field}: {answer}")
                values[field] = None
            elif answer in NOT_REPORTED:
                values[field] = None
            elif answer in _YES_NO:
                values[field] = _YES_NO[answer]
            else:
                raise FactsParseError(
                    section, line.number, f"{field} {_quote(answer)} is not Yes or No"
                )
        rows[key] = (line.number, GpuFlags(values, tuple(faults)))
    return rows
