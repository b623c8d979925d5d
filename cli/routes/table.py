"""The routing table: which endpoints answer each model and alias now. Pure.

From the catalog and a snapshot, for every catalog model: the rank-0 endpoint
(`http://ADDRESS:PORT/v1`) of each ready replica, its fallbacks in the catalog's order, and,
when no replica is ready, why — and which fallback answers for it meanwhile.

A replica is ready when every rank's unit runs (`running`, not `starting`, `failed` or
missing) and every node it is on is reachable. A cordoned node's replicas are ready: a
cordon stops new placements, not traffic. A replica on an Unreachable node is not ready,
though it may still serve: a router must not be pointed at what cannot be vouched for.

During an apply the table is recomputed with the replicas being stopped `withdrawn` and
the ones that started — and whose rank 0 passed its health check — added.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from cli.catalog.load import Catalog, CatalogProfile
from cli.catalog.schema import DEFAULT_FIRST_TOKEN_SECONDS
from cli.cluster.snapshot import NodeView, Reachability, Snapshot, checked
from cli.engines.specs import engine_spec
from cli.reconcile.planner import Replica, Start, replicas_of
from cli.shards.units import base_url

ROUTES_FORMAT = "modelfleet.routes/v1"


class State(StrEnum):
    READY = "ready"
    STARTING = "starting"
    FAILED = "failed"
    UNREACHABLE = "unreachable"  # on an Unreachable or Lost node
    WITHDRAWN = "withdrawn"  # being stopped by the apply in progress


@dataclass(frozen=True)
class ReplicaRoute:
    replica: str
    model: str
    profile: str
    engine: str
    node: str | None  # rank 0's node; None when rank 0 is missing
    url: str | None  # http(s)://ADDRESS:PORT/v1 of rank 0; None when it has no port
    state: State
    reason: str  # for people, after the replica's name: "starting", "failed: rank 1 on n-2"
    embedding: bool = False  # serves embeddings rather than chat (the engine spec's verdict)
    first_token_seconds: int = DEFAULT_FIRST_TOKEN_SECONDS  # the router's, from its profile

    @property
    def tls(self) -> bool:
        return self.url is not None and self.url.startswith("https://")

    @property
    def ready(self) -> bool:
        return self.state is State.READY


@dataclass(frozen=True)
class ModelRoute:
    model: str
    aliases: tuple[str, ...]
    replicas_min: int
    fallbacks: tuple[str, ...]  # the catalog's, aliases resolved, in its order
    # The order requests fall back in: the model's own fallbacks, then theirs, breadth first.
    chain: tuple[str, ...]
    replicas: tuple[ReplicaRoute, ...]  # every replica the nodes report, ready or not
    # The model whose endpoints answer this one's name now: itself when it has a ready
    # replica, else the first model of `chain` that has one; None: nothing answers.
    served_by: str | None

    @property
    def endpoints(self) -> tuple[ReplicaRoute, ...]:
        return tuple(r for r in self.replicas if r.ready)

    @property
    def ready(self) -> bool:
        return bool(self.endpoints)

    @property
    def wanted(self) -> bool:
        return self.replicas_min > 0

    @property
    def missing(self) -> str | None:
        """Why no replica is ready; None when one is."""
        if self.ready:
            return None
        if not self.replicas:
            return "none running" if self.wanted else "none wanted (replicas.min 0)"
        return "; ".join(f"{r.replica} {r.reason}" for r in self.replicas)


@dataclass(frozen=True)
class RouteTable:
    at: datetime
    models: tuple[ModelRoute, ...]  # in catalog order
    aliases: Mapping[str, str]  # alias → model, in catalog order
    unrouted: tuple[ReplicaRoute, ...] = ()  # replicas of models the catalog no longer has

    def model(self, name: str) -> ModelRoute:
        for route in self.models:
            if route.model == name:
                return route
        raise KeyError(name)

    @property
    def complete(self) -> bool:
        """Every model that wants replicas has a ready one."""
        return all(route.ready for route in self.models if route.wanted)

    @property
    def deployments(self) -> tuple[ReplicaRoute, ...]:
        """Every ready replica, model by model: what a router sends requests to."""
        return tuple(r for route in self.models for r in route.endpoints)


def endpoint_url(address: str, port: int, tls: bool = False) -> str:
    return base_url(address, port, tls) + "/v1"


def fallback_chain(catalog: Catalog, name: str) -> tuple[str, ...]:
    """`name`'s fallbacks in the catalog's order, then theirs, breadth first, each once.

    The catalog refuses cycles at load; `name` itself is skipped all the same."""
    order: list[str] = []
    queue = list(catalog.models[name].fallbacks)
    while queue:
        candidate = queue.pop(0)
        if candidate == name or candidate in order:
            continue
        order.append(candidate)
        queue += catalog.models[candidate].fallbacks
    return tuple(order)


def serves_embeddings(profile: CatalogProfile) -> bool:
    """Whether the profile runs its engine as an embedding server (the engine's spec says)."""
    return engine_spec(profile.spec.engine).serves_embeddings(profile.spec)


def route_table(
    catalog: Catalog,
    snapshot: Snapshot,
    addresses: Mapping[str, str],
    withdrawn: Collection[str] = frozenset(),
    started: Sequence[Start] = (),
) -> RouteTable:
    """The table as of `snapshot`, with `withdrawn` replicas out and `started` ones in.

    `addresses` maps a node to the address its shards are reached at (`ctl`'s
    serving_addresses); `started` replicas are ready: add only those whose rank 0 serves.
    """
    # Only believed records are routed to (cli/cluster/trust.py).
    snapshot = checked(snapshot, catalog)
    nodes = {node.name: node for node in snapshot.nodes}
    routes: dict[str, list[ReplicaRoute]] = {name: [] for name in catalog.models}
    unrouted: list[ReplicaRoute] = []
    for replica in replicas_of(snapshot):
        route = _replica_route(replica, catalog, nodes, addresses, frozenset(withdrawn))
        routes.get(replica.model, unrouted).append(route)
    known = {r.replica for replicas in routes.values() for r in replicas}
    for start in started:
        if start.replica in known or start.replica in withdrawn or start.model not in routes:
            continue
        leader = start.leader
        routes[start.model].append(
            ReplicaRoute(
                replica=start.replica,
                model=start.model,
                profile=start.profile.name,
                engine=start.profile.spec.engine,
                node=leader.node,
                url=None if leader.health_url is None else leader.health_url + "/v1",
                state=State.READY,
                reason="",
                embedding=serves_embeddings(start.profile),
                first_token_seconds=start.profile.spec.first_token_seconds,
            )
        )
    ready = {name for name, replicas in routes.items() if any(r.ready for r in replicas)}
    models = []
    for name, model in catalog.models.items():
        chain = fallback_chain(catalog, name)
        served_by = name if name in ready else next((m for m in chain if m in ready), None)
        models.append(
            ModelRoute(
                model=name,
                aliases=model.aliases,
                replicas_min=model.replicas_min,
                fallbacks=model.fallbacks,
                chain=chain,
                replicas=tuple(routes[name]),
                served_by=served_by,
            )
        )
    return RouteTable(
        at=snapshot.now,
        models=tuple(models),
        aliases=dict(catalog.aliases),
        unrouted=tuple(unrouted),
    )


def _replica_route(
    replica: Replica,
    catalog: Catalog,
    nodes: Mapping[str, NodeView],
    addresses: Mapping[str, str],
    withdrawn: frozenset[str],
) -> ReplicaRoute:
    leader = next((s for s in replica.shards if s.record.rank == 0), None)
    engine = (leader or replica.shards[0]).record.engine
    url = None
    if leader is not None and leader.record.port is not None:
        address = addresses.get(leader.node, leader.node)
        tls = leader.record.certificate is not None
        url = endpoint_url(address, leader.record.port, tls)
    state, reason = _state(replica, nodes, withdrawn)
    if state is State.READY and url is None:
        state, reason = State.FAILED, "failed: rank 0 records no port"
    model = catalog.models.get(replica.model)
    profiles = model.profiles if model is not None else ()
    profile = next((p for p in profiles if p.name == replica.profile), None)
    return ReplicaRoute(
        replica=replica.replica,
        model=replica.model,
        profile=replica.profile,
        engine=engine,
        node=None if leader is None else leader.node,
        url=url,
        state=state,
        reason=reason,
        embedding=profile is not None and serves_embeddings(profile),
        first_token_seconds=(
            DEFAULT_FIRST_TOKEN_SECONDS if profile is None else profile.spec.first_token_seconds
        ),
    )


def _state(
    replica: Replica, nodes: Mapping[str, NodeView], withdrawn: frozenset[str]
) -> tuple[State, str]:
    if replica.replica in withdrawn:
        return State.WITHDRAWN, "being stopped"
    for shard in replica.shards:
        node = nodes[shard.node]
        if node.reachability is not Reachability.READY:
            why = f": {node.unreachable_reason}" if node.unreachable_reason else ""
            return State.UNREACHABLE, f"on {node.reachability.value.lower()} node {node.name}{why}"
    ranks = {s.record.rank for s in replica.shards}
    missing = sorted(set(range(replica.nodes)) - ranks)
    if missing:
        return State.FAILED, "failed: rank " + ", ".join(str(r) for r in missing) + " missing"
    failed = [s for s in replica.shards if s.record.state in ("failed", "stopped")]
    if failed:
        where = ", ".join(f"rank {s.record.rank} on {s.node}" for s in failed)
        return State.FAILED, f"failed: {where}"
    starting = [s for s in replica.shards if s.record.state == "starting"]
    if starting:
        return State.STARTING, "starting"
    return State.READY, ""


def routes_json(table: RouteTable) -> dict[str, Any]:
    """`ctl routes --json` (docs/routing.md): keys are only ever added."""

    def replica_json(route: ReplicaRoute) -> dict[str, Any]:
        return {
            "replica": route.replica,
            "profile": route.profile,
            "engine": route.engine,
            "node": route.node,
            "url": route.url,
            "state": route.state.value,
            "reason": route.reason or None,
        }

    def endpoints(name: str) -> list[dict[str, Any]]:
        return [replica_json(r) for r in table.model(name).endpoints]

    models = []
    for route in table.models:
        models.append(
            {
                "model": route.model,
                "aliases": list(route.aliases),
                "replicas_min": route.replicas_min,
                "ready": route.ready,
                "endpoints": endpoints(route.model),
                "fallbacks": list(route.fallbacks),
                "fallback_chain": list(route.chain),
                "served_by": route.served_by,
                "missing": route.missing,
                "replicas": [replica_json(r) for r in route.replicas],
            }
        )
    aliases = []
    for alias, model in table.aliases.items():
        route = table.model(model)
        aliases.append(
            {
                "alias": alias,
                "model": model,
                "ready": route.ready,
                "served_by": route.served_by,
                "endpoints": endpoints(model),
            }
        )
    return {
        "format": ROUTES_FORMAT,
        "at": table.at.isoformat(),
        "complete": table.complete,
        "models": models,
        "aliases": aliases,
        "unrouted": [{"model": r.model, **replica_json(r)} for r in table.unrouted],
    }
