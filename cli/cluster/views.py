"""What `ctl nodes` says about a node, as data: counts per GPU class, notes, the JSON form."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cli.cluster.snapshot import NodeView, Snapshot
from cli.cluster.trust import UNCHECKED
from cli.pki.certs import renew_after

NODES_FORMAT = "modelfleet.nodes/v1"


@dataclass(frozen=True)
class GpuCount:
    gpu_class: str
    free: int  # usable and not held by our shards
    total: int


def gpu_counts(node: NodeView) -> list[GpuCount] | None:
    """Per class; None when the node did not report its GPUs."""
    if node.gpus is None:
        return None
    counts: dict[str, list[int]] = {}
    for gpu in node.gpus:
        free, total = counts.setdefault(gpu.gpu_class, [0, 0])
        usable = gpu.unusable is None and gpu.held_by is None
        counts[gpu.gpu_class] = [free + usable, total + 1]
    return [GpuCount(c, free, total) for c, (free, total) in sorted(counts.items())]


def certificate_note(node: NodeView, now: datetime) -> str | None:
    """What is wrong with the node's certificate at `now`, or None: why it cannot serve
    TLS, else that it is due for renewal (cli/pki/certs.py renew_after)."""
    cert = node.certificate
    if cert is None:
        return None
    if cert.problem is not None:
        return f"certificate: {cert.problem}"
    if now >= cert.not_after:
        return f"certificate: expired {cert.not_after:%Y-%m-%d %H:%M} UTC"
    if now >= renew_after(cert.not_before, cert.not_after):
        return f"certificate: due for renewal, expires {cert.not_after:%Y-%m-%d %H:%M} UTC"
    return None


def node_notes(node: NodeView, now: datetime | None = None) -> list[str]:
    """The things worth a line under the table: faults, foreign processes, unknowns; with
    `now`, a certificate that cannot serve or is due for renewal."""
    notes = []
    if node.cordon is not None:
        notes.append(f"cordoned: {node.cordon}")
    if node.unreachable_reason is not None:
        notes.append(f"{node.reachability.value.lower()}: {node.unreachable_reason}")
    for gpu in node.gpus or ():
        if gpu.unusable is not None:
            notes.append(f"GPU {gpu.index}: {gpu.unusable}")
    for fabric in node.fabrics:
        if fabric.active_hcas is None:
            notes.append(f"fabric {fabric.name}: HCA state unknown")
        elif fabric.down:
            notes.append(f"fabric {fabric.name}: {', '.join(fabric.down)}")
    if node.memory_total_gib is None and node.reachability.value == "Ready":
        notes.append("did not report its memory")
    for shard in node.shards:
        if shard.holds:
            continue
        note = f"shard {shard.replica}/{shard.rank} {shard.state}"
        if shard.gpus:
            gpus = ", ".join(str(index) for index in shard.gpus)
            note += f": GPU {gpus} no longer held"
        notes.append(note)
    for bad in node.invalid_shards:
        # The node's own words, shown as data (repr): never stopped, never routed to.
        notes.append(
            f"invalid shard {bad.record.replica[:200]!r} rank {bad.record.rank}: {bad.reason}"
            " (not believed: never stopped or routed to; its GPUs are unusable)"
        )
    if node.invalid_shards and not node.catalog_checked:
        notes.append(f"shard records {UNCHECKED}")
    certificate = None if now is None else certificate_note(node, now)
    if certificate is not None:
        notes.append(certificate)
    if not node.in_inventory:
        notes.append("what-if node: in the facts snapshot, not in the inventory")
    notes += node.notes
    return notes


def nodes_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "format": NODES_FORMAT,
        "at": snapshot.now.isoformat(),
        "nodes": [_node_json(node, snapshot.now) for node in snapshot.nodes],
    }


def _node_json(node: NodeView, now: datetime) -> dict[str, Any]:
    counts = gpu_counts(node)
    # Only when there are some: the keys of a fleet with none stay as they were.
    invalid: dict[str, Any] = {}
    if node.invalid_shards:
        invalid = {
            "invalid_shards": [
                {"record": i.record.model_dump(mode="json"), "reason": i.reason}
                for i in node.invalid_shards
            ],
            "catalog_checked": node.catalog_checked,
        }
    return {
        "name": node.name,
        "status": node.status.value,
        "reachability": node.reachability.value,
        "cordoned": node.cordon,
        "unreachable_reason": node.unreachable_reason,
        "last_reached": node.last_reached.isoformat() if node.last_reached else None,
        "in_inventory": node.in_inventory,
        "memory_gib": node.memory_total_gib,
        "memory_reserved_gib": node.memory_reserved_gib,
        "gpu_counts": None
        if counts is None
        else [{"class": c.gpu_class, "free": c.free, "total": c.total} for c in counts],
        "gpus": None
        if node.gpus is None
        else [
            {
                "index": g.index,
                "name": g.name,
                "class": g.gpu_class,
                "memory_total_mib": g.memory_total_mib,
                "held_by": g.held_by,
                "unusable": g.unusable,
            }
            for g in node.gpus
        ],
        "gpus_lost": node.gpus_lost,
        "nvlink_domains": None
        if node.nvlink_domains is None
        else [sorted(d) for d in node.nvlink_domains],
        "fabrics": [
            {
                "name": f.name,
                "hcas": list(f.hcas),
                "active_hcas": None if f.active_hcas is None else list(f.active_hcas),
                "rate_gbps": f.rate_gbps,
            }
            for f in node.fabrics
        ],
        "labels": dict(node.labels),
        # As the node reported it (docs/facts.md, ModelStore); null: not reported.
        "model_store": None
        if node.model_store is None
        else node.model_store.model_dump(mode="json"),
        "shards": [s.model_dump(mode="json") for s in node.shards],
        **invalid,
        # As the node reported it (docs/facts.md, NodeCertificate); null: no node.pem.
        "certificate": None
        if node.certificate is None
        else node.certificate.model_dump(mode="json"),
        "notes": node_notes(node, now),
    }
