"""Benchmark: load through the router moves a model's replica count (issue 29, point 6).

On the local test fleet's first three nodes (scripts/testfleet; the stand-in engines of
tests/fakes/engine.py, the LiteLLM router on node-3), one catalog model, `chat`, has an
`autoscale` policy between replicas.min 1 and max 2; its replicas run one request at a
time (vLLM's `--max-num-seqs 1`) and queue the others, as the real engines do, and say so
in their /metrics. The controller, `ctl reconcile --watch`, runs with a short interval.
Clients through the router, each request on a new connection asking for `sleep 1` (a
second in its replica's one slot), then make the load:

1. baseline: one client, one replica;
2. step: N clients; scale-up is timed from the step to the first answer through the
   router from the new replica (the `x-litellm-model-id` LiteLLM answers with is the
   replica, docs/routing.md); then held at N;
3. oscillation: one client for part of the down window, then N clients, again and again:
   a load that drops for less than the down window must never take a replica away;
4. drop: one client for good; scale-down is timed from the drop to the pass that stopped
   the replica, which must come only after the down window (drained first: the router
   stops sending it requests, those in flight finish);
5. after: one client for a few passes more, to see nothing undone.

The oscillation meets two replicas, before the load drops for good: that is where a flap
can happen. (After the scale-down, load that came back within the down window would
rightly add a replica, which the flap count below would count.)

Flaps are counted from the controller's own decisions, the `scale chat 1 → 2` lines of
its plans: a decision undone by the next one within the down window. Every request the
clients sent is counted; a failed one is any that did not end in an answer.

It prints each phase (clients, requests, failures, the queue per replica the controller
read, replicas), PASS or FAIL per goal (issue 29: scale-up ≤ 90 s including the replica's
start, 0 flaps, 0 failed requests, scale-down only after the down window), and one JSON
line last. `--quick` uses short windows and few cycles (the suite runs it so). Run it under
the fleet's lock; it leaves no replica and no router running.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests import testfleet  # noqa: E402
from tests.testfleet.engines import REMOVE_REPLICAS, install_engines  # noqa: E402
from tests.testfleet.router import PORT, prepare_router, router_group_vars, stop_router  # noqa: E402

NODES = 3
ROUTER = "node-3"
MODEL = "chat"
REQUEST = "sleep 1"  # each request holds its replica's one slot a second
GOAL_SCALE_UP_SECONDS = 90.0


@dataclass(frozen=True)
class Settings:
    clients: int
    interval: float  # the controller's, seconds
    up_seconds: int
    down_seconds: int
    target: float  # requests waiting per replica
    hold: float  # the step held this long once the new replica answers
    cycles: int  # of the oscillation
    low: float  # seconds of one client in each cycle (less than the down window)
    high: float  # seconds of N clients in each cycle
    after: float

    def windows(self) -> dict[str, float]:
        return {
            "interval_seconds": self.interval,
            "up_seconds": self.up_seconds,
            "down_seconds": self.down_seconds,
            "target_waiting_per_replica": self.target,
            "oscillation_low_seconds": self.low,
            "oscillation_high_seconds": self.high,
        }


def settings(options: argparse.Namespace) -> Settings:
    up, down = (5, 20) if options.quick else (options.up, options.down)
    interval = 2.0 if options.quick else options.interval
    # Each drop in the oscillation lasts well under the down window, each rise long
    # enough for a few passes to read it.
    low = round(0.6 * down, 1)
    high = round(max(3 * interval, 0.3 * down), 1)
    return Settings(
        clients=options.clients, interval=interval, up_seconds=up, down_seconds=down,
        target=options.target, hold=5.0 if options.quick else options.hold,
        cycles=2 if options.quick else options.cycles, low=low, high=high,
        after=3 * interval,
    )  # fmt: skip


def catalog_text(s: Settings) -> str:
    return f"""\
# bench_autoscale: one model whose replicas run one request at a time (vLLM's
# --max-num-seqs 1): clients through the router build its queue.
models:
  {MODEL}:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    replicas: {{min: 1, max: 2}}
    autoscale: {{signal: queue, target: {s.target:g}, up_seconds: {s.up_seconds},
                down_seconds: {s.down_seconds}}}
    profiles:
      - {{name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1,
         drain_seconds: 10, args: ["--max-num-seqs", "1"]}}
"""


def inventory_of(fleet: testfleet.Fleet, directory: Path, key: str) -> Path:
    """The fleet's first three nodes, node-3 the router, clients' key in its group_vars."""
    target = directory / "inventory"
    shutil.copytree(fleet.inventory_dir, target)
    hosts = target / "hosts.yml"
    keep = {n.name for n in fleet.nodes[:NODES]}
    data = yaml.safe_load(hosts.read_text())
    data["all"]["hosts"] = {k: v for k, v in data["all"]["hosts"].items() if k in keep}
    children = data["all"].setdefault("children", {}) or {}
    for group in children.values():
        group["hosts"] = {k: v for k, v in (group.get("hosts") or {}).items() if k in keep}
    children["routers"] = {"hosts": {ROUTER: None}}
    data["all"]["children"] = children
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    with (target / "group_vars" / "all.yml").open("a") as group_vars:
        group_vars.write("modelfleet_health_timeout: 60\n")  # the stand-in loads in 0.5 s
    routers = target / "group_vars" / "routers.yml"
    routers.touch(mode=0o600)
    settings_ = {"modelfleet_router_master_key": key, "modelfleet_router_apply_timeout": 60}
    routers.write_text(yaml.safe_dump(settings_ | router_group_vars()))
    return target


def environment(state: Path) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("MODELFLEET_")}
    # Wide enough that no plan line is wrapped by rich; ctl wraps at 100 itself.
    return kept | {"XDG_STATE_HOME": str(state), "COLUMNS": "400"}


# --------------------------------------------------------------------------- the clients


@dataclass(frozen=True)
class Answered:
    started: float
    ended: float
    replica: str | None  # LiteLLM's deployment id: the replica that answered
    error: str | None


@dataclass
class Load:
    """`clients` threads; client i sends requests one after another while i < active."""

    url: str
    key: str
    clients: int
    active: int = 0
    answers: list[Answered] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.clients):
            thread = threading.Thread(target=self.client, args=(index,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def ask(self) -> Answered:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": REQUEST}]})
        request = urllib.request.Request(
            f"{self.url}/v1/chat/completions", data=body.encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
        )  # fmt: skip
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                replica = response.headers.get("x-litellm-model-id")
                answer = json.loads(response.read())
                answer["choices"][0]["message"]["content"]
        except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError) as error:
            return Answered(started, time.monotonic(), None, f"{type(error).__name__}: {error}")
        return Answered(started, time.monotonic(), replica, None)

    def client(self, index: int) -> None:
        while not self.stopped.is_set():
            if index >= self.active:
                self.stopped.wait(0.05)
                continue
            answered = self.ask()
            with self.lock:
                self.answers.append(answered)

    def between(self, start: float, end: float) -> list[Answered]:
        """The requests sent from `start` until `end`."""
        with self.lock:
            return [a for a in self.answers if start <= a.started < end]

    def stop(self) -> None:
        self.stopped.set()
        deadline = time.monotonic() + 90  # the requests in flight end; a hung one is left
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


# ------------------------------------------------------------------------ the controller

SCALE = re.compile(r"^scale\s+(\S+)\s+(\d+)(?:\s+→\s+(\d+))?\s+why: (.*)$")
PASS_DONE = re.compile(r"^\S+ pass (\d+) done in ([\d.]+) s, exit (\d+) — did: (.*?)(?: — |$)")
WAITING = re.compile(r"^([\d.]+) waiting per replica")


@dataclass(frozen=True)
class Decision:
    at: float  # when its plan line was read
    replicas: int
    desired: int
    why: str

    @property
    def change(self) -> int:
        return self.desired - self.replicas


@dataclass(frozen=True)
class PassDone:
    at: float
    number: int
    exit_code: int
    did: tuple[str, ...]


class Controller:
    """`ctl reconcile --watch`, its text log read as it comes, each line timed."""

    def __init__(self, arguments: list[str], state: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", *arguments], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=ROOT, env=environment(state), text=True,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def log(self) -> list[tuple[float, str]]:
        with self.lock:
            return list(self.lines)

    def decisions(self) -> list[Decision]:
        """Every `scale chat …` line of the passes' plans, its wrapped words joined."""
        found: list[Decision] = []
        lines = self.log()
        for index, (at, line) in enumerate(lines):
            match = SCALE.match(line)
            if match is None or match.group(1) != MODEL:
                continue
            why = match.group(4)
            for _, more in lines[index + 1 :]:
                if not more.startswith("     "):
                    break
                why += " " + more.strip()
            replicas = int(match.group(2))
            desired = int(match.group(3)) if match.group(3) else replicas
            found.append(Decision(at, replicas, desired, why))
        return found

    def passes(self) -> list[PassDone]:
        found = []
        for at, line in self.log():
            match = PASS_DONE.match(line)
            if match:
                did = tuple(x for x in match.group(4).split("; ") if x != "nothing")
                found.append(PassDone(at, int(match.group(1)), int(match.group(3)), did))
        return found

    def wait(self, until: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = until()
            if found:
                return found
            if self.process.poll() is not None:
                raise BenchError(f"the controller exited {self.process.returncode}")
            time.sleep(0.2)
        raise BenchError(f"no {what} within {timeout:.0f} s")

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.reader.join(timeout=10)
        return self.process.returncode


class BenchError(Exception):
    """The benchmark could not measure what it is for."""


# ------------------------------------------------------------------------------ the run


@dataclass
class Phase:
    name: str
    clients: int
    start: float
    end: float = 0.0


def summary(phase: Phase, load: Load, controller: Controller, origin: float) -> dict[str, Any]:
    answers = load.between(phase.start, phase.end)
    failed = [a for a in answers if a.error is not None]
    seconds = [a.ended - a.started for a in answers if a.error is None]
    decisions = [d for d in controller.decisions() if phase.start <= d.at < phase.end]
    waiting = [float(m.group(1)) for d in decisions if (m := WAITING.match(d.why))]
    by_replica: dict[str, int] = {}
    for answer in answers:
        if answer.replica is not None:
            by_replica[answer.replica] = by_replica.get(answer.replica, 0) + 1
    return {
        "phase": phase.name,
        "clients": phase.clients,
        "from_seconds": round(phase.start - origin, 1),
        "seconds": round(phase.end - phase.start, 1),
        "requests": len(answers),
        "failed": len(failed),
        "failures": [a.error for a in failed[:3]],
        "slowest_seconds": round(max(seconds, default=0.0), 2),
        "answered_by": dict(sorted(by_replica.items())),
        "waiting_per_replica": {
            "passes": len(waiting),
            "min": min(waiting, default=None),
            "max": max(waiting, default=None),
        },
        "replicas_seen_by_the_controller": sorted({d.replicas for d in decisions}),
    }


def flaps(decisions: list[Decision], down_seconds: float) -> list[str]:
    """Each decision undone by the next within the down window."""
    changes = [d for d in decisions if d.change]
    found = []
    for before, after in itertools.pairwise(changes):
        apart = after.at - before.at
        if (before.change > 0) != (after.change > 0) and apart < down_seconds:
            found.append(
                f"{before.replicas} → {before.desired} undone by {after.replicas} →"
                f" {after.desired} {apart:.0f} s later"
            )
    return found


def run(fleet: testfleet.Fleet, s: Settings, scratch: Path) -> dict[str, Any]:
    key = "sk-bench-" + secrets.token_hex(16)
    inventory = inventory_of(fleet, scratch, key)
    catalog = scratch / "catalog.yaml"
    catalog.write_text(catalog_text(s))
    state = scratch / "state"
    inputs = ["--catalog", str(catalog), "--inventory", str(inventory)]
    prepare_router(fleet, ROUTER)
    began = time.monotonic()
    settled = subprocess.run(
        [sys.executable, "-m", "cli", "--timeout", "5", "reconcile", *inputs], cwd=ROOT,
        env=environment(state), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if settled.returncode != 0:
        said = settled.stdout[-3000:] + settled.stderr[-3000:]
        raise BenchError(f"the first reconcile failed:\n{said}")
    settle_seconds = time.monotonic() - began
    load = Load(f"http://{fleet.node(ROUTER).address}:{PORT}", key, s.clients)
    first = load.ask()
    if first.error is not None or first.replica is None:
        raise BenchError(f"{MODEL} does not answer through {ROUTER}'s router: {first}")
    controller = Controller(
        ["--timeout", "5", "reconcile", "--watch", "--interval", f"{s.interval:g}s", *inputs],
        state,
    )  # fmt: skip
    phases: list[Phase] = []

    def phase(name: str, clients: int) -> Phase:
        now = time.monotonic()
        if phases:
            phases[-1].end = now
        load.active = clients
        phases.append(Phase(name, clients, now))
        return phases[-1]

    try:
        load.start()
        baseline = phase("baseline", 1)
        controller.wait(
            lambda: len([p for p in controller.passes() if p.exit_code == 0]) >= 2,
            120, "two passes that left the fleet as the catalog asks",
        )  # fmt: skip
        time.sleep(max(0.0, baseline.start + 2 * s.interval - time.monotonic()))
        before = {a.replica for a in load.between(0, time.monotonic()) if a.replica}
        before.add(first.replica)

        step = phase("step", s.clients)

        def new_replica() -> Answered | None:
            fresh = [a for a in load.between(step.start, time.monotonic()) if a.error is None]
            return min(
                (a for a in fresh if a.replica not in before), key=lambda a: a.ended, default=None
            )

        answered = controller.wait(new_replica, s.up_seconds + 240, "answer from a new replica")
        scale_up = answered.ended - step.start
        up_decision = next(
            (d for d in controller.decisions() if d.change > 0 and d.at >= step.start), None
        )
        time.sleep(s.hold)
        # The pass that started it ends once the router serves it: after its first answers.
        started = next(
            (p for p in controller.passes()
             if p.at >= step.start and f"started {answered.replica}" in p.did), None,
        )  # fmt: skip
        phase("hold", s.clients)
        time.sleep(s.hold)
        for cycle in range(1, s.cycles + 1):
            phase(f"oscillation {cycle}: low", 1)
            time.sleep(s.low)
            phase(f"oscillation {cycle}: high", s.clients)
            time.sleep(s.high)
        drop = phase("drop", 1)

        def stopped() -> PassDone | None:
            return next(
                (p for p in controller.passes()
                 if p.at >= drop.start and any(d.startswith(f"stopped {MODEL}-") for d in p.did)),
                None,
            )  # fmt: skip

        gone = controller.wait(stopped, s.down_seconds + 240, "scale-down")
        scale_down = gone.at - drop.start
        down_decision = next(
            (d for d in controller.decisions() if d.change < 0 and d.at >= drop.start), None
        )
        retired = next(d.split()[1] for d in gone.did if d.startswith(f"stopped {MODEL}-"))
        last_answer = max(
            (a.ended for a in load.between(drop.start, time.monotonic()) if a.replica == retired),
            default=None,
        )
        phase("after", 1)
        time.sleep(s.after)
        phases[-1].end = time.monotonic()
    except BenchError as failed:
        tail = "\n".join(line for _, line in controller.log()[-60:])
        raise BenchError(f"{failed}; the controller's log ended:\n{tail}") from None
    finally:
        load.active = 0
        load.stop()
        exit_code = controller.stop()
    decisions = controller.decisions()
    found_flaps = flaps(decisions, s.down_seconds)
    changes = [d for d in decisions if d.change]
    origin = phases[0].start
    reports = [summary(p, load, controller, origin) for p in phases]
    return {
        "benchmark": "autoscale",
        "clients": s.clients,
        "windows": s.windows(),
        "scale_up_seconds": round(scale_up, 1),
        "scale_up": {
            "decided_after_seconds": None
            if up_decision is None
            else round(up_decision.at - step.start, 1),
            "started_after_seconds": None if started is None else round(started.at - step.start, 1),
            "decision": None if up_decision is None else up_decision.why,
            "new_replica": answered.replica,
        },
        "scale_down_seconds": round(scale_down, 1),
        "scale_down": {
            "decided_after_seconds": None
            if down_decision is None
            else round(down_decision.at - drop.start, 1),
            "last_answer_after_seconds": None
            if last_answer is None
            else round(last_answer - drop.start, 1),
            "decision": None if down_decision is None else down_decision.why,
            "replica": retired,
        },
        "flaps": len(found_flaps),
        "flap_details": found_flaps,
        "decisions": [
            {
                "after_seconds": round(d.at - origin, 1),
                "replicas": d.replicas,
                "desired": d.desired,
                "why": d.why,
            }
            for d in changes
        ],
        "requests": sum(r["requests"] for r in reports),
        "failed_requests": sum(r["failed"] for r in reports),
        "phases": reports,
        "passes": len(controller.passes()),
        "controller_exit_code": exit_code,
        "settle_seconds": round(settle_seconds, 1),
    }


def leave_as_found(fleet: testfleet.Fleet) -> None:
    """No replica and no router of this run left on the nodes."""
    for node in fleet.nodes[:NODES]:
        command = fleet.ssh_command(node.name, f"sh -c {shlex.quote(REMOVE_REPLICAS)}")
        subprocess.run(command, check=False, timeout=300, capture_output=True)
    stop_router(fleet, ROUTER)


def report(figures: dict[str, Any], s: Settings) -> dict[str, bool]:
    goals = {
        "scale_up": figures["scale_up_seconds"] <= GOAL_SCALE_UP_SECONDS,
        "flaps": figures["flaps"] == 0,
        "failed_requests": figures["failed_requests"] == 0,
        "scale_down_after_window": figures["scale_down_seconds"] >= s.down_seconds,
    }
    windows = figures["windows"]
    print(
        f"autoscale benchmark: {MODEL} between 1 and 2 replicas, queue target"
        f" {s.target:g} waiting per replica, up window {s.up_seconds} s, down window"
        f" {s.down_seconds} s, controller every {windows['interval_seconds']:g} s;"
        f" {s.clients} clients through {ROUTER}'s router, '{REQUEST}' each"
    )
    for p in figures["phases"]:
        waiting = p["waiting_per_replica"]
        read = "-" if waiting["max"] is None else f"{waiting['min']:g}-{waiting['max']:g}"
        by = ", ".join(f"{r} {n}" for r, n in p["answered_by"].items()) or "-"
        print(
            f"  {p['phase']:<20} {p['clients']} client(s) {p['seconds']:>6.1f} s:"
            f" {p['requests']:>4} requests, {p['failed']} failed, slowest"
            f" {p['slowest_seconds']:.1f} s; waiting per replica {read}; replicas"
            f" {'/'.join(map(str, p['replicas_seen_by_the_controller'])) or '-'}; answered by {by}"
        )
    up, down = figures["scale_up"], figures["scale_down"]
    print(
        f"scale-up: {figures['scale_up_seconds']} s from the step to {up['new_replica']}"
        f" answering through the router (decided after {up['decided_after_seconds']} s,"
        f" started after {up['started_after_seconds']} s; goal ≤ {GOAL_SCALE_UP_SECONDS:.0f} s):"
        f" {'PASS' if goals['scale_up'] else 'FAIL'}"
    )
    print(
        f"scale-down: {figures['scale_down_seconds']} s from the drop to {down['replica']}"
        f" stopped (decided after {down['decided_after_seconds']} s, last answer after"
        f" {down['last_answer_after_seconds']} s; goal ≥ the {s.down_seconds} s window):"
        f" {'PASS' if goals['scale_down_after_window'] else 'FAIL'}"
    )
    print(
        f"flaps: {figures['flaps']} (goal 0): {'PASS' if goals['flaps'] else 'FAIL'}"
        + "".join(f"\n  {line}" for line in figures["flap_details"])
    )
    print(
        f"requests: {figures['requests']}, failed {figures['failed_requests']} (goal 0):"
        f" {'PASS' if goals['failed_requests'] else 'FAIL'}"
    )
    return goals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="N, the clients of the step")
    parser.add_argument("--interval", type=float, default=5.0, help="the controller's, seconds")
    parser.add_argument("--up", type=int, default=30, help="the up window, seconds")
    parser.add_argument("--down", type=int, default=120, help="the down window, seconds")
    parser.add_argument("--target", type=float, default=4.0, help="waiting per replica")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds at N after the step")
    parser.add_argument("--cycles", type=int, default=3, help="of the oscillation")
    parser.add_argument("--quick", action="store_true",
                        help="windows of 5 and 20 s, a 2 s interval, two cycles")  # fmt: skip
    options = parser.parse_args()
    s = settings(options)
    if s.clients - 1 <= s.target or (s.clients - 2) / 2 * 2 <= s.target:
        parser.error(
            f"--clients {s.clients}: one replica must queue over --target {s.target:g}, and"
            " two replicas with one fewer too (the oscillation's highs), or nothing is tested"
        )
    # A SIGTERM (a timeout's) ends it as Ctrl-C does: the nodes are still cleaned up.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    began = time.monotonic()
    state = testfleet.state_dir()
    configured = len(testfleet.status(state))
    fleet = testfleet.up(max(NODES, configured), state=state, say=lambda _: None).fleet
    install_engines(fleet, list(fleet.names()[:NODES]), lambda _: None)
    leave_as_found(fleet)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-autoscale-") as scratch:
            figures = run(fleet, s, Path(scratch))
    except BenchError as failed:
        print(f"bench_autoscale: {failed}", file=sys.stderr)
        return 1
    finally:
        leave_as_found(fleet)
    figures["wall_seconds"] = round(time.monotonic() - began, 1)
    figures["pass"] = report(figures, s)
    print(f"wall time {figures['wall_seconds']} s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
