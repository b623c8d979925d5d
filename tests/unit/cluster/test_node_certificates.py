"""What `ctl nodes` says of each node's certificate: the CERT column, the note under the
table when it cannot serve or is due, `--json`, and the one warning for a CA near its end."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.cluster.snapshot import NodeView, Reachability, Snapshot
from cli.cluster.views import certificate_note, nodes_json
from cli.facts.model import NodeCertificate
from cli.reconcile.renewal import ca_warnings
from cli.ui.tables import cert_cell
from tests.ctl import ROOT, ctl

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
START = datetime(2026, 11, 1, tzinfo=UTC)
CERT = NodeCertificate(
    serial="2c7c4dc08aae3a9d",
    not_before=START,
    not_after=START + timedelta(days=90),  # 2027-01-30; due from 2026-12-31
    dns_names=("node-3",),
    ip_addresses=("127.0.1.3",),
    issuer="CN=modelfleet CA lab,O=modelfleet",
    key_present=True,
    ca_fingerprint="AB:" * 31 + "AB",
    ca_not_after=datetime(2036, 1, 1, tzinfo=UTC),
)


def with_(cert: NodeCertificate | None = None, **changes: object) -> NodeCertificate:
    return (cert or CERT).model_copy(update=changes)


def view(cert: NodeCertificate | None, reached: datetime | None = NOW) -> NodeView:
    return NodeView(
        name="node-3",
        reachability=Reachability.READY,
        cordon=None,
        unreachable_reason=None,
        last_reached=reached,
        labels={},
        memory_total_gib=None,
        memory_reserved_gib=0.0,
        gpus=(),
        nvlink_domains=None,
        fabrics=(),
        shards=(),
        certificate=cert,
    )


@pytest.mark.parametrize(
    ("cert", "reached", "at", "shown"),
    [
        (CERT, NOW, NOW, "58d"),  # 58.5 days left: whole days, rounded down
        (CERT, NOW, CERT.not_after - timedelta(hours=5, minutes=30), "5h"),
        (CERT, NOW, CERT.not_after - timedelta(minutes=3), "1h"),
        (CERT, NOW, CERT.not_after - timedelta(days=1), "1d"),
        (CERT, NOW, CERT.not_after, "expired"),
        (with_(CERT, problem="no node.key"), NOW, NOW, "invalid"),
        (with_(CERT, problem="no node.key"), NOW, CERT.not_after, "expired"),
        (None, NOW, NOW, "plain"),
        (None, None, NOW, "?"),
    ],
)
def test_the_cert_column_says_what_is_left_or_why_not(
    cert: NodeCertificate | None, reached: datetime | None, at: datetime, shown: str
) -> None:
    assert cert_cell(view(cert, reached), at) == shown


def test_a_note_says_when_a_certificate_is_due_from_exactly_two_thirds() -> None:
    due = START + timedelta(days=60)
    assert certificate_note(view(CERT), due - timedelta(seconds=1)) is None
    assert certificate_note(view(CERT), due) == (
        "certificate: due for renewal, expires 2027-01-30 00:00 UTC"
    )
    assert certificate_note(view(CERT), CERT.not_after) == (
        "certificate: expired 2027-01-30 00:00 UTC"
    )
    broken = with_(CERT, problem="not signed by its ca.pem")
    assert certificate_note(view(broken), NOW) == "certificate: not signed by its ca.pem"
    assert certificate_note(view(None), NOW) is None


def test_the_json_carries_the_certificate_as_the_node_reported_it_and_the_due_note() -> None:
    at = START + timedelta(days=61)
    document = nodes_json(Snapshot(now=at, nodes=(view(CERT), replace(view(None), name="n-2"))))
    first, second = document["nodes"]
    assert first["certificate"] == {
        "serial": "2c7c4dc08aae3a9d",
        "not_before": "2026-11-01T00:00:00Z",
        "not_after": "2027-01-30T00:00:00Z",
        "dns_names": ["node-3"],
        "ip_addresses": ["127.0.1.3"],
        "issuer": "CN=modelfleet CA lab,O=modelfleet",
        "key_present": True,
        "ca_fingerprint": CERT.ca_fingerprint,
        "ca_not_after": "2036-01-01T00:00:00Z",
        "problem": None,
    }
    assert "certificate: due for renewal, expires 2027-01-30 00:00 UTC" in first["notes"]
    assert second["certificate"] is None


def test_a_ca_near_its_end_is_one_line_however_many_nodes_hold_it() -> None:
    ending = with_(CERT, ca_not_after=NOW + timedelta(days=20))
    other = with_(CERT, ca_fingerprint="CD:" * 31 + "CD", ca_not_after=NOW + timedelta(days=31))
    lines = ca_warnings([ending, ending, ending, other], NOW)
    assert lines == [
        "the CA certificate on 3 nodes (SHA-256 AB:AB:AB:AB:AB:AB:AB:AB…) expires 2026-12-22"
        " 12:00 UTC (in 20 days): make a new CA (ctl ca init --ca-dir NEW_DIR) and onboard"
        " every node again with --renew from there (docs/onboarding.md, Renewal)"
    ]
    assert ca_warnings([with_(ending, ca_not_after=None, ca_fingerprint=None)], NOW) == []
    assert ca_warnings([other], NOW) == []


EXAMPLE_FLEET = ("--inventory", str(ROOT / "examples" / "inventory"))


def test_ctl_nodes_shows_the_examples_certificates_in_text_and_json() -> None:
    facts = ("--facts", str(ROOT / "examples" / "facts"))
    text = ctl("nodes", *EXAMPLE_FLEET, *facts, env={"COLUMNS": "100"}).stdout
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line}
    assert rows["NAME"][:4] == ["NAME", "STATUS", "CERT", "GPUS"]
    assert [rows[n][2] for n in ("hgx-1", "a100-1", "l40s-1", "cpu-big")] == [
        "70d", "49d", "24d", "plain",
    ]  # fmt: skip
    assert rows["l40s-2"][2] == "expired"
    assert "l40s-1: certificate: due for renewal, expires 2026-12-24 16:30 UTC" in text
    document = json.loads(ctl("nodes", *EXAMPLE_FLEET, *facts, "--json").stdout)
    nodes = {node["name"]: node for node in document["nodes"]}
    assert nodes["hgx-1"]["certificate"]["not_after"] == "2027-02-08T14:21:00Z"
    assert nodes["hgx-1"]["certificate"]["dns_names"] == ["hgx-1"]
    assert nodes["cpu-big"]["certificate"] is None


def test_every_command_reading_the_facts_warns_once_of_the_nodes_ca_ending(
    tmp_path: Path,
) -> None:
    facts = tmp_path / "facts"
    shutil.copytree(ROOT / "examples" / "facts", facts)
    for path in facts.glob("*.json"):  # the examples' nodes, gathered 2026-11-30 09:00
        data = json.loads(path.read_text())
        if data.get("certificate"):
            data["certificate"]["ca_not_after"] = "2026-12-20T00:00:00Z"
            path.write_text(json.dumps(data))
    result = ctl("nodes", *EXAMPLE_FLEET, "--facts", str(facts))
    warnings = [line for line in result.stderr.splitlines() if "CA certificate" in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("warning: the CA certificate on 9 nodes (SHA-256 ")
    assert "expires 2026-12-20 00:00 UTC (in 19 days)" in warnings[0]
    place = ctl("place", "--all", "--dry-run", "--catalog", str(ROOT / "examples" / "catalog.yaml"),
                *EXAMPLE_FLEET, "--facts", str(facts))  # fmt: skip
    assert place.stderr.count("CA certificate on 9 nodes") == 1
    plain = ctl("nodes", *EXAMPLE_FLEET, "--facts", str(ROOT / "examples" / "facts"))
    assert "CA certificate" not in plain.stderr
