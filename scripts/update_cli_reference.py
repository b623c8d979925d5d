"""Write docs/cli.md, the command reference, from what every command's --help says today.

`--check` writes nothing and exits 1 with a diff when docs/cli.md differs from it:
tests/integration/test_examples.py runs that, so the reference cannot drift from the code.
"""

from __future__ import annotations

import difflib
import sys

import typer
from typer.core import TyperGroup
from update_readme import ROOT, ctl_output

REFERENCE = ROOT / "docs" / "cli.md"
HEADER = """\
# ctl command reference

Every command's `--help`, as `ctl` prints it (at 100 columns). Written by
`python scripts/update_cli_reference.py`; a test fails when it differs from what the code
says, so run that after changing a command, read the diff and commit it. What the commands
are for: the README's Commands table and the docs it links.
"""


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group, in the order `--help` lists them: (), ("place",), ...."""
    sys.path.insert(0, str(ROOT))
    from cli.app import app

    root = typer.main.get_command(app)
    paths: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        paths.append(path)
        if isinstance(command, TyperGroup):
            context = typer.Context(command, info_name=path[-1] if path else "ctl")
            for name in command.list_commands(context):
                child = command.get_command(context, name)
                if child is not None and not child.hidden:
                    walk(child, (*path, name))

    walk(root, ())
    return paths


def help_text(path: tuple[str, ...]) -> str:
    printed = ctl_output(*path, "--help", check=True)
    # Rich pads every line to the width, and the help with blank lines; neither is content.
    return "\n".join(line.rstrip() for line in printed.splitlines()).strip("\n") + "\n"


def reference() -> str:
    sections = [HEADER]
    for path in command_paths():
        title = " ".join(("ctl", *path))
        sections.append(f"## {title}\n\n```text\n{help_text(path)}```\n")
    return "\n".join(sections)


def main() -> None:
    wanted = reference()
    if "--check" in sys.argv[1:]:
        current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
        if current != wanted:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), wanted.splitlines(keepends=True),
                "docs/cli.md", "what --help says now",
            )  # fmt: skip
            sys.stdout.writelines(diff)
            print("docs/cli.md is out of date: run python scripts/update_cli_reference.py")
            raise SystemExit(1)
        return
    REFERENCE.write_text(wanted, encoding="utf-8")


if __name__ == "__main__":
    main()
