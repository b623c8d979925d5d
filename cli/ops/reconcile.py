"""The reconcile pass: plan the fleet against the catalog, then carry the plan out.

`plan_pass` only computes (a dry run stops there); `apply_plan` runs it on the nodes with
the playbooks and, where the inventory has a `routers` group, keeps the routers in step
(docs/routing.md). Both return what happened; the command says it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cli.catalog.load import Catalog
from cli.ops.context import AppContext
from cli.ops.fleet import Fleet, rank_networks, serving_addresses
from cli.reconcile.apply import apply
from cli.reconcile.ledger import ledger_path, load_ledger, save_ledger
from cli.reconcile.planner import Plan, plan
from cli.routes.deploy import PlaybookRouter, RouterDeployer, router_hosts
from cli.shards.ansible import PlaybookRun
from cli.shards.executor import AnsibleExecutor

OnRun = Callable[[PlaybookRun], None]


@dataclass(frozen=True)
class Applied:
    """What a pass did, a line each for the operator, and whether all of it was done."""

    lines: list[str]
    complete: bool


def ledger_file(options: AppContext, inventory_path: Path) -> Path:
    return ledger_path(inventory_path, options.state)


def plan_pass(
    options: AppContext,
    catalog: Catalog,
    fleet: Fleet,
    inventory_path: Path,
    evict: frozenset[str] = frozenset(),
) -> Plan:
    """The plan that brings `fleet` to `catalog`; `evict`: nodes being drained."""
    addresses, listen = serving_addresses(fleet.inventory)
    networks = rank_networks(fleet.inventory)
    ledger = load_ledger(ledger_file(options, inventory_path))
    # No rng: each failure's jitter comes from the failure itself, so the same inputs give
    # the same plan in a dry run and in the pass (and in `ctl place --all --dry-run`).
    return plan(
        catalog, fleet.snapshot, ledger, addresses, None, evict, listen=listen,
        networks=networks,
    )  # fmt: skip


def router_deployer(
    options: AppContext, fleet: Fleet, inventory_path: Path, on_run: OnRun
) -> RouterDeployer | None:
    """The deployer for the inventory group `routers`, or None when it has no host."""
    hosts = router_hosts(fleet.inventory)
    if not hosts:
        return None
    known_hosts = options.known_hosts(inventory_path)
    return RouterDeployer(hosts, inventory_path, known_hosts, options.logs, on_run=on_run)


def apply_plan(
    options: AppContext,
    fleet: Fleet,
    the_plan: Plan,
    inventory_path: Path,
    catalog: Catalog | None,
    on_run: OnRun,
    report: Callable[[str], None],
) -> Applied:
    """Run `the_plan` on the nodes with the playbooks.

    With the `catalog` and an inventory group `routers`, the routers follow every change,
    and are brought up to date even when the plan is empty."""
    ledger = ledger_file(options, inventory_path)
    # A model waiting out its backoff is short of replicas.min: not done (exit 1).
    complete = not (the_plan.unplaced or the_plan.waits or fleet.partial)
    deployer = None if catalog is None else router_deployer(options, fleet, inventory_path, on_run)
    router = None
    if deployer is not None and catalog is not None:
        addresses, _ = serving_addresses(fleet.inventory)
        router = PlaybookRouter(catalog, fleet.snapshot, addresses, deployer)
    if the_plan.empty:
        save_ledger(ledger, the_plan.ledger)
        why = None if router is None else router.sync()
        lines = [] if why is None else [f"ROUTERS NOT UPDATED: {why}"]
        return Applied(lines, complete and why is None)
    executor = AnsibleExecutor(
        inventory_path, options.known_hosts(inventory_path), options.logs, on_run=on_run
    )
    rng = random.Random(the_plan.now.isoformat())  # the same inputs, the same backoffs
    outcome = apply(the_plan, executor, fleet.snapshot.now, rng, report, router)
    save_ledger(ledger, outcome.ledger)
    lines = [f"started {replica}" for replica in outcome.started]
    lines += [f"FAILED {r}: {why} — stopped whole" for r, why in outcome.failed.items()]
    lines += [f"NOT STOPPED {r}: {why}" for r, why in outcome.stop_failures.items()]
    lines += [f"ROUTERS NOT UPDATED: {why}" for why in outcome.route_failures]
    return Applied(lines, complete and outcome.complete)
