"""The reconcile pass: plan the fleet against the catalog, then carry the plan out.

`plan_pass` only computes (a dry run stops there); `apply_plan` runs it on the nodes with
the playbooks and, where the inventory has a `routers` group, keeps the routers in step
(docs/routing.md). Both return what happened; the command says it.
"""

from __future__ import annotations

import os
import random
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from cli.catalog.load import Catalog
from cli.ops.context import AppContext
from cli.ops.controller import STOP
from cli.ops.fleet import (
    Fleet,
    model_stores,
    node_targets,
    rank_networks,
    serving_addresses,
    store_shares,
)
from cli.ops.renew import Renewed, renew_certificates
from cli.ops.staging import ProgressLines, watch_staging
from cli.ops.tokens import resolve_tokens
from cli.pki.certs import fingerprint
from cli.pki.renewal import Renewal, due_renewals, sort_out
from cli.pki.store import CertificateAuthority, default_ca_dir, published_crl
from cli.reconcile.apply import Outcome, apply
from cli.reconcile.ledger import ledger_path, load_ledger, save_ledger
from cli.reconcile.planner import DRAINING, Plan, cordoned, plan
from cli.routes.deploy import PlaybookRouter, RouterDeployer, router_hosts
from cli.shards.ansible import PlaybookRun
from cli.shards.executor import AnsibleExecutor
from cli.shards.staging import evictable_directories

OnRun = Callable[[PlaybookRun], None]


@dataclass(frozen=True)
class Applied:
    """What a pass did, a line each for the operator, and whether all of it was done."""

    lines: list[str]
    complete: bool
    outcome: Outcome  # the same, for machines (cli/reconcile/report.py)


def ledger_file(options: AppContext, inventory_path: Path) -> Path:
    return ledger_path(inventory_path, options.state)


def due_certificates(fleet: Fleet) -> tuple[Renewal, ...]:
    """The reachable nodes whose certificates are due (cli/pki/renewal.py), at the moment
    the fleet was seen."""
    addresses = {host.name: host.address for host in fleet.inventory.hosts}
    return due_renewals(fleet.snapshot.nodes, addresses, fleet.snapshot.now)


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
) -> Plan:
    """The plan that brings `fleet` to `catalog`; `evict`: nodes being drained, planned as
    cordoned with reason `cordon` (the dry run's plan is the pass's, whose cordon is
    written); `force`: drain even a replica no replacement is found for; `defragment`:
    moves that make room for a replica that fits nowhere. The certificates due are
    renewed with `ca`, the CA found in `ca_dir`, and only said without one."""
    addresses, listen = serving_addresses(fleet.inventory)
    networks = rank_networks(fleet.inventory)
    ledger = load_ledger(ledger_file(options, inventory_path))
    # No rng: each failure's jitter comes from the failure itself, so the same inputs give
    # the same plan in a dry run and in the pass (and in `ctl place --all --dry-run`).
    snapshot = cordoned(fleet.snapshot, dict.fromkeys(evict, cordon))
    the_plan = plan(
        catalog, snapshot, ledger, addresses, None, evict, listen=listen, force=force,
        networks=networks, stores=model_stores(fleet.inventory), defragment=defragment,
    )  # fmt: skip
    here = None if ca is None else (ca.name, fingerprint(ca.cert))
    where = str(ca_dir if ca_dir is not None else default_ca_dir())
    renew, said = sort_out(due_certificates(fleet), here, where)
    return replace(the_plan, renewals=renew, certificates_due=said)


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
    if STOP.requested() and not the_plan.empty:  # asked to stop since it was planned
        left = Outcome(ledger=dict(the_plan.ledger), left_undone=[_whole_plan(the_plan)])
        return Applied([f"LEFT UNDONE (ctl is stopping): {_whole_plan(the_plan)}"], False, left)
    # Every token the staging needs, read now: one that is missing is said (exit 2) before
    # anything on a node has changed.
    tokens = resolve_tokens(
        [start.profile for start in the_plan.starts if any(j.token_key for j in start.stage)],
        os.environ,
    )
    renewed = renew_planned(options, fleet, the_plan, inventory_path, ca, report)
    # A model waiting out its backoff is short of replicas.min: not done (exit 1).
    complete = not (the_plan.unplaced or the_plan.waits or fleet.partial)
    deployer = None
    if catalog is not None:
        deployer = router_deployer(options, fleet, inventory_path, on_run, ca_dir=ca_dir)
    router = None
    if deployer is not None and catalog is not None:
        addresses, _ = serving_addresses(fleet.inventory)
        router = PlaybookRouter(catalog, fleet.snapshot, addresses, deployer)
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
        shares=store_shares(fleet.inventory),
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
            lines.append(f"NOT RENEWED {result.node}: {printable(result.error)}")
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
            lines.append(f"NOT STARTED {replica}: {printable(why)}")
            continue
        lines.append(f"FAILED {replica}: {printable(why)} — stopped whole")
        for shard in outcome.failed_shards:
            journal = shard.failure.journal
            if shard.replica == replica and journal:
                lines.append(f"  {shard.unit} on {shard.node}, its journal's last lines:")
                lines += [f"    {printable(line)}" for line in journal]
    lines += [f"NOT STOPPED {r}: {printable(why)}" for r, why in outcome.stop_failures.items()]
    lines += [f"NOT DRAINED {r}: {why}; it serves on" for r, why in outcome.undrained.items()]
    lines += [f"ROUTERS NOT UPDATED: {printable(why)}" for why in outcome.route_failures]
    lines += [f"LEFT UNDONE (ctl is stopping): {step}" for step in outcome.left_undone]
    return lines


def printable(text: str) -> str:
    """A node's text as one line of plain text: control and format characters (escape
    sequences, carriage returns, newlines, bidirectional overrides) shown escaped."""
    return "".join(
        _escaped(char) if unicodedata.category(char) in _UNPRINTABLE else char for char in text
    )


_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escaped(char: str) -> str:
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )
