"""Safety properties of placement, checked on random clusters and random catalogs.

Every property is checked against the raw inputs (inventory hosts and node facts), not
against the snapshot the core builds from them, so a slip in either shows up.

The properties:

1. Fabric: every multi-node replica's shards are all on one fabric; that fabric is one of
   each node's inventory fabrics; each shard's HCAs are exactly that fabric's ACTIVE HCAs
   on its node, or the declared HCAs when the node's HCA state is unknown. Single-node
   shards have no fabric and no HCAs; ranks run 0..n-1 over distinct nodes.
2. GPU class and count: every placed GPU exists and is of the profile's gpu_class (with
   the node's gpu_classes overrides); each shard has exactly gpus_per_node distinct GPUs.
3. GPU safety: no placed GPU has uncorrected ECC errors, a foreign process (or memory in
   use by a process the probe cannot see), or is held by a shard of ours (in any state
   but stopped); no GPU is handed out twice in a run.
4. Node fitness: a shard's node is Ready and not cordoned, matches the node selector,
   and has MemTotal ≥ min_memory_gb plus what our shards and the run's earlier
   placements reserve there (or did not report its memory).
5. Every refusal is explained: each failed attempt (of an unplaced replica, or before
   the profile that fitted) considered every node and rejects every node exactly once,
   with one of the six constraint codes; a fitting attempt rejects no node it used.
6. Determinism: shuffling the inventory's host order, the facts mapping's order and the
   order of each node's GPU rows, NVLink domains and HCA ports gives the same placement
   JSON.
7. Highest priority wins: attempts run in descending priority; every attempt but the
   last of a placed replica failed and the last fitted; replaying the run, no
   higher-priority profile fits on the state holding the earlier placements.
8. Verdicts are consistent: a replica that is not "not-now" stays unplaced when placed
   alone with every shard of ours freed; a "not-now" one is placed then; a "never" one
   stays unplaced even on a healed fleet (all nodes Ready, uncordoned, every GPU and
   HCA healthy, and a node that did not report its GPUs given 8 of every class, since
   the verdict counts such a node as one that may have them), and a "blocked" one is
   placed on it.
9. The run adds exactly the missing replicas: `running` is every replica with a shard on
   a node that is not Lost; `wanted` is replicas.min minus those (or the models asked
   for); there is one placement record per wanted replica.
10. New replica ids are fresh: distinct, prefixed by the model, and not the id of any
    shard still recorded on a node (a Lost node's included: it may come back).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.catalog.load import CatalogModel, CatalogProfile
from cli.cluster.snapshot import build_snapshot
from cli.facts.gpuclass import gpu_class
from cli.facts.model import Gpu, HcaPort, ModelStore, NodeFacts, ShardRecord
from cli.placement.explain import placement_json
from cli.placement.place import PlacementRun, ReplicaPlacement, Verdict, place, try_profile
from cli.placement.reasons import Constraint
from cli.placement.state import PlacementState
from tests.property.strategies import CLASSES, NOW, NodeInput, Scenario, scenarios

# The profile (tests/conftest.py) derandomizes; this sets only how many examples.
PROPERTY_SETTINGS = settings(max_examples=400)

# --- what the raw inputs say ---------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """One node's facts read directly, without the snapshot."""

    node: NodeInput
    gpus: dict[int, Gpu] = field(init=False)

    def __post_init__(self) -> None:
        rows = (self.node.facts.gpus if self.node.facts else None) or ()
        object.__setattr__(self, "gpus", {gpu.index: gpu for gpu in rows})

    @property
    def ready(self) -> bool:
        facts = self.node.facts
        return (
            self.node.vars.cordoned is None
            and facts is not None
            and facts.error is None
            and facts.last_reached is not None
        )

    @property
    def running_shards(self) -> tuple[ShardRecord, ...]:
        """The shards whose processes hold what they were given: a failed unit's are gone."""
        facts = self.node.facts
        return tuple(
            s for s in (facts.shards if facts else ()) if s.state in ("running", "starting")
        )

    @property
    def held(self) -> set[int]:
        return {index for shard in self.running_shards for index in shard.gpus}

    @property
    def memory_gib(self) -> float | None:
        facts = self.node.facts
        if facts is None or facts.memory is None:
            return None
        return facts.memory.total_mib / 1024

    @property
    def reserved_gib(self) -> float:
        return sum(shard.memory_gib or 0.0 for shard in self.running_shards)

    def gpu_class(self, index: int) -> str:
        return gpu_class(self.gpus[index].name, self.node.vars.gpu_classes)

    def usable(self, index: int) -> bool:
        gpu = self.gpus.get(index)
        if gpu is None or gpu.ecc_uncorrected or index in self.held:
            return False
        facts = self.node.facts
        assert facts is not None
        foreign = any(p.gpu_uuid == gpu.uuid for p in facts.gpu_processes or ())
        invisible = gpu.memory_used_mib is not None and gpu.memory_used_mib >= 1024  # 1 GiB
        return not foreign and not invisible

    def fabric_hcas(self, fabric: str) -> tuple[str, ...] | None:
        """The HCAs a shard on `fabric` should get; None when the node is not on it."""
        for declared in self.node.vars.fabrics:
            if declared.name != fabric:
                continue
            ports = self.node.facts.hcas if self.node.facts else None
            if ports is None:
                return declared.hcas
            return tuple(
                hca
                for hca in declared.hcas
                if any(p.hca == hca and p.state == "ACTIVE" for p in ports)
            )
        return None


def truths(scenario: Scenario) -> dict[str, Truth]:
    return {node.name: Truth(node) for node in scenario.nodes}


def placed(run: PlacementRun) -> Iterator[tuple[ReplicaPlacement, CatalogProfile]]:
    for placement in run.placements:
        if placement.profile is not None:
            yield placement, placement.profile


# --- the properties ------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_multi_node_replica_sits_on_one_fabric_with_that_fabrics_active_hcas(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    for placement, profile in placed(run):
        shards = placement.shards
        assert len(shards) == profile.spec.nodes
        assert [s.rank for s in shards] == list(range(len(shards)))
        assert len({s.node for s in shards}) == len(shards)
        if profile.spec.nodes == 1:
            assert shards[0].fabric is None and shards[0].hcas == ()
            continue
        fabrics = {s.fabric for s in shards}
        assert len(fabrics) == 1 and None not in fabrics, fabrics
        for shard in shards:
            assert shard.fabric is not None
            expected = nodes[shard.node].fabric_hcas(shard.fabric)
            assert expected is not None, f"{shard.node} is not on fabric {shard.fabric}"
            assert shard.hcas == expected, (shard, expected)
            assert shard.hcas, f"{shard.node}: a shard on {shard.fabric} with no HCA"


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_replica_gets_exactly_gpus_per_node_distinct_gpus_of_its_class(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    for placement, profile in placed(run):
        spec = profile.spec
        for shard in placement.shards:
            assert len(shard.gpus) == spec.gpus_per_node, shard
            assert len(set(shard.gpus)) == len(shard.gpus), shard
            truth = nodes[shard.node]
            for index in shard.gpus:
                assert index in truth.gpus, f"{shard.node} has no GPU {index}"
                assert truth.gpu_class(index) == spec.gpu_class, (shard, index)
                # No shard on a GPU with less memory than its profile asks (GB of 10^9
                # bytes, as the catalog's gpu_memory_gb counts); unknown memory passes.
                mib, ask = truth.gpus[index].memory_total_mib, spec.gpu_memory_gb
                if ask is not None and mib is not None:
                    assert mib * 1024 * 1024 >= ask * 1_000_000_000, (shard, index, mib, ask)


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_placed_gpu_is_unusable_and_none_is_handed_out_twice(scenario: Scenario) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    handed_out: Counter[tuple[str, int]] = Counter()
    for placement, _ in placed(run):
        for shard in placement.shards:
            for index in shard.gpus:
                handed_out[shard.node, index] += 1
                assert nodes[shard.node].usable(index), (
                    f"{placement.replica} got GPU {index} of {shard.node}, which is unusable"
                )
    twice = [gpu for gpu, count in handed_out.items() if count > 1]
    assert not twice, f"handed out twice: {twice}"


@PROPERTY_SETTINGS
@given(scenarios())
def test_placed_nodes_are_ready_match_the_selector_and_have_the_memory(
    scenario: Scenario,
) -> None:
    _, run = scenario.run()
    nodes = truths(scenario)
    reserved = {name: truth.reserved_gib for name, truth in nodes.items()}
    for placement, profile in placed(run):
        spec = profile.spec
        for shard in placement.shards:
            truth = nodes[shard.node]
            assert truth.ready, f"{placement.replica} placed on {shard.node}, which is not Ready"
            labels = truth.node.vars.labels
            for key, value in spec.node_selector.items():
                assert labels.get(key) == value, (shard.node, key, value, labels)
            need = spec.min_memory_gb
            if need is None:
                continue
            total = truth.memory_gib
            if total is not None:
                assert reserved[shard.node] + need <= total, (
                    f"{shard.node}: {total} GiB, {reserved[shard.node]} reserved, "
                    f"{placement.replica} needs {need}"
                )
            reserved[shard.node] += need


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_failed_attempt_rejects_every_node_once_with_a_known_constraint(
    scenario: Scenario,
) -> None:
    snapshot, run = scenario.run()
    names = sorted(node.name for node in snapshot.nodes)
    assert names == sorted(node.name for node in scenario.nodes)
    for placement in run.placements:
        for attempt in placement.attempts:
            assert attempt.nodes_considered == len(snapshot.nodes)
            for rejection in attempt.rejections:
                assert rejection.constraint in set(Constraint)
                assert rejection.profile == attempt.profile.name
                assert rejection.node in names
            rejected = Counter(r.node for r in attempt.rejections)
            assert all(count == 1 for count in rejected.values()), (attempt.profile.key, rejected)
            if attempt.fits:
                used = {s.node for s in placement.shards}
                assert not used & set(rejected), (placement.replica, used, rejected)
            else:
                assert sorted(rejected) == names, (
                    f"{placement.replica} {attempt.profile.key}: "
                    f"no rejection for {sorted(set(names) - set(rejected))}"
                )


@PROPERTY_SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_shuffling_hosts_facts_and_probe_rows_gives_the_same_placement(
    scenario: Scenario, rng: random.Random
) -> None:
    _, run = scenario.run()
    shuffled_nodes = []
    for node in scenario.nodes:
        facts = node.facts
        if facts is not None:
            update = {
                key: tuple(rng.sample(rows, len(rows)))
                for key, rows in (
                    ("gpus", facts.gpus),
                    ("nvlink_domains", facts.nvlink_domains),
                    ("hcas", facts.hcas),
                )
                if rows is not None
            }
            facts = facts.model_copy(update=update)
        shuffled_nodes.append(NodeInput(node.name, node.host, facts))
    rng.shuffle(shuffled_nodes)
    hosts = [node.host for node in shuffled_nodes if node.host is not None]
    rng.shuffle(hosts)
    facts_items = [(node.name, node.facts) for node in shuffled_nodes if node.facts is not None]
    rng.shuffle(facts_items)
    snapshot = build_snapshot(hosts, dict(facts_items), NOW, gpu_class)
    again = place(scenario.catalog, snapshot, scenario.models)
    assert placement_json(again) == placement_json(run)
    assert again.wanted == run.wanted


@PROPERTY_SETTINGS
@given(scenarios())
def test_the_highest_priority_profile_that_fits_wins(scenario: Scenario) -> None:
    snapshot, run = scenario.run()
    state = PlacementState(snapshot)
    for placement in run.placements:
        model: CatalogModel = scenario.catalog.models[placement.model]
        priorities = [a.profile.spec.priority for a in placement.attempts]
        assert priorities == sorted(priorities, reverse=True)
        assert len(set(priorities)) == len(priorities)
        tried = [a.profile.key for a in placement.attempts]
        assert tried == [p.key for p in model.profiles[: len(tried)]]
        if placement.profile is None:
            assert not any(a.fits for a in placement.attempts)
            assert len(placement.attempts) == len(model.profiles)
            assert placement.verdict is not Verdict.PLACED
        else:
            assert [a.fits for a in placement.attempts] == [False] * (len(tried) - 1) + [True]
            assert placement.attempts[-1].profile.key == placement.profile.key
            assert placement.verdict is Verdict.PLACED
        # Replay: on the state holding every earlier placement, no better profile fits.
        winner = placement.profile.spec.priority if placement.profile else None
        for profile in model.profiles:
            if winner is not None and profile.spec.priority <= winner:
                break
            shards, _ = try_profile(profile, state)
            assert shards is None, (
                f"{placement.replica}: {profile.key} fits but "
                f"{placement.profile.key if placement.profile else 'nothing'} was chosen"
            )
        if placement.profile is not None:
            state.hold(placement.replica, placement.profile, placement.shards)


def freed(node: NodeInput, invalid: frozenset[tuple[str, int]] = frozenset()) -> NodeInput:
    """The node with our shards gone, and with them their processes and GPU memory. The
    records in `invalid` (replica, rank) stay: not believed, they are not ours to free."""
    facts = node.facts
    if facts is None:
        return node
    kept = tuple(s for s in facts.shards if (s.replica, s.rank) in invalid)
    ours = facts.model_copy(update={"shards": tuple(s for s in facts.shards if s not in kept)})
    held = Truth(NodeInput(node.name, node.host, ours)).held
    uuids = {gpu.uuid for gpu in facts.gpus or () if gpu.index in held}
    gpus = None
    if facts.gpus is not None:
        gpus = tuple(
            gpu.model_copy(update={"memory_used_mib": None}) if gpu.index in held else gpu
            for gpu in facts.gpus
        )
    processes = None
    if facts.gpu_processes is not None:
        processes = tuple(p for p in facts.gpu_processes if p.gpu_uuid not in uuids)
    store = facts.model_store
    if store is not None:
        # Every stored source is ours: its room counts as free. Still listed: what they
        # take stays known, and a node holding a source still needs no room for it.
        room = min(store.total_bytes, store.free_bytes + store.stored_bytes)
        store = store.model_copy(update={"free_bytes": room})
    update = {"shards": kept, "gpus": gpus, "gpu_processes": processes, "model_store": store}
    return NodeInput(node.name, node.host, facts.model_copy(update=update))


def healed(node: NodeInput) -> NodeInput:
    """The node Ready, uncordoned, with every GPU and every declared HCA healthy.

    A node that did not report its GPUs is given 8 of every class (and no class overrides):
    the verdict counts such a node as one that may have whatever a profile needs.
    """
    host = node.host
    facts = node.facts or NodeFacts(gathered_at=NOW)
    if host is not None:
        changes: dict[str, object] = {"cordoned": None}
        if facts.gpus is None:
            changes["gpu_classes"] = {}
        host = host.model_copy(update={"vars": host.vars.model_copy(update=changes)})
    if facts.gpus is not None:
        gpus = tuple(
            gpu.model_copy(update={"ecc_uncorrected": None, "memory_used_mib": None})
            for gpu in facts.gpus
        )
    else:
        names = [GPU_NAME[klass] for klass in CLASSES for _ in range(8)]
        gpus = tuple(
            Gpu(index=index, uuid=f"GPU-{node.name}-healed-{index}", name=name)
            for index, name in enumerate(names)
        )
    ports = None
    if facts.hcas is not None:
        declared = [hca for fabric in node.vars.fabrics for hca in fabric.hcas]
        ports = tuple(HcaPort(hca=hca, port=1, state="ACTIVE") for hca in declared)
    # Other files cleaned off the store's disk (after freed(), which counted ours as free):
    # only its size stands in the way. A store not reported is one with room.
    store = facts.model_store
    if store is None:
        roomy = 10**18
        path = "/var/lib/modelfleet/models"
        store = ModelStore(
            path=path, present=True, measured=path, total_bytes=roomy, free_bytes=roomy
        )
    else:
        store = store.model_copy(update={"free_bytes": store.total_bytes})
    update = {
        "error": None,
        "last_reached": NOW,
        "model_store": store,
        "shards": (),  # what freed() left are invalid shards' claims: a condition, healed
        "gpus": gpus,
        "gpu_processes": (),
        "nvlink_domains": facts.nvlink_domains if facts.gpus is not None else None,
        "hcas": ports,
    }
    return NodeInput(node.name, host, facts.model_copy(update=update))


# A GPU name of each class, for the GPUs a healed node that did not report them is given.
GPU_NAME = {"H100": "NVIDIA H100 80GB HBM3", "A100": "NVIDIA A100-SXM4-80GB", "L40S": "NVIDIA L40S"}


@PROPERTY_SETTINGS
@given(scenarios())
def test_verdicts_agree_with_placing_alone_on_a_freed_and_on_a_healed_fleet(
    scenario: Scenario,
) -> None:
    snapshot, run = scenario.run()
    invalid = {
        node.name: frozenset((bad.record.replica, bad.record.rank) for bad in node.invalid_shards)
        for node in snapshot.nodes
    }
    free = scenario.replace(
        [freed(node, invalid.get(node.name, frozenset())) for node in scenario.nodes]
    )
    fixed = free.replace([healed(node) for node in free.nodes])
    alone: dict[tuple[str, bool], bool] = {}

    def fits_alone(model: str, healthy: bool) -> bool:
        key = (model, healthy)
        if key not in alone:
            fleet = (fixed if healthy else free).snapshot()
            alone[key] = place(scenario.catalog, fleet, [model]).all_placed
        return alone[key]

    for placement in run.placements:
        verdict, model = placement.verdict, placement.model
        event(f"verdict {verdict.value}")
        if verdict is Verdict.PLACED:
            continue
        assert fits_alone(model, healthy=False) == (verdict is Verdict.NOT_NOW), (
            f"{placement.replica} is {verdict.value}, but placed alone with our shards freed "
            f"it {'fits' if fits_alone(model, healthy=False) else 'does not fit'}"
        )
        if verdict is Verdict.NEVER:
            assert not fits_alone(model, healthy=True), (
                f"{placement.replica} is never, but fits on a freed and healed fleet"
            )
        if verdict is Verdict.BLOCKED:
            assert fits_alone(model, healthy=True), (
                f"{placement.replica} is blocked, but does not fit on a freed and healed fleet"
            )


@PROPERTY_SETTINGS
@given(scenarios())
def test_the_run_adds_exactly_the_missing_replicas(scenario: Scenario) -> None:
    snapshot, run = scenario.run()
    # Which records are believed is cli/cluster/trust.py's to say
    # (tests/unit/cluster/test_trust.py); here: of the believed ones, those that run, on nodes
    # that are not Lost.
    believed = {
        (view.name, shard.replica, shard.rank) for view in snapshot.nodes for shard in view.shards
    }
    running: dict[str, set[str]] = {}
    for node in scenario.nodes:
        facts = node.facts
        if facts is None or (
            facts.error is not None
            and facts.last_reached is not None
            and NOW - facts.last_reached >= snapshot.lost_after
        ):
            continue  # a Lost node's replicas are not running
        for shard in facts.shards:
            if (node.name, shard.replica, shard.rank) not in believed:
                continue
            if shard.state in ("running", "starting"):  # a failed one runs nothing
                running.setdefault(shard.model, set()).add(shard.replica)
    assert {model: set(replicas) for model, replicas in run.running.items()} == running
    if scenario.models is None:
        wanted = {
            name: max(0, model.replicas_min - len(running.get(name, ())))
            for name, model in scenario.catalog.models.items()
        }
    else:
        wanted = dict(Counter(scenario.models))
    assert run.wanted == wanted
    added = Counter(placement.model for placement in run.placements)
    assert added == Counter({model: count for model, count in wanted.items() if count})


@PROPERTY_SETTINGS
@given(scenarios())
def test_new_replicas_get_ids_that_no_shard_on_any_node_already_uses(scenario: Scenario) -> None:
    _, run = scenario.run()
    ids = [placement.replica for placement in run.placements]
    assert len(set(ids)) == len(ids), ids
    for placement in run.placements:
        assert placement.replica.startswith(f"{placement.model}-")
    in_use = {
        shard.replica: node.name
        for node in scenario.nodes
        for shard in (node.facts.shards if node.facts else ())
        if shard.state != "stopped"
    }
    reused = {replica: in_use[replica] for replica in ids if replica in in_use}
    assert not reused, f"new replicas reuse ids of shards still on nodes: {reused}"
