"""Benchmark: applying a plan batched (one playbook run per phase) against one run per shard.

On the local test fleet (scripts/testfleet, eight nodes, the stand-in engines of
tests/fakes/engine.py installed as vllm, llama-server and sglang), the workload of
examples/testfleet/bench-catalog.yaml — 12 replicas, two of them over two nodes — is
reconciled onto empty nodes twice: with ctl's executor, which starts every worker in one
ansible-playbook run and every rank 0 in the next, and with an executor that runs the
same playbook once per shard (workers still first). Each run is timed from the plan to
every replica serving, and the playbook runs are counted; then every replica is stopped,
draining, the same way (batched, or a run per shard), timed apart. Between runs the nodes
are emptied, and a fleet that had fewer than eight nodes is left with the ones it had.
Goal: batched starts at least 3x faster. Not a test: it prints figures.
"""

from __future__ import annotations

import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from cli.catalog.load import load_catalog
from cli.facts.model import ShardRecord
from cli.inventory.load import load_inventory
from cli.ops.context import KNOWN_HOSTS_NAME, AppContext
from cli.ops.executor import AnsibleExecutor
from cli.ops.fleet import gather_fleet, model_stores, serving_addresses
from cli.reconcile.apply import ShardFailure, apply
from cli.reconcile.planner import Plan, RunningShard, Stop, plan
from cli.shards.units import ShardFiles

# Run as a file, not a module: the project root, where the test fleet's package is
# (tests/testfleet), is not on the path of a script in scripts/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import testfleet
from tests.fakes.standin_install import INSTALL_FLAG_DATA, flag_data_tar
from tests.testfleet.engines import REMOVE_REPLICAS

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "examples" / "testfleet" / "bench-catalog.yaml"
ENGINE = ROOT / "tests" / "fakes" / "engine.py"
NODES = 8
GOAL = 3.0

CLEAN = REMOVE_REPLICAS
INSTALL = (
    "set -e; install -d /usr/local/lib/python3.11/dist-packages/sglang /etc/modelfleet-fake;"
    " cat > /usr/local/bin/vllm; chmod 755 /usr/local/bin/vllm;"
    " cp /usr/local/bin/vllm /usr/local/bin/llama-server;"
    " cp /usr/local/bin/vllm /usr/local/lib/python3.11/dist-packages/sglang/launch_server.py;"
    " : > /usr/local/lib/python3.11/dist-packages/sglang/__init__.py;"
    " echo '{\"load_seconds\": 0.5}' > /etc/modelfleet-fake/standin.json"
)


class PerShardExecutor(AnsibleExecutor):
    """The naive way: one ansible-playbook run for each shard."""

    def start(
        self, shards: Sequence[ShardFiles], verify: Sequence[ShardFiles] = ()
    ) -> dict[tuple[str, str], ShardFailure]:
        failures: dict[tuple[str, str], ShardFailure] = {}
        for files in shards:
            failures |= super().start([files])
        return failures | (super().start([], verify) if verify else {})

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        failures: dict[tuple[str, str], str] = {}
        for stop in stops:
            for shard in stop.shards:
                one = Stop(stop.replica, stop.model, (shard,), stop.reason, stop.drain)
                failures |= super().stop([one])
        return failures


def on_every_node(fleet: testfleet.Fleet, script: str, data: bytes = b"") -> None:
    for node in fleet.nodes[:NODES]:
        command = fleet.ssh_command(node.name, f"sh -c {shlex.quote(script)}")
        subprocess.run(command, input=data, check=True, timeout=120, capture_output=True)


def inventory_of(fleet: testfleet.Fleet, directory: Path) -> Path:
    """The fleet's inventory, its first eight nodes only."""
    import shutil

    import yaml

    target = directory / "inventory"
    shutil.copytree(fleet.inventory_dir, target)
    hosts = target / "hosts.yml"
    keep = {n.name for n in fleet.nodes[:NODES]}
    data = yaml.safe_load(hosts.read_text())
    data["all"]["hosts"] = {k: v for k, v in data["all"]["hosts"].items() if k in keep}
    for group in data["all"].get("children", {}).values():
        group["hosts"] = {k: v for k, v in (group.get("hosts") or {}).items() if k in keep}
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def the_plan(inventory: Path, state: Path) -> Plan:
    catalog = load_catalog(CATALOG)
    hosts = load_inventory(inventory)
    fleet = gather_fleet(hosts, inventory, AppContext(state_dir=state))
    addresses, listen = serving_addresses(hosts)
    return plan(
        catalog, fleet.snapshot, {}, addresses, random.Random(7), listen=listen,
        stores=model_stores(hosts),  # the test fleet's: no staging, its nodes reach no hub
    )  # fmt: skip


def run(mode: str, executor: AnsibleExecutor, inventory: Path, state: Path) -> dict[str, object]:
    started = time.monotonic()
    reconcile = the_plan(inventory, state)
    outcome = apply(reconcile, executor, datetime.now(UTC), random.Random(7))
    seconds = time.monotonic() - started
    runs = len(executor.runs)
    # Then retire them all, draining, as a reconcile retires a replica it moved.
    stops = [
        Stop(start.replica, start.model, tuple(
            RunningShard(f.node, ShardRecord.model_validate_json(f.record_text))
            for f in start.files
        ), "benchmark", drain=True)
        for start in reconcile.starts
    ]  # fmt: skip
    stopping = time.monotonic()
    stop_failures = executor.stop(stops)
    stop_seconds = time.monotonic() - stopping
    replicas = len(reconcile.starts)
    shards = sum(len(s.files) for s in reconcile.starts)
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "playbook_runs": runs,
        "replicas": replicas,
        "shards": shards,
        "started": len(outcome.started),
        "failed": len(outcome.failed),
        "stop_seconds": round(stop_seconds, 2),
        "stop_playbook_runs": len(executor.runs) - runs,
        "stop_failed": len(stop_failures),
        # One reason is enough to see what broke: they are usually all the same.
        "first_failure": next(iter(outcome.failed.values()), None),
    }


def main() -> None:
    state = testfleet.state_dir()
    # Never fewer nodes than are configured: up(N) stops the nodes beyond N, and a test
    # session (tests/integration/test_benchmarks.py runs this) may be using them.
    configured = len(testfleet.status(state))
    result = testfleet.up(max(NODES, configured), state=state, say=lambda _: None)
    try:
        figures = measure(result.fleet)
    finally:
        # Left as it was found, as bench_facts leaves it: a test session that booted three
        # nodes reads their inventory and known_hosts after this, and must not find eight.
        if 0 < configured < NODES:
            testfleet.up(configured, state=state, say=lambda _: None)
    report(figures)


def measure(fleet: testfleet.Fleet) -> list[dict[str, object]]:
    on_every_node(fleet, CLEAN + "; " + INSTALL, ENGINE.read_bytes())
    on_every_node(fleet, INSTALL_FLAG_DATA, flag_data_tar())  # the options it checks
    figures = []
    with tempfile.TemporaryDirectory(prefix="bench-apply-") as scratch:
        root = Path(scratch)
        inventory = inventory_of(fleet, root)
        known = inventory / KNOWN_HOSTS_NAME
        for mode, kind in (("batched", AnsibleExecutor), ("per shard", PerShardExecutor)):
            executor = kind(inventory, known, root / mode.replace(" ", "-") / "logs")
            figures.append(run(mode, executor, inventory, root / "state"))
            on_every_node(fleet, CLEAN)
    return figures


def report(figures: list[dict[str, object]]) -> None:
    batched, naive = figures
    speedup = float(str(naive["seconds"])) / float(str(batched["seconds"]))
    python = sys.version.split()[0]
    print(f"apply benchmark: {NODES} test-fleet nodes, {CATALOG.name}, Python {python}")
    for figure in figures:
        print(
            f"  {figure['mode']:<10} {figure['seconds']:>7} s  {figure['playbook_runs']:>3}"
            f" playbook runs  {figure['replicas']} replicas / {figure['shards']} shards,"
            f" {figure['started']} started, {figure['failed']} failed"
        )
        print(
            f"  {'':<10} {figure['stop_seconds']:>7} s  {figure['stop_playbook_runs']:>3}"
            f" playbook runs  to stop them all, draining; {figure['stop_failed']} failed"
        )
        if figure["first_failure"]:
            print(f"    first failure: {figure['first_failure']}")
    # A run that did not start everything measured something else: it cannot pass.
    complete = all(
        f["started"] == f["replicas"] and not f["failed"] and not f["stop_failed"] for f in figures
    )
    verdict = "PASS" if speedup >= GOAL and complete else "FAIL"
    print(f"  batched is {speedup:.1f}x faster  {verdict}  goal >= {GOAL:g}x")
    print(json.dumps({"bench": "apply", "figures": figures, "speedup": round(speedup, 2)}))


if __name__ == "__main__":
    main()
