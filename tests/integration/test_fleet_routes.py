"""Routing end to end on the real test fleet: `ctl reconcile` deploys a real LiteLLM proxy
(playbooks/deploy_router.yml) to node-3, the inventory's `routers`, in front of the
stand-in engines, and keeps it pointed at the replicas that serve.

One test, in steps, each starting from the fleet the previous one left:

1. a reconcile starts the catalog's replicas, then installs and configures the router;
   a request by alias reaches its model, through the router;
2. `ctl drain` moves the replica behind an alias while a client sends requests through the
   router in a loop: not one fails;
3. with a model's replicas stopped, a request falls back to the next model in the
   catalog's order — at once by LiteLLM's fallbacks, then, once `ctl routes --apply` has
   run, by the alias ctl gives it — and on down the chain; then `ctl reconcile` rebuilds
   the stopped replicas while a client asks by alias in a loop: not one request fails;
4. an empty catalog drains everything, and the router is left serving nothing.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import Ctl, ctl_on_standins
from tests.testfleet.router import prepare_router, router_group_vars, stop_router

pytestmark = pytest.mark.fleet

ROUTER = "node-3"
PORT = 4000
KEY = "sk-modelfleet-fleet-test-0123456789abcdef"
CATALOG = """\
# chat falls back to coder, coder to tiny: assistant → chat → coder → tiny.
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [assistant]
    fallbacks: [coder]
    replicas: {min: 1}
    profiles:
      - {name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1,
         drain_seconds: 20}
  coder:
    source: hf://Qwen/Qwen2.5-Coder-7B-Instruct
    fallbacks: [tiny]
    replicas: {min: 1}
    profiles:
      - {name: l40s, priority: 50, engine: sglang, gpu_class: L40S, gpus_per_node: 1}
  tiny:
    source: file:///srv/models/qwen2.5-0.5b-instruct-q8_0.gguf
    aliases: [small]
    replicas: {min: 1}
    profiles:
      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 2, threads: 2}
"""


def with_router(ctl: Ctl, fleet: LiveFleet, **more: object) -> None:
    """node-3 in the inventory group `routers`, with the key clients use and `more` router
    settings; and, when pip on this machine trusts a CA of its own (PIP_CERT: a
    TLS-inspecting proxy between here and PyPI, which the nodes reach through this
    machine), that CA on the router."""
    hosts = ctl.inventory / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    data["all"].setdefault("children", {})["routers"] = {"hosts": {ROUTER: None}}
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    settings = {"modelfleet_router_master_key": KEY, "modelfleet_router_apply_timeout": 60}
    settings |= router_group_vars() | more
    prepare_router(fleet, ROUTER)
    (ctl.inventory / "group_vars" / "routers.yml").write_text(yaml.safe_dump(settings))


def ask(
    fleet: LiveFleet, model: str, text: str = "hello", timeout: float = 60, port: int = PORT
) -> str:
    """A chat completion through the router; the answer's text (it names who answered)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    request = urllib.request.Request(
        f"http://{fleet.address(ROUTER)}:{port}/v1/chat/completions", data=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


@dataclass
class Client:
    """Sends requests through the router one after another until stopped, or `most` sent,
    or `seconds` passed: each a new connection, as a client configured once with the
    router's address."""

    fleet: LiveFleet
    model: str
    port: int = PORT
    most: int = 600
    seconds: float = 240
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    answered_from: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        while not self.stop.is_set() and self.sent < self.most and time.monotonic() < deadline:
            started = time.monotonic()
            self.sent += 1
            try:
                answer = ask(self.fleet, self.model, timeout=30, port=self.port)
            except (OSError, urllib.error.URLError) as error:
                self.failures.append(f"request {self.sent}: {error}")
            else:
                where = re.search(r" answered from (\S+) ", answer)
                node = where.group(1) if where else answer
                self.answered_from[node] = self.answered_from.get(node, 0) + 1
            self.slowest = max(self.slowest, time.monotonic() - started)
            time.sleep(0.05)


class Slow:
    """One request that takes `seconds` to answer, sent now, in a thread."""

    def __init__(self, fleet: LiveFleet, model: str, seconds: int) -> None:
        self.answer = "no answer"
        self.done = 0.0

        def send() -> None:
            try:
                self.answer = ask(fleet, model, f"sleep {seconds}", timeout=seconds + 60)
            except (OSError, urllib.error.URLError) as error:
                self.answer = f"failed: {error}"
            self.done = time.monotonic()

        self.thread = threading.Thread(target=send)
        self.thread.start()
        time.sleep(0.5)


def chat_node(ctl: Ctl) -> str:
    (chat,) = [shards for replica, shards in ctl.shards().items() if replica.startswith("chat")]
    return chat[0][0]


def test_requests_by_alias_keep_being_answered_while_replicas_move_and_fall_back(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    with_router(ctl, fleet)
    try:
        # 1. Replicas start, then the router is installed and pointed at them.
        result = ctl("reconcile")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deploy_router.yml: exit 0" in result.stderr, result.stderr
        again = ctl("routes", "--apply")  # the same routes: nothing changes, nothing reloads
        assert again.returncode == 0, again.stdout + again.stderr
        assert "deploy_router.yml: exit 0, 0 change(s)" in again.stderr, again.stderr
        routes = ctl("routes", "--json")
        assert routes.returncode == 0, routes.stdout + routes.stderr
        table = {m["model"]: m for m in json.loads(routes.stdout)["models"]}
        assert all(len(m["endpoints"]) == 1 for m in table.values()), table
        old = chat_node(ctl)
        assert ask(fleet, "assistant").startswith(f"chat answered from {old} (vllm stand-in")
        assert ask(fleet, "coder").startswith("coder answered from ")  # SGLang: openai/
        assert ask(fleet, "small").startswith("tiny answered from ")  # llama-server: openai/

        # 2. Move chat off its node while a client asks for it by alias, through the router.
        # And one slow request, in flight while the router reloads and the old replica drains.
        client = Client(fleet, "assistant")
        loop = threading.Thread(target=client.run)
        loop.start()
        time.sleep(2)
        slow = Slow(fleet, "assistant", 22)
        started = time.monotonic()
        result = ctl("drain", old)
        moved_in = time.monotonic() - started
        time.sleep(2)
        client.stop.set()
        loop.join(timeout=60)
        slow.thread.join(timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert slow.answer.startswith(f"chat answered from {old} "), slow.answer
        new = chat_node(ctl)
        assert new != old
        report = (
            f"{client.sent} requests during a {moved_in:.0f} s move, {len(client.failures)}"
            f" failed, answered from {client.answered_from}, slowest {client.slowest:.1f} s"
        )
        print(report)
        assert client.failures == [], report
        assert set(client.answered_from) == {old, new}, report  # both, and nothing else
        assert client.sent >= 50, report
        uncordoned = run_ctl("uncordon", old, "--inventory", str(ctl.inventory))
        assert uncordoned.returncode == 0, uncordoned.stderr

        # 2b. Ten reloads in a row under a request loop: through the router's address, none
        #     fails; straight to LiteLLM behind it, some may (a worker being replaced drops
        #     a connection it accepted but had not read yet), and HAProxy retries those.
        front, direct = Client(fleet, "assistant"), Client(fleet, "assistant", port=PORT + 1)
        loops = [threading.Thread(target=c.run) for c in (front, direct)]
        for loop in loops:
            loop.start()
        for _ in range(10):
            time.sleep(2)
            fleet.ssh(ROUTER, "systemctl", "reload", "modelfleet-router.service")
        time.sleep(3)
        for client in (front, direct):
            client.stop.set()
        for loop in loops:
            loop.join(timeout=60)
        print(
            f"10 reloads: through the router {front.sent} requests, {len(front.failures)}"
            f" failed (slowest {front.slowest:.1f} s); straight to LiteLLM {direct.sent},"
            f" {len(direct.failures)} failed"
        )
        assert front.failures == [], front.failures

        # 3. chat's replica stops behind the router's back: LiteLLM falls back to coder.
        unit = next(r.unit for n, r in ctl.shards()[replica_of(ctl, "chat")] if r.rank == 0)
        fleet.ssh(new, "systemctl", "stop", str(unit)).check_returncode()
        started = time.monotonic()
        assert ask(fleet, "assistant").startswith("coder answered from ")
        fallback_seconds = time.monotonic() - started
        print(f"fallback by LiteLLM, before ctl knew: {fallback_seconds:.1f} s")
        routes = ctl("routes")
        assert routes.returncode == 1  # chat has no ready replica
        assert "chat: no ready replica (chat-" in routes.stdout, routes.stdout
        assert "coder answers for it" in routes.stdout, routes.stdout
        slow = Slow(fleet, "small", 45)  # in flight while the router reloads (in 15-25 s)
        result = ctl("routes", "--apply")
        applied = time.monotonic()
        assert result.returncode == 1, result.stderr  # applied, but chat is not ready
        assert "routers updated: node-3" in result.stderr, result.stderr
        slow.thread.join(timeout=60)
        assert slow.answer.startswith("tiny answered from "), slow.answer
        assert slow.done > applied  # it was still in flight when the new routes served
        started = time.monotonic()
        for name in ("chat", "assistant"):
            assert ask(fleet, name).startswith("coder answered from ")
        print(f"chat by the alias ctl gives it: {time.monotonic() - started:.2f} s for two")
        # ... and on down the chain: coder stops too; assistant → tiny.
        coder_unit = next(r.unit for n, r in ctl.shards()[replica_of(ctl, "coder")])
        fleet.ssh("node-3", "systemctl", "stop", str(coder_unit)).check_returncode()
        assert ask(fleet, "assistant").startswith("tiny answered from ")
        assert ctl("routes", "--apply").returncode == 1
        assert ask(fleet, "assistant").startswith("tiny answered from ")

        # 3c. ctl reconcile rebuilds both while a client asks for assistant: tiny answers
        #     until chat's new replica has passed its health check and joined the router,
        #     then chat does; not one request fails meanwhile.
        tiny_node = ctl.shards()[replica_of(ctl, "tiny")][0][0]
        client = Client(fleet, "assistant", most=5000, seconds=420)
        loop = threading.Thread(target=client.run)
        loop.start()
        passes: list[str] = []
        try:
            for _ in range(5):  # a failed replica waits out its backoff (30 s at most) first
                result = ctl("reconcile")
                passes.append(result.stdout + result.stderr)
                if ctl("routes").returncode == 0:  # every model has a ready replica
                    break
                time.sleep(31)
            time.sleep(3)
        finally:
            client.stop.set()
            loop.join(timeout=60)
        rebuilt = chat_node(ctl)
        coder_node = ctl.shards()[replica_of(ctl, "coder")][0][0]
        report = (
            f"{client.sent} requests during {len(passes)} reconcile passes that rebuilt chat"
            f" and coder, {len(client.failures)} failed, answered from {client.answered_from}"
        )
        print(report)
        assert ctl("routes").returncode == 0, "\n".join(passes)
        assert client.failures == [], report
        # coder may answer for chat too, in the seconds it is back and chat is not yet.
        assert set(client.answered_from) <= {tiny_node, coder_node, rebuilt}, report
        assert {tiny_node, rebuilt} <= set(client.answered_from), report
        assert ask(fleet, "assistant").startswith(f"chat answered from {rebuilt} ")

        # 4. An empty catalog: everything drains, the router serves nothing.
        ctl.catalog.write_text("models: {}\n")
        result = ctl("reconcile", "--yes")
        assert ctl.shards() == {}, result.stdout + result.stderr
        with pytest.raises(urllib.error.HTTPError):
            ask(fleet, "assistant")
    finally:
        # Installed it stays, like a disk; stopped, so that it takes no memory meanwhile.
        stop_router(fleet, ROUTER)


def replica_of(ctl: Ctl, model: str) -> str:
    (replica,) = [r for r in ctl.shards() if r.startswith(f"{model}-")]
    return replica
