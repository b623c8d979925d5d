"""Two operators cordoning different nodes of one inventory at once lose no edit.

Both nodes are inline in the same hosts.yml, so each `ctl cordon` reads, plans and writes
the same file: without the fleet's lock (cli/edges/lock.py) the second write can undo the
first while both print success. scripts/bench_cordon_race.py runs the same race 40 times.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli.inventory.load import load_inventory
from tests.ctl import ctl_environment

HOSTS = """\
# two nodes inline in one file: every cordon edits it
all:
  hosts:
    node-a:
      ansible_host: 127.0.0.1
    node-b:
      ansible_host: 127.0.0.2
"""

RACES = 8


def race(inventory: Path, state: Path) -> list[tuple[int, str, str]]:
    """Start `ctl cordon node-a` and `ctl cordon node-b` at once; their exit codes and output."""
    env = ctl_environment({"XDG_STATE_HOME": str(state)})
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli",
                "cordon",
                node,
                "-r",
                f"race {node}",
                "-i",
                inventory.name,
            ],
            cwd=inventory.parent,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for node in ("node-a", "node-b")
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        results.append((process.returncode, out, err))
    return results


def test_concurrent_cordons_of_one_file_both_land(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    for attempt in range(RACES):
        inventory.write_text(HOSTS, encoding="utf-8")

        results = race(inventory, tmp_path / "state")

        assert [code for code, _, _ in results] == [0, 0], (attempt, results)
        # node-a's line comes first whoever wins; node-b's moves down one if node-a went first
        assert results[0][1] == 'node-a cordoned: "race node-a" (hosts.yml:6)\n'
        assert results[1][1] in {
            f'node-b cordoned: "race node-b" (hosts.yml:{line})\n' for line in (8, 9)
        }
        hosts = {host.name: host.vars.cordoned for host in load_inventory(inventory).hosts}
        assert hosts == {"node-a": "race node-a", "node-b": "race node-b"}, attempt
