"""Finding the commands ctl runs (Ansible's), apart from running them: `ctl --help` and every
command's exit-2 check import this without Ansible's runner, its YAML or its subprocesses."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


class ToolMissingError(Exception):
    """A command of Ansible's that is installed neither beside ctl nor on PATH."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"{tool}: {reason}")


def ansible_command(name: str) -> str:
    """The path of Ansible's command `name` (ansible-playbook, ansible-inventory…).

    The one installed beside the running interpreter first: `.venv/bin/ctl` must run the
    ansible-core it was installed with, whatever is (or is not) on PATH. Then PATH. Found
    nowhere, a ToolMissingError that names it and how to install it (exit 2 at the command),
    raised before anything is run, never a FileNotFoundError from deep in a pass.
    """
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise ToolMissingError(
            name,
            f"not found beside {sys.executable} nor on PATH; it comes with ansible-core, a"
            f" dependency of ctl: {Path(sys.executable).parent / 'pip'} install ansible-core",
        )
    return found
