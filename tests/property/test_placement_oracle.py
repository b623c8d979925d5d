"""`place()` against an independent reference placer (tests/property/oracle.py).

On small random fleets (at most 5 nodes) the oracle, written from docs/placement.md,
says for every replica of the run: which profiles fit and which wins, every refused node's
first failing constraint and what it would take (capacity, condition, hardware), the node
a single-node replica goes to and how good its GPU set is by the NVLink rule, the fabric
and nodes of a multi-node replica, and the verdict of one that is not placed. The
replicas `place()` placed are fed back to the oracle, so each replica is judged on the
state that holds the ones before it.

The last test measures the strategies: how often they reach the hard cases, each of
which some real bug only shows in.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import Phase, event, given, settings, target

from cli.catalog.schema import Profile
from cli.cluster.snapshot import NodeView, Reachability, Snapshot
from cli.placement.place import PlacementRun, ReplicaPlacement
from tests.ctl import ROOT
from tests.property.oracle import STRICT, Expectation, Oracle, Passes, gpu_choice_problems
from tests.property.strategies import NOW, Scenario, scenarios

# The profile (tests/conftest.py) derandomizes; this sets only how many examples.
ORACLE_SETTINGS = settings(max_examples=250)
SMALL = scenarios(max_nodes=5)


@dataclass
class Findings:
    """Where `place()` and the oracle disagree, by what they disagree on."""

    order: list[str] = field(default_factory=list)
    fits: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    single: list[str] = field(default_factory=list)
    multi: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)


def compare(scenario: Scenario) -> tuple[Snapshot, PlacementRun, Findings]:
    snapshot, run = scenario.run()
    oracle = Oracle(scenario.catalog, snapshot)
    found = Findings()
    sequence = oracle.sequence(scenario.models)
    models = [placement.model for placement in run.placements]
    if models != sequence:
        found.order.append(f"replicas placed as {models}, the rounds give {sequence}")
    for placement in run.placements:
        expected = oracle.expect(placement.model)
        judge(placement, expected, oracle, found)
        if placement.profile is not None:
            shards = [(s.node, s.gpus) for s in placement.shards]
            oracle.hold(placement.model, placement.replica, placement.profile, shards)
    for case in hard_cases(scenario, snapshot, run):
        event(case)
    multi = sum(1 for p in run.placements if p.profile and p.profile.spec.nodes > 1)
    target(multi, label="multi-node replicas placed")
    return snapshot, run, found


def judge(
    placement: ReplicaPlacement,
    expected: Expectation,
    oracle: Oracle,
    found: Findings,
) -> None:
    who = placement.replica
    tried = [a.profile.key for a in placement.attempts]
    wanted = [a.profile.key for a in expected.attempts]
    fits = [a.fits for a in placement.attempts]
    should = [a.fits for a in expected.attempts]
    if tried != wanted or fits != should:
        found.fits.append(
            f"{who}: tried {dict(zip(tried, fits, strict=True))}, "
            f"oracle {dict(zip(wanted, should, strict=True))}"
        )
    winner = expected.winner
    got = placement.profile.key if placement.profile else None
    if got != (winner.profile.key if winner else None):
        found.fits.append(
            f"{who}: placed as {got}, oracle: {winner.profile.key if winner else None}"
        )
    for attempt, mine in zip(placement.attempts, expected.attempts, strict=False):
        if attempt.profile.key != mine.profile.key:
            break
        theirs = {r.node: (r.constraint.value, r.blocking.value) for r in attempt.rejections}
        ours = {node: (r.code, r.blocking) for node, r in mine.refusals.items()}
        if theirs != ours:
            diff = {
                node: (theirs.get(node), ours.get(node))
                for node in sorted(set(theirs) | set(ours))
                if theirs.get(node) != ours.get(node)
            }
            found.refusals.append(f"{who} {attempt.profile.key}: (place, oracle) {diff}")
    if placement.profile is None or winner is None or got != winner.profile.key:
        if placement.profile is None and winner is None:
            verdict = placement.verdict.value
            if verdict != expected.verdict:
                found.verdicts.append(f"{who}: verdict {verdict}, oracle {expected.verdict}")
        return
    spec = placement.profile.spec
    shards = placement.shards
    if spec.nodes == 1:
        node = shards[0].node
        if node != winner.node:
            found.single.append(f"{who} {got}: on {node}, oracle: {winner.node}")
        passes = winner.checks.get(node)
        if not isinstance(passes, Passes):
            found.single.append(f"{who}: {node} does not fit ({passes})")
            return
        found.single += gpu_choice_problems(oracle.nodes[node], passes, spec, shards[0].gpus)
        return
    group = winner.group
    assert group is not None
    expected_nodes = [name for name, _ in group.members]
    nodes = [s.node for s in shards]
    fabrics = {s.fabric for s in shards}
    if fabrics != {group.fabric} or set(nodes) != set(expected_nodes):
        found.multi.append(
            f"{who} {got}: on {fabrics} {nodes}, oracle: {group.fabric} {expected_nodes}"
        )
        return
    if nodes[0] != expected_nodes[0] or [s.rank for s in shards] != list(range(len(shards))):
        found.multi.append(f"{who}: ranks {nodes}, rank 0 should be {expected_nodes[0]}")
    hcas = dict(group.members)
    for shard in shards:
        if shard.hcas != hcas[shard.node]:
            found.multi.append(f"{who}: {shard.node} got HCAs {shard.hcas}, not {hcas[shard.node]}")
        passes = winner.checks[shard.node]
        assert isinstance(passes, Passes)
        found.multi += gpu_choice_problems(oracle.nodes[shard.node], passes, spec, shard.gpus)


def report(problems: list[str]) -> str:
    return "\n".join(problems[:10])


# --- the properties ------------------------------------------------------------------------


@ORACLE_SETTINGS
@given(SMALL)
def test_place_tries_the_profiles_and_picks_the_winner_the_oracle_does(scenario: Scenario) -> None:
    _, _, found = compare(scenario)
    assert not found.order, report(found.order)
    assert not found.fits, report(found.fits)


@ORACLE_SETTINGS
@given(SMALL)
def test_every_refused_node_has_the_oracles_first_failing_constraint_and_blocking(
    scenario: Scenario,
) -> None:
    _, _, found = compare(scenario)
    assert not found.refusals, report(found.refusals)


@ORACLE_SETTINGS
@given(SMALL)
def test_single_node_replicas_go_to_the_oracles_node_with_a_gpu_set_no_worse(
    scenario: Scenario,
) -> None:
    _, _, found = compare(scenario)
    assert not found.single, report(found.single)


@ORACLE_SETTINGS
@given(SMALL)
def test_multi_node_replicas_take_the_oracles_fabric_and_emptiest_nodes(
    scenario: Scenario,
) -> None:
    _, _, found = compare(scenario)
    assert not found.multi, report(found.multi)


@ORACLE_SETTINGS
@given(SMALL)
def test_unplaced_replicas_get_the_oracles_verdict(scenario: Scenario) -> None:
    _, _, found = compare(scenario)
    assert not found.verdicts, report(found.verdicts)


# --- how often the strategies reach the hard cases ------------------------------------------


def hard_cases(scenario: Scenario, snapshot: Snapshot, run: PlacementRun) -> set[str]:
    """The hard cases one scenario reaches (its snapshot and `place()`'s run)."""
    cases: set[str] = set()
    specs = [p.spec for m in scenario.catalog.models.values() for p in m.profiles]
    for placement in run.placements:
        if placement.profile is not None and placement.profile.spec.nodes > 1:
            cases.add("multi-node replica placed")
            attempt = placement.attempts[-1]
            refused = {r.node for r in attempt.rejections}
            fabric = placement.shards[0].fabric
            eligible = [
                check
                for node, check in zip(snapshot.nodes, attempt.checks, strict=True)
                if node.name not in refused
                and isinstance(check, int)
                and any(f.name == fabric for f in node.fabrics)
            ]
            # Ties broken by name: which nodes, and which is rank 0.
            if len(set(eligible)) < len(eligible):
                cases.add("several equally empty nodes for a multi-node replica")
        if placement.profile is None:
            cases.add(f"verdict {placement.verdict.value}")
        for rejection in placement.rejections:
            if rejection.constraint.value == "disk":
                cases.add(f"disk refused ({rejection.blocking.value})")
        if placement.profile is not None:
            source = placement.profile.source
            if any(stored(snapshot.node(s.node), source) for s in placement.shards):
                cases.add("placed where the weights are stored")
    multi: dict[str, list[tuple[int, int]]] = {}
    for node in snapshot.nodes:
        for shard in node.shards:
            if shard.nodes > 1:
                multi.setdefault(shard.replica, []).append((shard.rank, shard.nodes))
    if multi:
        cases.add("multi-node replica running")
    if any(rank > 0 for ranks in multi.values() for rank, _ in ranks):
        cases.add("running rank other than 0")
    if any({r for r, _ in ranks} != set(range(ranks[0][1])) for ranks in multi.values()):
        cases.add("running multi-node replica missing a rank")
    for node in snapshot.nodes:
        if node.gpus is None or len(node.gpus) < 2:
            continue
        domains = node.nvlink_domains
        if domains is None:
            cases.add("NVLink unknown")
        elif len({len(d) for d in domains}) > 1:
            cases.add("NVLink uneven")
        if (
            domains is None
            or len({len(d) for d in domains}) > 1
            or any(len(d) == 1 for d in domains)
        ):
            cases.add("NVLink irregular")
    profiles = [p for m in scenario.catalog.models.values() for p in m.profiles]
    for profile in profiles:
        ask = profile.spec.disk_gb
        for node in snapshot.nodes:
            store = node.model_store
            if ask is not None and store is not None and store.free_bytes == math.ceil(ask * 1e9):
                cases.add("disk free exactly the ask")
    for spec in specs:
        for node in snapshot.nodes:
            total, need = node.memory_total_gib, spec.min_memory_gb
            if total is not None and need is not None:
                if total == need:
                    cases.add("memory exactly the ask")
                if node.memory_reserved_gib and total - node.memory_reserved_gib == need:
                    cases.add("unreserved memory exactly the ask")
            if spec.gpus_per_node == 0 or node.gpus is None:
                continue
            of_class = [g for g in node.gpus if g.gpu_class == spec.gpu_class]
            ask = spec.gpu_memory_gb
            small = [
                g
                for g in of_class
                if ask and g.memory_total_mib and g.memory_total_mib * 2**20 < ask * 10**9
            ]
            if small and len(of_class) >= spec.gpus_per_node > len(of_class) - len(small):
                cases.add("GPUs of the class too small for the ask")
            healthy = [g for g in of_class if g.unusable is None]
            free = [g.index for g in healthy if g.held_by is None]
            need_gpus = spec.gpus_per_node
            if len(free) == need_gpus:
                cases.add("exactly need free GPUs")
            if len(free) == need_gpus - 1:
                cases.add("need - 1 free GPUs")
                cases.add("need - 1 healthy" if len(healthy) < need_gpus else "need - 1, ours hold")
            group = min(spec.tp, need_gpus)
            if group > 1 and node.nvlink_domains is not None:
                holding = {
                    len(d & set(free)) for d in node.nvlink_domains if len(d & set(free)) >= group
                }
                if len(holding) > 1:
                    cases.add("two fitting NVLink domains of different sizes")
    # The spread limit matters when, by the oracle, a limit of one would move the replica.
    oracle = Oracle(scenario.catalog, snapshot)
    for placement in run.placements:
        model = scenario.catalog.models[placement.model]
        spread = max(1, math.ceil(model.replicas_max / 4))
        if spread > 1 and placement.profile is not None and placement.profile.spec.nodes == 1:
            wide = oracle.attempt(placement.profile, oracle.ledger, STRICT, spread)
            narrow = oracle.attempt(placement.profile, oracle.ledger, STRICT, 1)
            if wide.node != narrow.node:
                cases.add("spread limit decides the node")
        if placement.profile is not None:
            shards = [(s.node, s.gpus) for s in placement.shards]
            oracle.hold(placement.model, placement.replica, placement.profile, shards)
    return cases


# How often each hard case must come up, in the oracle's small fleets and in the default
# ones tests/property/test_placement_properties.py draws.
FLOORS = {
    "multi-node replica placed": 0.15,
    "several equally empty nodes for a multi-node replica": 0.05,
    "multi-node replica running": 0.10,
    "running rank other than 0": 0.10,
    "running multi-node replica missing a rank": 0.05,
    "NVLink irregular": 0.10,
    "NVLink uneven": 0.10,
    "NVLink unknown": 0.10,
    "memory exactly the ask": 0.10,
    "unreserved memory exactly the ask": 0.02,
    "exactly need free GPUs": 0.15,
    "need - 1 free GPUs": 0.15,
    "need - 1 healthy": 0.10,
    "need - 1, ours hold": 0.10,
    "two fitting NVLink domains of different sizes": 0.10,
    "spread limit decides the node": 0.05,
    "GPUs of the class too small for the ask": 0.05,
    "verdict not-now": 0.05,
    "verdict blocked": 0.05,
    "verdict never": 0.05,
    "disk free exactly the ask": 0.10,
    "disk refused (capacity)": 0.005,  # rarer since unused weights count as room (eviction)
    "disk refused (condition)": 0.05,
    "disk refused (hardware)": 0.02,
    "placed where the weights are stored": 0.05,
}


def stored(node: NodeView, source: str) -> bool:
    return node.model_store is not None and any(
        w.source == source for w in node.model_store.weights
    )


def frequencies(max_nodes: int, examples: int) -> dict[str, float]:
    seen: Counter[str] = Counter()
    drawn = 0

    @settings(max_examples=examples, phases=[Phase.generate], database=None)
    @given(scenarios(max_nodes=max_nodes))
    def sample(scenario: Scenario) -> None:
        nonlocal drawn
        drawn += 1
        snapshot, run = scenario.run()
        seen.update(hard_cases(scenario, snapshot, run))

    sample()
    assert drawn == examples
    return {case: seen[case] / drawn for case in FLOORS}


def frequencies_in_a_fresh_process(max_nodes: int, examples: int) -> dict[str, float]:
    """`frequencies` in a new interpreter, with Hypothesis's draws from the code's constants
    turned off: it mixes constants of the modules already imported into its draws, so in a
    process that ran other tests first the same derandomized draws differ (multi-node
    placed fell from 20 % to 8 %), and so they do after any edit of the code. Measured this
    way, the figures are the strategies' alone (hypothesis is pinned: constraints.txt)."""
    script = (
        "import json, sys\n"
        # Nor the code's own constants, which Hypothesis mixes into its draws: any edit of
        # cli/ would move these shares (a new string in the placer took one from 5 % to 3 %).
        "from hypothesis.internal.conjecture import providers\n"
        "providers._get_local_constants = providers.Constants\n"
        # The suite's `ci` profile (derandomized): without it a fresh interpreter draws
        # with a random seed, and the shares vary from run to run.
        "import tests.conftest\n"
        "from tests.property.test_placement_oracle import frequencies\n"
        f"print(json.dumps(frequencies({max_nodes}, {examples})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_the_strategies_reach_the_hard_cases_often() -> None:
    for max_nodes in (5, 8):
        found = frequencies_in_a_fresh_process(max_nodes, 300)
        rare = {
            case: f"{share:.0%} < {FLOORS[case]:.0%}"
            for case, share in found.items()
            if share < FLOORS[case]
        }
        assert not rare, f"max_nodes={max_nodes}: {rare}; all: {found}"


# --- the oracle's own rules, on hand-made cases -----------------------------------------------


def node_view(name: str, domains: tuple[frozenset[int], ...] | None) -> NodeView:
    return NodeView(
        name=name,
        reachability=Reachability.READY,
        cordon=None,
        unreachable_reason=None,
        last_reached=NOW,
        labels={},
        memory_total_gib=None,
        memory_reserved_gib=0.0,
        gpus=(),
        nvlink_domains=domains,
        fabrics=(),
        shards=(),
    )


PAIR = Profile(name="p", priority=1, engine="vllm", gpu_class="H100", gpus_per_node=2)
TWO_SIZES = (frozenset({0, 1, 2, 3}), frozenset({4, 5}), frozenset({6}), frozenset({7}))


def test_the_oracle_takes_a_pair_from_the_free_2_gpu_domain_not_the_4_gpu_one() -> None:
    node = node_view("hgx-1", TWO_SIZES)
    free = Passes((0, 1, 2, 3, 4, 5, 6, 7))
    assert gpu_choice_problems(node, free, PAIR, (4, 5)) == []
    assert gpu_choice_problems(node, free, PAIR, (0, 1)) != []  # a 4-GPU domain
    assert gpu_choice_problems(node, free, PAIR, (5, 6)) != []  # spans two domains
    # With GPU 4 taken, the pair has to come out of the big domain.
    assert gpu_choice_problems(node, Passes((0, 1, 2, 3, 5, 6, 7)), PAIR, (0, 1)) == []


def test_the_oracle_takes_the_lowest_free_gpus_when_the_topology_is_unknown() -> None:
    node = node_view("hgx-1", None)
    free = Passes((1, 3, 4, 6))
    assert gpu_choice_problems(node, free, PAIR, (1, 3)) == []
    assert gpu_choice_problems(node, free, PAIR, (3, 4)) != []
    assert gpu_choice_problems(node, free, PAIR, (0, 1)) != []  # GPU 0 is not free
