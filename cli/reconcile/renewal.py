"""Which node certificates a reconcile pass renews, and why. Pure: facts, names, the clock.

A node's certificate is due once two thirds of its lifetime have passed (cli/pki/certs.py
renew_after, the rule onboarding keeps a certificate by), when it has expired, when its
names are no longer the node's inventory name and address, or when the node cannot serve
TLS with it (no node.key, not signed by its ca.pem...). A node that reports no
certificate serves plain HTTP and is left so: giving it one is `ctl onboard-node`'s work.
Only reachable nodes are planned: an unreachable one keeps its last known facts, and
nobody could log in to renew it.

The CA decides the rest (cli/ops/renew.py): with the CA here, every due certificate it
issued is renewed; one another CA issued is only said, since a CA directory pointed at by
mistake must not re-key the fleet; without the CA here, each due certificate is said once,
with how to renew it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from cli.cluster.snapshot import NodeView, Reachability
from cli.facts.model import NodeCertificate
from cli.pki.certs import (
    CertificateError,
    NodeNames,
    ca_expiry_warning,
    lifetime_problem,
    parse_ip,
)


@dataclass(frozen=True)
class Renewal:
    """A node whose certificate is due, and what it has now."""

    node: str
    why: tuple[str, ...]  # each reason, for people: "past two thirds of its lifetime (...)"
    serial: str  # the certificate it has now
    not_after: datetime
    issuer: str
    ca_fingerprint: str | None  # the node's ca.pem
    # Why ctl does not renew it in this pass, with what to run instead; None: renewed.
    not_here: str | None = None


def renewal_reasons(cert: NodeCertificate, names: NodeNames, now: datetime) -> tuple[str, ...]:
    """Why `cert` should be replaced at `now` for a node known by `names` (empty: keep)."""
    reasons: list[str] = []
    lifetime = lifetime_problem(cert.not_before, cert.not_after, now)
    if lifetime is not None:
        reasons.append(lifetime)
    has = NodeNames(
        cert.dns_names, tuple(ip for ip in map(parse_ip, cert.ip_addresses) if ip is not None)
    )
    if not has.same_as(names):
        reasons.append(f"names {has or '(none)'}, not {names}")
    # A problem beside an expiry is mended by the same new certificate; said once.
    if cert.problem is not None and lifetime is None:
        reasons.append(cert.problem)
    return tuple(reasons)


def due_renewals(
    nodes: Sequence[NodeView], addresses: Mapping[str, str], now: datetime
) -> tuple[Renewal, ...]:
    """Every reachable inventory node whose certificate is due at `now`; `addresses`: each
    node's inventory address (ansible_host), which its certificate must name."""
    due: list[Renewal] = []
    for node in nodes:
        cert = node.certificate
        if cert is None or not node.in_inventory or node.reachability is not Reachability.READY:
            continue
        address = addresses.get(node.name)
        try:
            names = NodeNames.of(node.name, [] if address is None else [address])
        except CertificateError as error:  # an inventory name no certificate can carry
            reasons: tuple[str, ...] = (str(error),)
        else:
            reasons = renewal_reasons(cert, names, now)
        if reasons:
            due.append(
                Renewal(
                    node.name,
                    reasons,
                    cert.serial,
                    cert.not_after,
                    cert.issuer,
                    cert.ca_fingerprint,
                )
            )
    return tuple(due)


def sort_out(
    due: Sequence[Renewal], ca: tuple[str, str] | None, ca_dir: str
) -> tuple[tuple[Renewal, ...], tuple[Renewal, ...]]:
    """`due` as (renewed in this pass, only said): `ca` is the CA here as (its subject,
    RFC 4514; its fingerprint), None when there is none in `ca_dir`."""
    renew: list[Renewal] = []
    said: list[Renewal] = []
    for renewal in due:
        if ca is None:
            said.append(replace(renewal, not_here=f"no CA in {ca_dir}: {how(renewal.node)}"))
            continue
        subject, fingerprint = ca
        foreign = renewal.issuer != subject or renewal.ca_fingerprint not in (None, fingerprint)
        if foreign:
            said.append(
                replace(
                    renewal,
                    not_here=f"issued by {renewal.issuer}, not by this CA ({subject}, {ca_dir}):"
                    f" ctl onboard-node {renewal.node} --renew gives it one from this CA,"
                    " or run ctl reconcile where its own CA is",
                )
            )
        else:
            renew.append(renewal)
    return tuple(renew), tuple(said)


def how(node: str) -> str:
    """How to renew a node's certificate from the machine that holds the CA."""
    return (
        "renew it where the CA is: ctl reconcile there (--ca-dir DIR or MODELFLEET_CA_DIR),"
        f" or ctl onboard-node {node} --renew"
    )


def ca_warnings(certificates: Iterable[NodeCertificate], now: datetime) -> list[str]:
    """One line per CA certificate the nodes hold (their ca.pem) that ends within 30 days
    of `now`, however many nodes hold it."""
    holders: dict[str, list[NodeCertificate]] = {}
    for cert in certificates:
        if cert.ca_fingerprint is not None and cert.ca_not_after is not None:
            holders.setdefault(cert.ca_fingerprint, []).append(cert)
    lines = []
    for fingerprint, held in sorted(holders.items()):
        ends = held[0].ca_not_after
        assert ends is not None
        nodes = f"{len(held)} node{'s' if len(held) != 1 else ''}"
        whose = f"the CA certificate on {nodes} (SHA-256 {fingerprint[:23]}…)"
        warning = ca_expiry_warning(ends, now, whose)
        if warning is not None:
            lines.append(warning)
    return lines
