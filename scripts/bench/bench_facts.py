"""Benchmark gathering facts on the local test fleet: `ctl facts` against Ansible's setup.

On node-1..node-N of the test fleet (scripts/testfleet, docs/testfleet.md), for N = 1, 16
and 64 side by side in one run, four ways of learning about the nodes:

- `ctl facts` end to end: `python -m cli facts --inventory INV` in a subprocess, INV a
  temporary inventory directory holding only the first N hosts (hosts.yml filtered,
  group_vars/ and .known_hosts copied), XDG_STATE_HOME in a temporary directory, bytecode
  cached (PYTHONPYCACHEPREFIX in a temporary directory, as an installed ctl has its .pyc
  files). Includes Python's start-up and ctl's imports (about 0.4 s here), a fixed cost.
- ctl's gather in this process: `cli.facts.gather.gather()` on the same N targets, timed
  alone (connect, authenticate, run the probe on every node in parallel).
- `ansible all -m ansible.builtin.setup -i INV --forks N`, stdout to /dev/null,
  ANSIBLE_HOST_KEY_CHECKING=True and the fleet's known_hosts (through the inventory's
  group_vars). Each run has its own ANSIBLE_HOME and SSH control-socket directory, so it
  starts without connections, as ctl does; Ansible's ControlPersist masters are closed
  after each run. Must succeed (exit 0) for all N hosts.

Each figure is the best of 3 wall-clock times after one warm-up run; the methods take turns
within each round, so load from elsewhere on the machine falls on all of them alike. Beside
each time: the CPU time of the client (this process, or the subprocess and the children it
waited for), of the nodes (their cgroups: sshd, the probe, what it runs) and of the whole
machine, all during the best run ("other" = machine − client − nodes: anything else
running, and for Ansible its ControlPersist ssh masters). The nodes and the client share
this machine's CPUs, unlike a real fleet.

Goals (PASS/FAIL, for the end-to-end command and for the in-process gather): at least 10×
faster than Ansible's setup at the largest size (64); the time for it at most 2× the time
for 1.

Then, unless --no-stages, where the time goes: an instrumented copy of gather's steps for
one node at a time, all N in parallel (TCP connect, key exchange and host key check,
public-key authentication, session open, the command's run to its end of output), once
with the probe and once with `true` (what a session costs without the probe), with the
CPU time of the client and of the nodes per node. Best of 3 by wall-clock time.

The fleet is brought up to the largest size if fewer are up (testfleet.up) and left as it was
found. While it runs, the benchmark holds the fleet's shared locks as a test session does
(tests/integration/conftest.py): a test that stops nodes waits for it. Needs root (the
fleet does). The last line is one JSON object with every figure. Exit 0 whatever the
verdicts; 1 when something failed to run.

    python scripts/bench/bench_facts.py [--sizes 1,16,64] [--rounds 3] [--no-stages]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import paramiko
import yaml

from cli.facts.gather import Target, gather, probe_script
from cli.facts.probe import facts_from_probe
from cli.inventory.load import load_inventory

# Run as a file, not a module: the project root, where the test fleet's package is
# (tests/testfleet), is not on the path of a script in scripts/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import testfleet

ROOT = Path(__file__).resolve().parents[2]
SIZES = (1, 16, 64)  # 64: the most the test fleet boots (tests/testfleet/specs.py MAX_NODES)
ROUNDS = 3
SPEEDUP_GOAL = 10.0  # setup ÷ ctl at the largest size
SCALING_GOAL = 2.0  # ctl's time at the largest size ÷ at 1 node
RUN_TIMEOUT = 600.0
E2E = "ctl facts (end to end)"
IN_PROCESS = "ctl gather (in-process)"
SETUP = "ansible setup"


def _say(message: str) -> None:
    print(f"bench_facts: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A run that did not do what it should: the benchmark's figures would mean nothing."""


# =========================================================================== CPU accounting


def _host_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat, every CPU)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(value) for value in fields[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _rusage(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Run:
    """One timed run: wall-clock seconds and CPU seconds."""

    wall: float
    client_cpu: float
    nodes_cpu: float | None  # None without cgroup2 accounting
    host_cpu: float

    @property
    def other_cpu(self) -> float:
        return self.host_cpu - self.client_cpu - (self.nodes_cpu or 0.0)


class _Meter:
    """Wall clock and CPU around one run: the client's (this process with RUSAGE_SELF, a
    subprocess with RUSAGE_CHILDREN), the nodes' cgroups', the machine's."""

    def __init__(self, nodes: Sequence[str], who: int):
        self.nodes = nodes
        self.who = who

    def _nodes(self) -> float | None:
        total = 0.0
        for name in self.nodes:
            seconds = testfleet.node_cpu_seconds(name)
            if seconds is None:
                return None
            total += seconds
        return total

    @contextlib.contextmanager
    def measure(self) -> Iterator[list[Run]]:
        result: list[Run] = []
        nodes0, client0, host0 = self._nodes(), _rusage(self.who), _host_busy()
        began = time.perf_counter()
        yield result
        wall = time.perf_counter() - began
        nodes1, client1, host1 = self._nodes(), _rusage(self.who), _host_busy()
        nodes = None if nodes0 is None or nodes1 is None else nodes1 - nodes0
        result.append(Run(wall, client1 - client0, nodes, host1 - host0))


# =========================================================================== the fleet


@dataclass(frozen=True)
class FoundFleet:
    """What the fleet was before the benchmark touched it."""

    configured: int  # nodes in fleet.json (0: no fleet)
    up: frozenset[str]


def _found() -> FoundFleet:
    rows = testfleet.status()
    return FoundFleet(len(rows), frozenset(node.name for node, state in rows if state == "up"))


def _lock_file(name: str) -> IO[str]:
    path = testfleet.state_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")


@contextlib.contextmanager
def fleet_of(size: int) -> Iterator[testfleet.Fleet]:
    """node-1..node-SIZE up for the benchmark's duration; afterwards, the fleet as found."""
    problem = testfleet.check_host()
    if problem is not None:
        raise BenchError(f"this machine cannot run the test fleet: {problem}")
    wanted = {testfleet.node_name(index) for index in range(1, size + 1)}
    # As a test session does: `users` shared keeps a test session from powering the fleet
    # off under us, `nodes` shared keeps a test from stopping nodes while we measure.
    with _lock_file("users.lock") as users, _lock_file("nodes.lock") as nodes:
        fcntl.flock(users, fcntl.LOCK_SH)
        fcntl.flock(nodes, fcntl.LOCK_SH)
        found = _found()
        try:
            if wanted <= found.up:
                _say(f"node-1..node-{size} are up")
            else:
                # Never fewer nodes than were configured: up(N) stops nodes beyond N.
                _say(f"bringing the test fleet up to {max(size, found.configured)} nodes")
                testfleet.up(max(size, found.configured), say=_say)
            fleet = testfleet.load_fleet()
            if fleet is None:
                raise BenchError("the test fleet has no configuration after `up`")
            yield fleet
        finally:
            started = _found().up - found.up
            if started:
                # As the last test session does: only when nobody else uses the fleet.
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    _say("another session uses the test fleet now: leaving it up")
                else:
                    fcntl.flock(nodes, fcntl.LOCK_EX)
                    _restore(found, started)


def _restore(found: FoundFleet, started: frozenset[str]) -> None:
    """Stop the nodes the benchmark started; a smaller fleet gets its configuration back."""
    _say("leaving the test fleet as it was")
    if 0 < found.configured < max(map(testfleet.node_index, started)):
        testfleet.up(found.configured, say=_say)  # stops the nodes beyond, keeps the others
    if not found.up:
        testfleet.down(say=_say)
        return
    for name in sorted(started, key=testfleet.node_index):
        if testfleet.node_index(name) <= found.configured:
            testfleet.stop(name, say=_say)


def write_inventory(fleet: testfleet.Fleet, count: int, directory: Path) -> Path:
    """An inventory directory holding the fleet's first COUNT hosts only."""
    names = [node.name for node in fleet.nodes[:count]]
    data = yaml.safe_load(fleet.inventory.read_text())
    everything = data["all"]
    everything["hosts"] = {name: everything["hosts"][name] for name in names}
    children = {}
    for group, members in (everything.get("children") or {}).items():
        kept = {name: None for name in members.get("hosts") or {} if name in names}
        if kept:
            children[group] = {**members, "hosts": kept}
    everything["children"] = children
    directory.mkdir(parents=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copytree(fleet.inventory_dir / "group_vars", directory / "group_vars")
    shutil.copy2(fleet.inventory_known_hosts, directory / ".known_hosts")
    return directory


def _targets(inventory: Path) -> list[Target]:
    hosts = load_inventory(inventory).hosts
    return [Target(h.name, h.address, h.port, h.user, h.private_key_file) for h in hosts]


# =========================================================================== the methods


@dataclass
class Method:
    name: str
    runs: list[Run]

    def best(self) -> Run:
        return min(self.runs, key=lambda run: run.wall)


def run_ctl_facts(inventory: Path, state_home: Path, pycache: Path, meter: _Meter) -> Run:
    # Bytecode as an installed ctl has it (pip compiles it), kept out of the source tree:
    # with PYTHONDONTWRITEBYTECODE set, every run would compile cli/ again (+0.2 s here).
    environment = {
        key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"
    }
    environment |= {"XDG_STATE_HOME": str(state_home), "PYTHONPYCACHEPREFIX": str(pycache)}
    command = [sys.executable, "-m", "cli", "facts", "--inventory", str(inventory)]
    with meter.measure() as result:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        raise BenchError(f"ctl facts exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return result[0]


def run_gather(
    targets: Sequence[Target], known_hosts: Path, check: Callable[[str, str], None], meter: _Meter
) -> Run:
    with meter.measure() as result:
        attempts = gather(targets, known_hosts)
    for attempt in attempts:
        if attempt.output is None:
            raise BenchError(f"gather: {attempt.name}: {attempt.error}")
        check(attempt.name, attempt.output)
    return result[0]


def _ansible() -> str:
    beside = Path(sys.executable).with_name("ansible")
    found = str(beside) if beside.exists() else shutil.which("ansible")
    if found is None:
        raise BenchError("ansible is not installed (pip install ansible-core)")
    return found


def run_setup(ansible: str, inventory: Path, count: int, meter: _Meter) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-ansible-") as home_text:
        home = Path(home_text)
        control = home / "cp"
        environment = {
            **os.environ,
            "ANSIBLE_HOME": str(home),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
        }
        command = [ansible, "all", "-m", "ansible.builtin.setup"]
        command += ["-i", str(inventory), "--forks", str(count)]
        try:
            with meter.measure() as result:
                done = subprocess.run(
                    command,
                    cwd=home,  # no ansible.cfg from the current directory
                    env=environment,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    timeout=RUN_TIMEOUT,
                    check=False,
                )
        finally:
            _close_control_masters(control)
    if done.returncode != 0:
        raise BenchError(f"ansible setup exited {done.returncode}:\n{done.stderr}")
    return result[0]


def _close_control_masters(directory: Path) -> None:
    """Ask each ControlPersist master Ansible left to exit (they would linger 60 s)."""
    if not directory.is_dir():
        return
    for socket_path in directory.iterdir():
        subprocess.run(
            ["ssh", "-O", "exit", "-o", f"ControlPath={socket_path}", "bench-facts"],
            capture_output=True,
            timeout=30,
            check=False,
        )


def _ansible_hosts(ansible: str, inventory: Path) -> int:
    done = subprocess.run(
        [ansible, "all", "--list-hosts", "-i", str(inventory)],
        cwd=inventory,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    return sum(1 for line in done.stdout.splitlines()[1:] if line.strip())


def _checker(fleet: testfleet.Fleet) -> Callable[[str, str], None]:
    """The probe's output must give the node's GPUs: a benchmark of a broken probe (or fake
    nvidia-smi) would be worthless."""
    specs = {node.name: node.spec for node in fleet.nodes}

    def check(name: str, output: str) -> None:
        facts = facts_from_probe(output, datetime.now(UTC))
        gpus = specs[name].gpus
        expected = 0 if gpus is None or gpus.driver != "ok" else gpus.count
        found = len(facts.gpus or ())
        if found != expected or facts.memory is None:
            raise BenchError(f"{name}: the probe reported {found} GPUs (spec: {expected})")

    return check


# =========================================================================== stages

STAGES = ("tcp", "kex", "auth", "session", "run")


@dataclass(frozen=True)
class StageTimes:
    tcp: float  # TCP connect
    kex: float  # banner, key exchange, host key check against known_hosts
    auth: float  # public-key authentication
    session: float  # channel open
    run: float  # exec, send the script, read to the end of output

    @property
    def total(self) -> float:
        return self.tcp + self.kex + self.auth + self.session + self.run


def _staged(
    target: Target, host_keys: paramiko.HostKeys, command: str, script: bytes
) -> StageTimes:
    """What gather does through cli.edges.ssh (login, then execute), step by step."""
    t0 = time.perf_counter()
    sock = socket.create_connection((target.address, target.port), timeout=10)
    t1 = time.perf_counter()
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=10)
        offered = transport.get_remote_server_key()
        known = host_keys.lookup(target.address)
        if known is None or known.get(offered.get_name()) != offered:
            raise BenchError(f"{target.name}: host key not in known_hosts")
        t2 = time.perf_counter()
        if target.key_file is None:
            raise BenchError(f"{target.name}: no ansible_ssh_private_key_file")
        key = paramiko.PKey.from_path(Path(target.key_file).expanduser())
        transport.auth_publickey(target.user or "root", key)
        t3 = time.perf_counter()
        channel = transport.open_session(timeout=10)
        t4 = time.perf_counter()
        channel.exec_command(command)
        channel.sendall(script)
        channel.shutdown_write()
        while channel.recv(65536):
            pass
        if channel.recv_exit_status() != 0:
            raise BenchError(f"{target.name}: {command} failed")
        t5 = time.perf_counter()
    finally:
        transport.close()
    return StageTimes(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)


@dataclass(frozen=True)
class StageRun:
    nodes: int
    command: str
    run: Run
    mean: StageTimes
    slowest: StageTimes  # of the node that finished last


def measure_stages(
    targets: Sequence[Target], known_hosts: Path, command: str, script: str, rounds: int
) -> StageRun:
    host_keys = paramiko.HostKeys(str(known_hosts))
    meter = _Meter([target.name for target in targets], resource.RUSAGE_SELF)
    payload = script.encode()
    runs: list[tuple[Run, list[StageTimes]]] = []
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        for round_number in range(rounds + 1):  # round 0 is a warm-up
            with meter.measure() as result:
                times = list(pool.map(lambda t: _staged(t, host_keys, command, payload), targets))
            if round_number > 0:
                runs.append((result[0], times))
    run, times = min(runs, key=lambda pair: pair[0].wall)
    mean = StageTimes(*(sum(getattr(t, s) for t in times) / len(times) for s in STAGES))
    slowest = max(times, key=lambda t: t.total)
    return StageRun(len(targets), "probe" if script else command, run, mean, slowest)


# =========================================================================== report


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def _key(label: str) -> str:
    return label.replace(" ", "_").replace("-", "_")


def _other(run: Run) -> str:
    """Machine − client − nodes; /proc/stat counts in 10 ms ticks, so a few ms below 0
    is nothing."""
    return _ms(max(0.0, run.other_cpu))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_table(sizes: Sequence[int], results: dict[int, dict[str, Method]]) -> None:
    print()
    print("wall-clock seconds, best of the runs; CPU ms of that run: client/nodes/other")
    header = f"{'nodes':>5}  {'method':<22} {'seconds':>8}  {'client':>6} {'nodes':>6}"
    print(header + f" {'other':>6}  {'setup ÷ this':>12}")
    for size in sizes:
        setup = results[size][SETUP].best().wall
        for name, method in results[size].items():
            run = method.best()
            speedup = "" if name == SETUP else f"{_ratio(setup, run.wall):.1f}×"
            print(
                f"{size:>5}  {name:<22} {run.wall:>8.3f}  {_ms(run.client_cpu):>6}"
                f" {_ms(run.nodes_cpu):>6} {_other(run):>6}  {speedup:>12}"
            )


def print_stages(stages: Sequence[StageRun]) -> None:
    print()
    print(
        "where the time goes: gather's steps one by one, all nodes in parallel (ms; mean"
        " over the nodes, then the slowest node)"
    )
    columns = " ".join(f"{s:>7}" for s in STAGES)
    print(
        f"{'nodes':>5}  {'command':<7} {'wall':>6}  {columns}  |  {'slowest':>7}"
        f"  {'client CPU/node':>15} {'node CPU/node':>13} {'other':>6}"
    )
    for stage in stages:
        run = stage.run
        per_node = _ms(None if run.nodes_cpu is None else run.nodes_cpu / stage.nodes)
        mean = " ".join(f"{_ms(getattr(stage.mean, s)):>7}" for s in STAGES)
        print(
            f"{stage.nodes:>5}  {stage.command:<7} {_ms(run.wall):>6}  {mean}  |"
            f"  {_ms(stage.slowest.total):>7}  {_ms(run.client_cpu / stage.nodes):>15}"
            f" {per_node:>13} {_other(run):>6}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed runs after a warm-up")
    parser.add_argument("--no-stages", action="store_true", help="skip the per-stage timing")
    arguments = parser.parse_args(argv)
    sizes = sorted({int(size) for size in arguments.sizes.split(",")})
    rounds = max(1, arguments.rounds)
    try:
        return _bench(sizes, rounds, stages=not arguments.no_stages)
    except (BenchError, testfleet.FleetError, subprocess.SubprocessError) as error:
        print(f"bench_facts: {error}", file=sys.stderr)
        return 1


def _bench(sizes: Sequence[int], rounds: int, stages: bool) -> int:
    largest, smallest = max(sizes), min(sizes)
    ansible = _ansible()
    results: dict[int, dict[str, Method]] = {}
    stage_runs: list[StageRun] = []
    load_before = os.getloadavg()
    with fleet_of(largest) as fleet, tempfile.TemporaryDirectory(prefix="bench-facts-") as tmp:
        check = _checker(fleet)
        for size in sizes:
            inventory = write_inventory(fleet, size, Path(tmp) / f"inventory-{size}")
            if _ansible_hosts(ansible, inventory) != size:
                raise BenchError(f"ansible does not see {size} hosts in {inventory}")
            targets = _targets(inventory)
            names = [target.name for target in targets]
            state_home = Path(tmp) / f"state-{size}"
            known_hosts = inventory / ".known_hosts"
            methods: dict[str, tuple[_Meter, Callable[[_Meter], Run]]] = {
                E2E: (
                    _Meter(names, resource.RUSAGE_CHILDREN),
                    functools.partial(run_ctl_facts, inventory, state_home, Path(tmp) / "pycache"),
                ),
                IN_PROCESS: (
                    _Meter(names, resource.RUSAGE_SELF),
                    functools.partial(run_gather, targets, known_hosts, check),
                ),
                SETUP: (
                    _Meter(names, resource.RUSAGE_CHILDREN),
                    functools.partial(run_setup, ansible, inventory, size),
                ),
            }
            results[size] = {name: Method(name, []) for name in methods}
            for round_number in range(rounds + 1):  # round 0 is the warm-up
                for name, (meter, method) in methods.items():
                    outcome = method(meter)
                    if round_number > 0:
                        results[size][name].runs.append(outcome)
                if round_number > 0:
                    _say(
                        f"{size} nodes, round {round_number}/{rounds}: "
                        + ", ".join(
                            f"{name} {results[size][name].runs[-1].wall:.2f} s" for name in methods
                        )
                    )
            if stages:
                for command in ("sh -s", "true"):
                    script = probe_script() if command == "sh -s" else ""
                    stage_runs.append(measure_stages(targets, known_hosts, command, script, rounds))
    load_after = os.getloadavg()

    print(
        f"ctl facts vs ansible setup on the local test fleet: {platform.node()},"
        f" {os.cpu_count()} CPUs, Python {platform.python_version()};"
        f" load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(f"best of {rounds} runs after a warm-up; the nodes run on the same CPUs as the client")
    print_table(sizes, results)

    def best(size: int, name: str) -> float:
        return results[size][name].best().wall

    print()
    verdicts: dict[str, bool] = {}
    setup = best(largest, SETUP)
    for label, name in (("end to end", E2E), ("in-process", IN_PROCESS)):
        speedup = _ratio(setup, best(largest, name))
        ok = speedup >= SPEEDUP_GOAL
        verdicts[f"speedup_{_key(label)}"] = ok
        print(
            f"{verdict(ok)}  {label}: {speedup:.1f}× faster than ansible setup at {largest}"
            f" nodes (goal ≥ {SPEEDUP_GOAL:g}×)"
        )
    for label, name in (("end to end", E2E), ("in-process", IN_PROCESS)):
        scaling = _ratio(best(largest, name), best(smallest, name))
        ok = scaling <= SCALING_GOAL
        verdicts[f"scaling_{_key(label)}"] = ok
        print(
            f"{verdict(ok)}  {label}: {largest} nodes take {scaling:.2f}× the time of"
            f" {smallest} ({best(largest, name):.3f} s vs {best(smallest, name):.3f} s;"
            f" goal ≤ {SCALING_GOAL:g}×)"
        )
    # Context, not goals: the nodes and the client share this machine's CPUs, so the CPU
    # time a run used, spread over every CPU, is the least wall-clock time it could take.
    cpus = os.cpu_count() or 1
    floors: dict[str, float] = {}
    for name in (E2E, IN_PROCESS):
        run = results[largest][name].best()
        floors[name] = (run.client_cpu + (run.nodes_cpu or 0.0)) / cpus
        print(
            f"      {name} at {largest} nodes: its CPU time (client + nodes) ÷ {cpus} CPUs ="
            f" {floors[name]:.3f} s of the {run.wall:.3f} s it took"
        )
    if stage_runs:
        print_stages(stage_runs)
        logins = {stage.nodes: stage.run.wall for stage in stage_runs if stage.command == "true"}
        if smallest in logins and largest in logins:
            print(
                f"bare SSH logins (`true`, no probe): {largest} nodes take"
                f" {_ratio(logins[largest], logins[smallest]):.2f}× the time of {smallest}"
            )

    record: dict[str, Any] = {
        "benchmark": "facts",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_before": round(load_before[0], 2),
        "load_after": round(load_after[0], 2),
        "rounds": rounds,
        "seconds": {
            str(size): {name: round(method.best().wall, 4) for name, method in methods_.items()}
            for size, methods_ in results.items()
        },
        "runs": {
            str(size): {
                name: [{k: _round(v) for k, v in asdict(run).items()} for run in method.runs]
                for name, method in methods_.items()
            }
            for size, methods_ in results.items()
        },
        "verdicts": verdicts,
        "cpu_floor_seconds": {name: round(floor, 4) for name, floor in floors.items()},
        "stages_ms": [
            {
                "nodes": stage.nodes,
                "command": stage.command,
                "wall": round(stage.run.wall * 1000, 1),
                "client_cpu": round(stage.run.client_cpu * 1000, 1),
                "nodes_cpu": None
                if stage.run.nodes_cpu is None
                else round(stage.run.nodes_cpu * 1000, 1),
                "mean": {s: round(getattr(stage.mean, s) * 1000, 1) for s in STAGES},
                "slowest": {s: round(getattr(stage.slowest, s) * 1000, 1) for s in STAGES},
            }
            for stage in stage_runs
        ],
    }
    print(json.dumps(record, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
