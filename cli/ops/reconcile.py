"""The reconcile pass: plan the fleet against the catalog, then carry the plan out.

`run_pass` is the pass `ctl reconcile`, `ctl drain` and `ctl place` run, whole: the fleet's
lock, the cordon a drain writes, the CA opened when a certificate is due, the plan, the
mass-stop guard, and the plan carried out. It takes a PassRequest and returns a PassResult
that the command only renders; what it reads from the terminal or says on it goes through
the PassHooks the command hands it. Its parts: `plan_pass` only computes (a dry run stops
there); `apply_plan` runs the plan on the nodes with the playbooks and, where the inventory
has a `routers` group, keeps the routers in step (docs/routing.md).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot, checked
from cli.edges.ansible import PlaybookRun
from cli.edges.templating import render_template
from cli.errors import InputError, InputProblem
from cli.inventory.edit import cordon_node
from cli.inventory.load import load_inventory
from cli.inventory.schema import Inventory
from cli.ops.ca import ca_directory, open_ca
from cli.ops.context import AppContext
from cli.ops.controller import STOP
from cli.ops.executor import AnsibleExecutor
from cli.ops.fleet import Fleet, node_targets
from cli.ops.keys import keys_file, load_keys
from cli.ops.renew import Renewed, renew_certificates
from cli.ops.staging import ProgressLines, watch_staging
from cli.ops.tokens import resolve_tokens
from cli.pki.certs import fingerprint
from cli.pki.store import CertificateAuthority, default_ca_dir, published_crl
from cli.placement.place import running_replicas
from cli.reconcile.apply import Outcome, apply
from cli.reconcile.ledger import (
    ledger_path,
    load_ledger,
    load_scale_memory,
    save_ledger,
    save_scale_memory,
    scale_memory_path,
)
from cli.reconcile.planner import (
    DRAINING,
    Plan,
    Start,
    cordoned,
    plan,
    plan_manual,
    retired_unreplaced,
)
from cli.reconcile.renewal import sort_out
from cli.routes.deploy import PlaybookRouter, RouterDeployer, router_hosts
from cli.shards.staging import (
    architecture_problem,
    evictable_directories,
    token_destination_problem,
)

OnRun = Callable[[PlaybookRun], None]


@dataclass(frozen=True)
class Applied:
    """What a pass did, a line each for the operator, and whether all of it was done."""

    lines: list[str]
    complete: bool
    outcome: Outcome  # the same, for machines (cli/reconcile/report.py)


@dataclass(frozen=True)
class PassRequest:
    """One pass as a command asks for it.

    `evict`: nodes being drained, planned as cordoned with reason `cordon`, which is written
    to the inventory first when `write_cordon` (drain); `force`: drain even a replica no
    replacement is found for; `defragment`: moves that make room are planned too;
    `confirmed`: a plan that stops most running replicas goes ahead without asking;
    `models`: start one more replica of each of these and nothing else (`ctl place`);
    `ca_dir`: where the CA that renews node certificates is; not `renew`: no certificate is
    renewed or said (offboarding's drain: renewing is reconcile's and drain's work)."""

    catalog: Catalog
    inventory_path: Path
    dry_run: bool
    evict: frozenset[str] = frozenset()
    force: bool = False
    cordon: str = DRAINING
    write_cordon: bool = False
    defragment: bool = False
    confirmed: bool = True
    models: tuple[str, ...] | None = None
    ca_dir: Path | None = None
    renew: bool = True


@dataclass(frozen=True)
class PassHooks:
    """What the pass needs of the command around it: the fleet as the command reads it
    (with its progress and warnings), the lock's holder name and its waiting line, and the
    terminal for the plan, the question of the mass-stop guard and the lines on the way."""

    read_fleet: Callable[[], Fleet]
    command: str
    waiting: Callable[[str], None]
    show_plan: Callable[[Plan], None]
    confirm: Callable[[str], bool]
    say: Callable[[str], None]
    warn: Callable[[str], None]
    report: Callable[[str], None]
    on_run: OnRun


@dataclass(frozen=True)
class PassResult:
    """What a pass did. `applied` is None for a dry run and for a pass the mass-stop guard
    stopped (`refused`, with its line) or one whose models are already at their most
    (`refused` too, nothing planned: `plan` None)."""

    plan: Plan | None
    fleet: Fleet | None
    applied: Applied | None = None
    refused: str | None = None

    @property
    def complete(self) -> bool:
        if self.refused is not None or self.plan is None or self.fleet is None:
            return False
        if self.applied is not None:
            return self.applied.complete
        return not (self.plan.unplaced or self.plan.waits or self.fleet.partial)


def run_pass(options: AppContext, request: PassRequest, hooks: PassHooks) -> PassResult:
    """One pass, holding the fleet's lock (not for a dry run) from the cordon written and
    the first fact gathered to the last change, so two passes never plan on the same
    state. LockTimeoutError when another ctl holds it past the lock timeout; InputError on
    bad input (a token missing, a CA's bad files), before anything on a node changed."""
    held: AbstractContextManager[None] = (
        nullcontext()
        if request.dry_run
        else options.fleet_lock(request.inventory_path, hooks.command, waiting=hooks.waiting)
    )
    with held:
        return _run_pass(options, request, hooks)


def _run_pass(options: AppContext, request: PassRequest, hooks: PassHooks) -> PassResult:
    if request.write_cordon and not request.dry_run:
        for node in sorted(request.evict):
            said = _cordon_unless_cordoned(options, request.inventory_path, node, request.cordon)
            if said is not None:
                hooks.say(said)
    fleet = hooks.read_fleet()
    if request.models is not None:
        return _run_manual(options, request, hooks, fleet)
    directory = ca_directory(request.ca_dir)
    ca = None
    if request.renew and fleet.due and directory.exists():  # read only when needed
        ca = open_ca(directory, datetime.now(UTC), hooks.warn)
    the_plan = plan_pass(
        options, request.catalog, fleet, request.inventory_path, request.evict, request.force,
        request.cordon, request.defragment, ca, directory, warn=hooks.warn,
    )  # fmt: skip
    if not request.renew:
        the_plan = replace(the_plan, renewals=(), certificates_due=())
    hooks.show_plan(the_plan)
    if request.dry_run:
        return PassResult(the_plan, fleet)
    if not request.confirmed:
        lost, running = retired_unreplaced(the_plan)
        if 2 * len(lost) > running:
            said = (
                f"this pass stops {len(lost)} of {running} running replicas,"
                " with nothing in their place"
            )
            if not hooks.confirm(said):
                return PassResult(the_plan, fleet, refused=said)
    applied = apply_plan(
        options, fleet, the_plan, request.inventory_path, request.catalog, hooks.on_run,
        hooks.report, ca=ca, ca_dir=directory,
    )  # fmt: skip
    return PassResult(the_plan, fleet, applied)


def _cordon_unless_cordoned(
    options: AppContext, inventory_path: Path, node: str, reason: str
) -> str | None:
    """Cordon `node` with `reason` unless the inventory says it is cordoned; the line that
    says so, or None."""
    decrypt = options.decrypt()
    if (
        load_inventory(inventory_path, decrypt, render=render_template).host(node).vars.cordoned
        is not None
    ):
        return None
    return cordon_node(inventory_path, node, reason, decrypt)


def _run_manual(
    options: AppContext, request: PassRequest, hooks: PassHooks, fleet: Fleet
) -> PassResult:
    """`ctl place MODEL…`: one more replica of each, unless that puts one above its
    replicas.max (the next reconcile would drain it again): then nothing is started."""
    assert request.models is not None
    running = running_replicas(checked(fleet.snapshot, request.catalog))
    for name in request.models:
        have, most = len(running.get(name, ())), request.catalog.models[name].replicas_max
        if have >= most:
            return PassResult(
                None,
                fleet,
                refused=f"{name} runs {have} replica(s), its replicas.max is {most}: raise it"
                f" in {request.catalog.file} to run another; nothing was started",
            )
    addresses, listen = fleet.serving
    the_plan = plan_manual(
        request.catalog, fleet.snapshot, list(request.models), addresses, listen,
        fleet.networks, fleet.stores,
    )  # fmt: skip
    _check_token_destinations(the_plan, fleet.inventory)
    _check_architectures(the_plan, fleet.snapshot)
    hooks.show_plan(the_plan)
    if request.dry_run:
        return PassResult(the_plan, fleet)
    applied = apply_plan(
        options, fleet, the_plan, request.inventory_path, None, hooks.on_run, hooks.report
    )
    return PassResult(the_plan, fleet, applied)


def ledger_file(options: AppContext, inventory_path: Path) -> Path:
    return ledger_path(inventory_path, options.state)


def plan_pass(
    options: AppContext,
    catalog: Catalog,
    fleet: Fleet,
    inventory_path: Path,
    evict: frozenset[str] = frozenset(),
    force: bool = False,
    cordon: str = DRAINING,
    defragment: bool = False,
    ca: CertificateAuthority | None = None,
    ca_dir: Path | None = None,
    *,
    warn: Callable[[str], None],
) -> Plan:
    """The plan that brings `fleet` to `catalog`; `evict`: nodes being drained, planned as
    cordoned with reason `cordon` (the dry run's plan is the pass's, whose cordon is
    written); `force`: drain even a replica no replacement is found for; `defragment`:
    moves that make room for a replica that fits nowhere. The certificates due are
    renewed with `ca`, the CA found in `ca_dir`, and only said without one. `warn` is told
    of a backoff ledger that could not be read (the pass writes it afresh)."""
    addresses, listen = fleet.serving
    ledger, unreadable = load_ledger(ledger_file(options, inventory_path))
    if unreadable is not None:
        warn(unreadable)
    memory, unreadable = load_scale_memory(scale_memory_path(inventory_path, options.state))
    if unreadable is not None:
        warn(unreadable)
    # No rng: each failure's jitter comes from the failure itself, so the same inputs give
    # the same plan in a dry run and in the pass (and in `ctl place --all --dry-run`).
    snapshot = cordoned(fleet.snapshot, dict.fromkeys(evict, cordon))
    the_plan = plan(
        catalog, snapshot, ledger, addresses, None, evict, listen=listen, force=force,
        networks=fleet.networks, stores=fleet.stores, defragment=defragment,
        scale_memory=memory,
    )  # fmt: skip
    _check_token_destinations(the_plan, fleet.inventory)
    _check_architectures(the_plan, snapshot)
    here = None if ca is None else (ca.name, fingerprint(ca.cert))
    where = str(ca_dir if ca_dir is not None else default_ca_dir())
    renew, said = sort_out(fleet.due, here, where)
    return replace(the_plan, renewals=renew, certificates_due=said)


def _check_architectures(the_plan: Plan, snapshot: Snapshot) -> None:
    """InputError (exit 2, nothing done), at the profile, for a start whose staged weights
    are a model its engine serves only as embeddings while the profile is not one
    (cli/shards/staging.py `architecture_problem`)."""
    problems: list[InputProblem] = []
    for start in the_plan.starts:
        for files in start.files:
            store = snapshot.node(files.node).model_store
            found = architecture_problem(start.profile, files.node, store.weights if store else ())
            if found is not None:
                problems.append(found)
    if problems:
        raise InputError(list(dict.fromkeys(problems)))


def _sends_token(start: Start) -> bool:
    """Its staging, or its engine fetching the weights itself, sends the model's token."""
    return any(j.token_key for j in start.stage) or any(
        f.fetch is not None and f.fetch.token_key is not None for f in start.files
    )


def _check_token_destinations(the_plan: Plan, inventory: Inventory) -> None:
    """InputError (exit 2, nothing done), at each token reference, for a start whose staging,
    or whose engine fetching its own weights, would send its model's token to a host
    neither the hub endpoint nor allowed by the inventory (cli/shards/staging.py
    `token_destination_problem`)."""
    problems: list[InputProblem] = []
    for start in the_plan.starts:
        token = start.profile.token
        if token is None:
            continue
        sends = [(job.node, job.source, "staging") for job in start.stage if job.token_key]
        sends += [
            (files.node, files.fetch.source, "its engine fetching it")
            for files in start.files
            if files.fetch is not None and files.fetch.token_key is not None
        ]
        for node, source, how in sends:
            host = inventory.host(node).vars
            why = token_destination_problem(
                source, host.modelfleet_hf_endpoint, host.modelfleet_token_hosts
            )
            if why is not None:
                problems.append(
                    InputProblem(
                        token.file, token.line, token.path,
                        f"{token.model}'s token, {how} on {node}: {why}",
                    )
                )  # fmt: skip
    if problems:
        raise InputError(list(dict.fromkeys(problems)))


def router_deployer(
    options: AppContext,
    fleet: Fleet,
    inventory_path: Path,
    on_run: OnRun,
    ca_dir: Path | None = None,
    every: bool = False,
) -> RouterDeployer | None:
    """The deployer for the inventory group `routers`, or None when it has no host. It
    hands the routers the CA's revocation list where the CA is here: `ca_dir`, else
    MODELFLEET_CA_DIR, else the default of `ctl ca init`. It leaves alone the routers that
    report serving the routes already, unless `every` (`ctl routes --apply`)."""
    hosts = router_hosts(fleet.inventory)
    if not hosts:
        return None
    if ca_dir is None:
        configured = os.environ.get("MODELFLEET_CA_DIR")
        ca_dir = Path(configured) if configured else default_ca_dir()
    crl = published_crl(ca_dir)
    known_hosts = options.known_hosts(inventory_path)
    # What each router says it serves: a pass whose routes they all serve runs no playbook.
    served = None if every else {host: _served(fleet, host) for host in hosts}
    return RouterDeployer(
        hosts, inventory_path, known_hosts, options.logs, on_run=on_run, crl=crl,
        served=served, unreached=None if every else fleet.unreached,
        keys=load_keys(keys_file(options.state, inventory_path)),
    )  # fmt: skip


def _served(fleet: Fleet, host: str) -> str | None:
    facts = fleet.facts.get(host)
    return None if facts is None or not facts.reached else facts.router_served


def apply_plan(
    options: AppContext,
    fleet: Fleet,
    the_plan: Plan,
    inventory_path: Path,
    catalog: Catalog | None,
    on_run: OnRun,
    report: Callable[[str], None],
    ca: CertificateAuthority | None = None,
    ca_dir: Path | None = None,
) -> Applied:
    """Run `the_plan` on the nodes with the playbooks.

    With the `catalog` and an inventory group `routers`, the routers follow every change,
    and are brought up to date even when the plan is empty (with the CRL of the CA in
    `ca_dir`, router_deployer). The certificates it renews are renewed first, with `ca`,
    so replicas started in this pass load the new ones."""
    ledger = ledger_file(options, inventory_path)
    # What the autoscaler saw holds whatever this pass does: its windows go on. (A plan
    # of `ctl place`'s has no decisions, and leaves the memory as it is.)
    if the_plan.scaling:
        save_scale_memory(scale_memory_path(inventory_path, options.state), the_plan.scale_memory)
    if STOP.requested() and not the_plan.empty:  # asked to stop since it was planned
        left = Outcome(ledger=dict(the_plan.ledger), left_undone=[_whole_plan(the_plan)])
        return Applied([f"LEFT UNDONE (ctl is stopping): {_whole_plan(the_plan)}"], False, left)
    # Every token the staging needs, read now: one that is missing is said (exit 2) before
    # anything on a node has changed.
    tokens = resolve_tokens(
        [start.profile for start in the_plan.starts if _sends_token(start)], os.environ
    )
    renewed = renew_planned(options, fleet, the_plan, inventory_path, ca, report)
    # A model waiting out its backoff is short of replicas.min: not done (exit 1).
    complete = not (the_plan.unplaced or the_plan.waits or fleet.partial)
    deployer = None
    if catalog is not None:
        deployer = router_deployer(options, fleet, inventory_path, on_run, ca_dir=ca_dir)
    router = None
    if deployer is not None and catalog is not None:
        router = PlaybookRouter(catalog, fleet.snapshot, fleet.serving[0], deployer)
    if the_plan.empty:
        save_ledger(ledger, the_plan.ledger)
        why = None if router is None else router.sync()
        routed = Outcome(ledger=dict(the_plan.ledger), route_failures=[] if why is None else [why])
        said = _renewed_into(routed, renewed)
        return Applied(said + outcome_lines(routed), complete and routed.complete, routed)
    executor = AnsibleExecutor(
        inventory_path, options.known_hosts(inventory_path), options.logs, on_run=on_run,
        token_values={
            key: token.secret.get_secret_value()
            for key, token in tokens.items()
            if token.secret is not None
        },
        token_variables={
            key: token.inventory_variable
            for key, token in tokens.items()
            if token.inventory_variable is not None
        },
        watch=lambda jobs: watch_staging(
            {t.name: t for t in node_targets(fleet.inventory)},
            options.known_hosts(inventory_path), options.connect_timeout, jobs,
            ProgressLines(report),
        ),
        shares=fleet.shares,
        evictable=evictable_directories(fleet.snapshot.nodes, _starting(the_plan)),
    )  # fmt: skip
    rng = random.Random(the_plan.now.isoformat())  # the same inputs, the same backoffs
    outcome = apply(the_plan, executor, fleet.snapshot.now, rng, report, router, STOP.requested)
    said = _renewed_into(outcome, renewed)
    save_ledger(ledger, outcome.ledger)
    return Applied(said + outcome_lines(outcome), complete and outcome.complete, outcome)


def _whole_plan(the_plan: Plan) -> str:
    """A plan in a few words: what a pass that did none of it left undone."""
    parts = [f"stop {s.replica}" for s in (*the_plan.stops, *the_plan.drains)]
    parts += [f"start {s.replica}" for s in the_plan.starts]
    return ", ".join(parts)


def renew_planned(
    options: AppContext,
    fleet: Fleet,
    the_plan: Plan,
    inventory_path: Path,
    ca: CertificateAuthority | None,
    report: Callable[[str], None],
) -> list[Renewed]:
    """Renew the certificates `the_plan` renews (none without `ca`), signed now."""
    if ca is None or not the_plan.renewals:
        return []
    report(f"renewing {len(the_plan.renewals)} node certificate(s)")
    return renew_certificates(
        the_plan.renewals, fleet.inventory, ca, options.known_hosts(inventory_path),
        datetime.now(UTC), report, connect_timeout=options.connect_timeout,
        command_timeout=options.command_timeout, parallel=options.parallel,
    )  # fmt: skip


def _renewed_into(outcome: Outcome, renewed: list[Renewed]) -> list[str]:
    """Record the renewals in `outcome`; their lines for people."""
    lines = []
    for result in renewed:
        if result.serial is not None and result.not_after is not None:
            outcome.renewed.append(result.node)
            lines.append(
                f"renewed {result.node}: certificate {result.serial},"
                f" valid until {result.not_after:%Y-%m-%d %H:%M} UTC"
            )
        elif result.error is not None:
            outcome.not_renewed[result.node] = result.error
            lines.append(f"NOT RENEWED {result.node}: {result.error}")
    return lines


def _starting(the_plan: Plan) -> dict[str, set[str]]:
    """Per node, the sources of the replicas this pass starts there."""
    starting: dict[str, set[str]] = {}
    for start in the_plan.starts:
        for files in start.files:
            starting.setdefault(files.node, set()).add(start.profile.source)
    return starting


def outcome_lines(outcome: Outcome) -> list[str]:
    """What an apply did, for people: each replica started (verified), each that failed with
    every failed shard's journal lines as its node sent them, each left as it was."""
    lines = [f"started {replica}" for replica in outcome.started]
    for replica, why in outcome.failed.items():
        if replica in outcome.stage_failed:  # nothing of it ran: there was nothing to stop
            lines.append(f"NOT STARTED {replica}: {why}")
            continue
        lines.append(f"FAILED {replica}: {why} — stopped whole")
        for shard in outcome.failed_shards:
            journal = shard.failure.journal
            if shard.replica == replica and journal:
                lines.append(f"  {shard.unit} on {shard.node}, its journal's last lines:")
                lines += [f"    {line}" for line in journal]
    lines += [f"NOT STOPPED {r}: {why}" for r, why in outcome.stop_failures.items()]
    lines += [
        f"withdrew {r} from the routers: its nodes are lost, so nothing of it could be"
        " stopped; the pass that reaches them again stops it"
        for r in outcome.withdrawn_lost
    ]
    lines += [
        f"stopped {r} where its nodes answer and withdrew it from the routers; its ranks on"
        f" {', '.join(nodes)} (lost) still run: the pass that reaches them again stops them"
        for r, nodes in outcome.stopped_but_lost.items()
    ]
    lines += [f"NOT DRAINED {r}: {why}; it serves on" for r, why in outcome.undrained.items()]
    lines += [f"ROUTERS NOT UPDATED: {why}" for why in outcome.route_failures]
    lines += [f"LEFT UNDONE (ctl is stopping): {step}" for step in outcome.left_undone]
    return lines
