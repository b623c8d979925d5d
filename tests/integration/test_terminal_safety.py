"""Text from a node or a file reaches the terminal as text (issue 16, "Terminal safety").

A hostile facts snapshot and hostile inventory and catalog files, written here: ESC
sequences (a CSI that clears the screen, OSC 52 that writes the clipboard, OSC 8), a C1 CSI
(0x9b), BEL, and Rich markup (`[red]`, `\\[bold]`, `[link=…]`). Whatever `ctl` prints of them,
piped, at 100 and at 80 columns: no ESC, no 0x9b, no BEL byte, the markup as written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ctl import ROOT, ctl_environment

EXAMPLES = ROOT / "examples"
GPU_NAME = "NVIDIA H100\x1b]52;c;aGk=\x07"
# nvidia-smi reports a path; `ctl` shows what follows its last `/`.
PROCESS_NAME = "/usr/bin/python3\x1b[2J[red]x\\[bold]y"
LABEL = "[link=http://x]z[/link]"
CORDON = "fan \\[red]r[/red] [link=http://x]z[/link]"
# A catalog value no node matches: markup only, since a catalog with a control character is
# refused at load (tests/unit/common/test_hostile_names.py).
SELECTOR = "\\[red]q[link=http://x]z"


def ctl_bytes(*args: str, columns: int = 100) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True, cwd=ROOT, env=ctl_environment({"COLUMNS": str(columns)}),
        timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_inert(data: bytes) -> str:
    """No byte a terminal obeys; the text as it reads."""
    assert b"\x1b" not in data
    assert b"\x9b" not in data
    assert b"\x07" not in data
    text = data.decode()
    assert "\x9b" not in text  # U+009B, as UTF-8 (c2 9b): a C1 CSI to a terminal in 8-bit mode
    return text


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    shutil.copytree(EXAMPLES / "inventory", root / "inventory")
    shutil.copytree(EXAMPLES / "facts", root / "facts")
    facts_file = root / "facts" / "a100-1.json"
    facts = json.loads(facts_file.read_text())
    gpus = facts["gpus"]
    gpus[0]["name"] = GPU_NAME
    facts["gpu_processes"] = [
        {"gpu_uuid": gpus[1]["uuid"], "pid": 4242, "process_name": PROCESS_NAME},
    ]
    facts["notes"] = ["disk \x9b31m hot"]
    facts_file.write_text(json.dumps(facts))
    host_vars = root / "inventory" / "host_vars"
    (host_vars / "a100-1.yml").write_text(f'labels: {{site: "{LABEL}"}}\n')
    (host_vars / "cpu-old.yml").write_text(
        f"labels: {{role: general}}\ncordoned: {json.dumps(CORDON)}\n"
    )
    catalog = (EXAMPLES / "catalog.yaml").read_text()
    catalog += (
        "\n  sitebound:\n    source: hf://x/sitebound\n    replicas: {min: 1, max: 1}\n"
        "    profiles:\n      - name: cpu\n        priority: 10\n        engine: llama.cpp\n"
        "        source: file:///srv/models/sitebound.gguf\n        min_memory_gb: 1\n"
        f"        node_selector: {{site: {json.dumps(SELECTOR)}}}\n"
    )
    (root / "catalog.yaml").write_text(catalog)
    return root


def fleet(root: Path) -> list[str]:
    return ["--inventory", str(root / "inventory"), "--facts", str(root / "facts")]


@pytest.mark.parametrize("columns", [100, 80])
def test_nodes_shows_node_and_file_text_as_text(hostile: Path, columns: int) -> None:
    result = ctl_bytes("nodes", *fleet(hostile), columns=columns)
    out = assert_inert(result.stdout)
    assert_inert(result.stderr)
    lines = out.splitlines()
    assert "a100-1: GPU 1: pid 4242 python3\\x1b[2J[red]x\\[bold]y" in lines
    assert "a100-1: disk \\x9b31m hot" in lines
    assert "cpu-old: cordoned: fan \\[red]r[/red] [link=http://x]z[/link]" in lines
    assert result.returncode == 1  # l40s-2 is unreachable in the example snapshot


def test_nodes_table_shows_a_label_with_markup_as_written(hostile: Path) -> None:
    out = assert_inert(ctl_bytes("nodes", *fleet(hostile), columns=120).stdout)
    row = next(line for line in out.splitlines() if line.startswith("a100-1 "))
    assert "site=[link=http://x]z[/link]" in row


def test_nodes_json_escapes_every_control_character(hostile: Path) -> None:
    result = ctl_bytes("nodes", "--json", *fleet(hostile))
    out = assert_inert(result.stdout)
    assert '"NVIDIA H100\\u001b]52;c;aGk=\\u0007"' in out
    node = next(n for n in json.loads(out)["nodes"] if n["name"] == "a100-1")
    assert node["gpus"][0]["name"] == "NVIDIA H100\x1b]52;c;aGk=\x07"
    assert "disk \x9b31m hot" in node["notes"]


@pytest.mark.parametrize("columns", [100, 80])
def test_place_dry_run_shows_a_catalog_value_as_written(hostile: Path, columns: int) -> None:
    catalog = ["--catalog", str(hostile / "catalog.yaml")]
    result = ctl_bytes(
        "place", "sitebound", "--dry-run", *catalog, *fleet(hostile), columns=columns
    )
    out = assert_inert(result.stdout)
    assert_inert(result.stderr)
    assert "lack site=\\[red]q[link=http://x]z," in " ".join(out.split())
    assert result.returncode == 1


def test_place_dry_run_all_stays_inert(hostile: Path) -> None:
    catalog = ["--catalog", str(hostile / "catalog.yaml")]
    result = ctl_bytes("place", "--all", "--dry-run", *catalog, *fleet(hostile), columns=80)
    out = assert_inert(result.stdout)
    assert_inert(result.stderr)
    assert "sitebound-1" in out


def test_reconcile_dry_run_plan_lines_stay_inert(hostile: Path) -> None:
    catalog = ["--catalog", str(hostile / "catalog.yaml")]
    result = ctl_bytes("reconcile", "--dry-run", *catalog, *fleet(hostile))
    out = assert_inert(result.stdout)
    assert_inert(result.stderr)
    assert "lack site=\\[red]q[link=http://x]z," in " ".join(out.split())


def test_an_inventory_key_with_esc_in_an_error(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "inventory", tmp_path / "inventory")
    bad = tmp_path / "inventory" / "host_vars" / "cpu-old.yml"
    bad.write_text('labels: {"\\e[2J[red]k\\\\[bold]\\x9b": [1]}\n')
    result = ctl_bytes(
        "nodes", "--inventory", str(tmp_path / "inventory"), "--facts", "examples/facts"
    )
    err = assert_inert(result.stderr)
    assert err == f"error: {bad}:1: labels.\\x1b[2J[red]k\\[bold]\\x9b: must be text, not a list\n"
    assert result.returncode == 2


@pytest.mark.parametrize("columns", [100, 80])
def test_a_catalog_name_with_esc_in_an_error(tmp_path: Path, columns: int) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        'models:\n  "m\\e]52;c;aGk=\\a[red]x\\\\[bold]y\\x9b":\n    source: hf://a/b\n'
    )
    result = ctl_bytes("catalog", "check", "--catalog", str(catalog), columns=columns)
    err = assert_inert(result.stderr)
    # Refused for the control character, said by its code: the name is not printed at all.
    assert err == (
        f"error: {catalog}:1: models: a key here has a control character (U+001B): no text in"
        " a catalog may hold one (it reaches the nodes' unit files)\n"
    )
    assert result.returncode == 2


def test_a_catalog_value_with_esc_is_refused_without_printing_it(tmp_path: Path) -> None:
    text = (EXAMPLES / "catalog.yaml").read_text()
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(text.replace("gpu_class: L40S", 'gpu_class: "L4\\e[2J[red]"', 1))
    result = ctl_bytes("catalog", "check", "--catalog", str(catalog), columns=160)
    out = assert_inert(result.stdout + result.stderr)
    assert ".gpu_class: has a control character (U+001B): no text in a catalog" in out
    assert result.returncode == 2


def test_console_fail_reads_no_markup_in_what_it_quotes(hostile: Path) -> None:
    catalog = ["--catalog", str(hostile / "catalog.yaml")]
    name = "x\x1b[31m[red]q\\[bold]w\x9b"
    result = ctl_bytes("place", name, "--dry-run", *catalog, *fleet(hostile))
    err = assert_inert(result.stderr)
    assert "no model or alias 'x\\x1b[31m[red]q\\[bold]w\\x9b'" in err
    assert result.returncode == 2
