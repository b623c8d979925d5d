"""Which certificates a reconcile pass renews, what the plan and `--json` say of them, and
what it says when one could not be renewed (cli/reconcile/renewal.py, docs/onboarding.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.cluster.snapshot import NodeView, Reachability
from cli.facts.model import NodeCertificate
from cli.inventory.schema import Host, Inventory
from cli.ops.reconcile import _renewed_into
from cli.ops.renew import Renewed, renew_certificates
from cli.pki.certs import NodeNames
from cli.pki.store import init_ca
from cli.reconcile.apply import Outcome
from cli.reconcile.planner import Plan
from cli.reconcile.renewal import Renewal, due_renewals, renewal_reasons, sort_out
from cli.reconcile.report import reconcile_json
from cli.ui.plan import render_plan

START = datetime(2026, 11, 1, tzinfo=UTC)
DUE = START + timedelta(days=60)  # two thirds of 90 days
ISSUER = "CN=modelfleet CA lab,O=modelfleet"
FINGERPRINT = "AB:" * 31 + "AB"
CERT = NodeCertificate(
    serial="2c7c4dc08aae3a9d",
    not_before=START,
    not_after=START + timedelta(days=90),
    dns_names=("node-3",),
    ip_addresses=("10.0.0.3",),
    issuer=ISSUER,
    key_present=True,
    ca_fingerprint=FINGERPRINT,
    ca_not_after=datetime(2036, 1, 1, tzinfo=UTC),
)
NAMES = NodeNames.of("node-3", ["10.0.0.3"])


def node(
    name: str = "node-3",
    cert: NodeCertificate | None = CERT,
    reachability: Reachability = Reachability.READY,
    in_inventory: bool = True,
) -> NodeView:
    return NodeView(
        name=name, reachability=reachability, cordon=None, unreachable_reason=None,
        last_reached=START, labels={}, memory_total_gib=None, memory_reserved_gib=0.0,
        gpus=(), nvlink_domains=None, fabrics=(), shards=(), in_inventory=in_inventory,
        certificate=cert,
    )  # fmt: skip


def test_a_certificate_is_due_from_exactly_two_thirds_of_its_lifetime() -> None:
    assert renewal_reasons(CERT, NAMES, DUE - timedelta(seconds=1)) == ()
    assert renewal_reasons(CERT, NAMES, DUE) == (
        "past two thirds of its lifetime, expires 2027-01-30 00:00 UTC",
    )
    assert renewal_reasons(CERT, NAMES, CERT.not_after) == ("expired 2027-01-30 00:00 UTC",)


def test_names_that_no_longer_match_the_inventory_or_a_problem_make_it_due() -> None:
    moved = NodeNames.of("node-3", ["10.0.0.4"])
    assert renewal_reasons(CERT, moved, START) == (
        "names DNS:node-3, IP:10.0.0.3, not DNS:node-3, IP:10.0.0.4",
    )
    keyless = CERT.model_copy(update={"problem": "no node.key", "key_present": False})
    assert renewal_reasons(keyless, NAMES, START) == ("no node.key",)
    # An expired certificate's gather-time problem is the same fact: said once.
    gone = CERT.model_copy(update={"problem": "expired 2027-01-30 00:00 UTC"})
    assert renewal_reasons(gone, NAMES, CERT.not_after) == ("expired 2027-01-30 00:00 UTC",)


def test_only_reachable_inventory_nodes_with_a_certificate_are_planned() -> None:
    nodes = [
        node("node-3"),
        node("plain", cert=None),
        node("away", reachability=Reachability.UNREACHABLE),
        node("lost", reachability=Reachability.LOST),
        node("what-if", in_inventory=False),
        node("fresh", cert=CERT.model_copy(update={"not_before": DUE, "dns_names": ("fresh",)})),
    ]
    addresses = {n.name: "10.0.0.3" for n in nodes}
    due = due_renewals(nodes, addresses, DUE)
    assert [r.node for r in due] == ["node-3"]
    (renewal,) = due
    assert (renewal.serial, renewal.not_after, renewal.not_here) == (
        "2c7c4dc08aae3a9d", CERT.not_after, None,
    )  # fmt: skip
    # The inventory's address is what the certificate must name.
    assert [r.node for r in due_renewals(nodes[:1], {"node-3": "10.9.9.9"}, START)] == ["node-3"]


def test_the_ca_decides_renewed_or_only_said() -> None:
    due = due_renewals([node()], {"node-3": "10.0.0.3"}, DUE)
    renew, said = sort_out(due, (ISSUER, FINGERPRINT), "/ca")
    assert [r.node for r in renew] == ["node-3"] and said == ()
    renew, said = sort_out(due, None, "/nowhere")
    assert renew == ()
    assert said[0].not_here == (
        "no CA in /nowhere: renew it where the CA is: ctl reconcile there (--ca-dir DIR or"
        " MODELFLEET_CA_DIR), or ctl onboard-node node-3 --renew"
    )
    # Another CA's certificate is never re-keyed by a CA directory pointed at by mistake.
    renew, said = sort_out(due, ("CN=modelfleet CA other,O=modelfleet", "CD:CD"), "/ca")
    assert renew == ()
    assert said[0].not_here is not None and said[0].not_here.startswith(
        f"issued by {ISSUER}, not by this CA (CN=modelfleet CA other,O=modelfleet, /ca)"
    )
    renew, said = sort_out(due, (ISSUER, "CD:CD"), "/ca")  # same name, another key
    assert renew == () and len(said) == 1


RENEWAL = Renewal("node-3", ("past two thirds of its lifetime, expires 2027-01-30 00:00 UTC",),
                  "2c7c4dc08aae3a9d", CERT.not_after, ISSUER, FINGERPRINT)  # fmt: skip


def test_the_plan_shows_a_renewal_as_planned_and_a_due_one_with_how() -> None:
    planned = Plan(now=DUE, renewals=(RENEWAL,))
    assert render_plan(planned) == [
        "renew  node-3  certificate: past two thirds of its lifetime, expires 2027-01-30 00:00 UTC"
    ]
    said = Plan(now=DUE, certificates_due=(replace(RENEWAL, not_here="no CA in /x: do y"),))
    first, *rest = render_plan(said)
    assert first.startswith("due    node-3  certificate: past two thirds")
    assert " ".join(" ".join([first, *rest]).split()).endswith("not renewed: no CA in /x: do y")
    assert render_plan(Plan(now=DUE)) == ["nothing to do: the fleet runs what the catalog asks"]


def test_json_lists_renewals_planned_due_and_done() -> None:
    plan = Plan(now=DUE, renewals=(RENEWAL,))
    outcome = Outcome(renewed=["node-3"], not_renewed={"node-4": "timed out"})
    document = reconcile_json(plan, dry_run=False, complete=False, outcome=outcome)
    assert document["plan"]["renewals"] == [
        {
            "node": "node-3",
            "why": ["past two thirds of its lifetime, expires 2027-01-30 00:00 UTC"],
            "serial": "2c7c4dc08aae3a9d",
            "not_after": "2027-01-30T00:00:00+00:00",
            "not_here": None,
        }
    ]
    assert document["plan"]["certificates_due"] == []
    assert document["outcome"]["renewed"] == ["node-3"]
    assert document["outcome"]["not_renewed"] == {"node-4": "timed out"}
    assert not outcome.complete  # a renewal that failed is work not done: exit 1
    assert Outcome(renewed=["node-3"]).complete


def test_a_renewal_that_fails_is_said_and_leaves_the_pass_incomplete(tmp_path: Path) -> None:
    ca = init_ca(tmp_path / "ca", "tests", START)
    inventory = Inventory(
        source=str(tmp_path / "hosts.yml"),
        hosts=(Host(name="node-3", groups=("all",), address="10.0.0.3", user="root"),),
        groups={"all": ("node-3",)},
    )
    known_hosts = tmp_path / ".known_hosts"
    known_hosts.write_text("")  # never trusted: nothing is even connected to
    said: list[str] = []
    (result,) = renew_certificates([RENEWAL], inventory, ca, known_hosts, DUE, said.append)
    assert result == Renewed(
        "node-3",
        error=f"{known_hosts} has no host key for 10.0.0.3: ctl onboard-node node-3 pins it",
    )
    outcome = Outcome()
    lines = _renewed_into(outcome, [result, Renewed("node-5", "abc", CERT.not_after)])
    assert lines == [
        f"NOT RENEWED node-3: {known_hosts} has no host key for 10.0.0.3: ctl onboard-node"
        " node-3 pins it",
        "renewed node-5: certificate abc, valid until 2027-01-30 00:00 UTC",
    ]
    assert outcome.renewed == ["node-5"] and not outcome.complete


@pytest.mark.parametrize("name", ["under_score", "x" * 70])
def test_a_name_no_certificate_can_carry_is_said_not_raised(name: str) -> None:
    (renewal,) = due_renewals([node(name)], {name: "10.0.0.3"}, START)
    assert renewal.why[0].startswith(f"'{name}' ")
