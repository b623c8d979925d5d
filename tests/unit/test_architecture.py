"""The layer contracts ([tool.importlinter] in pyproject.toml) hold, and can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # --no-cache: no .import_linter_cache left in the tree; cwd: the cli/ it analyses.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_code_keeps_every_layer_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 kept, 0 broken" in result.stdout


def test_a_pure_module_that_imports_rich_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "cli", tmp_path / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "cli" / "placement" / "gpus.py"
    source = module.read_text(encoding="utf-8")
    marker = "from __future__ import annotations\n"
    assert marker in source
    module.write_text(source.replace(marker, marker + "import rich\n", 1), encoding="utf-8")

    result = lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "cli.placement.gpus -> rich" in result.stdout
    assert "Only cli/ui imports rich BROKEN" in result.stdout
