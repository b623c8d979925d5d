"""Rewrite the README's example outputs from what `ctl` prints today.

tests/integration/test_examples.py fails when they drift; run this, read the diff, commit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLEET = "--inventory examples/inventory --facts examples/facts"
BLOCKS = {
    "PLACEMENT": f"ctl place --all --dry-run --catalog examples/catalog.yaml {FLEET}",
    "NODES": f"ctl nodes {FLEET}",
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


def run(command: str) -> str:
    return ctl_output(*command.split()[1:])


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    for marker, command in BLOCKS.items():
        block = f"<!-- {marker} -->\n```text\n$ {command}\n{run(command)}```"
        pattern = re.compile(rf"<!-- {marker} -->\n```text\n.*?```", flags=re.DOTALL)
        count = len(pattern.findall(text))
        text = pattern.sub(block.replace("\\", "\\\\"), text)
        if count != 1:
            raise SystemExit(f"README.md: no <!-- {marker} --> block")
    readme.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
