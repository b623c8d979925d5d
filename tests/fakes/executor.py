"""A fake Executor: a real implementation of the interface over an in-memory fleet.

It keeps the shard records each node would hold, starts and stops them as the playbooks
would, and can be told to fail a shard or to be interrupted, so apply() is tested for
what ends up running, not for which mocks were called. It is also a Router: it keeps the
replicas a router would send requests to, and notes every replica stopped while still
routed and every one routed before its rank 0 served.

It is no more forgiving than a node: a shard asking for a GPU another of its shards holds
fails to start (CUDA would refuse the memory), and so does one whose port or rendezvous
port is already bound there (the engine's bind fails: "address already in use"). A shard
can be made to fail at start, or to die after its unit started (found when its replica's
rank 0 is checked, as the playbook's checks find it), each with the journal lines its node
would send. A stop can be made to fail, as a unit that will not stop does. Weights are
staged per node and source, and a shard started on a staged path that was never staged
there fails as its engine would; a staging can be made to fail.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cli.cluster.snapshot import Snapshot, with_shards
from cli.facts.model import DEFAULT_MODEL_STORE, ShardRecord
from cli.reconcile.apply import ShardFailure
from cli.reconcile.planner import Start, Stop
from cli.shards.engines import RENDEZVOUS_OFFSET
from cli.shards.staging import StageJob
from cli.shards.units import ShardFiles, unit_name


def _ports(record: ShardRecord) -> set[int]:
    """What a shard binds on its node: its port, and rank 0's rendezvous beside it."""
    if record.port is None:
        return set()
    if record.nodes > 1 and record.rank == 0:
        return {record.port, record.port + RENDEZVOUS_OFFSET}
    return {record.port}


@dataclass
class FakeFleet:
    records: dict[tuple[str, str], ShardRecord] = field(default_factory=dict)  # (node, unit)
    fail: set[tuple[str, int]] = field(default_factory=set)  # (replica, rank) that won't start
    die: set[tuple[str, int]] = field(default_factory=set)  # start, then exit before checked
    journal: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    fail_stop: set[str] = field(default_factory=set)  # replicas whose units will not stop
    interrupt_on_rank0: bool = False
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    stop_calls: list[tuple[str, ...]] = field(default_factory=list)  # per stop: replica/rank
    verified: list[tuple[str, ...]] = field(default_factory=list)  # per start: shards checked
    routed: set[str] = field(default_factory=set)  # replicas the router sends requests to
    route_error: str | None = None  # set: every router update fails with this
    stopped_while_routed: list[str] = field(default_factory=list)
    routed_before_serving: list[str] = field(default_factory=list)
    stored: set[str] = field(default_factory=set)  # staged directories: <store>/<directory>
    fail_stage: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, source) → why
    staged: list[tuple[str, str]] = field(default_factory=list)  # (node, source) downloaded

    def start(
        self, shards: Sequence[ShardFiles], verify: Sequence[ShardFiles] = ()
    ) -> dict[tuple[str, str], ShardFailure]:
        self.calls.append(("start", tuple(f"{f.replica}/{f.rank}" for f in shards)))
        self.verified.append(tuple(f"{f.replica}/{f.rank}" for f in verify))
        if self.interrupt_on_rank0 and any(f.rank == 0 for f in shards):
            for files in shards:  # some got started before the operator pressed Ctrl-C
                self.records[(files.node, files.unit)] = ShardRecord.model_validate_json(
                    files.record_text
                )
            raise KeyboardInterrupt
        failures: dict[tuple[str, str], ShardFailure] = {}
        for files in shards:
            key = (files.replica, files.rank)
            record = ShardRecord.model_validate_json(files.record_text)
            clash = self._clash(files.node, record) or self._unstaged(files)
            journal = self.journal.get(key, ())
            if clash is not None:
                failures[(files.node, files.unit)] = ShardFailure(clash, journal)
            elif key in self.fail or key in self.die:
                self.records[(files.node, files.unit)] = record.model_copy(
                    update={"state": "failed"}
                )
                if key in self.fail:
                    why = "not healthy after 600 s"
                    failures[(files.node, files.unit)] = ShardFailure(why, journal)
                elif files.rank == 0:  # the health check sees it go
                    why = "unit failed: its process exited with status 1"
                    failures[(files.node, files.unit)] = ShardFailure(why, journal)
            else:
                self.records[(files.node, files.unit)] = record
        for files in verify:
            found = self.records.get((files.node, files.unit))
            if found is None or found.state != "running":
                why = "unit failed: its process exited with status 1"
                journal = self.journal.get((files.replica, files.rank), ())
                failures[(files.node, files.unit)] = ShardFailure(why, journal)
        return failures

    def adopt(self, snapshot: Snapshot) -> None:
        """Run what `snapshot`'s nodes report, as if started before."""
        for node in snapshot.nodes:
            for record in node.shards:
                self.records[(node.name, unit_name(record.replica, record.rank))] = record

    def _clash(self, node: str, record: ShardRecord) -> str | None:
        """Why `record` cannot start beside what already runs on `node`, or None."""
        for (where, _), other in sorted(self.records.items()):
            if where != node or other.replica == record.replica or other.state == "stopped":
                continue
            gpus = sorted(set(record.gpus) & set(other.gpus))
            if gpus:
                return f"GPU {gpus[0]} is in use by {other.replica}"
            ports = sorted(_ports(record) & _ports(other))
            if ports:
                return f"port {ports[0]}: address already in use ({other.replica})"
        return None

    def stage(self, jobs: Sequence[StageJob]) -> dict[tuple[str, str], str]:
        self.calls.append(("stage", tuple(f"{j.source}@{j.node}" for j in jobs)))
        assert len({(j.node, j.source) for j in jobs}) == len(jobs), "one job per node, source"
        failures = {}
        for job in jobs:
            where = posixpath.join(job.store, job.directory)
            if (job.node, job.source) in self.fail_stage:
                failures[(job.node, job.source)] = self.fail_stage[job.node, job.source]
            elif f"{job.node}:{where}" not in self.stored:
                self.stored.add(f"{job.node}:{where}")
                self.staged.append((job.node, job.source))
        return failures

    def _unstaged(self, files: ShardFiles) -> str | None:
        """A shard started on a staged path that is not there: the engine could not load it."""
        _, found, rest = files.unit_text.partition("ExecStart=")
        for argument in shlex.split(rest.splitlines()[0]) if found else ():
            if argument.startswith(DEFAULT_MODEL_STORE + "/"):
                directory = "/".join(argument.split("/")[:6])  # /var/lib/modelfleet/models/D
                if f"{files.node}:{directory}" not in self.stored:
                    return f"unit failed: {argument}: no such file or directory"
        return None

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        self.calls.append(("stop", tuple(s.replica for s in stops)))
        self.stop_calls.append(
            tuple(f"{s.replica}/{x.record.rank}" for s in stops for x in s.shards)
        )
        self.stopped_while_routed += [s.replica for s in stops if s.replica in self.routed]
        failures = {}
        for stop in stops:
            for shard in stop.shards:
                unit = unit_name(stop.replica, shard.record.rank)
                if stop.replica in self.fail_stop:
                    failures[(shard.node, unit)] = f"{unit} did not stop"
                else:
                    self.records.pop((shard.node, unit), None)
        return failures

    def route(self, add: Sequence[Start], withdraw: Sequence[Stop]) -> str | None:
        changes = [f"+{s.replica}" for s in add] + [f"-{s.replica}" for s in withdraw]
        self.calls.append(("route", tuple(changes)))
        if self.route_error is not None:
            return self.route_error
        for start in add:
            leader = self.records.get((start.leader.node, start.leader.unit))
            if leader is None or leader.state != "running":
                self.routed_before_serving.append(start.replica)
        self.routed |= {s.replica for s in add}
        self.routed -= {s.replica for s in withdraw}
        return None

    def running(self) -> set[str]:
        return {record.replica for record in self.records.values()}

    def snapshot(self, before: Snapshot) -> Snapshot:
        """`before` with the shards this fake fleet now runs."""
        nodes = [
            with_shards(node, [r for (n, _), r in sorted(self.records.items()) if n == node.name])
            for node in before.nodes
        ]
        return replace(before, nodes=tuple(nodes))
