"""Load what every command starts from: the catalog, the inventory and a snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.errors import InputError
from cli.facts.gpuclass import gpu_class
from cli.facts.store import load_facts_dir
from cli.inventory.load import load_inventory
from cli.inventory.schema import Inventory


@dataclass(frozen=True)
class Fleet:
    inventory: Inventory
    snapshot: Snapshot


def load_fleet(inventory_path: Path, facts_dir: Path | None) -> Fleet:
    inventory = load_inventory(inventory_path)
    if facts_dir is None:
        raise InputError.single(
            "--facts",
            None,
            (),
            "no facts to read: pass --facts DIR with a snapshot (see examples/facts)",
        )
    facts = load_facts_dir(facts_dir)
    if not facts:
        raise InputError.single(str(facts_dir), None, (), "no NAME.json facts files here")
    # A snapshot is one moment: the newest gather in it, so an example read next year
    # says what it said the day it was written.
    now = max(f.gathered_at for f in facts.values())
    what_if = {name: f.host_vars for name, f in facts.items() if f.host_vars is not None}
    snapshot = build_snapshot(inventory.hosts, facts, now, gpu_class, what_if_vars=what_if)
    return Fleet(inventory, snapshot)
