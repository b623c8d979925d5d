"""Staging's progress, read from the nodes while the staging playbook downloads.

An Ansible module says nothing until it ends, and a 140 GB download takes an hour: so while
stage_weights.yml runs, one SSH session per staging node (the facts' session: the fleet's
known_hosts, never a new key) reads every `.modelfleet-progress` file the download module
writes (docs/facts.md, the store's layout) every few seconds, and hands each reading on.
A node's file is its word, untrusted: a reading is two bounded integers and a state word,
or nothing.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import paramiko

from cli.edges import ssh
from cli.facts.gather import Target
from cli.shards.staging import StageJob

INTERVAL_SECONDS = 3.0
MAX_BYTES = 2**70  # as the store's marker allows
STATES = frozenset({"running", "done", "failed"})


@dataclass(frozen=True)
class Reading:
    node: str
    source: str
    done: int
    total: int | None
    state: str


def parse_reading(node: str, source: str, text: str) -> Reading | None:
    """One progress file's line, or None when it is not what the module writes."""
    try:
        data = json.loads(text[:4096])
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    done, total, state = data.get("bytes"), data.get("total"), data.get("state")
    if type(done) is not int or not 0 <= done <= MAX_BYTES or state not in STATES:
        return None
    if total is not None and (type(total) is not int or not 0 <= total <= MAX_BYTES):
        return None
    return Reading(node, source, done, total, str(state))


def _script(jobs: Sequence[StageJob]) -> str:
    """Each job's progress file on one line, prefixed by its index; `-` when absent."""
    lines = [
        f"printf '%s\\t' {index}; head -c 4096 {shlex.quote(job.store + '/' + job.directory)}"
        "/.modelfleet-progress 2>/dev/null | tr -d '\\n\\r'; echo"
        for index, job in enumerate(jobs)
    ]
    return "\n".join(lines) + "\n"


def _read(client: paramiko.SSHClient, node: str, jobs: Sequence[StageJob]) -> list[Reading]:
    result = ssh.run(client, _script(jobs), timeout=30)
    readings: dict[int, Reading] = {}
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        index, _, text = line.partition("\t")
        if index.isdigit() and int(index) < len(jobs) and int(index) not in readings:
            reading = parse_reading(node, jobs[int(index)].source, text)
            if reading is not None:
                readings[int(index)] = reading
    return list(readings.values())


class ProgressLines:
    """Readings as lines for people: a bar per node and source, said again when it has
    moved by a twentieth or changed state, so a log stays readable."""

    WIDTH = 20

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.shown: dict[tuple[str, str], tuple[int, str]] = {}
        self.lock = threading.Lock()

    def __call__(self, reading: Reading) -> None:
        steps = (
            self.WIDTH * reading.done // reading.total
            if reading.total
            else reading.done // 1_000_000_000
        )
        key = (reading.node, reading.source)
        with self.lock:
            if self.shown.get(key) == (steps, reading.state):
                return
            self.shown[key] = (steps, reading.state)
        self.say(progress_line(reading))


def progress_line(reading: Reading) -> str:
    done = f"{reading.done / 1e9:.1f}"
    where = f"  staging {reading.source} on {reading.node}:"
    if reading.total:
        filled = ProgressLines.WIDTH * min(reading.done, reading.total) // reading.total
        bar = "#" * filled + "." * (ProgressLines.WIDTH - filled)
        percent = 100 * reading.done // reading.total
        line = f"{where} [{bar}] {percent}% {done} of {reading.total / 1e9:.1f} GB"
    else:
        line = f"{where} {done} GB (size not known yet)"
    return line if reading.state == "running" else f"{line}, {reading.state}"


@contextmanager
def watch_staging(
    targets: Mapping[str, Target],
    known_hosts: Path,
    connect_timeout: float,
    jobs: Sequence[StageJob],
    on_reading: Callable[[Reading], None],
) -> Iterator[None]:
    """While the block runs: each staging node's progress, every few seconds, to
    `on_reading`. A node that cannot be read is simply not shown: the playbook, not this,
    says whether its download worked."""
    stop = threading.Event()
    by_node: dict[str, list[StageJob]] = {}
    for job in jobs:
        by_node.setdefault(job.node, []).append(job)

    def follow(node: str, mine: list[StageJob]) -> None:
        target = targets.get(node)
        if target is None:
            return
        try:
            keys = ssh.known_keys(known_hosts, target.address, target.port)
            key_file = Path(target.key_file) if target.key_file else None
            client = ssh.login(
                target.address, target.port, target.user, key_file, keys, connect_timeout,
                proxy=target.proxy, known=ssh.load_known_hosts(known_hosts),
            )  # fmt: skip
        except Exception:
            return
        try:
            while not stop.wait(INTERVAL_SECONDS):
                for reading in _read(client, node, mine):
                    on_reading(reading)
        except ssh.NodeError:
            return
        finally:
            with suppress(Exception):
                client.close()

    threads = [
        threading.Thread(target=follow, args=(node, mine), daemon=True)
        for node, mine in by_node.items()
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=INTERVAL_SECONDS + 35)
