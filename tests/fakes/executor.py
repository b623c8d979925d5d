"""A fake Executor: a real implementation of the interface over an in-memory fleet.

It keeps the shard records each node would hold, starts and stops them as the playbooks
would, and can be told to fail a shard or to be interrupted, so apply() is tested for
what ends up running, not for which mocks were called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cli.cluster.snapshot import Snapshot, with_shards
from cli.facts.model import ShardRecord
from cli.reconcile.planner import Stop
from cli.shards.units import ShardFiles, unit_name


@dataclass
class FakeFleet:
    records: dict[tuple[str, str], ShardRecord] = field(default_factory=dict)  # (node, unit)
    fail: set[tuple[str, int]] = field(default_factory=set)  # (replica, rank) that won't start
    interrupt_on_rank0: bool = False
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def start(self, shards: Sequence[ShardFiles]) -> dict[tuple[str, str], str]:
        self.calls.append(("start", tuple(f"{f.replica}/{f.rank}" for f in shards)))
        if self.interrupt_on_rank0 and any(f.rank == 0 for f in shards):
            for files in shards:  # some got started before the operator pressed Ctrl-C
                self.records[(files.node, files.unit)] = ShardRecord.model_validate_json(
                    files.record_text
                )
            raise KeyboardInterrupt
        failures = {}
        for files in shards:
            record = ShardRecord.model_validate_json(files.record_text)
            if (files.replica, files.rank) in self.fail:
                self.records[(files.node, files.unit)] = record.model_copy(
                    update={"state": "failed"}
                )
                failures[(files.node, files.unit)] = "health check timed out"
            else:
                self.records[(files.node, files.unit)] = record
        return failures

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        self.calls.append(("stop", tuple(s.replica for s in stops)))
        for stop in stops:
            for shard in stop.shards:
                self.records.pop((shard.node, unit_name(stop.replica, shard.record.rank)), None)
        return {}

    def running(self) -> set[str]:
        return {record.replica for record in self.records.values()}

    def snapshot(self, before: Snapshot) -> Snapshot:
        """`before` with the shards this fake fleet now runs."""
        nodes = [
            with_shards(node, [r for (n, _), r in sorted(self.records.items()) if n == node.name])
            for node in before.nodes
        ]
        return replace(before, nodes=tuple(nodes))
