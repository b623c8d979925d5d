"""`ctl reconcile --defragment` on the real test fleet (issue 19): a replica that fits
nowhere is admitted by moving another, while a client asks the router for the moved
model in a loop and not one request fails.

node-1 and node-2 have 8 H100s each. One `chat` replica on each (placed there by cordoning
the other node in turn) leaves 7 free on both, so an 8-GPU replica of `big` fits nowhere,
though the fleet has 14 free GPUs. `ctl place big --dry-run` says which move makes room;
`ctl reconcile --defragment` starts the moved replica's copy beside the other one, waits
for it to serve and routes to it, then drains the old one; the next pass places `big` on
the node the move emptied.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import Ctl, ctl_on_standins
from tests.integration.test_fleet_routes import ROUTER, Client, ask, with_router
from tests.testfleet.router import stop_router

pytestmark = pytest.mark.fleet

CHAT = """\
models:
  chat:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [assistant]
    replicas: {{min: {chats}, max: 8}}
    profiles:
      - {{name: h100x1, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1,
          drain_seconds: 20}}
"""
BIG = """\
  big:
    source: hf://meta-llama/Llama-3.1-70B-Instruct
    replicas: {min: 1}
    profiles:
      - {name: h100x8, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 8,
         tensor_parallel: 8}
"""


def nodes_of(ctl: Ctl, model: str) -> dict[str, str]:
    """replica → its node, for `model`'s replicas as the nodes report them."""
    return {
        replica: placed[0][0]
        for replica, placed in ctl.shards().items()
        if replica.startswith(model + "-")
    }


def cordon(ctl: Ctl, *args: str) -> int:
    """`ctl cordon ARGS` or `ctl uncordon ARGS` on the test's inventory; its exit code."""
    done = run_ctl(*args, "--inventory", str(ctl.inventory), env=ctl.environment)
    return done.returncode


def reconcile_with_only(ctl: Ctl, node: str, other: str, chats: int) -> None:
    """A reconcile while `other` is cordoned: what it starts goes to `node`."""
    assert cordon(ctl, "cordon", other, "--reason", "test: keep new work on " + node) == 0
    ctl.catalog.write_text(CHAT.format(chats=chats))
    result = ctl("reconcile")
    assert result.returncode == 0, result.stdout + result.stderr
    assert cordon(ctl, "uncordon", other) == 0


def test_a_replica_is_moved_to_admit_one_that_fits_nowhere_with_no_request_failing(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    first, second = fleet.names[:2]
    ctl = ctl_on_standins(fleet, tmp_path, CHAT.format(chats=0))
    with_router(ctl, fleet)
    try:
        # One chat replica on each H100 node: 7 GPUs free on both.
        reconcile_with_only(ctl, second, first, 1)
        reconcile_with_only(ctl, first, second, 2)
        chats = nodes_of(ctl, "chat")
        assert sorted(chats.values()) == [first, second], chats

        # An 8-GPU replica fits nowhere; the dry run says which move makes room.
        ctl.catalog.write_text(CHAT.format(chats=2) + BIG)
        refused = ctl("reconcile")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert not nodes_of(ctl, "big")
        advice = ctl("place", "big", "--dry-run")
        move = re.search(r"fits on (\S+) after moving (chat-\d+) \((\S+) GPU", advice.stdout)
        assert move, advice.stdout + advice.stderr
        target, moved, source = move.groups()
        assert target == source and chats[moved] == target, advice.stdout

        # The move, under a client asking for chat by alias through the router.
        client = Client(fleet, "assistant", seconds=180)
        loop = threading.Thread(target=client.run)
        loop.start()
        time.sleep(2)
        began = time.monotonic()
        moving = ctl("reconcile", "--defragment")
        took = time.monotonic() - began
        time.sleep(2)
        client.stop.set()
        loop.join(timeout=60)
        report = (
            f"{client.sent} requests during a {took:.0f} s move, {len(client.failures)} failed"
            f" {client.failures[:3]}, answered from {client.answered_from}"
        )
        print(report + "\n" + moving.stdout)
        assert re.search(
            rf"drain +{moved} +moved to chat-\d+ on \S+: room for big-1", moving.stdout
        ), moving.stdout + moving.stderr
        assert client.failures == [], report
        assert client.sent >= 10, report
        after = nodes_of(ctl, "chat")
        assert moved not in after and len(after) == 2, after
        assert set(after.values()) == {first, second} - {target}, after

        # The next pass places big on the node the move emptied.
        placed = ctl("reconcile")
        assert placed.returncode == 0, placed.stdout + placed.stderr
        assert list(nodes_of(ctl, "big").values()) == [target], placed.stdout
        assert ask(fleet, "assistant").startswith("chat answered from ")
    finally:
        stop_router(fleet, ROUTER)
        for node in (first, second):
            cordon(ctl, "uncordon", node)
        ctl.catalog.write_text("models: {}\n")
        ctl("reconcile", "--yes")
