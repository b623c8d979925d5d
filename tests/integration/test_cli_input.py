"""Operator input that names something that is not there: exit 2, one line, nothing changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.ctl import ROOT, ctl

EXAMPLES = ROOT / "examples"


def copy_of_examples(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "inventory", tmp_path / "inventory")
    shutil.copy(EXAMPLES / "catalog.yaml", tmp_path / "catalog.yaml")
    return tmp_path


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_draining_a_node_the_inventory_does_not_have_is_bad_input(tmp_path: Path) -> None:
    root = copy_of_examples(tmp_path)
    before = files_of(root)
    result = ctl("drain", "NOSUCH", cwd=root)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "error: inventory: no host 'NOSUCH' in this inventory\n"
    assert files_of(root) == before


def test_a_near_miss_is_suggested(tmp_path: Path) -> None:
    root = copy_of_examples(tmp_path)
    result = ctl("drain", "cpu-bg", "--dry-run", cwd=root)
    assert result.returncode == 2
    assert result.stderr == (
        "error: inventory: no host 'cpu-bg' in this inventory (did you mean 'cpu-big'?)\n"
    )


def test_place_starts_only_named_models_and_only_on_live_facts(tmp_path: Path) -> None:
    root = copy_of_examples(tmp_path)
    everything = ctl("place", "--all", cwd=root)
    assert everything.returncode == 2
    assert everything.stderr == (
        "error: --all only with --dry-run: `ctl reconcile` starts what the catalog asks\n"
    )
    snapshot = ctl("place", "coder", "--facts", str(EXAMPLES / "facts"), cwd=root)
    assert snapshot.returncode == 2
    assert snapshot.stderr == (
        "error: --facts reads a snapshot: use it with --dry-run; starting needs live facts\n"
    )


def test_reconcile_json_is_one_document_for_one_pass_not_a_watch() -> None:
    result = ctl(
        "reconcile", "--json", "--watch", "--catalog", str(ROOT / "examples" / "catalog.yaml")
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --json prints one document for one pass: not with --watch"
    )
    assert result.stdout == ""
