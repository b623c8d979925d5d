"""A new user's first hour: a tool ctl runs that is missing, a default path that is not there,
counts in words. Each is one line that says what to do, and the right exit code."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from cli.edges import tools
from tests.ctl import ROOT, ctl, ctl_environment

EXAMPLES = ROOT / "examples"


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def interpreter_without_ansible(tmp_path: Path) -> Path:
    """A python whose directory holds no ansible-playbook (a link to this one, elsewhere)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.symlink_to(Path(sys.executable).resolve())
    return python


def ctl_without_ansible(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The venv's packages by PYTHONPATH, and a PATH that has no Ansible on it either.
    environment = ctl_environment()
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), *site.getsitepackages()])
    environment["PATH"] = str(python.parent)
    return subprocess.run(
        [str(python), "-m", "cli", *args],
        capture_output=True, text=True, cwd=cwd, env=environment, timeout=60, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def missing_playbook_line(python: Path) -> str:
    return (
        f"error: ansible-playbook: not found beside {python} nor on PATH; it comes with"
        f" ansible-core, a dependency of ctl: {python.parent}/pip install ansible-core\n"
    )


@pytest.fixture
def fleet_copy(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLES / "inventory", root / "inventory")
    shutil.copy(EXAMPLES / "catalog.yaml", root / "catalog.yaml")
    return root


def test_ansible_commands_are_found_beside_the_interpreter_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beside = tmp_path / "venv" / "bin"
    beside.mkdir(parents=True)
    on_path = tmp_path / "path"
    on_path.mkdir()
    for directory in (beside, on_path):
        tool = directory / "ansible-playbook"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    assert tools.ansible_command("ansible-playbook") == str(beside / "ansible-playbook")
    (beside / "ansible-playbook").unlink()
    assert tools.ansible_command("ansible-playbook") == str(on_path / "ansible-playbook")


def test_an_ansible_command_found_nowhere_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tools.ToolMissingError) as raised:
        tools.ansible_command("ansible-inventory")
    assert str(raised.value) == (
        f"ansible-inventory: not found beside {tmp_path}/bin/python nor on PATH; it comes"
        f" with ansible-core, a dependency of ctl: {tmp_path}/bin/pip install ansible-core"
    )


def test_reconcile_without_ansible_says_so_in_one_line_before_anything_else(
    tmp_path: Path, fleet_copy: Path
) -> None:
    python = interpreter_without_ansible(tmp_path)
    before = files_of(fleet_copy)
    result = ctl_without_ansible(python, "reconcile", cwd=fleet_copy)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == missing_playbook_line(python)
    assert files_of(fleet_copy) == before


def test_drain_without_ansible_writes_no_cordon(tmp_path: Path, fleet_copy: Path) -> None:
    python = interpreter_without_ansible(tmp_path)
    before = files_of(fleet_copy)
    result = ctl_without_ansible(python, "drain", "hgx-1", cwd=fleet_copy)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == missing_playbook_line(python)
    assert files_of(fleet_copy) == before


def test_routes_apply_without_ansible_is_one_line(tmp_path: Path, fleet_copy: Path) -> None:
    python = interpreter_without_ansible(tmp_path)
    result = ctl_without_ansible(python, "routes", "--apply", cwd=fleet_copy)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == missing_playbook_line(python)


def test_a_dry_run_needs_no_ansible(tmp_path: Path, fleet_copy: Path) -> None:
    python = interpreter_without_ansible(tmp_path)
    result = ctl_without_ansible(
        python, "reconcile", "--dry-run", "--facts", str(EXAMPLES / "facts"), cwd=fleet_copy
    )
    assert result.returncode == 1, result.stderr  # deepseek-v3 does not fit
    assert "start" in result.stdout


def test_a_missing_default_catalog_says_how_to_name_one(tmp_path: Path) -> None:
    result = ctl("catalog", "check", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: catalog.yaml: cannot read: No such file or directory (point ctl at a catalog"
        " with --catalog FILE or MODELFLEET_CATALOG)\n"
    )


def test_a_missing_default_inventory_says_how_to_name_one(tmp_path: Path) -> None:
    result = ctl("nodes", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: inventory: no such inventory file or directory (point ctl at an inventory"
        " with --inventory PATH or MODELFLEET_INVENTORY)\n"
    )


def test_reconcile_in_an_empty_directory_names_the_catalog_option(tmp_path: Path) -> None:
    result = ctl("reconcile", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    assert "--catalog FILE or MODELFLEET_CATALOG" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_path_the_operator_named_gets_no_hint(tmp_path: Path) -> None:
    # They know how to name a file: they just did.
    result = ctl("catalog", "check", "--catalog", "mine.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "error: mine.yaml: cannot read: No such file or directory\n"


ONE_OF_EACH = """\
models:
  solo:
    source: hf://example/solo
    aliases: [one]
    replicas: {min: 1, max: 1}
    profiles:
      - name: cpu
        priority: 10
        engine: llama.cpp
        source: file:///srv/models/solo.gguf
        min_memory_gb: 4
"""


def test_catalog_check_counts_in_words_that_agree(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(ONE_OF_EACH)
    result = ctl("catalog", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "catalog.yaml: OK — 1 model, 1 profile, 1 alias"


def test_nodes_names_an_unreachable_node_once() -> None:
    result = ctl("nodes", "--inventory", "examples/inventory", "--facts", "examples/facts")
    said = (result.stdout + result.stderr).count("timed out after 10 s")
    assert said == 1, (result.stdout, result.stderr)
    assert "l40s-2: unreachable: timed out after 10 s" in result.stdout.splitlines()
    assert result.stderr == ""


def test_nodes_json_still_names_it_on_stderr_for_the_person_watching() -> None:
    args = ["nodes", "--json", "--inventory", "examples/inventory", "--facts", "examples/facts"]
    result = ctl(*args)
    assert result.stderr == "warning: l40s-2: timed out after 10 s\n"


def test_the_readme_names_the_packages_ci_installs_for_the_tests() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What the tests need\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z0-9][a-z0-9.+-]*)`", section))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    apt = ci.split("apt-get install -y -qq", 1)[1].split(">/dev/null", 1)[0]
    installed = set(apt.replace("\\", " ").split())
    needed = {"openssh-server", "openssh-client", "systemd-container", "debootstrap", "tmux"}
    assert needed <= installed
    assert needed | {"python3-venv", "git"} <= named
    assert named - {"scripts/test", ".venv", ".ci/run"} <= installed
    assert "**root**" in section
