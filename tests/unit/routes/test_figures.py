"""ctl's own figures (cli/routes/figures.py) for the textfile collector: what each pass
counts, how the counters add up, and the exposition Debian's promtool accepts. Pure but
for promtool, run on the text."""

from __future__ import annotations

import random
import shutil
import subprocess
from datetime import timedelta

import pytest

from cli.facts.model import ReplicaLoad
from cli.reconcile.autoscale import Memory
from cli.reconcile.planner import plan
from cli.routes.figures import METRICS, Totals, pass_figures, textfile
from cli.routes.table import route_table
from tests.builders import NOW, NodeSpec, shard, snapshot
from tests.unit.reconcile.test_autoscale import ADDRESSES, SCALED


def one_full_node_pass() -> tuple[Totals, str]:
    """chat-1 on the only H100, its queue long for a minute: the autoscaler wants a second
    replica, which fits nowhere."""
    shards = [shard("chat-1", "chat", [0], profile="x1")]
    only = NodeSpec("hgx-1", "H100", 1, [[0]], shards=shards,
                    load=[ReplicaLoad(replica="chat-1", waiting=20)])  # fmt: skip
    fleet = snapshot(only)
    held = {"chat": Memory(above_since=NOW - timedelta(seconds=60))}
    decided = plan(SCALED, fleet, {}, ADDRESSES, random.Random(1), scale_memory=held)
    figures = pass_figures(route_table(SCALED, fleet, ADDRESSES), decided)
    assert figures.replicas == {
        ("chat", "ready"): 1, ("chat", "starting"): 0, ("chat", "failed"): 0,
        ("chat", "unreachable"): 0,
    }  # fmt: skip
    assert figures.refused == {"chat": 1}
    assert figures.desired == {"chat": 2}
    assert figures.scaled == {("chat", "up"): 1}
    totals = Totals().add(figures).add(None).add(figures)
    return totals, textfile(1.25, 1, NOW, figures, totals)


def test_replicas_are_counted_as_the_pass_leaves_them_a_stopped_one_gone() -> None:
    shards = [
        shard("chat-1", "chat", [0], profile="x1"),
        shard("chat-2", "chat", [1], profile="x1", port=8002, state="starting"),
        shard("chat-3", "chat", [], profile="x1", port=8003, state="failed"),
        shard("gone-1", "gone", [2], profile="x1", port=8004),  # a model no longer listed
    ]
    fleet = snapshot(NodeSpec("hgx-1", "H100", 4, [[0, 1, 2, 3]], shards=shards))
    table = route_table(SCALED, fleet, ADDRESSES, withdrawn={"chat-3"})
    figures = pass_figures(table, plan(SCALED, fleet, {}, ADDRESSES, random.Random(1)))
    assert figures.replicas == {
        ("chat", "ready"): 1, ("chat", "starting"): 1, ("chat", "failed"): 0,
        ("chat", "unreachable"): 0, ("gone", "ready"): 1,
    }  # fmt: skip


def test_the_counters_add_up_over_passes_and_a_pass_without_a_plan_counts_as_a_pass() -> None:
    totals, _ = one_full_node_pass()
    assert totals == Totals(3, {"chat": 2}, {("chat", "up"): 2})


def test_the_exposition_says_each_figure_with_its_help_and_type() -> None:
    _, text = one_full_node_pass()
    lines = text.splitlines()
    for name, (kind, _help) in METRICS.items():
        assert f"# TYPE {name} {kind}" in lines
        assert any(line.startswith(f"# HELP {name} ") for line in lines)
        assert name.startswith("modelfleet_")
        assert (kind == "counter") == name.endswith("_total")
    for sample in [
        "modelfleet_passes_total 3",
        "modelfleet_pass_duration_seconds 1.25",
        "modelfleet_pass_exit_code 1",
        "modelfleet_pass_end_timestamp_seconds 1796029200",  # NOW, in Unix time
        'modelfleet_replicas{model="chat",state="ready"} 1',
        'modelfleet_replicas{model="chat",state="failed"} 0',
        'modelfleet_replicas{model="chat",state="starting"} 0',
        'modelfleet_replicas_refused{model="chat"} 1',
        'modelfleet_refusals_total{model="chat"} 2',
        'modelfleet_autoscale_desired_replicas{model="chat"} 2',
        'modelfleet_scaling_decisions_total{model="chat",direction="up"} 2',
    ]:
        assert sample in lines
    assert text.endswith("\n")


def test_a_pass_that_planned_nothing_keeps_the_counters_and_drops_the_gauges_it_cannot_say() -> (
    None
):
    text = textfile(0.5, 2, NOW, None, Totals(4, {"chat": 2}, {}))
    assert "modelfleet_pass_exit_code 2" in text
    assert 'modelfleet_refusals_total{model="chat"} 2' in text
    assert "modelfleet_replicas{" not in text


def test_a_label_value_is_escaped_as_the_format_says() -> None:
    totals = Totals(1, {'odd"name\\\n': 1}, {})
    text = textfile(0.5, 0, NOW, None, totals)
    assert 'modelfleet_refusals_total{model="odd\\"name\\\\\\n"} 1' in text.splitlines()


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="no promtool: apt-get install prometheus"
)
def test_promtool_finds_the_exposition_valid() -> None:
    _, text = one_full_node_pass()
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""  # not even a lint remark
    # And it is not lenient: a sample without its TYPE is said.
    bad = subprocess.run(
        ["promtool", "check", "metrics"], input=text + "modelfleet_x{a=1} 1\n",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode != 0
