"""GPUs that look healthy but are not: memory repairs pending, and fields nvidia-smi answers
with an error. The real probe (cli/facts/probe.sh) runs against the test fleet's fake
nvidia-smi (tests/fakes/nvidia_smi.py), whose data the test fleet's spec makes; the GPU is
then unusable, with the reason in the node's notes and in why placement refuses it. A field
the GPU or its driver does not have ([N/A]) is unknown, not bad."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.facts.model import NodeFacts
from cli.facts.parse import FactsParseError
from cli.facts.probe import facts_from_probe
from cli.facts.sections.gpuhealth import parse_remapped_rows, parse_retired_pages
from cli.facts.store import save_facts
from tests import testfleet
from tests.builders import NOW
from tests.ctl import ctl
from tests.fakes import nvidia_smi
from tests.unit.facts.test_nvidia_smi_exits import ROW_0, facts
from tests.unit.facts.test_probe_output import section

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "cli" / "facts" / "probe.sh"
FAKE = ROOT / "tests" / "fakes" / "nvidia_smi.py"
UUID_0 = "GPU-aaaaaaaa-1111-2222-3333-444444444444"


def probed(spec: testfleet.NodeSpec, tmp_path: Path, refused: str | None = None) -> NodeFacts:
    """The real probe's facts on a node whose nvidia-smi is the test fleet's fake; with
    `refused`, one whose driver refuses a --query-gpu naming that text as nvidia-smi refuses
    a field it does not know."""
    data = tmp_path / "gpus.json"
    tmp_path.mkdir(exist_ok=True)
    data.write_text(json.dumps(testfleet.gpu_data("node-1", spec)))
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    refuse = ""
    if refused is not None:
        refuse = (
            f'case "$1" in --query-gpu=*{refused}*)\n'
            f"  printf 'Field \"%s\" is not a valid field to query.\\n\\n' {refused}; exit 2;;\n"
            "esac\n"
        )
    smi.write_text(f'#!/bin/sh\n{refuse}exec {sys.executable} -IS {FAKE} "$@"\n')
    smi.chmod(0o755)
    environment = {
        **os.environ,
        "PATH": f"{tools}:{os.environ['PATH']}",
        nvidia_smi.DATA_ENV: str(data),
    }
    done = subprocess.run(
        ["sh", str(PROBE)], capture_output=True, text=True, timeout=60, check=False,
        env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return facts_from_probe(done.stdout, NOW)


def gpu_spec(model: str, **health: tuple[int, ...]) -> testfleet.NodeSpec:
    spec = testfleet.default_spec(4)
    assert spec.gpus is not None
    gpus = testfleet.GpuSpec(model=model, count=3, memory_mib=81559, **health)  # type: ignore[arg-type]
    return testfleet.NodeSpec(**{**spec.__dict__, "gpus": gpus})


def test_a_gpu_with_rows_pending_remapping_or_needing_a_reset_is_unusable_and_said(
    tmp_path: Path,
) -> None:
    found = probed(
        gpu_spec("NVIDIA H100 80GB HBM3", repair_pending=(1,), requires_reset=(2,)), tmp_path
    )

    assert found.gpus is not None
    gpu_0, gpu_1, gpu_2 = found.gpus
    assert (gpu_0.remapped_rows_pending, gpu_0.remapped_rows_failure) == (False, False)
    assert gpu_0.retired_pages_pending is None  # an H100 retires no pages: [N/A], unknown
    assert gpu_0.hardware_problem() is None
    assert gpu_1.remapped_rows_pending is True
    assert gpu_2.faults == (
        "memory.used: [GPU requires reset]",
        "ecc.errors.uncorrected.volatile.total: [GPU requires reset]",
    )
    assert gpu_2.memory_used_mib is None
    assert [note for note in found.notes if note.startswith("GPU ")] == [
        "GPU 1: memory rows pending remapping (reset the GPU or reboot the node)",
        "GPU 2: nvidia-smi reports memory.used: [GPU requires reset],"
        " ecc.errors.uncorrected.volatile.total: [GPU requires reset]",
    ]


def test_a_gpu_from_before_ampere_with_pages_pending_retirement_is_unusable(
    tmp_path: Path,
) -> None:
    found = probed(gpu_spec("Tesla V100-SXM2-32GB", repair_pending=(0,)), tmp_path)

    assert found.gpus is not None
    assert [gpu.retired_pages_pending for gpu in found.gpus] == [True, False, False]
    assert [gpu.remapped_rows_pending for gpu in found.gpus] == [None, None, None]
    assert [gpu.hardware_problem() for gpu in found.gpus] == [
        "memory pages pending retirement (reset the GPU or reboot the node)",
        None,
        None,
    ]


def test_placement_says_why_it_refuses_those_gpus(tmp_path: Path) -> None:
    found = probed(
        gpu_spec("NVIDIA H100 80GB HBM3", repair_pending=(1,), requires_reset=(2,)), tmp_path
    )
    snapshot = tmp_path / "facts"
    save_facts(snapshot, "hgx-1", found)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu:\n  hosts:\n    hgx-1:\n")
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "models:\n  m:\n    source: hf://org/m\n    profiles:\n"
        "      - {name: h100x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}\n"
    )

    placed = ctl(
        "place", "--all", "--dry-run", "--catalog", str(catalog), "--inventory",
        str(inventory), "--facts", str(snapshot),
    )  # fmt: skip

    assert placed.returncode == 1, placed.stderr
    out = " ".join(placed.stdout.split())
    assert "GPU 1: memory rows pending remapping" in out
    assert "GPU 2: nvidia-smi reports memory.used: [GPU requires reset]" in out


def test_err_in_any_field_the_probe_reads_is_a_fault_and_n_a_is_unknown() -> None:
    row = ROW_0.replace(", 4, 0", ", ERR!, [N/A]")
    found = facts(
        section("query-gpu", row + "\n"),
        mig=section("mig", "0, ERR!\n"),
        **{
            "retired-pages": section("retired-pages", "0, [N/A]\n"),
            "remapped-rows": section("remapped-rows", f"{UUID_0}, [Not Supported], ERR!\n"),
        },
    )

    assert found.gpus is not None
    (gpu,) = found.gpus
    assert gpu.faults == (
        "memory.used: ERR!",
        "mig.mode.current: ERR!",
        "remapped_rows.failure: ERR!",
    )
    assert (gpu.ecc_uncorrected, gpu.retired_pages_pending, gpu.remapped_rows_pending) == (
        None,
        None,
        None,
    )


def test_a_driver_that_does_not_know_the_fields_loses_only_them_with_a_note() -> None:
    refused = 'Field "retired_pages.pending" is not a valid field to query.\n'
    found = facts(
        section("query-gpu", ROW_0 + "\n"),
        **{
            "retired-pages": section("retired-pages", refused, 2),
            "remapped-rows": section("remapped-rows", "Invalid combination of input.\n", 2),
        },
    )

    assert found.gpus is not None and found.gpus[0].hardware_problem() is None
    assert "nvidia-smi did not report retired pages (exit 2)" in found.notes
    assert "nvidia-smi did not report remapped rows (exit 2)" in found.notes


def test_a_failed_remapping_is_unusable_for_good() -> None:
    found = facts(
        section("query-gpu", ROW_0 + "\n"),
        **{"remapped-rows": section("remapped-rows", f"{UUID_0}, No, Yes\n")},
    )

    assert found.gpus is not None
    assert found.gpus[0].hardware_problem() == "a memory row remapping failed (replace the GPU)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0, Maybe\n", "line 1: retired_pages.pending 'Maybe' is not Yes or No"),
        ("0, No\n0, Yes\n", "line 2: GPU 0 given twice"),
        ("0, No, No\n", "line 1: expected 2 fields, got 3"),
    ],
)
def test_a_row_nvidia_smi_would_not_print_is_said_with_its_line(text: str, problem: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_retired_pages(text)

    assert str(raised.value).endswith(problem)


def test_remapped_rows_are_read_by_uuid() -> None:
    rows = parse_remapped_rows(f"{UUID_0}, Yes, No\nNo devices were found\n")

    assert rows[UUID_0].values == {"remapped_rows.pending": True, "remapped_rows.failure": False}


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/facts/sections/gpuhealth.py: the
# section each refusal names, the bounds on GPUs and indexes, and where the lines to skip
# may stand.

RETIRED = "nvidia-smi --query-gpu=index,retired_pages.pending"
REMAPPED = "nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure"


def retired_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_retired_pages(text)
    return str(raised.value)


def remapped_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_remapped_rows(text)
    return str(raised.value)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("0, Maybe\n", "line 1: retired_pages.pending 'Maybe' is not Yes or No"),
        ("0, No\n0, Yes\n", "line 2: GPU 0 given twice"),
        ("0, No, No\n", "line 1: expected 2 fields, got 3"),
        ("GPU-0, No\n", "line 1: index 'GPU-0' is not a whole number"),
        ("1024, No\n", "line 1: index '1024' is out of range (at most 1,023)"),
    ],
    ids=["not-yes-or-no", "twice", "three-fields", "uuid-for-index", "index-1024"],
)
def test_a_retired_pages_row_refused_names_the_section_and_line(text: str, error: str) -> None:
    assert retired_error(text) == f"{RETIRED} {error}"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"{UUID_0}, Yes, Maybe\n", "line 1: remapped_rows.failure 'Maybe' is not Yes or No"),
        ("[N/A], No, No\n", "line 1: GPU '[N/A]' is no GPU"),
        (f"{UUID_0}, No, No\n, No, No\n", "line 2: GPU '' is no GPU"),
    ],
    ids=["not-yes-or-no", "n-a-for-uuid", "empty-uuid"],
)
def test_a_remapped_rows_row_refused_names_the_section_and_line(text: str, error: str) -> None:
    assert remapped_error(text) == f"{REMAPPED} {error}"


def test_the_highest_gpu_index_is_read() -> None:
    assert parse_retired_pages("1023, Yes\n")[1023].values == {"retired_pages.pending": True}


def test_more_rows_than_gpus_a_node_may_have_are_refused_before_any_is_read() -> None:
    rows = "".join(f"{i}, No\n" for i in range(1025))

    assert retired_error(rows) == f"{RETIRED}: reported 1025 GPUs, more than 1,024"


def test_no_devices_found_is_not_counted_nor_stops_the_rows_after_it() -> None:
    rows = "".join(f"{i}, No\n" for i in range(1, 1024))

    found = parse_retired_pages(f"No devices were found\n0, Yes\n{rows}")

    assert len(found) == 1024
    assert found[0].values == {"retired_pages.pending": True}


def test_a_field_in_error_is_a_fault_and_its_value_unknown() -> None:
    flags = parse_retired_pages("0, [GPU requires reset]\n")[0]

    assert flags.values == {"retired_pages.pending": None}
    assert flags.faults == ("retired_pages.pending: [GPU requires reset]",)


ONE_RUN = "index,uuid,name,pci.bus_id,memory.total,memory.used,ecc.errors.uncorrected.volatile.total,mig.mode.current,retired_pages.pending"  # noqa: E501
GPU_NODE_SPECS = [
    *(spec for i in range(1, 8) if (spec := testfleet.default_spec(i)).gpus is not None),
    gpu_spec("NVIDIA H100 80GB HBM3", repair_pending=(1,), requires_reset=(2,)),
    gpu_spec("Tesla V100-SXM2-32GB", repair_pending=(0,)),
    gpu_spec("NVIDIA A100-SXM4-80GB", mig_enabled=(1,), requires_reset=(2,)),
]


@pytest.mark.parametrize("spec", GPU_NODE_SPECS, ids=lambda spec: spec.gpus.model)
def test_one_nvidia_smi_run_reads_as_the_three_queries_it_stands_for(
    spec: testfleet.NodeSpec, tmp_path: Path
) -> None:
    """The GPUs, MIG modes and pages pending retirement asked in one run give the facts the
    three runs apart give (those of a driver that refuses the one run: the probe's fallback,
    and what the probe asked before)."""
    together = probed(spec, tmp_path / "one")
    apart = probed(spec, tmp_path / "three", refused=ONE_RUN)
    assert together.gpus  # some GPUs, read
    # What the GPU queries say; the rest is this machine's, which other work moves.
    gpu_facts = ("gpus", "gpus_lost", "gpu_processes", "nvlink_domains", "notes")
    assert [getattr(together, key) for key in gpu_facts] == [
        getattr(apart, key) for key in gpu_facts
    ]


def test_a_driver_older_than_mig_loses_only_the_mig_modes(tmp_path: Path) -> None:
    spec = gpu_spec("Tesla V100-SXM2-32GB", repair_pending=(0,))
    found = probed(spec, tmp_path, refused="mig.mode.current")
    assert found.gpus is not None and len(found.gpus) == 3
    assert [gpu.mig_enabled for gpu in found.gpus] == [None, None, None]  # unknown
    assert [gpu.retired_pages_pending for gpu in found.gpus] == [True, False, False]
    assert "nvidia-smi did not report MIG mode (exit 2)" in found.notes
