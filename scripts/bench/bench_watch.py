"""Benchmark: the controller, `ctl reconcile --watch`, on the local test fleet (issue 28).

On the fleet of `scripts/testfleet up 3 --router node-3`, brought to
examples/testfleet/catalog.yaml first, it measures:

1. a pass with nothing to change against gathering the facts: `ctl reconcile` and
   `ctl facts`, each a whole process, run alternately (--rounds times; the medians), and
   the pass must run no playbook (goal: pass ÷ facts ≤ 2);
2. recovery: a controller with --interval and --lost-after runs; a node holding
   single-node replicas (not the router) is cut (`scripts/testfleet stop`); the time from
   the cut to a replacement of each of them started elsewhere, which a pass says only once
   its rank 0 answers (goal: ≤ lost-after + 30 s). The node is then started again, and
   the replicas left on it are stopped by the controller (its orphans);
3. memory: a controller making dry passes on a snapshot of the fleet's facts, its RSS
   after --passes passes against after 10 (goal: within 10 %).

Then the controller is stopped with SIGTERM (it must exit 0). Not a test: it prints
figures, PASS/FAIL per goal, and last one JSON line. Run it under the fleet's lock.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "testfleet" / "catalog.yaml"
FLEET = Path(os.environ.get("MODELFLEET_TESTFLEET_DIR", "/var/tmp/modelfleet-testfleet"))
INVENTORY = FLEET / "inventory"
ROUTER = "node-3"


def environment(state: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"}


def ctl(
    state: Path, *args: str, timeout: float = 600
) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, cwd=ROOT,
        env=environment(state), timeout=timeout, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - began, done


def testfleet(*args: str) -> None:
    subprocess.run([str(ROOT / "scripts" / "testfleet"), *args], check=True, cwd=ROOT,
                   capture_output=True, timeout=600)  # fmt: skip


def settle(state: Path) -> None:
    """The fleet brought to the catalog, routers included."""
    for _ in range(8):  # a replica that failed to start waits out its backoff first
        _, done = ctl(state, "reconcile", "--catalog", str(CATALOG), "-i", str(INVENTORY))
        if done.returncode == 0:
            return
        time.sleep(10)
    raise SystemExit(f"the fleet does not settle: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def no_op(state: Path, rounds: int) -> dict[str, Any]:
    facts: list[float] = []
    passes: list[float] = []
    playbooks = 0
    for _ in range(rounds):
        seconds, done = ctl(state, "facts", "-i", str(INVENTORY))
        assert done.returncode == 0, done.stderr
        facts.append(seconds)
        seconds, done = ctl(state, "reconcile", "--catalog", str(CATALOG), "-i", str(INVENTORY))
        assert done.returncode == 0, done.stdout + done.stderr
        playbooks += done.stderr.count(".yml: exit")
        passes.append(seconds)
    ratio = statistics.median(passes) / statistics.median(facts)
    return {
        "facts_seconds": [round(s, 2) for s in facts],
        "pass_seconds": [round(s, 2) for s in passes],
        "ratio": round(ratio, 2),
        "playbook_runs": playbooks,
    }


class Controller:
    def __init__(self, state: Path, *args: str) -> None:
        self.state = state
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as it)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", *args, "--log-format", "json"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=environment(state),
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def passes(self) -> list[dict[str, Any]]:
        self.log.seek(0)
        # A line still being written has no newline yet: read it next time.
        lines = [line for line in self.log if line.startswith("{") and line.endswith("\n")]
        events = [json.loads(line) for line in lines]
        return [event for event in events if event["event"] == "pass"]

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def wait(self, until: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = until(self.passes())
            if found:
                return found
            if self.process.poll() is not None:
                raise SystemExit(f"the controller exited {self.process.returncode}")
            time.sleep(0.2)
        raise SystemExit(f"no {what} within {timeout} s: {self.passes()[-3:]}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=300)


def single_node_replicas(state: Path, node: str) -> list[str]:
    _, done = ctl(state, "facts", "--json", "-i", str(INVENTORY))
    shards = json.loads(done.stdout)["nodes"][node]["shards"]
    return sorted(s["replica"] for s in shards if s["nodes"] == 1 and s["state"] == "running")


def recovery(state: Path, node: str, interval: str, lost_after: str) -> dict[str, Any]:
    lost = single_node_replicas(state, node)
    for other in ("node-1", "node-2"):  # where the fleet put none on it: the other one
        if not lost and other != node:
            node, lost = other, single_node_replicas(state, other)
    assert lost, "no node but the router holds a single-node replica"
    models = sorted({replica.rsplit("-", 1)[0] for replica in lost})
    controller = Controller(
        state, "--lost-after", lost_after, "reconcile", "--watch", "--interval", interval,
        "--catalog", str(CATALOG), "-i", str(INVENTORY),
    )  # fmt: skip
    try:
        controller.wait(lambda passes: passes and passes[-1]["exit_code"] == 0, 300, "quiet pass")
        cut = time.time()  # from the stop's start: sshd goes early in the node's shutdown
        testfleet("stop", node)
        stopping = time.time() - cut

        def replaced(passes: list[dict[str, Any]]) -> float | None:
            started: dict[str, float] = {}
            for done in passes:
                ended = calendar.timegm(time.strptime(done["time"], "%Y-%m-%dT%H:%M:%SZ"))
                for line in done["did"]:
                    if line.startswith("started "):
                        started.setdefault(line.split()[1].rsplit("-", 1)[0], ended)
            if all(model in started for model in models):
                return max(started[model] for model in models) - cut
            return None

        seconds = controller.wait(replaced, 600, "replacement")
        testfleet("start", node)
        # "stopped R but its ranks on NODE (lost ...)" is a stop that left the node's ranks.
        orphans = controller.wait(
            lambda passes: [line for p in passes for line in p["did"]
                            if line.startswith("stopped ") and line.split()[1] in lost
                            and " but its ranks on " not in line],
            600, "stop of the replicas left on the node",
        )  # fmt: skip
        code = controller.stop()
    finally:
        if controller.process.poll() is None:
            controller.process.kill()
    return {
        "node": node,
        "replicas": lost,
        "seconds": round(seconds, 1),
        "stop_seconds": round(stopping, 1),  # how long `testfleet stop` itself took
        "orphans_stopped": sorted(line.split()[1] for line in orphans),
        # Each pass that stopped one, as the controller logged it: a replica stopped twice
        # is a pass that found it again, and these say which and when.
        "orphan_stop_passes": [
            {key: done.get(key) for key in ("time", "did", "could_not", "left_undone")}
            for done in controller.passes()
            if any(line.startswith("stopped ") for line in done["did"])
        ],
        "exit_code": code,
    }


def memory(state: Path, passes: int) -> dict[str, Any]:
    snapshot = state / "snapshot"
    _, done = ctl(state, "facts", "-i", str(INVENTORY), "--save", str(snapshot))
    assert done.returncode == 0, done.stderr
    controller = Controller(
        state, "reconcile", "--watch", "--dry-run", "--interval", "0.02s",
        "--catalog", str(CATALOG), "-i", str(INVENTORY), "--facts", str(snapshot),
    )  # fmt: skip
    try:
        controller.wait(lambda p: len(p) >= 10, 120, "10 passes")
        early = controller.rss_kib()
        controller.wait(lambda p: len(p) >= passes, 1200, f"{passes} passes")
        late = controller.rss_kib()
        code = controller.stop()
    finally:
        if controller.process.poll() is None:
            controller.process.kill()
    return {
        "passes": passes,
        "rss_kib_after_10": early,
        "rss_kib_after": late,
        "growth": round(late / early - 1, 3),
        "exit_code": code,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", default="10s")
    parser.add_argument("--lost-after", default="60s")
    parser.add_argument("--cut", default="node-2", help="the node cut off (not the router)")
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--no-recovery", action="store_true")
    options = parser.parse_args()
    lost_after = float(options.lost_after.rstrip("s"))
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as directory:
        state = Path(directory)
        settle(state)
        figures: dict[str, Any] = {"benchmark": "watch", "no_op": no_op(state, options.rounds)}
        if not options.no_recovery:
            figures["recovery"] = recovery(state, options.cut, options.interval, options.lost_after)
            print(json.dumps(figures["recovery"]), file=sys.stderr, flush=True)
            settle(state)
        figures["memory"] = memory(state, options.passes)
    goals = {
        "no_op": figures["no_op"]["ratio"] <= 2 and figures["no_op"]["playbook_runs"] == 0,
        "memory": figures["memory"]["growth"] <= 0.10,
    }
    if "recovery" in figures:
        goals["recovery"] = figures["recovery"]["seconds"] <= lost_after + 30
    figures["pass"] = goals
    no_op_ = figures["no_op"]
    verdict = "PASS" if goals["no_op"] else "FAIL"
    print(f"no-op pass {statistics.median(no_op_['pass_seconds']):.2f} s, ctl facts"
          f" {statistics.median(no_op_['facts_seconds']):.2f} s: ratio {no_op_['ratio']}"
          f" (goal ≤ 2), {no_op_['playbook_runs']} playbook runs: {verdict}")  # fmt: skip
    if "recovery" in figures:
        rec = figures["recovery"]
        print(f"{rec['node']} cut: {', '.join(rec['replicas'])} served elsewhere after"
              f" {rec['seconds']} s (goal ≤ {lost_after + 30:.0f} s):"
              f" {'PASS' if goals['recovery'] else 'FAIL'}; left on it and stopped on its"
              f" return: {', '.join(rec['orphans_stopped'])}")  # fmt: skip
    mem = figures["memory"]
    print(f"RSS after 10 passes {mem['rss_kib_after_10']} KiB, after {mem['passes']}"
          f" {mem['rss_kib_after']} KiB: {mem['growth']:+.1%} (goal ≤ +10 %):"
          f" {'PASS' if goals['memory'] else 'FAIL'}")  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
