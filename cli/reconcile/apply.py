"""Apply a Plan through an Executor, phase by phase, so every replica ends whole or stopped.

1. stop broken replicas (failed, lost, unwanted-and-broken): their GPUs are reused below;
   then stage the new replicas' weights in their nodes' model stores (cli/shards/
   staging.py): a replica whose weights could not be staged on every one of its nodes is
   not started (a staging failure, backed off as a start failure is);
2. start every new replica's workers (rank > 0): ranks rendezvous, and rank 0 waits for
   them (SGLang at --dist-init-addr, vLLM for its --headless ranks);
3. start every rank 0 and wait for it to serve, then check that its workers' units are
   still active: a replica counts as started only once all of that is verified;
4. drain the replicas being retired, now that their replacements serve — but not one
   drained off a node being emptied whose replacement did not start: it serves on;
5. stop, whole, any new replica a rank of which did not come up.

One executor call per phase for all the shards in it, not one per shard. Each shard is
judged on its own: one that fails on a node never spares another on that node its checks.
An interrupt during a start phase stops every replica of the plan that was being started.

With a Router (docs/routing.md), the routers follow: broken replicas leave them before
phase 1; after phase 3 one update adds the replicas whose rank 0 serves and withdraws the
ones about to be drained, and phase 4 runs only once every router has it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from cli.facts.model import ShardRecord
from cli.reconcile.backoff import Backoff, after_failure, failure_key
from cli.reconcile.planner import Plan, RunningShard, Start, Stop
from cli.shards.staging import StageJob
from cli.shards.units import ShardFiles, unit_name


@dataclass(frozen=True)
class ShardFailure:
    """Why a shard did not start, as its node tells it."""

    cause: str
    journal: tuple[str, ...] = ()  # the unit's last journal lines: the node's text, untrusted


class Executor(Protocol):
    """What runs on the nodes: the playbooks, or a fake in tests."""

    def start(
        self, shards: Sequence[ShardFiles], verify: Sequence[ShardFiles] = ()
    ) -> dict[tuple[str, str], ShardFailure]:
        """Start these shards and check each on its own: its unit active and, for a rank 0,
        serving (health and its model listed). `verify`: shards started before whose units
        must still be active. Failures by (node, unit)."""
        ...

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        """Stop these replicas' shards (draining where asked) and remove their files."""
        ...

    def stage(self, jobs: Sequence[StageJob]) -> dict[tuple[str, str], str]:
        """Put these weights in their nodes' stores (one job per node and source); why
        each that failed did, by (node, source)."""
        ...


class Router(Protocol):
    """What sends clients' requests to the replicas: the routers, or a fake in tests."""

    def route(self, add: Sequence[Start], withdraw: Sequence[Stop]) -> str | None:
        """Send requests to `add` too (their rank 0 serves) and no more to `withdraw`;
        return once every router has the change: None, or why it could not be made."""
        ...


@dataclass(frozen=True)
class FailedShard:
    replica: str
    rank: int
    node: str
    unit: str
    failure: ShardFailure

    def __str__(self) -> str:
        return f"rank {self.rank} on {self.node}: {self.failure.cause}"


@dataclass
class Outcome:
    started: list[str] = field(default_factory=list)  # verified: every rank up, rank 0 serves
    failed: dict[str, str] = field(default_factory=dict)  # replica → why it did not start
    stage_failed: list[str] = field(default_factory=list)  # of those, the ones never started
    failed_shards: list[FailedShard] = field(default_factory=list)  # each, with its journal
    stopped: list[str] = field(default_factory=list)  # each once: every shard it had stopped
    stop_failures: dict[str, str] = field(default_factory=dict)
    # Taken out of the routers with nothing stopped: every shard is on a lost node, out of
    # reach; its shards are stopped by the pass that finds its node answering again.
    withdrawn_lost: list[str] = field(default_factory=list)
    # Stopped on every node that answers, withdrawn from the routers; its ranks on these
    # lost nodes still run, out of reach, until the pass that finds them answering again.
    stopped_but_lost: dict[str, list[str]] = field(default_factory=dict)
    undrained: dict[str, str] = field(default_factory=dict)  # replica → why it serves on
    phases: list[str] = field(default_factory=list)  # what ran, in order
    ledger: dict[str, Backoff] = field(default_factory=dict)
    route_failures: list[str] = field(default_factory=list)  # router updates that failed
    # Nodes whose certificate this pass renewed (node.key and node.pem replaced; the
    # engines' side reloads them), and node → why one due was not (cli/ops/renew.py).
    renewed: list[str] = field(default_factory=list)
    not_renewed: dict[str, str] = field(default_factory=dict)
    # The steps not begun because ctl was asked to stop, each in a few words.
    left_undone: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (
            self.failed
            or self.stop_failures
            or self.undrained
            or self.route_failures
            or self.not_renewed
            or self.left_undone
        )


def apply(
    plan: Plan,
    executor: Executor,
    now: datetime,
    rng: random.Random,
    report: Callable[[str], None] = lambda _: None,
    router: Router | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Outcome:
    """`stopping`: asked between steps; once it says yes (ctl was asked to stop), the steps
    not begun are left undone, each said in `left_undone`, and no replica is left half up:
    a start begun is finished, and none is drained whose replacement was not routed."""
    outcome = Outcome(ledger=dict(plan.ledger))
    if plan.stops:
        _route(router, [], plan.stops, outcome, report)
        _stop(plan.stops, executor, outcome, report, "stop broken replicas")
    starts = plan.starts
    if starts and stopping():
        outcome.left_undone.append(f"start {', '.join(s.replica for s in starts)}")
        starts = ()
    pending = _stage(starts, executor, outcome, report)
    try:
        workers = [w for start in pending for w in start.workers]
        if workers:
            report(f"starting {len(workers)} worker shard(s)")
            outcome.phases.append("start workers")
            _fail(pending, executor.start(workers), outcome)
        going = [s for s in pending if s.replica not in outcome.failed]
        if going:
            report(f"starting {len(going)} rank-0 shard(s) and waiting until they serve")
            outcome.phases.append("start rank 0")
            verify = [w for start in going for w in start.workers]
            _fail(pending, executor.start([s.leader for s in going], verify), outcome)
    except BaseException:
        # Interrupted mid-start: no replica may be left half up.
        _stop([_whole(s, "interrupted") for s in pending], executor, outcome, report,
              "stop interrupted starts")  # fmt: skip
        raise
    outcome.started = [s.replica for s in pending if s.replica not in outcome.failed]
    serving = [s for s in pending if s.replica not in outcome.failed]
    # Make before break: a replica moved off a drained node goes only once its replacement
    # serves; if that did not start, the old one serves on, routed as before.
    outcome.undrained = {
        stop.replica: f"its replacement {stop.replacement} did not start"
        for stop in plan.drains
        if stop.replacement is not None and stop.replacement in outcome.failed
    }
    drains = [stop for stop in plan.drains if stop.replica not in outcome.undrained]
    if (serving or drains) and stopping():
        # Routed and drained by the next pass: the old replicas serve on till then.
        undone = [f"route {s.replica}" for s in serving] + [f"drain {s.replica}" for s in drains]
        outcome.left_undone += undone
        serving, drains = [], []
    if (serving or drains) and not _route(router, serving, drains, outcome, report):
        # A router may still send them requests: they serve on until the next pass.
        why = f"not drained: the routers could not be updated first ({outcome.route_failures[-1]})"
        for stop in drains:
            outcome.stop_failures[stop.replica] = why
    elif drains:
        # Rank 0 first: it stops taking requests and drains; a worker stopped first would
        # take rank 0 down with it, in-flight requests and all.
        firsts = [_ranks(stop, lambda rank: rank == 0) for stop in drains]
        rest = [_ranks(stop, lambda rank: rank > 0) for stop in drains]
        _stop([s for s in firsts if s.shards], executor, outcome, report,
              "drain retired replicas")  # fmt: skip
        if any(s.shards for s in rest):
            _stop([s for s in rest if s.shards], executor, outcome, report,
                  "stop retired replicas' workers")  # fmt: skip
    broken = [s for s in pending if s.replica in outcome.failed]
    if broken:
        _stop([_whole(s, outcome.failed[s.replica]) for s in broken], executor, outcome,
              report, "stop replicas that did not start")  # fmt: skip
    for start in starts:
        if start.replica in outcome.failed:
            before = outcome.ledger.get(start.model, Backoff())
            started = ShardRecord.model_validate_json(start.leader.record_text).started
            key = failure_key(start.replica, started)
            outcome.ledger[start.model] = after_failure(before, key, now, rng)
    return outcome


def _stage(
    starts: Sequence[Start], executor: Executor, outcome: Outcome, report: Callable[[str], None]
) -> list[Start]:
    """Stage the weights every start needs, once per node and source; the starts whose
    weights are all in place (the others are failed, said as staging failures)."""
    jobs: dict[tuple[str, str], StageJob] = {}
    for start in starts:
        for job in start.stage:
            jobs.setdefault((job.node, job.source), job)
    if not jobs:
        return list(starts)
    report(f"staging weights: {', '.join(f'{s} on {n}' for n, s in jobs)}")
    outcome.phases.append("stage weights")
    failures = executor.stage(list(jobs.values()))
    going = []
    for start in starts:
        why = [
            f"staging {job.source} on {job.node} failed: {failures[job.node, job.source]}"
            for job in start.stage
            if (job.node, job.source) in failures
        ]
        if why:
            outcome.failed[start.replica] = "; ".join(why)
            outcome.stage_failed.append(start.replica)
        else:
            going.append(start)
    return going


def _route(
    router: Router | None,
    add: Sequence[Start],
    withdraw: Sequence[Stop],
    outcome: Outcome,
    report: Callable[[str], None],
) -> bool:
    """Update the routers, if any; whether they have the change."""
    if router is None:
        return True
    changes = [f"+{s.replica}" for s in add] + [f"-{s.replica}" for s in withdraw]
    report(f"routes: {', '.join(changes)}")
    outcome.phases.append("route")
    why = router.route(add, withdraw)
    if why is not None:
        outcome.route_failures.append(why)
    return why is None


def _fail(
    starts: Sequence[Start], failures: Mapping[tuple[str, str], ShardFailure], outcome: Outcome
) -> None:
    """Note every shard that failed, and each replica it fails: why, rank by rank."""
    for start in starts:
        found = [
            FailedShard(start.replica, files.rank, files.node, files.unit, failure)
            for files in start.files
            if (failure := failures.get((files.node, files.unit))) is not None
        ]
        if found:
            outcome.failed_shards += found
            mine = [str(f) for f in outcome.failed_shards if f.replica == start.replica]
            outcome.failed[start.replica] = "; ".join(mine)


def _ranks(stop: Stop, keep: Callable[[int], bool]) -> Stop:
    return replace(stop, shards=tuple(s for s in stop.shards if keep(s.record.rank)))


def _whole(start: Start, reason: str) -> Stop:
    """Every shard of a replica being started, as a stop: no rank is left running."""
    shards = tuple(
        RunningShard(f.node, ShardRecord.model_validate_json(f.record_text)) for f in start.files
    )
    return Stop(start.replica, start.model, shards, reason, drain=False)


def _stop(
    stops: Sequence[Stop],
    executor: Executor,
    outcome: Outcome,
    report: Callable[[str], None],
    phase: str,
) -> None:
    report(f"{phase}: {', '.join(s.replica for s in stops)}")
    outcome.phases.append(phase)
    failures = executor.stop([stop for stop in stops if stop.shards])
    for stop in stops:
        if not stop.shards:
            outcome.withdrawn_lost.append(stop.replica)  # nothing ran: it is not "stopped"
            continue
        mine = {(s.node, unit_name(stop.replica, s.record.rank)) for s in stop.shards}
        errors = [why for key, why in failures.items() if key in mine]
        if errors:
            outcome.stop_failures[stop.replica] = errors[0]
            if stop.replica in outcome.stopped:  # its rank 0, in an earlier step: not whole
                outcome.stopped.remove(stop.replica)
        elif stop.out_of_reach:  # not every rank stopped: not "stopped"
            outcome.stopped_but_lost[stop.replica] = list(stop.out_of_reach)
        elif stop.replica not in outcome.stopped and stop.replica not in outcome.stop_failures:
            # A drain stops rank 0 and then the workers, two steps: one replica, said once.
            outcome.stopped.append(stop.replica)
