"""ctl drain on the real test fleet: the node is cordoned in the inventory, its replica is
placed elsewhere and serves, and only then is the old one drained."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli.inventory.load import load_inventory
from tests.ctl import ROOT, ctl_environment
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_dead_node import InFlight, Loop
from tests.integration.test_fleet_reconcile import CLEAN, chat, ctl_on_standins, embed, rank0
from tests.integration.test_fleet_routes import ROUTER, ask, with_router
from tests.testfleet.router import stop_router

pytestmark = pytest.mark.fleet

CATALOG = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
"""


def plan_of(output: str) -> list[str]:
    """The plan a drain printed: its lines after the cordon's, before what the pass did."""
    lines = output.splitlines()
    first = next(
        i
        for i, line in enumerate(lines)
        if re.match(r"(stop|start|drain|wait|leave|refuse) ", line)
    )
    done = re.compile(r"(started|FAILED|NOT (STOPPED|DRAINED)|ROUTERS) ")
    last = next((i for i, line in enumerate(lines) if done.match(line)), len(lines))
    return lines[first:last]


def test_draining_a_node_moves_its_replica_before_stopping_it(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    first = ctl("reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    ((replica, shards),) = ctl.shards().items()
    node = shards[0][0]
    dry = ctl("drain", node, "--reason", "kernel upgrade", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    result = ctl("drain", node, "--reason", "kernel upgrade")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{node} cordoned" in result.stdout
    # The dry run showed the plan the drain carried out, not one on the drained node.
    assert plan_of(result.stdout) == dry.stdout.splitlines(), (dry.stdout, result.stdout)
    moved = re.search(r"start +(chat-\d+) +h100x1 +(node-\d+)", result.stdout)
    assert moved and moved.group(2) != node, result.stdout
    assert re.search(rf"drain +{replica} +node drained", result.stdout), result.stdout
    running = ctl.shards()
    assert list(running) == [moved.group(1)]
    address, record = rank0(fleet, running[moved.group(1)])
    chat(address, record.port or 0, "chat")
    assert load_inventory(ctl.inventory).host(node).vars.cordoned == "kernel upgrade"
    for name in fleet.names[:3]:
        fleet.ssh(name, CLEAN)


EMBED_ONLY_ON_NODE_3 = """\
models:
  embed:
    source: hf://BAAI/bge-m3
    profiles:
      - {name: l40s, priority: 50, engine: vllm, gpu_class: L40S, gpus_per_node: 1,
         embedding: true}
"""


def test_a_drain_with_no_room_leaves_the_replica_serving_unless_forced(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    """node-3 is the only L40S node: embed-1 has nowhere to go. The dry run shows the plan the
    drain carries out, and the drain leaves embed-1 serving (exit 1); --force drains it."""
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, EMBED_ONLY_ON_NODE_3)
    first = ctl("reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    ((replica, shards),) = ctl.shards().items()
    assert (replica, shards[0][0]) == ("embed-1", "node-3")
    dry = ctl("drain", "node-3", "--reason", "kernel upgrade", "--dry-run")
    assert dry.returncode == 1, dry.stdout + dry.stderr
    assert load_inventory(ctl.inventory).host("node-3").vars.cordoned is None  # a dry run
    result = ctl("drain", "node-3", "--reason", "kernel upgrade")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0].startswith("node-3 cordoned"), result.stdout
    assert plan_of(result.stdout) == dry.stdout.splitlines(), (dry.stdout, result.stdout)
    assert " ".join(dry.stdout.split()).startswith(
        "leave embed-1 on node-3, being drained: no replacement could be placed, so it serves on"
        " (drain --force stops it) refuse embed-2 NOT PLACED — blocked"
    ), dry.stdout
    assert "1 cordoned (node-3: kernel upgrade)" in " ".join(dry.stdout.split())
    assert not re.search(r"^(drain|stop) ", result.stdout, re.MULTILINE), result.stdout
    running = ctl.shards()
    assert list(running) == ["embed-1"]
    address, record = rank0(fleet, running["embed-1"])
    embed(address, record.port or 0, "embed")
    forced = ctl("drain", "node-3", "--force")
    assert re.search(
        r"^drain +embed-1 +node drained \(--force: no replacement could be placed\) \[node-3\]",
        forced.stdout, re.MULTILINE,
    ), forced.stdout  # fmt: skip
    assert forced.returncode == 1, forced.stdout + forced.stderr  # embed has no replica now
    assert ctl.shards() == {}
    assert load_inventory(ctl.inventory).host("node-3").vars.cordoned == "kernel upgrade"
    for name in fleet.names[:3]:
        fleet.ssh(name, CLEAN)


# Two replicas of two nodes each (one GPU on node-1 and one on node-2), drained to one.
TWO_NODE = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [chat-small]
    replicas: {{min: {replicas}}}
    profiles:
      - {{name: h100x2, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1,
         nodes: 2, pipeline_parallel: 2, drain_seconds: 40}}
"""
SLOW = 12  # seconds a request in flight during the drain takes


def standin_events(fleet: LiveFleet, node: str, unit: str, since: float) -> list[dict[str, object]]:
    """The stand-in's own log records of `unit` on `node` from `since` (epoch s) on,
    oldest first."""
    shown = fleet.ssh(node, "journalctl", "--unit", unit, "--output", "cat", "--no-pager")
    events = [
        json.loads(line.removeprefix("standin: "))
        for line in shown.stdout.splitlines()
        if line.startswith("standin: ")
    ]
    return [event for event in events if float(str(event["ts"])) >= since]


def test_a_two_node_replica_drains_under_load_without_failing_a_request(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    """Issue 31, point 2: rank 0 drains first, its worker stopped only after it; the
    requests in flight on the retired replica finish, and a client asking the router
    throughout sees no failure."""
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, TWO_NODE.format(replicas=2))
    with_router(ctl, fleet)
    loop = Loop(fleet)
    client = threading.Thread(target=loop.run)
    try:
        first = ctl("reconcile")
        assert first.returncode == 0, first.stdout + first.stderr
        before = ctl.shards()
        assert len(before) == 2 and all(len(s) == 2 for s in before.values()), before
        assert ask(fleet, "chat-small").startswith("chat answered from ")
        client.start()
        ctl.catalog.write_text(TWO_NODE.format(replicas=1))
        flying: list[InFlight] = []
        direct: list[str] = []
        retired = ""
        sent_at = 0.0
        with subprocess.Popen(
            [sys.executable, "-m", "cli", *ctl.arguments("reconcile")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=ctl_environment(ctl.environment),
        ) as running:  # fmt: skip
            assert running.stdout is not None
            output = []
            for line in running.stdout:
                output.append(line)
                print(f"{time.time():.1f} {line}", end="")  # when each step ended, for a failure
                planned = re.match(r"drain +(chat-\d+) ", line)
                if planned and not retired:
                    # Sent as the plan is shown, before the router is told: some reach the
                    # retired replica through the router and must outlive the route update.
                    retired = planned.group(1)
                    sent_at = time.time()
                    flying = [InFlight(fleet, SLOW) for _ in range(4)]
                if retired and line.startswith("drain retired replicas:"):
                    # Shown as the drain's Ansible run starts, seconds before rank 0 gets
                    # its SIGTERM: this one is in flight on rank 0 when its drain begins.
                    address, record = rank0(fleet, before[retired])
                    threading.Thread(
                        target=lambda a=address, p=record.port or 0: direct.append(
                            str(chat(a, p, "chat", f"sleep {SLOW}")["choices"])
                        )
                    ).start()
            assert running.wait(timeout=600) == 0, "".join(output)
        text = "".join(output)
        assert retired, text
        assert re.search(rf"drain retired replicas: {retired}\b", text), text
        assert re.search(rf"stop retired replicas' workers: {retired}\b", text), text
        for request in flying:
            request.thread.join(timeout=120)
        deadline = time.monotonic() + 60
        while not direct and time.monotonic() < deadline:
            time.sleep(0.2)
        answers = [request.answer[:19] for request in flying]
        assert answers == ["chat answered from "] * 4, [r.answer for r in flying]
        assert direct and "chat answered from " in direct[0], direct
        assert list(ctl.shards()) == [name for name in before if name != retired]

        # On the nodes: rank 0 drained what it was answering, and its worker was told to
        # stop only after rank 0 had drained.
        (node0, leader), (node1, worker) = sorted(before[retired], key=lambda s: s[1].rank)
        # Unit names repeat from test to test: only this test's records count.
        leader_events = standin_events(fleet, node0, str(leader.unit), since=sent_at)
        worker_events = standin_events(fleet, node1, str(worker.unit), since=sent_at)
        drain = next(e for e in leader_events if e["event"] == "drain")
        assert int(str(drain["in_flight"])) >= 1, (
            f"drain began {float(str(drain['ts'])) - sent_at:.1f} s after the requests",
            drain,
            text,
        )
        drained = [float(str(e["ts"])) for e in leader_events if e["event"] == "drained"]
        assert drained, leader_events[-5:]
        # The worker ends either on ctl's SIGTERM ("stopping") or when rank 0 shuts down
        # ("shutdown"), never before rank 0 has drained.
        ended = [float(str(e["ts"])) for e in worker_events
                 if e["event"] in ("stopping", "shutdown", "exit")]  # fmt: skip
        assert ended and min(ended) >= drained[-1], (drained, worker_events[-5:])
    finally:
        loop.stop.set()
        if client.is_alive():
            client.join(timeout=90)
        stop_router(fleet, ROUTER)
        for name in fleet.names[:3]:
            fleet.ssh(name, CLEAN)
    failed = [s for s in loop.sent if s.node is None]
    print(f"2-node drain under load: {len(loop.sent)} requests, {len(failed)} failed")
    assert loop.sent and not failed, [s.error for s in failed][:3]
