"""The test fleet's fake nvidia-smi (tests/fakes/nvidia_smi.py).

Its output, for the command lines the facts probe runs, goes through the real parsers and
must give back the node's spec; its `topo -m` layout must be the real one, byte for byte,
where a real sample (tests/unit/samples/) describes the same machine.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from cli.facts.parse import (
    GPU_QUERY_FIELDS,
    parse_compute_apps,
    parse_mig_modes,
    parse_query_gpu,
    parse_topology,
)
from cli.facts.probe import GPUS_FIELDS
from tests import testfleet
from tests.fakes import nvidia_smi
from tests.fakes.nvidia_smi import FakeData, GpuData, NicData

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = Path(__file__).parents[1] / "samples"
PROBE = ROOT / "cli" / "facts" / "probe.sh"


def probe_invocations() -> dict[str, list[str]]:
    """The nvidia-smi command lines of the probe (run by its `smi` wrapper), by the section
    each is printed in (the `begin NAME` before it)."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in PROBE.read_text().splitlines():
        if (begin := re.match(r"^\s*begin\s+(\S+)\s*$", line)) is not None:
            section = begin.group(1)
        elif (match := re.match(r"^\s*smi\s+(.*?)\s*$", line)) is not None:
            assert section not in found, f"two nvidia-smi runs in section {section}"
            found[section] = shlex.split(match.group(1))
    return found


def run(argv: list[str], data: FakeData) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = nvidia_smi.main(argv, out, err, data=data)
    return code, out.getvalue(), err.getvalue()


def fake_data(name: str, spec: testfleet.NodeSpec) -> FakeData:
    return cast(FakeData, testfleet.gpu_data(name, spec))


GPU_NODES = [
    (testfleet.node_name(index), testfleet.default_spec(index))
    for index in range(1, 15)
    if testfleet.default_spec(index).gpus is not None
]


def test_the_probe_runs_four_nvidia_smi_commands_and_three_more_for_an_old_driver() -> None:
    assert list(probe_invocations()) == [
        "gpus",
        "query-gpu",  # these three only when the driver refused the one before (exit 2)
        "mig",
        "retired-pages",
        "remapped-rows",
        "compute-apps",
        "topology",
    ]


@pytest.mark.parametrize(("name", "spec"), GPU_NODES, ids=[name for name, _ in GPU_NODES])
def test_probe_output_parses_back_to_the_spec(name: str, spec: testfleet.NodeSpec) -> None:
    gpus = spec.gpus
    assert gpus is not None
    data = fake_data(name, spec)
    commands = probe_invocations()

    code, out, err = run(commands["query-gpu"], data)
    assert (code, err) == (0, "")
    parsed = parse_query_gpu(out)
    used = dict.fromkeys(range(gpus.count), gpus.used_mib)
    for process in gpus.processes:
        used[process.gpu] += process.used_mib
    assert [gpu.index for gpu in parsed] == list(range(gpus.count))
    for gpu in parsed:
        assert gpu.name == gpus.model
        assert gpu.uuid == testfleet.gpu_uuid(name, gpu.index)
        assert gpu.memory_total_mib == gpus.memory_mib
        assert gpu.memory_used_mib == used[gpu.index]
        expected_ecc = gpus.uncorrected_ecc.get(gpu.index, 0) if gpus.ecc else None
        assert gpu.ecc_uncorrected == expected_ecc
        assert gpu.pci_bus_id is not None
    assert len({gpu.uuid for gpu in parsed}) == gpus.count
    assert len({gpu.pci_bus_id for gpu in parsed}) == gpus.count

    code, out, err = run(commands["compute-apps"], data)
    assert (code, err) == (0, "")
    if not gpus.processes:
        assert out == ""  # noheader and nothing running: nothing at all
    processes = parse_compute_apps(out)
    assert [(p.gpu_uuid, p.pid, p.process_name, p.used_memory_mib) for p in processes] == [
        (testfleet.gpu_uuid(name, p.gpu), p.pid, p.name, p.used_mib) for p in gpus.processes
    ]

    code, out, err = run(commands["mig"], data)
    assert (code, err) == (0, "")
    expected_mig = {
        index: (index in gpus.mig_enabled if gpus.has_mig() else None)
        for index in range(gpus.count)
    }
    assert parse_mig_modes(out) == expected_mig

    code, out, err = run(commands["topology"], data)
    assert (code, err) == (0, "")
    assert parse_topology(out) == gpus.nvlink_domains()


def test_a_gpu_in_mig_mode_says_enabled_and_a_gpu_without_mig_says_not_available() -> None:
    a100 = testfleet.default_spec(4)
    assert a100.gpus is not None
    split = fake_data("node-4", replace(a100, gpus=replace(a100.gpus, mig_enabled=(1,))))
    code, out, _ = run(["--query-gpu=index,mig.mode.current", "--format=csv,noheader"], split)
    assert (code, out) == (0, "0, Disabled\n1, Enabled\n2, Disabled\n3, Disabled\n")
    l40s = testfleet.default_spec(3)
    assert l40s.gpus is not None
    code, out, _ = run(
        ["--query-gpu=index,mig.mode.current", "--format=csv,noheader"], fake_data("node-3", l40s)
    )
    assert (code, out) == (0, "0, [N/A]\n1, [N/A]\n2, [N/A]\n3, [N/A]\n")
    with pytest.raises(ValueError, match="has no MIG mode"):
        replace(l40s.gpus, mig_enabled=(0,))


def test_the_default_fleet_covers_the_cases() -> None:
    specs = [testfleet.default_spec(index) for index in range(1, 8)]
    gpus = [spec.gpus for spec in specs if spec.gpus is not None]
    assert any(not gpu.ecc for gpu in gpus)  # [N/A] in the ECC column
    assert any(gpu.uncorrected_ecc for gpu in gpus)
    assert any(gpu.processes for gpu in gpus)
    assert any(gpu.underline_topo_header for gpu in gpus)
    assert any(gpu.nvlink not in ("all", "none") for gpu in gpus)  # NVLink pairs
    assert any(hca.state == "DOWN" for spec in specs for hca in spec.hcas)
    assert sum(spec.gpus is None for spec in specs) == 2


# --------------------------------------------------------------------------- real layouts


def gpu(
    index: int, numa: int | None, affinity: str, switch: int | None = None, name: str = "GPU"
) -> GpuData:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": name,
        "pci_bus_id": f"00000000:{index + 16:02X}:00.0",
        "memory_total_mib": 81559,
        "memory_used_mib": 0,
        "ecc_uncorrected": 0,
        "numa_node": numa,
        "cpu_affinity": affinity,
        "pcie_switch": switch,
    }


def machine(
    gpus: list[GpuData],
    nvlinks: list[list[int]],
    nics: list[NicData] | None = None,
    underline: bool = False,
) -> FakeData:
    return {
        "driver": "ok",
        "driver_version": "550.54.15",
        "gpus": gpus,
        "nics": nics or [],
        "nvlinks": nvlinks,
        "processes": [],
        "underline_topo_header": underline,
    }


def all_pairs(count: int, width: int) -> list[list[int]]:
    return [[a, b, width] for a in range(count) for b in range(a + 1, count)]


def hgx_h100_one_nic(underline: bool = False) -> FakeData:
    """dstack's 8x H100 SXM5: NV18 everywhere, two NUMA nodes, one NIC far from all."""
    gpus = [gpu(i, i // 4, "0-103" if i < 4 else "104-207") for i in range(8)]
    nic: NicData = {"name": "mlx5_0", "numa_node": None, "pcie_switch": None}
    return machine(gpus, all_pairs(8, 18), [nic], underline)


def test_topo_is_the_real_layout_hgx_h100() -> None:
    expected = (SAMPLES / "topo-h100-sxm5-8gpu-dstack.txt").read_text()
    assert nvidia_smi.topology(hgx_h100_one_nic()) == expected


def test_topo_underlines_the_header_like_newer_drivers() -> None:
    expected = (SAMPLES / "topo-h100-sxm5-8gpu-ansi-header.txt").read_text()
    assert nvidia_smi.topology(hgx_h100_one_nic(underline=True)) == expected


def test_topo_is_the_real_layout_a100_pairs() -> None:
    affinity = ["0-23", "24-47", "48-71", "72-95"]
    gpus = [gpu(i, i, affinity[i]) for i in range(4)]
    data = machine(gpus, [[0, 1, 12], [2, 3, 12]])
    expected = (SAMPLES / "topo-a100-4gpu-nv12-pairs.txt").read_text()
    assert nvidia_smi.topology(data) == expected


def test_topo_is_the_real_layout_hgx_with_a_nic_per_gpu() -> None:
    # The H20 sample was published with trailing whitespace stripped: compare without it.
    gpus = [gpu(i, i // 4, "0-47,96-143" if i < 4 else "48-95,144-191", switch=i) for i in range(8)]
    nics: list[NicData] = [
        {"name": f"mlx5_{i + 1}", "numa_node": i // 4, "pcie_switch": i} for i in range(8)
    ]
    data = machine(gpus, all_pairs(8, 18), nics)
    expected = (SAMPLES / "topo-h20-hgx-8gpu-8nic-sglang.txt").read_text()

    def stripped(text: str) -> list[str]:
        return [line.rstrip() for line in text.splitlines()]

    assert stripped(nvidia_smi.topology(data)) == stripped(expected)


# --------------------------------------------------------------------------- formats


H100_NODE = fake_data("node-1", testfleet.default_spec(1))


def test_header_keeps_units_and_values_lose_them_with_nounits() -> None:
    code, out, _ = run(["--query-gpu=memory.total,name", "--format=csv,nounits"], H100_NODE)
    assert code == 0
    assert out.splitlines()[:2] == ["memory.total [MiB], name", "81559, NVIDIA H100 80GB HBM3"]
    code, out, _ = run(["--query-gpu=memory.used", "--format=csv,noheader"], H100_NODE)
    assert out.splitlines()[0] == "0 MiB"


def test_fields_in_any_order_and_aliases() -> None:
    code, out, _ = run(
        ["--query-gpu", "gpu_name,index,ecc.errors.uncorrected.volatile.total", "--format", "csv"],
        H100_NODE,
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "name, index, ecc.errors.uncorrected.volatile.total"
    assert lines[8] == "NVIDIA H100 80GB HBM3, 7, 0"


def test_ecc_not_supported_is_not_available() -> None:
    l40s = fake_data("node-3", testfleet.default_spec(3))
    code, out, _ = run(
        ["--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader"], l40s
    )
    assert code == 0
    assert out.splitlines() == ["0, [N/A]", "1, [N/A]", "2, [N/A]", "3, [N/A]"]


def test_compute_apps_header_only_when_nothing_runs() -> None:
    code, out, _ = run(["--query-compute-apps=pid,used_memory", "--format=csv"], H100_NODE)
    assert (code, out) == (0, "pid, used_gpu_memory [MiB]\n")


@pytest.mark.parametrize(
    ("argv", "code", "stdout"),
    [
        (
            ["--query-gpu=index,bogus", "--format=csv"],
            2,
            'Field "bogus" is not a valid field to query.\n\n',
        ),
        (["--format=csv"], 2, nvidia_smi.BAD_COMBINATION),
        (
            ["--query-gpu=index", "--query-compute-apps=pid", "--format=csv"],
            2,
            nvidia_smi.BAD_COMBINATION,
        ),
        (["--query-gpu=index"], 2, nvidia_smi.BAD_COMBINATION),
        (
            ["--frobnicate"],
            2,
            "ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h' for help.\n",
        ),
    ],
)
def test_fails_like_the_real_tool(argv: list[str], code: int, stdout: str) -> None:
    assert run(argv, H100_NODE)[:2] == (code, stdout)


def test_unimplemented_invocations_say_so() -> None:
    for argv in ([], ["-q"], ["topo", "-p2p", "r"]):
        code, out, err = run(argv, H100_NODE)
        assert code == 2
        assert out == ""
        assert "not implemented" in err


def test_list_gpus() -> None:
    code, out, _ = run(["-L"], H100_NODE)
    assert code == 0
    assert (
        out.splitlines()[0]
        == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {testfleet.gpu_uuid('node-1', 0)})"
    )


def test_a_broken_driver_fails_every_query() -> None:
    spec = testfleet.default_spec(1)
    assert spec.gpus is not None
    broken = fake_data("node-1", replace(spec, gpus=replace(spec.gpus, driver="broken")))
    for argv in probe_invocations().values():
        code, out, _ = run(argv, broken)
        assert (code, out) == (9, nvidia_smi.NO_DRIVER)


def test_no_data_file_is_no_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nvidia_smi.DATA_ENV, str(tmp_path / "missing.json"))
    out = io.StringIO()
    assert nvidia_smi.main(["topo", "-m"], out, io.StringIO()) == 9
    assert out.getvalue() == nvidia_smi.NO_DRIVER


def test_reads_its_data_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(H100_NODE))
    monkeypatch.setenv(nvidia_smi.DATA_ENV, str(path))
    out = io.StringIO()
    assert nvidia_smi.main(["-L"], out, io.StringIO()) == 0
    assert len(out.getvalue().splitlines()) == 8


def test_missing_driver_means_no_nvidia_smi_but_pci_devices() -> None:
    spec = testfleet.default_spec(1)
    assert spec.gpus is not None
    missing = replace(spec, gpus=replace(spec.gpus, driver="missing"))
    files = testfleet.node_files("node-1", missing, b"key", b"key.pub", b"client.pub")
    assert "usr/bin/nvidia-smi" not in files
    vendors = [path for path in files if path.endswith("/vendor")]
    assert len(vendors) == 8
    assert all(files[path].content == b"0x10de\n" for path in vendors)


# --------------------------------------------------------------------------- the fast path

FAKE = ROOT / "tests" / "fakes" / "nvidia_smi.py"
# A fallback that says so: the probe's invocations must never reach it.
NO_FALLBACK = ["/bin/sh", "-c", 'echo fallback reached: "$@" >&2; exit 99', "fallback"]


def _node(index: int, **gpus: Any) -> testfleet.NodeSpec:
    spec = testfleet.default_spec(index)
    assert spec.gpus is not None
    return replace(spec, gpus=replace(spec.gpus, **gpus)) if gpus else spec


FAST_PATH_NODES = [
    ("node-1", _node(1)),  # NVSwitch, ECC 0, four NICs
    ("node-1", _node(1, driver="broken")),  # no driver: every query fails (exit 9)
    ("node-3", _node(3)),  # ECC [N/A], no NICs, PCIe only
    ("node-4", _node(4)),  # NVLink pairs, uncorrected ECC errors on GPU 3
    ("node-7", _node(7)),  # a process on GPU 5, underlined topo header
    ("node-7", _node(7, used_mib=1024, processes=())),  # no processes: compute-apps prints nothing
    (
        "node-9",
        testfleet.NodeSpec(
            memory_gib=32,
            gpus=testfleet.GpuSpec(model="NVIDIA L4", count=1, memory_mib=23034, ecc=False),
        ),
    ),
]
FAST_PATH_IDS = [
    "h100",
    "broken-driver",
    "l40s-no-ecc",
    "a100-pairs-ecc",
    "processes",
    "idle",
    "one-gpu",
]


def install_fast_path(directory: Path, data: FakeData, fallback: list[str]) -> Path:
    """The node's /usr/bin/nvidia-smi and its precomputed outputs, in a temporary directory."""
    outputs = directory / "outputs"
    outputs.mkdir()
    for name, content in nvidia_smi.precomputed(data).items():
        (outputs / name).write_text(content)
    script = directory / "nvidia-smi"
    script.write_text(nvidia_smi.fast_path_script(str(outputs), fallback))
    script.chmod(0o755)
    return script


def run_process(
    command: list[str], environment: dict[str, str] | None = None
) -> tuple[int, str, str]:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=30, check=False, env=environment
    )
    return result.returncode, result.stdout, result.stderr


def test_the_probes_one_gpu_run_asks_the_fields_ctl_splits_it_by() -> None:
    assert probe_invocations()["gpus"][0] == "--query-gpu=" + ",".join(GPUS_FIELDS)
    assert probe_invocations()["query-gpu"][0] == "--query-gpu=" + ",".join(GPU_QUERY_FIELDS)


def test_the_fast_path_serves_exactly_the_probes_invocations() -> None:
    assert {tuple(argv) for argv in probe_invocations().values()} == set(
        nvidia_smi.PROBE_INVOCATIONS.values()
    )


@pytest.mark.parametrize(("name", "spec"), FAST_PATH_NODES, ids=FAST_PATH_IDS)
def test_the_fast_path_answers_the_probe_as_the_python_fake_does(
    name: str, spec: testfleet.NodeSpec, tmp_path: Path
) -> None:
    data = fake_data(name, spec)
    script = install_fast_path(tmp_path, data, NO_FALLBACK)
    for argv in probe_invocations().values():  # as cli/facts/probe.sh has them
        assert run_process([str(script), *argv]) == run(argv, data), argv


def test_the_cases_above_include_failures_and_empty_output() -> None:
    answers = {
        (name, spec.gpus.driver if spec.gpus else None): nvidia_smi.precomputed(
            fake_data(name, spec)
        )
        for name, spec in FAST_PATH_NODES
    }
    broken = answers[("node-1", "broken")]
    assert broken["topo.status"] == "9\n"
    assert broken["query-gpu.out"] == nvidia_smi.NO_DRIVER
    assert any(files["compute-apps.out"] == "" for files in answers.values())
    assert any("[N/A]" in files["query-gpu.out"] for files in answers.values())


ANY_OTHER = [
    ["-L"],
    ["topo", "-m", "-i", "0"],
    ["topo", "--matrix"],
    ["--query-gpu=name,index", "--format=csv"],
    ["--format=csv,noheader,nounits", "--query-gpu=index"],
    ["--query-gpu=index,bogus", "--format=csv"],
    ["-q"],
    [],
]


@pytest.mark.parametrize("argv", ANY_OTHER, ids=[" ".join(argv) or "none" for argv in ANY_OTHER])
def test_any_other_invocation_runs_the_python_fake(argv: list[str], tmp_path: Path) -> None:
    data = fake_data("node-4", testfleet.default_spec(4))
    gpus_json = tmp_path / "gpus.json"
    gpus_json.write_text(json.dumps(data))
    script = install_fast_path(tmp_path, data, [sys.executable, "-IS", str(FAKE)])
    environment = {"PATH": "/usr/bin:/bin", nvidia_smi.DATA_ENV: str(gpus_json)}
    assert run_process([str(script), *argv], environment) == run(argv, data)


def test_without_its_outputs_the_fast_path_runs_the_python_fake(tmp_path: Path) -> None:
    data = fake_data("node-7", testfleet.default_spec(7))
    gpus_json = tmp_path / "gpus.json"
    gpus_json.write_text(json.dumps(data))
    script = install_fast_path(tmp_path, data, [sys.executable, "-IS", str(FAKE)])
    for path in (tmp_path / "outputs").iterdir():
        path.unlink()
    environment = {"PATH": "/usr/bin:/bin", nvidia_smi.DATA_ENV: str(gpus_json)}
    argv = list(nvidia_smi.PROBE_INVOCATIONS["topo"])
    assert run_process([str(script), *argv], environment) == run(argv, data)


def test_a_gpu_node_gets_the_fast_path_its_outputs_and_the_python_fake() -> None:
    spec = testfleet.default_spec(4)
    files = testfleet.node_files("node-4", spec, b"key", b"key.pub", b"client.pub")
    nvidia = files["usr/bin/nvidia-smi"]
    assert nvidia.mode == 0o755
    assert nvidia.content.startswith(b"#!/bin/sh\n")
    assert f"dir=/{testfleet.NVIDIA_SMI_OUTPUTS}\n".encode() in nvidia.content
    assert nvidia.content.rstrip().endswith(f'exec /{testfleet.NVIDIA_SMI_FAKE} "$@"'.encode())
    fake = files[testfleet.NVIDIA_SMI_FAKE]
    assert (fake.content, fake.mode) == (FAKE.read_bytes(), 0o755)
    assert fake.content.startswith(b"#!/usr/bin/python3 -IS\n")
    expected = nvidia_smi.precomputed(fake_data("node-4", spec))
    assert {
        path.removeprefix(testfleet.NVIDIA_SMI_OUTPUTS + "/"): item.content.decode()
        for path, item in files.items()
        if path.startswith(testfleet.NVIDIA_SMI_OUTPUTS + "/")
    } == expected
    assert json.loads(files["etc/modelfleet-fake/gpus.json"].content) == fake_data("node-4", spec)
