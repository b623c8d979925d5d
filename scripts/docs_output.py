"""The text of the docs' generated blocks, rendered from what `ctl` prints today.

README.md's example outputs and docs/cli.md are kept by cog (cogapp): their snippets call
these functions (docs/reconcile.md's engine table calls cli/engines/specs.py, and
docs/placement.md's constraint table cli/placement/constraints.py). Update:
`cog -r -I scripts README.md docs/cli.md docs/reconcile.md docs/placement.md`; check (as
tests/integration/test_examples.py does): the same with `--check` instead of `-r`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
from typer.core import TyperGroup

ROOT = Path(__file__).resolve().parents[1]
FLEET = "--inventory examples/inventory --facts examples/facts"
README_COMMANDS = {
    "PLACEMENT": f"ctl place --all --dry-run --catalog examples/catalog.yaml {FLEET}",
    "NODES": f"ctl nodes {FLEET}",
    "TOP": f"ctl top --once --catalog examples/catalog.yaml {FLEET}",
}


def ctl_output(*args: str, check: bool = False) -> str:
    """What `ctl ARGS` prints as the docs show it: 100 columns, no colour, and none of the
    MODELFLEET_* settings of whoever runs this (as the tests run ctl: tests/ctl.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELFLEET_")}
    env.update(COLUMNS="100", NO_COLOR="1", TERM="dumb", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, check=check, timeout=60,
    )  # fmt: skip
    return result.stdout


def readme_block(marker: str) -> str:
    """A README example: the command README_COMMANDS names, and what it prints, fenced."""
    command = README_COMMANDS[marker]
    return f"```text\n$ {command}\n{ctl_output(*command.split()[1:])}```\n"


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


def cli_reference() -> str:
    """docs/cli.md's body: one section per command, its --help fenced."""
    sections = []
    for path in command_paths():
        title = " ".join(("ctl", *path))
        sections.append(f"## {title}\n\n```text\n{help_text(path)}```\n")
    return "\n".join(sections)
