"""What `ctl facts` imports before it reaches a node: what it needs, not what it never uses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.ctl import ROOT, ctl_environment

# `ctl facts` run as the console script runs it, stopped at its first SSH login: the modules
# loaded by then, as JSON on stdout. No node is contacted.
FIRST_CONTACT = """
import json, os, sys
sys.argv = ["ctl", "facts", "--inventory", sys.argv[1]]
import cli.edges.ssh as ssh
def login(*args, **kwargs):
    print(json.dumps(sorted(n for n, m in sys.modules.items() if m is not None)), flush=True)
    os._exit(0)
ssh.login = login
from cli.app import main
main()
"""


def test_ctl_facts_reaches_its_first_node_without_importing_invoke(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    node-1:\n      ansible_host: 127.0.0.1\n"
    )
    (inventory / ".known_hosts").write_text("")
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CONTACT, str(inventory)],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=60,
        env=ctl_environment({"XDG_STATE_HOME": str(tmp_path / "state")}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    assert "paramiko" in loaded  # the login was reached, through the real imports
    # paramiko imports invoke (for ssh_config's Match exec, never read by ctl) unless told
    # not to: 90 ms of every start (docs/scale.md).
    assert not {name for name in loaded if name == "invoke" or name.startswith("invoke.")}
