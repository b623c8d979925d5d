"""The pure core opens no files. Which libraries and layers it may import: the contracts in
[tool.importlinter] (pyproject.toml), checked by tests/unit/project/test_architecture.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / "cli"
PURE_PACKAGES = ["catalog", "inventory", "facts", "cluster", "placement", "pki"]
PURE_MODULES = ["errors.py", "yamlsource.py", "schemaerrors.py"]
# Modules of the pure packages that are edges by design (DESIGN.md's layout puts them
# beside the models they read and write): files, the cache, SSH.
EDGE_MODULES = {
    "catalog/load.py",
    "inventory/load.py",
    "inventory/edit.py",  # writes the operator's inventory (ctl cordon, ctl onboard-node)
    "facts/store.py",
    "facts/cache.py",
    "facts/gather.py",
    "pki/store.py",
    "pki/ssh.py",
    "pki/node.py",
    "pki/addhost.py",
}


def pure_files() -> list[Path]:
    files = [ROOT / name for name in PURE_MODULES]
    for package in PURE_PACKAGES:
        files += sorted((ROOT / package).glob("*.py"))
    return files


# Kept for tests/unit/routes/test_routes.py's import check (now also the contracts' job: it can go
# with these once that test uses lint-imports).
FORBIDDEN = {"paramiko", "proxmoxer", "ansible", "ansible_runner", "typer", "rich", "click"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_pure_core_list_covers_real_modules() -> None:
    assert len(pure_files()) >= 15
    assert all(path.exists() for path in pure_files())


@pytest.mark.parametrize(
    "path",
    [p for p in pure_files() if str(p.relative_to(ROOT)) not in EDGE_MODULES],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_pure_core_module_opens_no_files(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    for call in ("open(", ".read_text(", ".write_text(", "subprocess", "socket"):
        assert call not in source, f"{path.name} uses {call}"
