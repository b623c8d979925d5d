"""The module start_shards.yml checks shards with (playbooks/library/modelfleet_verify.py),
its judgement alone: systemd and the engines' HTTP answers are stood in for here; the
module runs for real on the test fleet (test_fleet_reconcile.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from cli.edges.ansible import Event, PlaybookRun
from cli.ops.executor import REPORT_TASK, start_failures
from cli.reconcile.apply import ShardFailure
from tests.playbook_modules import load_playbook_module


@pytest.fixture
def verify_module() -> Iterator[ModuleType]:
    yield load_playbook_module("modelfleet_verify")


class Node:
    """Units and engines as a node has them: ActiveState by unit, serving by URL."""

    def __init__(self, states: dict[str, dict[str, str]], serving: set[str]) -> None:
        self.states = states
        self.serving = serving
        self.asked: list[str] = []

    def unit_state(self, unit: str) -> dict[str, str]:
        self.asked.append(unit)
        return self.states[unit]

    def serves(
        self, url: str, model: str, ca: str | None = None, serial: str | None = None
    ) -> tuple[bool, str]:
        return (url in self.serving, "" if url in self.serving else "/health: 503")


ACTIVE = {"ActiveState": "active", "SubState": "running", "Result": "success"}
EXITED_2 = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code",
            "ExecMainStatus": "2", "LoadState": "loaded"}  # fmt: skip


def shard(unit: str, url: str | None = None) -> dict[str, object]:
    return {"unit": unit, "health_url": url, "model": "m"}


def run_verify(
    module: ModuleType, node: Node, shards: list[dict[str, object]], timeout: float = 30
) -> dict[str, str]:
    setattr(module, "unit_state", node.unit_state)  # noqa: B010 (a module, not a type)
    setattr(module, "serving", node.serves)  # noqa: B010
    result: dict[str, str] = module.verify(shards, {}, timeout, 0.01)
    return result


def test_a_failed_unit_beside_a_serving_one_fails_alone_and_at_once(
    verify_module: ModuleType,
) -> None:
    node = Node({"bad": EXITED_2, "good": ACTIVE}, serving={"http://n:8001"})
    started = time.monotonic()
    failed = run_verify(verify_module, node, [shard("bad", "http://n:8000"),
                                              shard("good", "http://n:8001")])  # fmt: skip
    assert failed == {"bad": "unit failed: its process exited with status 2"}
    assert time.monotonic() - started < 10  # not the 30 s timeout


def test_a_rank_0_that_never_serves_fails_after_the_timeout(verify_module: ModuleType) -> None:
    node = Node({"slow": ACTIVE}, serving=set())
    failed = run_verify(verify_module, node, [shard("slow", "http://n:8000")], timeout=0.05)
    assert failed == {"slow": "not serving after 0.05 s (last: /health: 503)"}


def test_a_worker_is_checked_after_its_rank_0s_were_waited_for(
    verify_module: ModuleType,
) -> None:
    node = Node({"worker": EXITED_2, "leader": ACTIVE}, serving={"http://n:8000"})
    failed = run_verify(verify_module, node, [shard("worker"), shard("leader", "http://n:8000")])
    assert failed == {"worker": "unit failed: its process exited with status 2"}
    assert node.asked[-1] == "worker"


@pytest.mark.parametrize(
    ("state", "start_error", "cause"),
    [
        ({"ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "203"}, None,
         "unit failed: its command could not be run (status 203/EXEC)"),
        ({"ActiveState": "failed", "Result": "signal", "ExecMainStatus": "9"}, None,
         "unit failed: its process was killed by signal 9"),
        ({"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, None,
         "unit inactive: its process exited with status 0"),
        ({"ActiveState": "inactive", "LoadState": "not-found"}, None, "unit not found"),
        ({"ActiveState": "failed", "Result": "resources", "SubState": "failed"},
         "Unable to start service x: no env file\\nmore", "unit failed: Unable to start service"
         " x: no env file\\nmore"),
    ],
)  # fmt: skip
def test_why_a_unit_stopped_in_a_few_words(
    verify_module: ModuleType, state: dict[str, str], start_error: str | None, cause: str
) -> None:
    assert verify_module.stopped_cause(state, start_error) == cause


def playbook_run(*events: Event, returncode: int = 2) -> PlaybookRun:
    return PlaybookRun("start_shards.yml", returncode, events, Path("/log"), 1.0)


def test_the_executor_reads_each_failed_shards_cause_and_journal() -> None:
    report = json.dumps({"cause": "unit failed: x", "journal": ["line 1", "\x1b[2J line 2"]})
    run = playbook_run(
        Event("node-3", REPORT_TASK, "failed", "modelfleet-a-1-rank0.service", False, report),
        Event("node-3", "Start each shard", "ok", "modelfleet-b-1-rank0.service", True, ""),
    )
    units = {("node-3", "modelfleet-a-1-rank0.service"), ("node-3", "modelfleet-b-1-rank0.service")}
    assert start_failures(run, units) == {
        ("node-3", "modelfleet-a-1-rank0.service"): ShardFailure(
            "unit failed: x", ("line 1", "\x1b[2J line 2")
        )
    }


def test_a_host_wide_failure_fails_every_shard_of_that_host_only() -> None:
    run = playbook_run(Event("node-1", "Write", "unreachable", None, False, "ssh: timed out"))
    units = {("node-1", "u1"), ("node-1", "u2"), ("node-2", "u3")}
    assert start_failures(run, units) == {
        ("node-1", "u1"): ShardFailure("unreachable: ssh: timed out"),
        ("node-1", "u2"): ShardFailure("unreachable: ssh: timed out"),
    }
