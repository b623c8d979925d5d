"""Point the inventory's `routers` at a routing table: the router playbook, run by ctl.

An edge: it runs playbooks/deploy_router.yml with ansible-playbook, passing the LiteLLM
configuration rendered from the table (marked unsafe: never templated) and the replicas
the routers must serve once they have reloaded it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Snapshot
from cli.edges.ansible import PlaybookRun, playbook_path, run_playbook
from cli.inventory.schema import Inventory
from cli.reconcile.planner import Start, Stop
from cli.routes.keys import TeamKey, router_keys
from cli.routes.litellm import (
    LITELLM_CONSTRAINTS,
    LITELLM_VERSION,
    RouterSettings,
    deployment_ids,
    relays,
    render,
)
from cli.routes.table import RouteTable, route_table

ROUTERS_GROUP = "routers"
PLAYBOOK = "deploy_router.yml"


def router_hosts(inventory: Inventory) -> tuple[str, ...]:
    """The hosts of the inventory group `routers`; none: ctl manages no router."""
    return inventory.groups.get(ROUTERS_GROUP, ())


def litellm_constraints_file() -> Path:
    """The pip constraints file LiteLLM LITELLM_VERSION was tested with (package data)."""
    return Path(str(resources.files("cli.routes").joinpath(LITELLM_CONSTRAINTS)))


def router_variables(
    table: RouteTable,
    settings: RouterSettings | None = None,
    crl: str | None = None,
    keys: Sequence[TeamKey] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The playbook's variables; `crl`: the fleet CA's revocation list (PEM) where this ctl
    has one, which the routers then refuse revoked engine certificates by. Without it,
    the routers keep the list they were last given. `keys`: the teams' keys, of which the
    routers get those valid at `now` (hashed), with the names each may ask for under
    `table`: every update of the routes updates them too."""
    variables: dict[str, Any] = {
        "modelfleet_router_keys": router_keys(keys, table, now or table.at),
        "modelfleet_router_config": render(table, settings),
        "modelfleet_router_deployments": deployment_ids(table),
        "modelfleet_router_relays": relays(table),
        "modelfleet_router_relay_port": (settings or RouterSettings()).relay_port,
        "modelfleet_router_tested_version": LITELLM_VERSION,
        "modelfleet_router_tested_constraints": litellm_constraints_file().read_text("utf-8"),
        "modelfleet_router_tls": any(route.tls for route in table.deployments),
    }
    if crl:
        variables["modelfleet_router_crl"] = crl
    elif crl is not None:  # the CA revoked nothing: no list (an empty one reads as null)
        variables["modelfleet_router_crl_clear"] = True
    return variables


class RouterDeployer:
    """Runs the router playbook on the routers; says per router what failed."""

    def __init__(
        self,
        hosts: Sequence[str],
        inventory: Path,
        known_hosts: Path,
        log_dir: Path,
        on_run: Callable[[PlaybookRun], None] = lambda _: None,
        crl: str | None = None,
        served: Mapping[str, str | None] | None = None,
        unreached: Mapping[str, str] | None = None,
        keys: Sequence[TeamKey] = (),
    ) -> None:
        """`served`: what each router reported it serves (facts `router_served`): one that
        already serves the routes is left alone; None: every push runs the playbook on
        every router. `unreached`: routers not reached this pass, and why: not waited for."""
        self.crl = crl
        self.keys = tuple(keys)
        self.served = None if served is None else dict(served)
        self.unreached = dict(unreached or {})
        self.skipped = 0  # pushes that found every router serving the routes already
        self.hosts = tuple(hosts)
        self.inventory = inventory
        self.known_hosts = known_hosts
        self.log_dir = log_dir
        self.on_run = on_run
        self.runs: list[PlaybookRun] = []

    def push(self, table: RouteTable) -> dict[str, str]:
        """Install, configure and reload every router for `table`, but those that serve
        it already; router → why it failed."""
        variables = router_variables(table, crl=self.crl, keys=self.keys, now=datetime.now(UTC))
        line = variables["modelfleet_router_served"] = served_line(variables)
        failures = {
            host: f"not reached: {why}; its routes not updated"
            for host, why in self.unreached.items()
            if host in self.hosts and (self.served or {}).get(host) != line
        }
        due = sorted(
            host
            for host in self.hosts
            if host not in failures and (self.served is None or self.served.get(host) != line)
        )
        if not due:
            self.skipped += 1
            return failures
        run = run_playbook(PLAYBOOK, self.inventory, variables, due, self.log_dir, self.known_hosts)
        self.runs.append(run)
        self.on_run(run)
        for (host, _), why in run.failures().items():
            failures.setdefault(host, why)
        if run.returncode != 0 and not set(failures) & set(due):
            failures.update(dict.fromkeys(due, f"ansible-playbook exited {run.returncode}"))
        if self.served is not None:
            self.served.update({host: line for host in due if host not in failures})
        return failures


def served_line(variables: Mapping[str, Any]) -> str:
    """What a router that has these variables installed serves, as deploy_router.yml
    records it and the facts probe reads it back: a digest of the variables and of the
    playbook that installs them, then the SHA-256 of the routes file (so that a file
    changed since by hand is not taken for the one written)."""
    playbook = playbook_path(PLAYBOOK).read_bytes()
    given = json.dumps(variables, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(hashlib.sha256(playbook).digest() + given).hexdigest()
    config = str(variables["modelfleet_router_config"]).encode()
    return f"{digest} {hashlib.sha256(config).hexdigest()}"


def failure_text(failures: Mapping[str, str]) -> str:
    return "; ".join(f"{host}: {why}" for host, why in sorted(failures.items()))


class PlaybookRouter:
    """The Router of an apply (cli.reconcile.apply): the table of the pass's snapshot, with
    the replicas withdrawn so far taken out and those started so far put in, pushed to
    every router at each change."""

    def __init__(
        self,
        catalog: Catalog,
        snapshot: Snapshot,
        addresses: Mapping[str, str],
        deployer: RouterDeployer,
    ) -> None:
        self.catalog = catalog
        self.snapshot = snapshot
        self.addresses = dict(addresses)
        self.deployer = deployer
        self.withdrawn: set[str] = set()
        self.started: list[Start] = []

    def table(self) -> RouteTable:
        return route_table(
            self.catalog, self.snapshot, self.addresses, self.withdrawn, self.started
        )

    def route(self, add: Sequence[Start], withdraw: Sequence[Stop]) -> str | None:
        self.started += add
        self.withdrawn |= {stop.replica for stop in withdraw}
        return self.sync()

    def sync(self) -> str | None:
        """Push the current table; None when every router has it."""
        failures = self.deployer.push(self.table())
        return failure_text(failures) if failures else None
