"""A command run on the control host itself, as Ansible's `local` connection runs a task: a
child process of ctl, as the operator, with its stdin given, in its own process group (so a
timeout ends all of it), its output bounded as an SSH session's is (cli/edges/ssh.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence

from cli.edges.ssh import MAX_OUTPUT, CommandTimeoutError, OutputLimitError


def run_local(argv: Sequence[str], stdin: bytes, timeout: float, limit: int = MAX_OUTPUT) -> bytes:
    """`argv`'s stdout, all within `timeout` seconds; its stderr is not kept. Raises
    CommandTimeoutError (the whole process group killed) or OutputLimitError (more than
    `limit` bytes)."""
    # Into a file, not a pipe: nothing to pump while stdin is written, and the size is
    # checked before a byte is read into memory.
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            process.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise CommandTimeoutError(f"did not finish in {timeout:g} s") from None
        size = output.seek(0, os.SEEK_END)
        if size > limit:
            raise OutputLimitError(f"{size} bytes, more than {limit}")
        output.seek(0)
        return output.read()
