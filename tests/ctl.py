"""Run ctl as an operator does: a new process, its output read as text.

One environment for every test that does: no terminal (no colours, a fixed width), the
project importable from any working directory, and none of the MODELFLEET_* settings or
PROXMOX_* token of whoever runs the tests, so that their own fleet never leaks into a result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What ctl reads from its environment: settings, and Proxmox's token.
SETTINGS = ("MODELFLEET_", "PROXMOX_")


def ctl_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS)}
    environment.update(COLUMNS="100", NO_COLOR="1", TERM="dumb", PYTHONPATH=str(ROOT))
    environment.update(extra or {})
    return environment


def ctl(
    *args: str,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.CompletedProcess[str]:
    """`ctl ARGS...`; `env` adds to (or overrides) the tests' environment."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True, text=True, cwd=cwd, env=ctl_environment(env),
        timeout=timeout, check=False, stdin=stdin,
    )  # fmt: skip
