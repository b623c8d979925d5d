"""`ctl` on a real terminal: a tmux window of a given width, its pane captured as a person
sees it, and a prompt answered as a person would type the answer."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ctl import ROOT


@dataclass(frozen=True)
class Screen:
    lines: list[str]  # the pane's non-empty lines, right-stripped
    returncode: int


def _capture(tmux_args: list[str]) -> str:
    return subprocess.run(
        [*tmux_args, "capture-pane", "-p", "-t", "ctl"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip


def on_a_terminal(
    args: list[str],
    columns: int,
    tmp_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    reply: tuple[str, str] | None = None,
    timeout: float = 60,
    enter: bool = True,
) -> Screen:
    """`ctl ARGS` in a tmux window `columns` wide, with `env` added to its environment;
    `reply` = (text, keys): once the pane shows text, the keys are typed, then Enter
    unless not `enter` (a key like C-c that is a whole answer)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run installs it)")
    # A server of its own each time: a socket name used twice can reach a server still
    # shutting down, whose pane is another test's.
    socket = f"modelfleet-test-{uuid.uuid4().hex}"
    done = tmp_path / f"done-{socket}"
    settings = [f"{key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    command = " ".join(
        [
            f"cd {shlex.quote(str(ROOT))} &&",
            # pytest-xdist's workers carry COLUMNS=80 and LINES=24: the window's size must
            # be the terminal's, as a person's shell has it.
            f"env -u NO_COLOR -u COLUMNS -u LINES TERM=xterm PYTHONPATH={shlex.quote(str(ROOT))}",
            *settings,
            shlex.quote(sys.executable),
            "-m cli",
            *map(shlex.quote, args),
            f"; echo $? > {shlex.quote(str(done))}.tmp; mv {shlex.quote(str(done))}.tmp",
            f"{shlex.quote(str(done))}; sleep 60",
        ]
    )
    tmux_args = [tmux, "-L", socket, "-f", "/dev/null"]
    subprocess.run(
        [*tmux_args, "new-session", "-d", "-s", "ctl", "-x", str(columns), "-y", "60", command],
        check=True, timeout=30, env={**os.environ, "TERM": "xterm"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        if reply is not None:
            text, keys = reply
            while text not in _capture(tmux_args):
                assert not done.exists(), f"ctl ended without asking {text!r}"
                assert time.monotonic() < deadline, f"ctl did not ask {text!r}"
                time.sleep(0.1)
            subprocess.run(
                [*tmux_args, "send-keys", "-t", "ctl", keys, *(["Enter"] if enter else [])],
                check=True, timeout=30,
            )  # fmt: skip
        while not done.exists():
            assert time.monotonic() < deadline, "ctl did not finish in the tmux window"
            time.sleep(0.1)
        captured = _capture(tmux_args)
    finally:
        subprocess.run([*tmux_args, "kill-server"], check=False, timeout=30)
    lines = [line.rstrip() for line in captured.splitlines() if line.strip()]
    return Screen(lines, int(done.read_text()))
