"""What nvidia-smi prints besides its rows, and its exit codes, read as nvidia-smi(1) says.

Each message is one published from a real machine (samples/SOURCES.md); the probe keeps
nvidia-smi's stderr apart from its rows (probe.sh's `smi`), and a message on either stream
is a note, never a CSV row that hides every GPU of the node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from cli.facts.model import NodeFacts
from cli.facts.parse import FactsParseError, parse_mig_modes
from cli.facts.probe import facts_from_probe
from tests.builders import NOW
from tests.ctl import ctl
from tests.unit.facts.test_probe_output import probe_output, section

SAMPLES = Path(__file__).parents[1] / "samples"
PROBE = Path(__file__).parents[3] / "cli" / "facts" / "probe.sh"
ROW_0 = (
    "0, GPU-aaaaaaaa-1111-2222-3333-444444444444, NVIDIA H100 80GB HBM3, 00000000:18:00.0,"
    " 81559, 4, 0"
)
ROW_2 = (
    "2, GPU-cccccccc-1111-2222-3333-444444444444, NVIDIA H100 80GB HBM3, 00000000:3A:00.0,"
    " 81559, 4, 0"
)
ONE_DEVICE = section("pci-nvidia", "0000:18:00.0 0x030200\n")
NO_DEVICE = section("pci-nvidia", "")


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def stderr(text: str) -> str:
    return "".join(f"@@stderr {line}\n" for line in text.splitlines())


def facts(query_gpu: str, pci: str = ONE_DEVICE, **others: str) -> NodeFacts:
    gpu_free = {"compute-apps": "", "topology": ""} if "topology" not in others else {}
    return facts_from_probe(
        probe_output(**{"query-gpu": query_gpu, "pci-nvidia": pci, **gpu_free, **others}), NOW
    )


def test_a_cpu_node_with_the_driver_tools_has_no_gpus_not_unknown_ones() -> None:
    found = facts(
        section("query-gpu", sample("nvidia-smi-no-devices-singuconda-6.txt"), 6), NO_DEVICE
    )
    assert found.gpus == ()
    assert found.notes == ("no NVIDIA device on the PCI bus",)


def test_a_cpu_node_whose_nvidia_smi_finds_no_driver_has_no_gpus() -> None:
    text = sample("nvidia-smi-no-driver-cpu-node-eessi-910.txt")
    assert facts(section("query-gpu", text, 9), NO_DEVICE).gpus == ()


def test_no_devices_while_one_is_on_the_pci_bus_is_unknown_and_said() -> None:
    found = facts(section("query-gpu", sample("nvidia-smi-no-devices-singuconda-6.txt"), 6))
    assert found.gpus is None
    assert found.notes[0] == "nvidia-smi found no devices, but 1 NVIDIA device(s) on the PCI bus"


def test_no_driver_on_a_gpu_node_is_unknown_gpus_with_the_cause() -> None:
    text = sample("nvidia-smi-no-driver-cpu-node-eessi-910.txt")
    found = facts(section("query-gpu", text, 9))
    assert found.gpus is None
    assert found.notes[0] == f"nvidia-smi failed (exit 9): {text.strip()}"
    silent = facts(section("query-gpu", "", 9))
    assert silent.notes[0] == "nvidia-smi failed (exit 9): the NVIDIA driver is not loaded"


def test_a_driver_library_mismatch_is_said_as_such() -> None:
    text = sample("nvidia-smi-version-mismatch-gputil-55.txt")
    found = facts(section("query-gpu", text, 18))
    assert found.gpus is None
    assert found.notes[0] == (
        "nvidia-smi failed (exit 18): Failed to initialize NVML: Driver/library version mismatch"
    )


@pytest.mark.parametrize("where", ["stderr", "stdout"])
def test_an_inforom_warning_keeps_the_good_rows_and_is_a_note(where: str) -> None:
    warning = sample("nvidia-smi-inforom-warning-gpu-operator-20.txt")
    body = (stderr(warning) + ROW_0 + "\n") if where == "stderr" else (warning + ROW_0 + "\n")
    found = facts(section("query-gpu", body, 14))
    assert found.gpus is not None and [gpu.index for gpu in found.gpus] == [0]
    assert "nvidia-smi: WARNING: infoROM is corrupted at gpu 0000:B3:00.0" in found.notes


def test_a_lost_gpu_is_said_and_its_healthy_siblings_stay_usable() -> None:
    lost = sample("nvidia-smi-gpu-lost-owod-81.txt")
    found = facts(section("query-gpu", stderr(lost) + ROW_0 + "\n" + ROW_2 + "\n", 15))
    assert found.gpus is not None and [gpu.index for gpu in found.gpus] == [0, 2]
    assert any("GPU 0000:02:00.0: GPU is lost" in note for note in found.notes)
    assert found.gpus_lost == 1  # counted: the node has three GPUs, one of them lost


def test_ctl_nodes_counts_a_lost_gpu_in_the_total_and_never_as_free(tmp_path: Path) -> None:
    lost = sample("nvidia-smi-gpu-lost-owod-81.txt")
    found = facts(section("query-gpu", stderr(lost) + ROW_0 + "\n" + ROW_2 + "\n", 15))
    snapshot = tmp_path / "facts"
    snapshot.mkdir()
    (snapshot / "gpu-1.json").write_text(found.model_dump_json())
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    gpu-1:\n")
    shown = ctl("nodes", "--inventory", str(inventory), "--facts", str(snapshot))
    row = next(line for line in shown.stdout.splitlines() if line.startswith("gpu-1 "))
    assert re.search(r" 2/3 \S+ ", row), row  # 2 free of 3: the lost one is no one's
    listed = ctl("nodes", "--json", "--inventory", str(inventory), "--facts", str(snapshot))
    (node,) = json.loads(listed.stdout)["nodes"]
    assert node["gpus_lost"] == 1 and len(node["gpus"]) == 2


def test_mig_mode_is_read_per_gpu_and_a_gpu_without_mig_has_none() -> None:
    published = [line.split(", ") for line in sample("mig-mode-dra-driver-852.csv").splitlines()]
    rows = "".join(f"{index}, {fields[1]}\n" for index, fields in enumerate(published))
    assert parse_mig_modes(rows) == {0: True, 1: False, 2: False, 3: False}
    assert parse_mig_modes("0, [N/A]\n") == {0: None}
    with pytest.raises(FactsParseError, match="line 1: MIG mode 'Pending' is not Enabled"):
        parse_mig_modes("0, Pending\n")


MIG = "nvidia-smi --query-gpu=index,mig.mode.current"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0, Enabled, extra\n", " line 1: expected 2 fields, got 3"),
        ("x, Enabled\n", " line 1: index 'x' is not a whole number"),
        ("1024, Enabled\n", " line 1: index '1024' is out of range (at most 1,023)"),
        ("1023, Disabled\n0, Enabled\n0, Disabled\n", " line 3: GPU index 0 given twice"),
        ("".join(f"{i}, Disabled\n" for i in range(1025)), ": reported 1025 GPUs, more than 1,024"),
    ],
    ids=["fields", "index", "range", "twice", "rows"],
)
def test_a_mig_mode_row_nvidia_smi_would_not_print_is_said_with_its_line(
    text: str, problem: str
) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_mig_modes(text)
    assert str(raised.value) == MIG + problem


def test_mig_rows_around_a_no_devices_line_are_all_read_and_it_is_no_row() -> None:
    assert parse_mig_modes("0, Enabled\nNo devices were found\n1, Disabled\n") == {
        0: True,
        1: False,
    }
    at_the_cap = "".join(f"{i}, Disabled\n" for i in range(1024)) + "No devices were found\n"
    assert len(parse_mig_modes(at_the_cap)) == 1024


def test_a_gpu_in_mig_mode_is_known_as_such_in_the_facts() -> None:
    two = ROW_0 + "\n" + ROW_2 + "\n"
    found = facts(section("query-gpu", two), mig=section("mig", "0, Enabled\n2, Disabled\n"))
    assert found.gpus is not None
    assert [gpu.mig_enabled for gpu in found.gpus] == [True, False]
    old_driver = section("mig", 'Field "mig.mode.current" is not a valid field to query.\n', 2)
    found = facts(section("query-gpu", two), mig=old_driver)
    assert found.gpus is not None and [gpu.mig_enabled for gpu in found.gpus] == [None, None]
    assert "nvidia-smi did not report MIG mode (exit 2)" in found.notes


def test_a_topology_of_other_gpus_than_the_list_is_no_topology() -> None:
    topology = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-47\nGPU1\tNV18\t X \t0-47\n"
    found = facts(
        section("query-gpu", ROW_0 + "\n" + ROW_2 + "\n"),
        topology=section("topology", topology),
        **{"compute-apps": ""},
    )
    assert found.nvlink_domains is None
    assert any("does not match the GPU list" in note and "GPU1" in note for note in found.notes)


def test_the_probe_keeps_nvidia_smis_stderr_apart_and_its_exit_status(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo '{ROW_0}'\n"
        "echo 'WARNING: infoROM is corrupted at gpu 0000:B3:00.0' >&2\n"
        "exit 14\n"
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["sh", str(PROBE)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    query = done.stdout.split("@@modelfleet begin gpus\n", 1)[1].split("@@modelfleet end")[0]
    assert query.strip().splitlines() == [
        ROW_0,
        "@@stderr WARNING: infoROM is corrupted at gpu 0000:B3:00.0",
    ]
    assert "@@modelfleet end gpus 14\n" in done.stdout
    found = facts_from_probe(done.stdout, NOW)
    assert found.gpus is not None and [gpu.index for gpu in found.gpus] == [0]


def test_the_probe_marks_every_stderr_line_as_written_and_leaves_the_shell_as_it_was(
    tmp_path: Path,
) -> None:
    # The shell marks the lines (no sed): a line that looks like a glob, one with leading
    # blanks and backslashes stay as written, and the globbing and field splitting the
    # probe's later sections rely on are back (the model store's markers are a glob).
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f"echo '{ROW_0}'\n"
        "printf '%s\\n' '*' '  Unable to determine the device handle: \\\\0' '' 'last' >&2\n"
        "exit 15\n"
    )
    fake.chmod(0o755)
    store = tmp_path / "models"
    (store / "m").mkdir(parents=True)
    (store / "m" / ".modelfleet-complete").write_text('{"source": "hf://org/m"}')
    done = subprocess.run(
        ["sh", "-s", "--", str(store)],
        input=PROBE.read_text(), capture_output=True, text=True, timeout=60, check=False,
        cwd=tmp_path, env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    query = done.stdout.split("@@modelfleet begin gpus\n", 1)[1].split("@@modelfleet end")[0]
    assert query.strip("\n").splitlines() == [
        ROW_0,
        "@@stderr *",
        "@@stderr   Unable to determine the device handle: \\\\0",
        "@@stderr last",
    ]
    assert "@@modelfleet end gpus 15\n" in done.stdout
    model_store = done.stdout.split("@@modelfleet begin model-store\n", 1)[1]
    assert "complete\tm\t" in model_store.split("@@modelfleet end")[0]


def test_ctl_nodes_shows_a_cpu_node_with_the_driver_tools_as_having_no_gpus(
    tmp_path: Path,
) -> None:
    # The probe's answer from such a node, saved as a snapshot, read by ctl nodes: no "?".
    no_devices = sample("nvidia-smi-no-devices-singuconda-6.txt")
    found = facts(section("query-gpu", no_devices, 6), NO_DEVICE)
    snapshot = tmp_path / "facts"
    snapshot.mkdir()
    (snapshot / "cpu-1.json").write_text(found.model_dump_json())
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    cpu-1:\n")
    shown = ctl("nodes", "--inventory", str(inventory), "--facts", str(snapshot))
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("cpu-1 "))
    assert row.split()[:4] == ["cpu-1", "Ready", "plain", "-"]  # GPUS: none, not "?"
    assert "?" not in row
    assert "cpu-1: no NVIDIA device on the PCI bus" in shown.stdout


def test_one_run_with_a_lost_gpu_and_a_warning_reads_as_the_three_runs_would() -> None:
    # Each run of nvidia-smi prints the same messages and exits alike: the one run's are
    # given to each query it stands for, and the GPUs' rows split into theirs.
    lost = sample("nvidia-smi-gpu-lost-owod-81.txt")
    warning = "WARNING: infoROM is corrupted at gpu 0000:B3:00.0"
    rows = [(ROW_0, "Disabled", "[N/A]"), (ROW_2, "Enabled", "No")]
    one = "".join(f"{row}, {mig}, {pages}\n" for row, mig, pages in rows)
    together = facts("", gpus=section("gpus", stderr(lost) + warning + "\n" + one, 15))
    apart = facts(
        section("query-gpu", stderr(lost) + warning + "\n" + ROW_0 + "\n" + ROW_2 + "\n", 15),
        mig=section("mig", stderr(lost) + warning + "\n0, Disabled\n2, Enabled\n", 15),
        **{
            "retired-pages": section(
                "retired-pages", stderr(lost) + warning + "\n0, [N/A]\n2, No\n", 15
            )
        },
    )
    assert together.gpus is not None and [gpu.index for gpu in together.gpus] == [0, 2]
    assert [gpu.mig_enabled for gpu in together.gpus] == [False, True]
    assert together.gpus_lost == 1
    assert together == apart
