"""docs/security.md names, for every rule, the test that holds it: each named test exists.

A rule whose test was renamed or deleted would otherwise stay in the document, held by
nothing; this keeps the document's promise checkable.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "security.md"
# `tests/unit/<package>/test_x.py::test_y`, the form every rule's test is written in.
REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(test_\w+)")


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_test_the_security_document_names_exists() -> None:
    references = REFERENCE.findall(DOC.read_text(encoding="utf-8"))
    assert len(references) >= 30, "docs/security.md should name the test of every rule"
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not (ROOT / path).is_file() or name not in _test_functions(ROOT / path)
    ]
    assert missing == []


def test_every_trust_boundary_has_its_section() -> None:
    headings = re.findall(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    for source in ("inventory", "catalog", "node", "facts directory", "state directory", "Proxmox"):
        assert any(source.lower() in heading.lower() for heading in headings), source
