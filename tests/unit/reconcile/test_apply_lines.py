"""What a pass says it did: a start only once verified, a failed one with its shard, node,
cause and journal lines, a node's text shown as text (control characters escaped)."""

from __future__ import annotations

import random
from datetime import timedelta

from cli.ops.controller import PassRecord, note_outcome
from cli.ops.reconcile import outcome_lines
from cli.reconcile.apply import Outcome, apply
from cli.reconcile.planner import plan
from cli.reconcile.report import outcome_json
from cli.ui.safe import shown
from tests.builders import NOW, catalog, hgx, shard, snapshot
from tests.fakes.executor import FakeFleet
from tests.unit.reconcile.test_drain import drain_plan, fleet

MODELS = catalog(
    """\
    models:
      good:
        source: hf://org/good
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      bad:
        source: hf://org/bad
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)


def test_a_failed_start_is_named_with_its_node_cause_and_journal_shown_as_plain_text() -> None:
    journal = ("\x1b[31mTraceback\x1b[0m [bold]x[/bold]\r", "ValueError: bad\u202e")
    fake = FakeFleet(fail={("bad-1", 0)}, journal={("bad-1", 0): journal})
    fleet = snapshot(hgx("hgx-1"))
    outcome = apply(plan(MODELS, fleet, {}, {}, random.Random(1)), fake, NOW, random.Random(1))
    # The node's text as it came; the terminal gets it through cli/ui's one rule.
    assert [shown(line) for line in outcome_lines(outcome)] == [
        "started good-1",
        "FAILED bad-1: rank 0 on hgx-1: not healthy after 600 s — stopped whole",
        "  modelfleet-bad-1-rank0.service on hgx-1, its journal's last lines:",
        "    \\x1b[31mTraceback\\x1b[0m [bold]x[/bold]\\r",
        "    ValueError: bad\\u202e",
    ]


def test_a_drained_replica_whose_replacement_failed_is_said_to_serve_on() -> None:
    nodes = fleet()
    fake = FakeFleet(fail={("chat-3", 0)})
    fake.adopt(snapshot(*nodes))
    outcome = apply(drain_plan(*nodes), fake, NOW, random.Random(1))
    assert outcome_lines(outcome)[-1] == (
        "NOT DRAINED chat-1: its replacement chat-3 did not start; it serves on"
    )


def test_a_replica_on_a_lost_node_is_said_withdrawn_in_the_output_and_the_pass_record() -> None:
    fleet = snapshot(
        hgx("hgx-1", unreachable_for=timedelta(hours=2),
            shards=[shard("good-1", "good", [0], profile="x1")]),
        hgx("hgx-2"),
    )  # fmt: skip
    outcome = apply(plan(MODELS, fleet, {}, {}, random.Random(1)), FakeFleet(), NOW,
                    random.Random(1))  # fmt: skip
    assert outcome_lines(outcome) == [
        "started good-2",
        "started bad-1",
        "withdrew good-1 from the routers: its nodes are lost, so nothing of it could be"
        " stopped; the pass that reaches them again stops it",
    ]
    record = PassRecord(number=1, started=NOW, dry_run=False)
    note_outcome(record, outcome)
    assert record.did == [
        "withdrew good-1 from the routers (its nodes are lost: stopped once they answer)",
        "started good-2",
        "started bad-1",
    ]


def test_a_replica_stopped_but_for_its_ranks_on_lost_nodes_says_which_still_run() -> None:
    outcome = Outcome(stopped_but_lost={"big-1": ["hgx-2", "hgx-3"]})
    assert outcome_lines(outcome) == [
        "stopped big-1 where its nodes answer and withdrew it from the routers; its ranks on"
        " hgx-2, hgx-3 (lost) still run: the pass that reaches them again stops them"
    ]
    record = PassRecord(number=1, started=NOW, dry_run=False)
    note_outcome(record, outcome)
    assert record.did == [
        "stopped big-1 but its ranks on hgx-2, hgx-3 (lost: stopped once they answer)"
    ]
    assert outcome_json(outcome)["stopped_but_lost"] == {"big-1": ["hgx-2", "hgx-3"]}
