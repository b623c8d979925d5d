"""The layer contracts ([tool.importlinter] in pyproject.toml) hold, and can fail."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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
    assert "7 kept, 0 broken" in result.stdout


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


def test_two_domain_packages_that_import_each_other_break_the_contracts(tmp_path: Path) -> None:
    """The engines are below the catalog: an engine spec that read the catalog would close
    the circle catalog → engines → catalog, which the layers and acyclic contracts refuse."""
    shutil.copytree(ROOT / "cli", tmp_path / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "cli" / "engines" / "specs.py"
    source = module.read_text(encoding="utf-8")
    marker = "from __future__ import annotations\n"
    assert marker in source
    module.write_text(
        source.replace(marker, marker + "import cli.catalog.load\n", 1), encoding="utf-8"
    )

    result = lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "No package of ctl imports its siblings in a circle BROKEN" in result.stdout
    assert "cli.engines.specs -> cli.catalog.load" in result.stdout


# --- docs/architecture.md says what the contracts say ----------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


def documented(block: str) -> list[list[str]]:
    """The module names of each list item between <!-- block… --> and <!-- /block -->."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {block}\b.*?-->\n(.*?)<!-- /{block} -->", text, re.DOTALL)
    assert match is not None, f"docs/architecture.md has no {block} block"
    items = re.split(r"^(?:\d+\.|-) ", match.group(1), flags=re.MULTILINE)
    return [re.findall(r"`(cli(?:\.\w+)*)`", item) for item in items if item.strip()]


def test_the_documented_layers_are_the_layer_contract_top_to_bottom() -> None:
    layers = contracts()[0]
    assert layers["type"] == "layers"
    expected = [
        sorted(name.strip() for name in re.split(r"[:|]", str(layer)))
        for layer in layers["layers"]  # type: ignore[attr-defined]
    ]

    assert [sorted(names) for names in documented("layers")] == expected


def test_the_documented_edges_in_the_domain_are_the_ones_the_contract_names() -> None:
    upper = {"cli.app", "cli.commands", "cli.ui", "cli.ops", "cli.edges"}
    forbidden = set(contracts()[2]["forbidden_modules"])  # type: ignore[call-overload]

    named = {name for names in documented("edges-in-domain") for name in names}

    assert named == forbidden - upper


# --- a command imports no other command ------------------------------------------------------

COMMANDS = ROOT / "cli" / "commands"


def command_modules() -> set[str]:
    """The modules cli/app.py registers commands from (`from cli.commands import a, b`)."""
    tree = ast.parse((ROOT / "cli" / "app.py").read_text(encoding="utf-8"))
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "cli.commands"
        for alias in node.names
    }


def imported_commands(module: Path) -> set[str]:
    """The cli/commands modules `module` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("cli.commands."):
                found.add(node.module.split(".")[2])
            elif node.module == "cli.commands":
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {
                alias.name.split(".")[2]
                for alias in node.names
                if alias.name.startswith("cli.commands.")
            }
    return found


def test_no_command_module_imports_another_command_module() -> None:
    """Commands share only helpers (options, inputs, locking, ...: modules app.py registers no
    command from); what two commands both do is an operation in cli/ops or such a helper."""
    commands = command_modules()
    assert {"reconcile", "place", "offboard", "deprovision", "ca"} <= commands
    crossing = {
        (module.stem, imported)
        for module in sorted(COMMANDS.glob("*.py"))
        for imported in imported_commands(module)
        if module.stem in commands and imported in commands and imported != module.stem
    }
    assert crossing == set()


def test_the_check_of_command_imports_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "place.py"
    module.write_text("def f() -> None:\n    from cli.commands.reconcile import x\n")
    assert imported_commands(module) == {"reconcile"}
