"""The workload of `scripts/bench/bench_apply.py --wide 64` (examples/testfleet/wide-catalog.yaml)
is what the benchmark says it times: ctl's planner puts one replica on each of the test
fleet's 64 default nodes, from the facts their probe output gives (the simulated probe of
scripts/bench/bench_scale.py, which the fleet's own fake hardware shapes)."""

from __future__ import annotations

import collections
import importlib.util
import random
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import yaml

from cli.catalog.load import load_catalog
from cli.cluster import DEFAULT_LOST_AFTER
from cli.cluster.snapshot import build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.probe import facts_from_probe
from cli.inventory.load import load_inventory
from cli.ops.fleet import serving_addresses
from cli.reconcile.planner import plan
from tests.testfleet.defaults import default_spec
from tests.testfleet.specs import node_address, node_name

ROOT = Path(__file__).resolve().parents[3]
NODES = 64


def bench_scale() -> ModuleType:
    path = ROOT / "scripts" / "bench" / "bench_scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


def test_the_wide_catalog_puts_one_replica_on_each_of_64_default_nodes(tmp_path: Path) -> None:
    simulated_node = bench_scale().simulated_node
    names = [node_name(index) for index in range(1, NODES + 1)]
    hosts = {name: {"ansible_host": node_address(i + 1)} for i, name in enumerate(names)}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    inventory = load_inventory(tmp_path)
    now = datetime.now(UTC)
    facts = {
        node_name(i): facts_from_probe(
            simulated_node(node_name(i), node_address(i), default_spec(i)).output().decode(), now
        )
        for i in range(1, NODES + 1)
    }
    snapshot = build_snapshot(inventory.hosts, facts, now, gpu_class, DEFAULT_LOST_AFTER)
    addresses, listen = serving_addresses(inventory)
    catalog = load_catalog(ROOT / "examples" / "testfleet" / "wide-catalog.yaml")
    wide = plan(catalog, snapshot, {}, addresses, random.Random(7), listen=listen)
    per_node = collections.Counter(f.node for start in wide.starts for f in start.files)
    assert sorted(per_node, key=names.index) == names
    assert set(per_node.values()) == {1}
