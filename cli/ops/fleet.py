"""Load what every operation starts from: the inventory and the facts, as a Snapshot.

Facts come from a snapshot directory (--facts) or, by default, live from the nodes over
SSH, merged with the cache so a node not reached now keeps its last known facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from cli.cluster.snapshot import Snapshot, build_snapshot
from cli.edges import ssh
from cli.edges.templating import render_template
from cli.errors import InputError
from cli.facts.cache import FactsCache
from cli.facts.gather import Target, gather
from cli.facts.gpuclass import gpu_class
from cli.facts.model import NodeFacts
from cli.facts.probe import facts_from_attempt
from cli.facts.store import load_facts_dir
from cli.inventory.load import load_inventory
from cli.inventory.schema import Host, Inventory
from cli.ops.context import AppContext
from cli.reconcile.renewal import Renewal, ca_warnings, due_renewals


@dataclass(frozen=True)
class Fleet:
    inventory: Inventory
    facts: dict[str, NodeFacts]
    snapshot: Snapshot
    unreached: dict[str, str] = field(default_factory=dict)  # node → why, this gather
    warnings: tuple[str, ...] = ()

    @property
    def partial(self) -> bool:
        return bool(self.unreached)

    # What a pass reads of the fleet more than once (the planner, apply, the routers),
    # derived once: a pass has one Fleet.
    @cached_property
    def serving(self) -> tuple[dict[str, str], dict[str, str]]:
        """serving_addresses of the inventory: (reach, listen)."""
        return serving_addresses(self.inventory)

    @cached_property
    def networks(self) -> dict[str, tuple[str | None, str | None]]:
        return rank_networks(self.inventory)

    @cached_property
    def stores(self) -> dict[str, str | None]:
        return model_stores(self.inventory)

    @cached_property
    def shares(self) -> dict[str, str]:
        return store_shares(self.inventory)

    @cached_property
    def due(self) -> tuple[Renewal, ...]:
        """The reachable nodes whose certificates are due (cli/reconcile/renewal.py), at the
        moment the fleet was seen."""
        addresses = {host.name: host.address for host in self.inventory.hosts}
        return due_renewals(self.snapshot.nodes, addresses, self.snapshot.now)


def _from_snapshot(inventory: Inventory, facts_dir: Path, options: AppContext) -> Fleet:
    facts = load_facts_dir(facts_dir)
    if not facts:
        raise InputError.single(str(facts_dir), None, (), "no NAME.json facts files here")
    # A snapshot is one moment: the newest gather in it, so an example read next year
    # says what it said the day it was written.
    now = max(f.gathered_at for f in facts.values())
    snapshot = _snapshot(inventory, facts, now, options)
    unreached = {name: f.error for name, f in facts.items() if f.error is not None}
    said = tuple(f"{n}: {e}" for n, e in unreached.items())
    return Fleet(
        inventory, facts, snapshot, {}, (*inventory.warnings, *said, *_ca_warnings(snapshot))
    )


def _ca_warnings(snapshot: Snapshot) -> list[str]:
    """The CA certificates the nodes hold that end within 30 days: a line each."""
    held = [node.certificate for node in snapshot.nodes if node.certificate is not None]
    return ca_warnings(held, snapshot.now)


def _snapshot(
    inventory: Inventory, facts: dict[str, NodeFacts], now: datetime, options: AppContext
) -> Snapshot:
    what_if = {name: f.host_vars for name, f in facts.items() if f.host_vars is not None}
    return build_snapshot(
        inventory.hosts, facts, now, gpu_class, options.lost_after, what_if_vars=what_if
    )


def node_targets(inventory: Inventory) -> list[Target]:
    """How ctl's own SSH sessions reach each node, as the inventory says."""
    targets = []
    for h in inventory.hosts:
        proxy, refused = proxy_of(h)
        targets.append(
            Target(
                h.name,
                h.address,
                h.port,
                h.user,
                h.private_key_file,
                h.vars.modelfleet_model_store,
                h.ssh_refusal or refused,
                h.connection == "local",
                proxy,
            )
        )
    return targets


def proxy_of(host: Host) -> tuple[ssh.Proxy | None, str | None]:
    """The host's ProxyJump or ProxyCommand as ctl's SSH follows it; or why it cannot."""
    if host.proxy_command is not None:
        return ssh.Proxy(command=host.proxy_command), None
    if host.proxy_jump is None:
        return None, None
    try:
        return ssh.Proxy(jump=ssh.parse_proxy_jump(host.proxy_jump)), None
    except ValueError as error:
        return None, str(error)


def gather_fleet(
    inventory: Inventory,
    inventory_path: Path,
    options: AppContext,
    on_progress: Callable[[str, str | None], None] | None = None,
    now: datetime | None = None,
) -> Fleet:
    targets = node_targets(inventory)
    attempts = gather(
        targets,
        options.known_hosts(inventory_path),
        connect_timeout=options.connect_timeout,
        command_timeout=options.command_timeout,
        parallel=options.parallel,
        sessions=options.sessions,
        on_done=None
        if on_progress is None
        else lambda attempt: on_progress(attempt.name, attempt.error),
    )
    moment = now or datetime.now(UTC)
    cache = FactsCache(inventory_path, options.state_dir)
    previous, warnings = cache.load()
    facts = {
        a.name: facts_from_attempt(a.output, a.error, previous.get(a.name), moment)
        for a in attempts
    }
    cache.save(facts)
    unreached = {name: f.error for name, f in facts.items() if f.error is not None}
    snapshot = _snapshot(inventory, facts, moment, options)
    return Fleet(
        inventory, facts, snapshot, unreached,
        (*inventory.warnings, *warnings, *_ca_warnings(snapshot)),
    )  # fmt: skip


def load_fleet(
    options: AppContext,
    inventory_path: Path,
    facts_dir: Path | None,
    on_progress: Callable[[str, str | None], None] | None = None,
) -> Fleet:
    """The inventory at `inventory_path` and its facts: from the snapshot `facts_dir`, or
    gathered live now. Bad input raises InputError; a node not reached is in `unreached`."""
    inventory = load_inventory(inventory_path, options.decrypt(), render=render_template)
    return fleet_of(options, inventory, inventory_path, facts_dir, on_progress)


def fleet_of(
    options: AppContext,
    inventory: Inventory,
    inventory_path: Path,
    facts_dir: Path | None,
    on_progress: Callable[[str, str | None], None] | None = None,
) -> Fleet:
    """The facts of `inventory`, already read from `inventory_path`: from the snapshot
    `facts_dir`, or gathered live now."""
    if facts_dir is not None:
        return _from_snapshot(inventory, facts_dir, options)
    return gather_fleet(inventory, inventory_path, options, on_progress)


def rank_networks(inventory: Inventory) -> dict[str, tuple[str | None, str | None]]:
    """Per node whose inventory names one: the network multi-node ranks talk on, as
    (`fabric_interface`, `fabric_address`)."""
    return {
        host.name: (
            host.vars.fabric_interface,
            None if host.vars.fabric_address is None else str(host.vars.fabric_address),
        )
        for host in inventory.hosts
        if host.vars.fabric_interface is not None or host.vars.fabric_address is not None
    }


def model_stores(inventory: Inventory) -> dict[str, str | None]:
    """Per node whose inventory says: its model store (`modelfleet_model_store`), or None
    where weights are not staged (`modelfleet_stage_weights: false`)."""
    return {
        host.name: None
        if not host.vars.modelfleet_stage_weights
        else host.vars.modelfleet_model_store
        for host in inventory.hosts
        if host.vars.modelfleet_model_store is not None or not host.vars.modelfleet_stage_weights
    }


def store_shares(inventory: Inventory) -> dict[str, str]:
    """Per node whose store is a share: the share's name (`modelfleet_model_store_shared`)."""
    return {
        host.name: host.vars.modelfleet_model_store_shared
        for host in inventory.hosts
        if host.vars.modelfleet_model_store_shared is not None
    }


def serving_addresses(inventory: Inventory) -> tuple[dict[str, str], dict[str, str]]:
    """Per node: the address its shards are reached at, and, where the inventory sets
    one, the address they listen on (otherwise every address)."""
    reach: dict[str, str] = {}
    listen: dict[str, str] = {}
    for host in inventory.hosts:
        chosen = host.vars.listen_address
        if chosen is not None and not chosen.is_unspecified:
            listen[host.name] = str(chosen)
            reach[host.name] = str(chosen)
        else:
            reach[host.name] = host.address
    return reach, listen
