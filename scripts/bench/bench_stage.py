"""Benchmark: time to serving with weights staged first, against an engine that fetches
them inside its own start; and a move to a node without the weights against one to a node
that holds them.

On the local test fleet's first three nodes (scripts/testfleet; the stand-in engines of
tests/fakes/engine.py, whose llama-server downloads `--model-url` into its cache before it
listens, as llama.cpp's does), a generated GGUF-named file of --size-gb (2 by default) is
served by the fake hub of tests/fakes/hub.py on loopback, optionally at --rate MB/s, and one
llama.cpp replica of it is run through the real `ctl`:

1. engine fetches: staging off (`modelfleet_stage_weights: false`): `ctl reconcile` starts
   `llama-server --model-url`, which downloads inside the readiness wait;
2. staged: staging on: `ctl reconcile` stages the file in the node's model store, then
   starts `llama-server -m` on it;
3. move, weights not there: `ctl drain` of its node: the replacement's node stages first;
4. move to a holder: back to the first node, which holds the weights: nothing downloaded.

Each is timed from the command's start to its end (every replica verified serving), with
the bytes the hub sent. Not a test: it prints figures, and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import testfleet
from tests.fakes.hub import Hub, run_hub
from tests.testfleet.engines import REMOVE_REPLICAS, install_engines

ROOT = Path(__file__).resolve().parents[2]
NODES = 3
CLEAN = REMOVE_REPLICAS + "; rm -rf /var/lib/modelfleet/models /root/.cache/llama.cpp"


def on_nodes(fleet: testfleet.Fleet, script: str) -> None:
    for node in fleet.nodes[:NODES]:
        command = fleet.ssh_command(node.name, f"sh -c {shlex.quote(script)}")
        subprocess.run(command, check=True, timeout=300, capture_output=True)


def inventory_of(fleet: testfleet.Fleet, directory: Path, staging: bool) -> Path:
    target = directory / ("staged" if staging else "engine-fetches")
    shutil.copytree(fleet.inventory_dir, target)
    hosts = target / "hosts.yml"
    keep = {n.name for n in fleet.nodes[:NODES]}
    data = yaml.safe_load(hosts.read_text())
    data["all"]["hosts"] = {k: v for k, v in data["all"]["hosts"].items() if k in keep}
    for group in data["all"].get("children", {}).values():
        group["hosts"] = {k: v for k, v in (group.get("hosts") or {}).items() if k in keep}
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    settings = target / "group_vars" / "all.yml"
    text = settings.read_text().replace(
        "modelfleet_stage_weights: false", f"modelfleet_stage_weights: {str(staging).lower()}"
    )
    settings.write_text(text + "modelfleet_health_timeout: 1800\n")
    return target


class Ctl:
    def __init__(self, inventory: Path, catalog: Path, state: Path) -> None:
        self.inventory, self.catalog, self.state = inventory, catalog, state

    def __call__(self, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
        environment = {
            key: value for key, value in os.environ.items() if not key.startswith("MODELFLEET_")
        }
        environment |= {"XDG_STATE_HOME": str(self.state), "COLUMNS": "160"}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "cli", "--timeout", "5", *args, "--catalog",
             str(self.catalog), "--inventory", str(self.inventory)],
            capture_output=True, text=True, cwd=ROOT, env=environment, timeout=3600,
            check=False,
        )  # fmt: skip
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"ctl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return seconds, done

    def node(self) -> str:
        _, shown = self("reconcile", "--dry-run", "--json")
        data = json.loads(shown.stdout)
        running = data["plan"]["running"].get("tiny", [])
        if len(running) != 1:
            raise SystemExit(f"expected one tiny replica, found {running}")
        listed = subprocess.run(
            [sys.executable, "-m", "cli", "nodes", "--json", "--inventory", str(self.inventory)],
            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
            env={**os.environ, "XDG_STATE_HOME": str(self.state)},
        )  # fmt: skip
        for node in json.loads(listed.stdout)["nodes"]:
            if any(shard["replica"] == running[0] for shard in node["shards"]):
                return str(node["name"])
        raise SystemExit(f"no node runs {running[0]}")

    def uncordon(self, node: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "cli", "uncordon", node, "--inventory", str(self.inventory)],
            capture_output=True, cwd=ROOT, timeout=120, check=True,
        )  # fmt: skip


def step(name: str, seconds: float, hub: Hub, before: int, staged_lines: int) -> dict[str, object]:
    return {
        "step": name,
        "seconds": round(seconds, 2),
        "downloaded_bytes": hub.bytes_sent - before,
        "progress_lines": staged_lines,
    }


def measure(fleet: testfleet.Fleet, size: int, rate: float | None) -> list[dict[str, object]]:
    on_nodes(fleet, CLEAN)
    figures: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-stage-") as scratch:
        root = Path(scratch)
        (root / "hub" / "files").mkdir(parents=True)
        with (root / "hub" / "files" / "model.gguf").open("wb") as model:
            model.truncate(size)  # sparse: the bytes sent are what is measured
        with run_hub(root / "hub", bytes_per_second=rate) as hub:
            source = f"{hub.endpoint}/files/model.gguf"
            catalog = root / "catalog.yaml"
            catalog.write_text(
                "models:\n  tiny:\n"
                f"    source: {source}\n"
                "    profiles:\n"
                "      - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 1}\n"
            )
            for staging in (False, True):
                ctl = Ctl(inventory_of(fleet, root, staging), catalog, root / f"state-{staging}")
                before = hub.bytes_sent
                seconds, done = ctl("reconcile")
                lines = len(re.findall(r"^  staging ", done.stderr, re.MULTILINE))
                figures.append(
                    step("staged" if staging else "engine fetches", seconds, hub, before, lines)
                )
                if not staging:
                    on_nodes(fleet, CLEAN)
                    continue
                first = ctl.node()
                before = hub.bytes_sent
                seconds, done = ctl("drain", first)
                lines = len(re.findall(r"^  staging ", done.stderr, re.MULTILINE))
                figures.append(step("move, weights not there", seconds, hub, before, lines))
                second = ctl.node()
                ctl.uncordon(first)
                before = hub.bytes_sent
                seconds, done = ctl("drain", second)
                figures.append(step("move to a holder", seconds, hub, before, 0))
                if ctl.node() != first:
                    raise SystemExit(f"the replica did not go back to {first}")
                ctl.uncordon(second)
    on_nodes(fleet, CLEAN)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="the model's size")
    parser.add_argument("--rate", type=float, help="the hub's speed, MB/s (default: loopback's)")
    arguments = parser.parse_args()
    size = int(arguments.size_gb * 1e9)
    rate = arguments.rate * 1e6 if arguments.rate else None
    state = testfleet.state_dir()
    configured = len(testfleet.status(state))
    result = testfleet.up(max(NODES, configured), state=state, say=lambda _: None)
    install_engines(result.fleet, list(result.fleet.names()[:NODES]), lambda _: None)
    figures = measure(result.fleet, size, rate)
    by_step = {str(f["step"]): float(str(f["seconds"])) for f in figures}
    print(f"staging benchmark: a {size / 1e9:g} GB model, {NODES} test-fleet nodes,"
          f" hub at {'loopback speed' if rate is None else f'{rate / 1e6:g} MB/s'}")  # fmt: skip
    for figure in figures:
        print(
            f"  {figure['step']:<24} {figure['seconds']:>8} s  "
            f"{int(str(figure['downloaded_bytes'])) / 1e9:6.2f} GB downloaded,"
            f" {figure['progress_lines']} progress lines"
        )
    ratios = {
        "first_start_engine_over_staged": round(by_step["engine fetches"] / by_step["staged"], 2),
        "move_without_over_with_weights": round(
            by_step["move, weights not there"] / by_step["move to a holder"], 2
        ),
    }
    print(
        f"  first start, engine fetching ÷ staged: {ratios['first_start_engine_over_staged']}×;"
        f" a move without the weights ÷ to a holder: {ratios['move_without_over_with_weights']}×"
    )
    print(json.dumps({"size_bytes": size, "figures": figures, "ratios": ratios}))


if __name__ == "__main__":
    main()
