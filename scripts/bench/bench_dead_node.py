"""Benchmark: what a dead node costs the router's clients, over 60 s windows.

Runs tests/integration/test_fleet_dead_node.py on the local test fleet (scripts/testfleet;
root, like the fleet) with MODELFLEET_DEAD_NODE_WINDOW set to the window (60 s unless
`--window S`): a client asks the router on node-3 for `chat-small`, replicas on node-1 and
node-2, while node-2 is cut off the network, then frozen, then its engine killed; then the
router unit is stopped with requests in flight. It prints the test's figures (requests
sent in the window after each death, failed, slowest, when the router stopped sending to
the dead replica, when it was back after the cure; the router unit's stop), PASS or FAIL
(the test's own assertions: issue 27's goals), and one JSON line. Not a test: the suite
runs the same code with 30 s windows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("node cut off: ", "node frozen: ", "engine killed (SIGKILL): ", "router unit stopped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, metavar="SECONDS")
    arguments = parser.parse_args()
    environment = os.environ | {"MODELFLEET_DEAD_NODE_WINDOW": str(arguments.window)}
    test = "tests/integration/test_fleet_dead_node.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", test],
        cwd=ROOT, env=environment, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [
        line.strip()
        for line in done.stdout.splitlines()
        if line.lstrip(".").startswith(FIGURES) or line.startswith("requests in flight")
    ]
    for line in lines:
        print(line.lstrip("."))
    print("PASS" if done.returncode == 0 else f"FAIL (pytest exit {done.returncode})")
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    print(json.dumps({"window_seconds": arguments.window, "passed": done.returncode == 0,
                      "figures": [line.lstrip(".") for line in lines]}))  # fmt: skip
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
