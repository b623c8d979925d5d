"""A reference placer for small fleets, written from docs/placement.md, not from cli/placement.

It imports nothing from cli/placement: its input is the catalog (cli.catalog.load) and the
snapshot (cli.cluster.snapshot: node status, labels, memory, GPU rows with their class,
fault and holder, NVLink domains, fabrics with their ACTIVE HCAs), and it decides fitness,
GPU choice, node choice and verdicts with its own code, by enumeration where it can:
every node for single-node profiles, every combination of nodes and fabric for multi-node
ones, every set of GPUs for the NVLink rule. Meant for at most ~5 nodes of at most 8 GPUs.

The rules of docs/placement.md it encodes:

- Replicas one at a time, each on a state holding the run's earlier placements (the caller
  feeds `hold` what `place()` placed); profiles in descending priority, the first that fits
  wins. Replicas come in rounds, in catalog order.
- Per (profile, node), the first failing of: node-status (Ready, not cordoned; condition),
  node-selector (every label; hardware), memory (MemTotal ≥ min_memory_gb: hardware; then
  what our shards reserve leaves enough: capacity; unknown memory passes), gpu-class (GPUs
  of the class; hardware, or condition when the node did not report GPUs), gpu-memory (as
  many of them as the profile needs have gpu_memory_gb each, in GB of 10^9 bytes, unknown
  memory passing: hardware; from here on only those count), gpus (enough of
  the class: hardware; enough usable: condition; enough usable and free: capacity), disk
  (below), fabric (multi-node only). The blocking words are the doc's: capacity when our
  shards hold it, condition for the node's state, hardware for what the node is.
- A multi-node attempt: a node that passes the five but can join no fabric (no fabric:
  hardware; no ACTIVE HCA on any: condition) is refused with `fabric`; when no fabric has
  enough eligible nodes, every other passing node is refused with `fabric` (hardware).
- Single-node GPU replicas: the tensor-parallel group (min(tp, gpus_per_node)) inside one
  NVLink domain, the domain with the fewest free GPUs that holds it, then the smaller
  domain; unknown topology: the lowest free indices. Nodes ordered by: group inside
  domains, then unknown topology, then spanning; then fewer of this model's replicas than
  the spread limit (a quarter of replicas.max, rounded up, at least one); then best fit
  (fewest free GPUs of the class); then fewer replicas of this model; then the name.
- CPU replicas: nodes without GPUs first, then under the spread limit, then known memory,
  then the least unreserved memory left, then the name.
- Multi-node replicas: per fabric, the eligible nodes (passing, with an ACTIVE HCA on it,
  or declared HCAs when the HCA state is unknown); a fabric with too few is skipped; on
  each, the emptiest nodes (most free GPUs of the class, ties to the name); the group
  with the most free GPUs wins, then the faster fabric, then the fabric's name. Rank 0 is
  the emptiest node; each shard gets that fabric's usable HCAs on its node.
- disk: only what is staged in the store needs room (docs/reconcile.md's table): hf://
  for vLLM and SGLang, http(s):// for llama.cpp; a file:// path, llama.cpp's hf:// (its
  own -hf download) and s3:// need none. Otherwise
  the weights' size is the profile's disk_gb in bytes of 10^9, else the largest size
  any node's store reports for the source, else unknown, which passes. A node whose store
  holds the source complete, or where the run already placed that source, passes. A node
  that did not report its store: condition. A filesystem smaller than the size: hardware.
  Free space, less the sizes of the sources the run placed there (once each), below the
  size, plus the stored weights no shard there loads and the run places nothing of
  (evicted by the staging step; none when a shard there does not say its source), passes;
  short of the size: capacity when that plus the bytes of the weights stored there plus the run's
  sources would be enough, condition otherwise. Nothing of ours held: the stored weights
  count as free. Every node is healthy: a big enough filesystem passes.
- Among nodes equal up to best fit (single-node; for CPU replicas, up to the memory left),
  and among equally empty ones of a fabric (multi-node), a node whose store holds the
  source complete (as reported: not one the run placed it on) wins; between fabric groups
  equal in free GPUs and rate, the one with more such nodes.
- Verdicts: not-now when some profile fits with nothing of ours held (what invalid shards
  say they reserve is not ours: still reserved); blocked when it fits
  only if besides every node were Ready, uncordoned, every GPU and HCA healthy, and a node
  that did not report its GPUs had as many as the profile needs; never otherwise.

Where the docs were silent and the code was read to decide (docs/placement.md now says
each of these): the spread limit's size and that it ranks before best fit; unknown
topology ranking between "inside a domain" and "spanning"; fewer replicas of the model as
the tie-break after best fit; a node that did not report its GPUs counted as having them
for the verdict; "the faster fabric" as the slowest declared rate among the group's nodes
(unknown counting as 0). Read from the code and not written in the docs, because they
look like details rather than intent: a node that did not report its GPUs counts as one
"without GPUs" when ranking CPU replicas; a node whose every fabric lacks an ACTIVE HCA
is refused as `condition`, a fabric with too few eligible nodes as `hardware`. Left
open: which GPUs inside the chosen domain are taken, and how several groups per node are
laid out (the test asks only that each group could sit inside a domain when some set of
free GPUs allows it, and, for one group, a domain no worse than the best).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cli.catalog.load import Catalog, CatalogModel, CatalogProfile
from cli.catalog.schema import Profile
from cli.cluster.snapshot import NodeView, Reachability, Snapshot


@dataclass(frozen=True)
class Refusal:
    code: str  # node-status, node-selector, memory, gpu-class, gpus, fabric
    blocking: str  # capacity, condition, hardware


@dataclass(frozen=True)
class Passes:
    free: tuple[int, ...]  # free usable GPUs of the class, sorted; () for CPU profiles
    assumed: bool = False  # did not report GPUs; counted as having them (verdicts only)

    @property
    def count(self) -> int:
        return len(self.free)


Check = Refusal | Passes


@dataclass(frozen=True)
class Relax:
    capacity: bool = False  # nothing of ours held
    conditions: bool = False  # every node Ready and healthy


STRICT = Relax()


@dataclass
class Ledger:
    """What our shards hold: GPUs, reserved memory, and replicas per model and node."""

    gpus: dict[str, dict[int, str]] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    replicas: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    # node → source → bytes: sources the run placed there that its store did not hold.
    staged: dict[str, dict[str, int]] = field(default_factory=dict)
    uses: dict[str, set[str]] = field(default_factory=dict)  # node → sources the run put there

    @classmethod
    def of(cls, snapshot: Snapshot, ours: bool = True) -> Ledger:
        """What is held; `ours` False: only what invalid shards say they reserve, which
        freeing our replicas does not free (they are not ours)."""
        ledger = cls()
        for node in snapshot.nodes:
            ledger.gpus[node.name] = {
                gpu.index: gpu.held_by
                for gpu in node.gpus or ()
                if gpu.held_by is not None and ours
            }
            # A failed shard's processes are gone: it holds no memory (docs/placement.md).
            # An invalid shard that says it runs may still hold what it says (docs/facts.md).
            records = (*(node.shards if ours else ()), *(b.record for b in node.invalid_shards))
            held = (s for s in records if s.state in ("running", "starting"))
            ledger.memory[node.name] = sum(
                s.memory_gib or 0.0
                for s in held
                if s.memory_gib is None or 0 <= s.memory_gib <= 1024.0 * 1024
            )
            for shard in node.shards if ours else ():
                ledger.count(shard.model, node.name, shard.replica)
        return ledger

    def count(self, model: str, node: str, replica: str) -> None:
        self.replicas.setdefault(model, {}).setdefault(node, set()).add(replica)

    def here(self, model: str, node: str) -> int:
        return len(self.replicas.get(model, {}).get(node, ()))

    def hold(
        self,
        model: str,
        replica: str,
        spec: Profile,
        shards: Iterable[tuple[str, Sequence[int]]],
        source: str = "",
        size: int | None = None,
        stored: Callable[[str], bool] = lambda node: False,
    ) -> None:
        for node, gpus in shards:
            if not stored(node):
                self.staged.setdefault(node, {}).setdefault(source, size or 0)
            self.uses.setdefault(node, set()).add(source)
            held = self.gpus.setdefault(node, {})
            for index in gpus:
                assert index not in held, f"GPU {index} of {node} handed out twice"
                held[index] = replica
            self.memory[node] = self.memory.get(node, 0.0) + (spec.min_memory_gb or 0.0)
            self.count(model, node, replica)


def uses_gpus(spec: Profile) -> bool:
    return spec.gpus_per_node > 0 and spec.gpu_class is not None


def holds_complete(node: NodeView, source: str) -> bool:
    return node.model_store is not None and any(
        w.source == source for w in node.model_store.weights
    )


def unused_stored(node: NodeView, ledger: Ledger | None) -> int:
    """Bytes of weights stored there that the staging step may evict: none of the node's
    shards loads them and the run places none there; nothing when a shard (or a record not
    believed) does not say what it loads."""
    store = node.model_store
    if store is None or node.invalid_shards or any(s.source is None for s in node.shards):
        return 0
    used = {s.source for s in node.shards}
    used |= ledger.uses.get(node.name, set()) if ledger is not None else set()
    return sum(w.bytes for w in store.weights if w.source not in used)


def disk(
    source: str, size: int | None, node: NodeView, ledger: Ledger | None, relax: Relax
) -> Refusal | None:
    if not size or holds_complete(node, source):
        return None
    store = node.model_store
    if store is None:
        return None if relax.conditions else Refusal("disk", "condition")
    if store.total_bytes < size:
        return Refusal("disk", "hardware")
    staged = ledger.staged.get(node.name, {}) if ledger is not None else {}
    if source in staged:
        return None
    stored = sum(w.bytes for w in store.weights)
    free = store.free_bytes - sum(staged.values())
    if (
        free + unused_stored(node, ledger) >= size
        or (relax.capacity and free + stored >= size)
        or relax.conditions
    ):
        return None
    if free + stored + sum(staged.values()) >= size:
        return Refusal("disk", "capacity")
    return Refusal("disk", "condition")


def check(
    spec: Profile,
    node: NodeView,
    ledger: Ledger | None,
    relax: Relax,
    source: str = "",
    size: int | None = None,
) -> Check:
    """The node's first failing constraint for `spec` (docs order), or its free GPUs.
    `ledger` None: nothing of ours is held."""
    if not relax.conditions and (
        node.reachability is not Reachability.READY or node.cordon is not None
    ):
        return Refusal("node-status", "condition")
    if any(node.labels.get(key) != value for key, value in spec.node_selector.items()):
        return Refusal("node-selector", "hardware")
    need_gib = spec.min_memory_gb
    total = node.memory_total_gib
    if need_gib is not None and total is not None:
        if total < need_gib:
            return Refusal("memory", "hardware")
        reserved = ledger.memory.get(node.name, 0.0) if ledger is not None else 0.0
        if total - reserved < need_gib:
            return Refusal("memory", "capacity")
    if not uses_gpus(spec):
        return disk(source, size, node, ledger, relax) or Passes(())
    need = spec.gpus_per_node
    if node.gpus is None:
        if relax.conditions:
            return disk(source, size, node, ledger, relax) or Passes(
                tuple(range(need)), assumed=True
            )
        return Refusal("gpu-class", "condition")
    of_class = [gpu for gpu in node.gpus if gpu.gpu_class == spec.gpu_class]
    if not of_class:
        return Refusal("gpu-class", "hardware")
    # gpu-memory: GB of 10^9 bytes; a GPU that did not say its memory is big enough.
    big = [
        gpu
        for gpu in of_class
        if spec.gpu_memory_gb is None
        or gpu.memory_total_mib is None
        or gpu.memory_total_mib * 2**20 >= spec.gpu_memory_gb * 10**9
    ]
    if len(of_class) >= need > len(big):
        return Refusal("gpu-memory", "hardware")
    if len(of_class) < need:
        return Refusal("gpus", "hardware")
    usable = [gpu for gpu in big if gpu.unusable is None or relax.conditions]
    if len(usable) < need:
        return Refusal("gpus", "condition")
    held = ledger.gpus.get(node.name, {}) if ledger is not None else {}
    free = tuple(sorted(gpu.index for gpu in usable if gpu.index not in held))
    if len(free) < need:
        return Refusal("gpus", "capacity")
    return disk(source, size, node, ledger, relax) or Passes(free)


# --- GPUs inside NVLink domains --------------------------------------------------------------


def in_domains(chosen: Iterable[int], group: int, domains: Sequence[frozenset[int]]) -> bool:
    """Can `chosen` be split into groups of `group` GPUs, each inside one domain?"""
    picked = set(chosen)
    fitting = sum(len(picked & domain) // group for domain in domains)
    return fitting * group >= len(picked)


def domain_key(
    chosen: Iterable[int], free: Iterable[int], domains: Sequence[frozenset[int]]
) -> tuple[int, int] | None:
    """(free GPUs in the domain holding all of `chosen`, its size); None if none holds it."""
    picked, free_set = set(chosen), set(free)
    for domain in domains:
        if picked <= domain:
            return len(domain & free_set), len(domain)
    return None


def quality(passes: Passes, spec: Profile, domains: Sequence[frozenset[int]] | None) -> int:
    """0: every group inside one domain (or groups of one); 1: topology unknown (or GPUs
    not reported); 2: some group must span domains. By enumerating every GPU set."""
    group = min(spec.tp, spec.gpus_per_node)
    if passes.assumed:
        return 1
    if group <= 1:
        return 0
    if domains is None:
        return 1
    for chosen in itertools.combinations(passes.free, spec.gpus_per_node):
        if in_domains(chosen, group, domains):
            return 0
    return 2


def best_domain_key(
    passes: Passes, spec: Profile, domains: Sequence[frozenset[int]]
) -> tuple[int, int] | None:
    """For one group (gpus_per_node == group): the best (free in domain, size) of any set."""
    keys = [
        key
        for chosen in itertools.combinations(passes.free, spec.gpus_per_node)
        if (key := domain_key(chosen, passes.free, domains)) is not None
    ]
    return min(keys, default=None)


def gpu_choice_problems(
    node: NodeView, passes: Passes, spec: Profile, chosen: Sequence[int]
) -> list[str]:
    """Why `chosen` is not a valid GPU set for `spec` on `node`, or is worse than the best."""
    need = spec.gpus_per_node
    if not uses_gpus(spec):
        return [f"{node.name}: a CPU shard got GPUs {chosen}"] if chosen else []
    problems = []
    if len(chosen) != need or len(set(chosen)) != need:
        problems.append(f"{node.name}: {chosen} is not {need} distinct GPUs")
    if not set(chosen) <= set(passes.free):
        problems.append(f"{node.name}: {chosen} not within the free GPUs {passes.free}")
    if problems:
        return problems
    group = min(spec.tp, need)
    domains = node.nvlink_domains
    if group <= 1:
        return []
    if domains is None:
        lowest = passes.free[:need]
        if tuple(sorted(chosen)) != lowest:
            problems.append(f"{node.name}: topology unknown, got {chosen}, lowest are {lowest}")
        return problems
    if quality(passes, spec, domains) == 0 and not in_domains(chosen, group, domains):
        problems.append(
            f"{node.name}: {chosen} spans NVLink domains {[sorted(d) for d in domains]}, "
            f"but the free GPUs {passes.free} can keep every group of {group} inside one"
        )
    if need == group:
        best = best_domain_key(passes, spec, domains)
        got = domain_key(chosen, passes.free, domains)
        if best is not None and got != best:
            problems.append(
                f"{node.name}: {chosen} sits in a domain with (free, size) {got}; the best "
                f"domain for {group} of free {passes.free} in {[sorted(d) for d in domains]} "
                f"has {best}"
            )
    return problems


# --- the placer --------------------------------------------------------------------------------


def spread_limit(model: CatalogModel) -> int:
    return max(1, math.ceil(model.replicas_max / 4))


@dataclass(frozen=True)
class Group:
    """A multi-node choice: the fabric, and (node, its usable HCAs) by rank."""

    fabric: str
    members: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Attempt:
    profile: CatalogProfile
    checks: dict[str, Check]  # every node's check, before the fabric constraint
    refusals: dict[str, Refusal]  # every node refused, the fabric constraint included
    fits: bool
    node: str | None = None  # single-node: the node the replica should go to
    group: Group | None = None  # multi-node: the fabric and the nodes, in rank order


@dataclass(frozen=True)
class Expectation:
    model: str
    attempts: tuple[Attempt, ...]  # the profiles tried, the winner last
    verdict: str  # placed, not-now, blocked, never

    @property
    def winner(self) -> Attempt | None:
        last = self.attempts[-1] if self.attempts else None
        return last if last is not None and last.fits else None


def usable_hcas(node: NodeView, fabric: str, relax: Relax) -> tuple[str, ...]:
    for view in node.fabrics:
        if view.name == fabric:
            if view.active_hcas is None or relax.conditions:
                return view.hcas
            return view.active_hcas
    return ()


def fabric_rate(node: NodeView, fabric: str) -> float:
    return next((v.rate_gbps or 0.0 for v in node.fabrics if v.name == fabric), 0.0)


class Oracle:
    def __init__(self, catalog: Catalog, snapshot: Snapshot) -> None:
        self.catalog = catalog
        self.snapshot = snapshot
        self.nodes = {node.name: node for node in snapshot.nodes}
        # Snapshot nodes are in name order (docs: "nodes are considered in name order").
        self.order = {node.name: position for position, node in enumerate(snapshot.nodes)}
        self.ledger = Ledger.of(snapshot)
        self._verdicts: dict[str, str] = {}

    # -- the run --

    def running(self) -> dict[str, set[str]]:
        """Replicas with a running or starting shard on a node that is not Lost (a failed
        shard runs nothing: docs/placement.md)."""
        found: dict[str, set[str]] = {}
        for node in self.snapshot.nodes:
            if node.reachability is not Reachability.LOST:
                for shard in node.shards:
                    if shard.state in ("running", "starting"):
                        found.setdefault(shard.model, set()).add(shard.replica)
        return found

    def sequence(self, models: Sequence[str] | None) -> list[str]:
        """The model of each replica the run places, in order: rounds in catalog order."""
        running = self.running()
        wanted: dict[str, int] = {}
        if models is None:
            for name, model in self.catalog.models.items():
                wanted[name] = max(0, model.replicas_min - len(running.get(name, ())))
        else:
            for name in models:
                wanted[name] = wanted.get(name, 0) + 1
        rounds = max(wanted.values(), default=0)
        return [name for r in range(rounds) for name, count in wanted.items() if r < count]

    def profiles(self, model: CatalogModel) -> list[CatalogProfile]:
        return sorted(model.profiles, key=lambda p: -p.spec.priority)

    def expect(self, model_name: str) -> Expectation:
        """What placing one more replica of the model on the current ledger should do."""
        model = self.catalog.models[model_name]
        attempts = []
        for profile in self.profiles(model):
            attempt = self.attempt(profile, self.ledger, STRICT, spread_limit(model))
            attempts.append(attempt)
            if attempt.fits:
                return Expectation(model_name, tuple(attempts), "placed")
        return Expectation(model_name, tuple(attempts), self.verdict(model))

    def hold(
        self,
        model: str,
        replica: str,
        profile: CatalogProfile,
        shards: Iterable[tuple[str, Sequence[int]]],
    ) -> None:
        self.ledger.hold(
            model,
            replica,
            profile.spec,
            shards,
            profile.source,
            self.size(profile),
            lambda node: holds_complete(self.nodes[node], profile.source),
        )

    def size(self, profile: CatalogProfile) -> int | None:
        """The bytes its weights take: disk_gb, else the most any node reports, else None."""
        staged = (
            ("hf://",) if profile.spec.engine in ("vllm", "sglang") else ("https://", "http://")
        )
        if not profile.source.startswith(staged):
            return 0  # read where it is, or fetched by the engine itself: nothing is staged
        if profile.spec.disk_gb is not None:
            return math.ceil(profile.spec.disk_gb * 10**9)
        reported = [
            w.bytes
            for node in self.snapshot.nodes
            for w in (node.model_store.weights if node.model_store else ())
            if w.source == profile.source
        ]
        return max(reported, default=None)

    def verdict(self, model: CatalogModel) -> str:
        if model.name not in self._verdicts:
            found = "never"
            theirs = Ledger.of(self.snapshot, ours=False)
            for relax, ledger, verdict in (
                (Relax(capacity=True), theirs, "not-now"),
                (Relax(capacity=True, conditions=True), None, "blocked"),
            ):
                if any(self.attempt(p, ledger, relax, 1).fits for p in model.profiles):
                    found = verdict
                    break
            self._verdicts[model.name] = found
        return self._verdicts[model.name]

    # -- one profile --

    def attempt(
        self, profile: CatalogProfile, ledger: Ledger | None, relax: Relax, spread: int
    ) -> Attempt:
        spec = profile.spec
        size = self.size(profile)
        checks = {
            name: check(spec, node, ledger, relax, profile.source, size)
            for name, node in self.nodes.items()
        }
        refusals = {name: c for name, c in checks.items() if isinstance(c, Refusal)}
        passing = {name: c for name, c in checks.items() if isinstance(c, Passes)}
        if spec.nodes == 1:
            node = self._single(profile, passing, ledger, spread) if passing else None
            return Attempt(profile, checks, refusals, node is not None, node=node)
        return self._multi(profile, checks, refusals, passing, relax)

    def _single(
        self,
        profile: CatalogProfile,
        passing: dict[str, Passes],
        ledger: Ledger | None,
        spread: int,
    ) -> str:
        spec, model = profile.spec, profile.model

        def here(name: str) -> int:
            return ledger.here(model, name) if ledger is not None else 0

        def lacks(name: str) -> bool:
            return not holds_complete(self.nodes[name], profile.source)

        if not uses_gpus(spec):
            need = spec.min_memory_gb or 0.0

            def cpu_key(name: str) -> tuple[bool, bool, bool, float, bool, int]:
                node = self.nodes[name]
                total = node.memory_total_gib
                reserved = ledger.memory.get(name, 0.0) if ledger is not None else 0.0
                left = 0.0 if total is None else total - reserved - need
                return (
                    bool(node.gpus),
                    here(name) >= spread,
                    total is None,
                    left,
                    lacks(name),
                    self.order[name],
                )

            return min(passing, key=cpu_key)

        def gpu_key(name: str) -> tuple[int, bool, int, bool, int, int]:
            passes = passing[name]
            return (
                quality(passes, spec, self.nodes[name].nvlink_domains),
                here(name) >= spread,
                passes.count,
                lacks(name),
                here(name),
                self.order[name],
            )

        return min(passing, key=gpu_key)

    def _multi(
        self,
        profile: CatalogProfile,
        checks: dict[str, Check],
        refusals: dict[str, Refusal],
        passing: dict[str, Passes],
        relax: Relax,
    ) -> Attempt:
        spec = profile.spec
        refusals = dict(refusals)
        joinable: dict[str, dict[str, tuple[str, ...]]] = {}  # node → fabric → usable HCAs
        for name in passing:
            node = self.nodes[name]
            fabrics = {v.name: usable_hcas(node, v.name, relax) for v in node.fabrics}
            fabrics = {f: hcas for f, hcas in fabrics.items() if hcas}
            if fabrics:
                joinable[name] = fabrics
            else:
                refusals[name] = Refusal("fabric", "hardware" if not node.fabrics else "condition")
        best: tuple[tuple[int, float, int, str], Group] | None = None
        fabric_names = sorted({f for fabrics in joinable.values() for f in fabrics})
        for fabric in fabric_names:
            on = [name for name in joinable if fabric in joinable[name]]
            # Brute force: every combination of `nodes` eligible nodes on this fabric; the
            # emptiest (most free GPUs, then the emptier nodes by name) is the fabric's group.
            combos = list(itertools.combinations(on, spec.nodes))
            if not combos:
                continue

            def rank(n: str) -> tuple[int, bool, int]:
                return (
                    -passing[n].count,
                    not holds_complete(self.nodes[n], profile.source),
                    self.order[n],
                )

            def emptiest(combo: tuple[str, ...]) -> tuple[int, list[tuple[int, bool, int]]]:
                return -sum(passing[n].count for n in combo), sorted(rank(n) for n in combo)

            combo = min(combos, key=emptiest)
            ranked = sorted(combo, key=rank)
            rate = min(fabric_rate(self.nodes[n], fabric) for n in ranked)
            holding = sum(holds_complete(self.nodes[n], profile.source) for n in ranked)
            key = (-sum(passing[n].count for n in ranked), -rate, -holding, fabric)
            group = Group(fabric, tuple((n, joinable[n][fabric]) for n in ranked))
            if best is None or key < best[0]:
                best = (key, group)
        if best is None:
            for name in joinable:
                refusals[name] = Refusal("fabric", "hardware")
            return Attempt(profile, checks, refusals, False)
        return Attempt(profile, checks, refusals, True, group=best[1])
