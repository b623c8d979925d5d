"""What Prometheus should scrape: `ctl targets`, as file_sd target groups. Pure.

From the routing table and the snapshot: the rank-0 endpoint of every ready replica (its
engine serves /metrics there, over TLS when the replica does), and each node's Prometheus
node exporter where the node's facts show its port listening (docs/metrics.md). A target
group is what Prometheus's file_sd reads: `{"targets": ["HOST:PORT"], "labels": {...}}`,
one per replica or node, so that each carries its own labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from cli.cluster.snapshot import Snapshot
from cli.routes.table import RouteTable

DEFAULT_NODE_EXPORTER_PORT: Final = 9100
KIND_REPLICA: Final = "replica"
KIND_NODE: Final = "node"


@dataclass(frozen=True)
class TargetGroup:
    target: str  # HOST:PORT, an IPv6 host bracketed
    labels: Mapping[str, str]


def scrape_targets(
    table: RouteTable,
    snapshot: Snapshot,
    addresses: Mapping[str, str],
    exporter_ports: Mapping[str, int | None],
) -> list[TargetGroup]:
    """Every ready replica, model by model in catalog order (then those of models the
    catalog no longer has), then every node whose exporter port listens, in node order.

    `addresses` maps a node to the address it is reached at (as for the routes);
    `exporter_ports` a node to its `modelfleet_node_exporter_port` (None: the default).
    A replica on a node that does not answer is left out, as the routers leave it: ctl
    cannot vouch that it runs. A node that does not answer keeps its exporter, as its last
    facts saw it, so that Prometheus says it is down rather than forgetting it.
    """
    groups: list[TargetGroup] = []
    ready = [r for route in table.models for r in route.endpoints]
    ready += [r for r in table.unrouted if r.ready]
    for replica in ready:
        if replica.url is None or replica.node is None:
            continue  # a ready replica has a rank 0 with a port (cli/routes/table.py)
        url = urlsplit(replica.url)
        labels = {
            "kind": KIND_REPLICA,
            "model": replica.model,
            "replica": replica.replica,
            "node": replica.node,
            "engine": replica.engine,
        }
        if replica.tls:
            labels["__scheme__"] = "https"
        groups.append(TargetGroup(url.netloc, labels))
    for node in snapshot.nodes:
        port = exporter_ports.get(node.name) or DEFAULT_NODE_EXPORTER_PORT
        if port not in node.listening_ports:
            continue
        address = addresses.get(node.name, node.name)
        host = f"[{address}]" if ":" in address else address
        groups.append(TargetGroup(f"{host}:{port}", {"kind": KIND_NODE, "node": node.name}))
    return groups


def file_sd(groups: list[TargetGroup]) -> list[dict[str, Any]]:
    """The groups as Prometheus's file_sd JSON reads them."""
    return [{"targets": [group.target], "labels": dict(group.labels)} for group in groups]
