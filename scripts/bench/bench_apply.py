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

With --wide N (issue 33, Ansible at scale): one replica on each of node-1..node-N at once
(examples/testfleet/wide-catalog.yaml, placed by ctl's planner: 64 replicas on 64 nodes),
started by ctl's executor in one ansible-playbook run, then stopped, draining, in one more;
once with ctl's own settings and once with each variant of Ansible's forks, pipelining and
the start play's strategy (VARIANTS), the nodes emptied between. Each line gives the wall
time and the CPU time of ansible-playbook and its children (its forks, its ssh clients).
Goal: none; it is what chose ctl's settings (cli/edges/ansible.py).

    python scripts/bench/bench_apply.py [--wide N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import cli.edges.ansible as ansible_edge
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
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import testfleet
from tests.fakes.standin_install import INSTALL_ENGINES, INSTALL_FLAG_DATA, flag_data_tar
from tests.testfleet.engines import REMOVE_REPLICAS

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "testfleet" / "bench-catalog.yaml"
WIDE_CATALOG = ROOT / "examples" / "testfleet" / "wide-catalog.yaml"
WIDE_PLAN_ATTEMPTS = 4
ENGINE = ROOT / "tests" / "fakes" / "engine.py"
NODES = 8
GOAL = 3.0

CLEAN = REMOVE_REPLICAS


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


def on_every_node(
    fleet: testfleet.Fleet, script: str, data: bytes = b"", nodes: int = NODES
) -> None:
    def run_on(name: str) -> None:
        command = fleet.ssh_command(name, f"sh -c {shlex.quote(script)}")
        subprocess.run(command, input=data, check=True, timeout=120, capture_output=True)

    # Eight at a time: the nodes' sshd share this machine's CPUs with the client.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(run_on, [node.name for node in fleet.nodes[:nodes]]))


def inventory_of(fleet: testfleet.Fleet, directory: Path, nodes: int = NODES) -> Path:
    """The fleet's inventory, its first `nodes` nodes only."""
    import yaml

    target = directory / "inventory"
    shutil.copytree(fleet.inventory_dir, target)
    hosts = target / "hosts.yml"
    keep = {n.name for n in fleet.nodes[:nodes]}
    data = yaml.safe_load(hosts.read_text())
    data["all"]["hosts"] = {k: v for k, v in data["all"]["hosts"].items() if k in keep}
    for group in data["all"].get("children", {}).values():
        group["hosts"] = {k: v for k, v in (group.get("hosts") or {}).items() if k in keep}
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def the_plan(inventory: Path, state: Path, catalog_path: Path = CATALOG) -> Plan:
    catalog = load_catalog(catalog_path)
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--wide", type=int, metavar="N", help="one replica on each of N nodes")
    parser.add_argument(
        "--variants",
        default="ctl,forks32,forks16,no-pipelining,start-linear,ctl",
        help=f"with --wide, in this order, of: {', '.join(VARIANTS)}",
    )
    arguments = parser.parse_args(argv)
    if arguments.wide:
        names = arguments.variants.split(",")
        unknown = [name for name in names if name not in VARIANTS]
        if unknown:
            parser.error(f"unknown variants {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
        wide_main(arguments.wide, names)
        return
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
    on_every_node(fleet, CLEAN + "; " + INSTALL_ENGINES, ENGINE.read_bytes())
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


# ===================================================================== --wide: Ansible at scale

# name → (Ansible settings over ctl's own, the start play's strategy or None for the
# playbook's own). --variants picks some, in its order: ctl's twice (first and last) shows
# the machine's drift between runs.
Variant = tuple[Mapping[str, str], str | None]
VARIANTS: dict[str, Variant] = {
    "ctl": ({}, None),
    "forks32": ({"ANSIBLE_FORKS": "32"}, None),
    "forks16": ({"ANSIBLE_FORKS": "16"}, None),
    "forks8": ({"ANSIBLE_FORKS": "8"}, None),
    "no-pipelining": ({"ANSIBLE_PIPELINING": "False"}, None),
    "start-linear": ({}, "linear"),
}


@contextmanager
def ansible_variant(overrides: Mapping[str, str], strategy: str | None) -> Iterator[None]:
    """ctl's executor with `overrides` over the environment ctl gives ansible-playbook, and
    with the start play's `strategy:` replaced (in a copy of the playbooks)."""
    environment = ansible_edge.playbook_environment
    directory = ansible_edge.playbooks_dir
    with tempfile.TemporaryDirectory(prefix="bench-apply-playbooks-") as scratch:
        if strategy is not None:
            copy = Path(scratch) / "playbooks"
            shutil.copytree(directory(), copy)
            start = copy / "start_shards.yml"
            text = start.read_text()
            if "  strategy: free\n" not in text:
                raise SystemExit("bench_apply: start_shards.yml no longer says `strategy: free`")
            start.write_text(text.replace("  strategy: free\n", f"  strategy: {strategy}\n"))
            ansible_edge.playbooks_dir = lambda: copy
        ansible_edge.playbook_environment = lambda environ, settings: environment(
            environ, {**settings, **overrides}
        )
        try:
            yield
        finally:
            ansible_edge.playbook_environment = environment
            ansible_edge.playbooks_dir = directory


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wide_run(
    label: str, fleet: testfleet.Fleet, inventory: Path, scratch: Path, nodes: int
) -> dict[str, object]:
    """One variant: every node's replica started in one run and stopped in another."""
    executor = AnsibleExecutor(inventory, inventory / KNOWN_HOSTS_NAME, scratch / "logs")
    # Right after a run with 64 forks the machine's load is in the tens, and a node's login
    # can outlast ctl's connect timeout: it is left out of the plan. Plan again, a few times.
    for attempt in range(1, WIDE_PLAN_ATTEMPTS + 1):
        reconcile = the_plan(inventory, scratch / "state", WIDE_CATALOG)
        touched = {files.node for start in reconcile.starts for files in start.files}
        if len(touched) == nodes:
            break
        left = sorted({n.name for n in fleet.nodes[:nodes]} - touched, key=testfleet.node_index)
        message = f"the plan touches {len(touched)} nodes, not {nodes}: not {', '.join(left)}"
        if attempt == WIDE_PLAN_ATTEMPTS:
            raise SystemExit(f"bench_apply: {message}")
        print(f"bench_apply: {message}; planning again in 15 s", file=sys.stderr, flush=True)
        time.sleep(15)
    cpu, started = _children_cpu(), time.monotonic()
    outcome = apply(reconcile, executor, datetime.now(UTC), random.Random(7))
    seconds, start_cpu = time.monotonic() - started, _children_cpu() - cpu
    runs = len(executor.runs)
    stops = [
        Stop(start.replica, start.model, tuple(
            RunningShard(f.node, ShardRecord.model_validate_json(f.record_text))
            for f in start.files
        ), "benchmark", drain=True)
        for start in reconcile.starts
    ]  # fmt: skip
    cpu, stopping = _children_cpu(), time.monotonic()
    stop_failures = executor.stop(stops)
    stop_seconds, stop_cpu = time.monotonic() - stopping, _children_cpu() - cpu
    on_every_node(fleet, CLEAN, nodes=nodes)
    return {
        "variant": label,
        "nodes": len(touched),
        "seconds": round(seconds, 2),
        "cpu_seconds": round(start_cpu, 2),
        "playbook_runs": runs,
        "started": len(outcome.started),
        "failed": len(outcome.failed),
        "stop_seconds": round(stop_seconds, 2),
        "stop_cpu_seconds": round(stop_cpu, 2),
        "stop_failed": len(stop_failures),
        "first_failure": next(iter(outcome.failed.values()), None),
    }


def wide_main(nodes: int, variants: Sequence[str]) -> None:
    state = testfleet.state_dir()
    configured = len(testfleet.status(state))
    result = testfleet.up(max(nodes, configured), state=state, say=lambda _: None)
    figures: list[dict[str, object]] = []
    try:
        fleet = result.fleet
        on_every_node(fleet, CLEAN + "; " + INSTALL_ENGINES, ENGINE.read_bytes(), nodes=nodes)
        on_every_node(fleet, INSTALL_FLAG_DATA, flag_data_tar(), nodes=nodes)
        with tempfile.TemporaryDirectory(prefix="bench-apply-wide-") as directory:
            inventory = inventory_of(fleet, Path(directory), nodes)
            for number, label in enumerate(variants):
                scratch = Path(directory) / f"variant-{number}"
                with ansible_variant(*VARIANTS[label]):
                    figures.append(wide_run(label, fleet, inventory, scratch, nodes))
                print(f"bench_apply: {json.dumps(figures[-1])}", file=sys.stderr, flush=True)
    finally:
        if 0 < configured < nodes:
            testfleet.up(configured, state=state, say=lambda _: None)
    wide_report(nodes, figures)


def wide_report(nodes: int, figures: list[dict[str, object]]) -> None:
    load = os.getloadavg()[0]
    print(
        f"apply at scale: one replica on each of {nodes} test-fleet nodes, one playbook run"
        f" to start them and one to stop them; Python {sys.version.split()[0]}, load {load:.1f}"
    )
    for f in figures:
        print(
            f"  {f['variant']:<22} start {f['seconds']:>6} s (CPU {f['cpu_seconds']:>6} s),"
            f" {f['started']}/{f['nodes']} started, {f['failed']} failed;"
            f" stop {f['stop_seconds']:>6} s (CPU {f['stop_cpu_seconds']:>6} s),"
            f" {f['stop_failed']} failed"
        )
        if f["first_failure"]:
            print(f"    first failure: {f['first_failure']}")
    print(json.dumps({"bench": "apply-wide", "nodes": nodes, "figures": figures}))


if __name__ == "__main__":
    main()
