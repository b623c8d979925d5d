#!/usr/bin/env python3
"""Two `ctl cordon` at once on different nodes of one inventory file: are edits lost?

Each race writes a fresh hosts.yml naming node-a and node-b inline, starts
`ctl cordon node-a` and `ctl cordon node-b` at the same moment, and then reads the
inventory back. A race is *lost* when either node is not cordoned as asked afterwards, and
*failed* when either command exited non-zero or printed anything but its one line. The
fleet's lock (cli/edges/lock.py) makes both 0: the second waits for the first.

    scripts/bench/bench_cordon_race.py [--races 40]

The last line of output is one JSON object: races, lost, failed, seconds. Exit 0 when no
edit was lost and no command failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cli.inventory.load import load_inventory  # noqa: E402

HOSTS = """\
# two nodes inline in one file: every cordon edits it
all:
  hosts:
    node-a:
      ansible_host: 127.0.0.1
    node-b:
      ansible_host: 127.0.0.2
"""
NODES = ("node-a", "node-b")
SAID = re.compile(r'^(node-[ab]) cordoned: "race \1" \(hosts\.yml:\d+\)\n$')


def race(directory: Path, environment: dict[str, str]) -> tuple[bool, bool]:
    """One race: (lost, failed)."""
    inventory = directory / "hosts.yml"
    inventory.write_text(HOSTS, encoding="utf-8")
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
            cwd=directory,
            env=environment,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for node in NODES
    ]
    failed = False
    for process in processes:
        out, err = process.communicate(timeout=300)
        if process.returncode != 0 or not SAID.match(out):
            print(f"  exit {process.returncode}: {out.strip()} {err.strip()}", file=sys.stderr)
            failed = True
    cordons = {host.name: host.vars.cordoned for host in load_inventory(inventory).hosts}
    lost = cordons != {node: f"race {node}" for node in NODES}
    return lost, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelfleet-cordon-race-") as temporary:
        directory = Path(temporary)
        environment = dict(os.environ)
        environment.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(directory / "state"))
        started = time.monotonic()
        outcomes = [race(directory, environment) for _ in range(args.races)]
        seconds = time.monotonic() - started
    lost = sum(lost for lost, _ in outcomes)
    failed = sum(failed for _, failed in outcomes)
    print(f"{args.races} races: {lost} lost an edit, {failed} had a command fail")
    figures = {"races": args.races, "lost": lost, "failed": failed, "seconds": round(seconds, 1)}
    print(json.dumps(figures))
    return 0 if lost == failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
