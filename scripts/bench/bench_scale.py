"""Benchmark a reconcile pass over 2,000 and 200 simulated nodes: ctl's own time, per phase.

Everything of ctl is real — the catalog and inventory read from files, the gathering's
threads, the probe's output parsed, the facts cache, the snapshot, the plan, the routing
diff, the plan rendered, and the playbook variables of what the pass would run rendered as
run_playbook renders them — but for the two edges where a pass meets the nodes:

- the SSH session (cli/edges/ssh.py `login` and `execute`) is replaced by one that answers
  each node's probe after `--delay` (50 ms: a probe's run on a real node) with that node's
  output, shaped as the real probe prints it: the test fleet's seven kinds of node
  (tests/testfleet/defaults.py: HGX H100 with InfiniBand, L40S, A100 in NVLink pairs, CPU
  nodes), their nvidia-smi answers from the fleet's fake nvidia-smi, /proc/meminfo, the
  InfiniBand ports, listening sockets, the model store, and each node's shard records with
  their unit states. The known_hosts key is still looked up per node, as the real login
  pins it;
- ansible-playbook (cli/edges/ansible.py `run_playbook`, where the executor and the router
  deployer call it) is replaced by the simulated fleet taking the variables as the
  playbooks would: shard records written or removed, the routers' served line recorded.
  The variables are rendered to YAML first, as the real run does.

So each pass leaves the simulated nodes as a real one would, and the next pass reads them
back. Per size: a first pass fills the empty fleet (not timed), a second settles it, then
the timed passes: a no-op pass (must plan nothing and run no playbook), and a pass that
moves 5 % of the replicas (the nodes holding them drained, as `ctl drain` plans it), each
with ctl's wall and CPU time (this process, every thread) per phase. Nothing is contacted:
the simulated passes open no socket.

First, unless --no-sshd, what the controller's lasting sessions (cli/edges/ssh.py
SessionPool) save, which the simulated session cannot show: ctl's CPU per node per pass
gathering the real probe from real sshds on loopback (tests/sshd.py, one a node), each
pass logging in afresh as `ctl facts` does, or reusing the sessions of the pass before as
`ctl reconcile --watch` does.

The last line is one JSON object; exit 1 when a pass did not do what it is timed for.

    python scripts/bench/bench_scale.py [--sizes 2000,200] [--delay 0.05] [--parallel 32]
        [--no-sshd]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
import yaml

# Run as a file, not a module: the project root, where the test fleet's node kinds are
# (tests/testfleet), is not on the path of a script in scripts/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cli.edges.ansible as ansible_edge
import cli.edges.ssh as ssh_edge
import cli.ops.executor as executor_module
import cli.ops.fleet as fleet_module
import cli.ops.reconcile as reconcile_module
import cli.routes.deploy as deploy_module
from cli.catalog.load import load_catalog
from cli.edges.ansible import PlaybookRun
from cli.edges.ssh import SessionPool
from cli.facts.cache import FactsCache
from cli.facts.gather import Target, gather
from cli.inventory.load import load_inventory
from cli.ops.context import AppContext
from cli.ops.fleet import Fleet, load_fleet
from cli.ops.reconcile import PassHooks, PassRequest, PassResult, run_pass
from cli.ui import console
from cli.ui.plan import render_plan
from tests.fakes.nvidia_smi import FakeData, precomputed
from tests.sshd import missing_reason, running_sshd
from tests.testfleet.defaults import default_spec
from tests.testfleet.hardware import gpu_data, infiniband_files, meminfo
from tests.testfleet.specs import NodeSpec, node_spec_to_dict

DEFAULT_SIZES = (2_000, 200)
DELAY = 0.05
MOVED_FRACTION = 0.05
ROUTERS = 2
PROBE_VERSION = "1"


# --- the simulated nodes --------------------------------------------------------------------


def _section(name: str, body: str, status: int = 0) -> str:
    return f"@@modelfleet begin {name}\n{body}\n@@modelfleet end {name} {status}\n"


def _smi_sections(data: FakeData) -> str:
    """What probe.sh's smi() prints for the four nvidia-smi calls, stderr lines marked."""
    files = precomputed(data)
    out = []
    for name, section in (
        ("query-gpu", "query-gpu"), ("mig", "mig"), ("compute-apps", "compute-apps"),
        ("topo", "topology"),
    ):  # fmt: skip
        err = "".join(f"@@stderr {line}\n" for line in files[f"{name}.err"].splitlines())
        status = int(files[f"{name}.status"])
        out.append(_section(section, files[f"{name}.out"] + err, status))
    return "".join(out)


# /proc/net/tcp with sshd on 22 listening and one connection (the probe's own session).
_LISTENING = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout"
    " inode\n"
    "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0"
    " 19337 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0A00000B:0016 0A000001:D2F4 01 00000000:00000000 02:0009A2A2 00000000     0        0"
    " 88123 4 0000000000000000 20 4 29 10 -1\n"
)


@dataclass
class SimulatedNode:
    name: str
    address: str
    fixed: str  # every section up to the model store: the node's hardware
    records: dict[str, str] = field(default_factory=dict)  # unit → record JSON (one line)
    served: str | None = None  # a router's served line, once deployed

    def output(self) -> bytes:
        router = _section("router", "", 127)
        if self.served is not None:
            config = self.served.split()[1]
            router = _section(
                "router", f"served\t{self.served}\nconfig\t{config}\nunits\tactive active"
            )
        shards = "".join(f"{record}\tactive\n" for record in self.records.values())
        return (self.fixed + router + _section("shards", shards)).encode()


def simulated_node(name: str, address: str, spec: NodeSpec) -> SimulatedNode:
    parts = [
        _section("version", PROBE_VERSION),
        _section("meminfo", meminfo(spec)),
        _section("cgroup-memory", "max"),
    ]
    if spec.gpus is None:
        parts += [
            _section("pci-nvidia", ""),
            _section("query-gpu", "nvidia-smi: command not found", 127),
        ]
    else:
        data: FakeData = gpu_data(name, spec)  # type: ignore[assignment]
        pci = "".join(f"{gpu['pci_bus_id'][4:].lower()} 0x030200\n" for gpu in data["gpus"])
        parts += [_section("pci-nvidia", pci), _smi_sections(data)]
    ib = infiniband_files(spec)
    ports = "".join(
        f"{path}\t{value.strip()}\n"
        for path, value in sorted(ib.items())
        if path.rsplit("/", 1)[-1] in ("state", "rate", "link_layer")
    )
    parts += [
        _section("infiniband", ports, 0 if ib else 127),
        _section("listening", _LISTENING),
        _section(
            "model-store",
            "store\t/var/lib/modelfleet/models\tpresent\nfilesystem\t4096\t976754646\t732565984",
        ),
        _section("pki", "key\tabsent"),
    ]
    return SimulatedNode(name, address, "".join(parts))


class SimulatedFleet:
    """The nodes' side: their probe output, and what the playbooks do to them."""

    def __init__(self, nodes: Sequence[SimulatedNode], delay: float) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.by_address = {node.address: node for node in nodes}
        self.delay = delay
        self.sessions = 0
        self.runs: list[str] = []
        self._lock = threading.Lock()

    # cli/edges/ssh.py's login and execute, for the simulated nodes
    def login(
        self, address: str, port: int, user: str | None, key_file: Path | None,
        host_keys: Sequence[paramiko.PKey], connect_timeout: float,
        proxy: ssh_edge.Proxy | None = None, known: ssh_edge.KnownHosts | None = None,
    ) -> Any:  # fmt: skip
        del port, user, key_file, connect_timeout, proxy, known
        if not host_keys:  # as the real login refuses a node known_hosts does not name
            raise ssh_edge.NodeError(f"{address} not in known_hosts")
        with self._lock:
            self.sessions += 1
        return _Session(self.by_address[address])

    def execute(
        self, client: Any, command: str, stdin: bytes, timeout: float, limit: int = 0
    ) -> ssh_edge.Result:
        del command, stdin, timeout, limit
        time.sleep(self.delay)  # the probe's run on the node; the client waits, idle
        return ssh_edge.Result(0, client.node.output(), b"")

    # cli/edges/ansible.py's run_playbook, for the simulated nodes
    def run_playbook(
        self, name: str, inventory: Path, variables: Any, hosts: Sequence[str],
        log_dir: Path, known_hosts: Path, secrets: Any = None,
    ) -> PlaybookRun:  # fmt: skip
        del inventory, known_hosts, secrets
        started = time.monotonic()
        with PHASES.phase("playbook variables rendered"):
            yaml.dump(ansible_edge.mark_unsafe(dict(variables)), Dumper=ansible_edge._Dumper)
        self.runs.append(name)
        if name == "start_shards.yml":
            for host, shards in variables["modelfleet_shards"].items():
                for shard in shards:
                    for file in shard.get("files", ()):
                        if file["path"].endswith(".json"):
                            record = "".join(file["content"].splitlines())
                            self.nodes[host].records[shard["unit"]] = record
        elif name == "stop_shards.yml":
            for host, stops in variables["modelfleet_stops"].items():
                for stop in stops:
                    self.nodes[host].records.pop(stop["unit"], None)
        elif name == "deploy_router.yml":
            for host in hosts:
                self.nodes[host].served = variables["modelfleet_router_served"]
        return PlaybookRun(name, 0, (), log_dir / "simulated.log", time.monotonic() - started)


@dataclass
class _Session:
    node: SimulatedNode

    def close(self) -> None:
        pass


# --- ctl's time, per phase ------------------------------------------------------------------


class Phases:
    """Wall and CPU time (this process, every thread) per phase, each phase's own: time in a
    phase nested inside another is counted once, in the inner one."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._stack: list[list[float]] = []  # per open phase: its children's wall and CPU

    def reset(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # the gathering's workers: counted in the phase that waits for them
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self._stack.append([0.0, 0.0])
        try:
            yield
        finally:
            inner_wall, inner_cpu = self._stack.pop()
            spent_wall = time.perf_counter() - wall
            spent_cpu = time.process_time() - cpu
            self.wall[name] = self.wall.get(name, 0.0) + spent_wall - inner_wall
            self.cpu[name] = self.cpu.get(name, 0.0) + spent_cpu - inner_cpu
            if self._stack:
                self._stack[-1][0] += spent_wall
                self._stack[-1][1] += spent_cpu


PHASES = Phases()


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with PHASES.phase(name):
            return function(*args, **kwargs)

    return wrapper


def _refuse_network(self: socket.socket, address: Any) -> None:
    del self
    raise AssertionError(f"bench_scale contacts nothing, yet something asked for {address}")


def instrument(simulated: SimulatedFleet) -> None:
    """Put the simulated edges in place, and a timer around each phase of the pass."""
    edges: list[tuple[Any, str, Any]] = [
        (socket.socket, "connect", _refuse_network),
        (ssh_edge, "login", simulated.login),
        (ssh_edge, "execute", simulated.execute),
        (executor_module, "run_playbook", simulated.run_playbook),
        (deploy_module, "run_playbook", simulated.run_playbook),
    ]
    for owner, attribute, replacement in edges:
        setattr(owner, attribute, replacement)
    patches: list[tuple[Any, str, str]] = [
        (fleet_module, "load_inventory", "inputs read"),
        (fleet_module, "gather", "gather (simulated SSH)"),
        (fleet_module, "facts_from_attempt", "probe output parsed"),
        (FactsCache, "load", "facts cache"),
        (FactsCache, "save", "facts cache"),
        (fleet_module, "build_snapshot", "snapshot"),
        (reconcile_module, "plan", "plan"),
        (reconcile_module, "apply", "apply"),
        (deploy_module, "route_table", "routing diff"),
        (deploy_module, "router_variables", "routing diff"),
        (deploy_module, "served_line", "routing diff"),
    ]
    for owner, attribute, name in patches:
        setattr(owner, attribute, timed(name, getattr(owner, attribute)))


# --- the fleet's files ----------------------------------------------------------------------


def catalog_text(size: int) -> str:
    """Five models whose replicas take about half the fleet's GPUs, and CPU replicas."""
    models = {
        "deepseek-h100x8": (
            "hf://deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
            "H100",
            8,
            size // 28,
        ),
        "qwen-h100x2": ("hf://Qwen/Qwen2.5-Coder-14B-Instruct", "H100", 2, size // 10),
        "llama-a100x2": ("hf://meta-llama/Llama-3.1-8B-Instruct", "A100", 2, size // 14),
        "mistral-l40s": ("hf://mistralai/Mistral-7B-Instruct-v0.3", "L40S", 1, size // 7),
    }
    lines = ["models:"]
    for name, (source, gpu_class, gpus, count) in models.items():
        lines += [
            f"  {name}:",
            f"    source: {source}",
            f"    replicas: {{min: {count}, max: {count}}}",
            "    profiles:",
            f"      - name: {gpu_class.lower()}x{gpus}",
            "        priority: 50",
            "        engine: vllm",
            f"        gpu_class: {gpu_class}",
            f"        gpus_per_node: {gpus}",
        ]
    lines += [
        "  bge-small-cpu:",
        "    source: file:///srv/models/bge-small-q8_0.gguf",
        f"    replicas: {{min: {size // 20}, max: {size // 20}}}",
        "    profiles:",
        "      - name: cpu",
        "        priority: 10",
        "        engine: llama.cpp",
        "        min_memory_gb: 2",
        "        embedding: true",
    ]
    return "\n".join(lines) + "\n"


def write_fleet(directory: Path, size: int, delay: float) -> SimulatedFleet:
    """The catalog, the inventory (hosts, group vars, known_hosts) and the simulated nodes."""
    inventory = directory / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (directory / "catalog.yaml").write_text(catalog_text(size), encoding="utf-8")
    (inventory / "group_vars" / "all.yml").write_text(
        "ansible_user: llm\nmodelfleet_stage_weights: false\n", encoding="utf-8"
    )
    key = paramiko.ECDSAKey.generate()
    hosts: dict[str, Any] = {}
    routers: dict[str, Any] = {}
    known: list[str] = []
    nodes = []
    for index in range(1, size + ROUTERS + 1):
        router = index > size
        name = f"router-{index - size}" if router else f"node-{index:04d}"
        address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
        spec = NodeSpec(memory_gib=16) if router else default_spec(index)
        host: dict[str, Any] = {"ansible_host": address}
        described = node_spec_to_dict(spec)
        host |= {key: described[key] for key in ("labels", "fabrics") if key in described}
        if router:
            host["cordoned"] = "a router"
            routers[name] = host
        else:
            hosts[name] = host
        known.append(f"{address} {key.get_name()} {key.get_base64()}")
        nodes.append(simulated_node(name, address, spec))
    document = {"all": {"children": {"gpu": {"hosts": hosts}, "routers": {"hosts": routers}}}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(document), encoding="utf-8")
    (inventory / ".known_hosts").write_text("\n".join(known) + "\n", encoding="utf-8")
    return SimulatedFleet(nodes, delay)


# --- the passes -----------------------------------------------------------------------------


@dataclass
class Timed:
    wall: float
    cpu: float
    phases: dict[str, tuple[float, float]]
    result: PassResult
    playbooks: list[str]


def one_pass(
    options: AppContext, directory: Path, simulated: SimulatedFleet, evict: frozenset[str]
) -> Timed:
    """A pass as the controller makes it: the inputs read, then run_pass, its plan shown."""
    inventory = directory / "inventory"
    PHASES.reset()
    before = len(simulated.runs)
    rendered = io.StringIO()
    hooks = PassHooks(
        read_fleet=lambda: load_fleet(options, inventory, None),
        command="bench_scale",
        waiting=lambda _: None,
        show_plan=timed("plan rendered", lambda p: console.print_lines(render_plan(p))),
        confirm=lambda _: True,
        say=lambda _: None,
        warn=lambda _: None,
        report=lambda _: None,
        on_run=lambda _: None,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(rendered), contextlib.redirect_stderr(rendered):
        with PHASES.phase("inputs read"):  # the controller checks both files, then reads
            load_catalog(directory / "catalog.yaml")
            load_inventory(inventory, None)
            catalog = load_catalog(directory / "catalog.yaml")
        request = PassRequest(catalog, inventory, False, evict=evict, confirmed=True)
        result = run_pass(options, request, hooks)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    phases = {name: (PHASES.wall[name], PHASES.cpu[name]) for name in PHASES.wall}
    phases["other"] = (wall - sum(PHASES.wall.values()), cpu - sum(PHASES.cpu.values()))
    return Timed(wall, cpu, phases, result, simulated.runs[before:])


def replicas_on(fleet: Fleet) -> dict[str, set[str]]:
    """Per node, the replicas with a shard there."""
    found: dict[str, set[str]] = {}
    for node in fleet.snapshot.nodes:
        for shard in node.shards:
            found.setdefault(node.name, set()).add(shard.replica)
    return found


def nodes_holding(fleet: Fleet, fraction: float) -> tuple[frozenset[str], int, int]:
    """The first nodes (by name) that together hold `fraction` of the replicas; with how many
    replicas they hold and how many run."""
    on = replicas_on(fleet)
    every = set().union(*on.values()) if on else set()
    chosen: set[str] = set()
    held: set[str] = set()
    for node in sorted(on):
        if len(held) >= fraction * len(every):
            break
        chosen.add(node)
        held |= on[node]
    return frozenset(chosen), len(held), len(every)


def show(label: str, figure: Timed, nodes: int) -> None:
    print(
        f"  {label}: wall {figure.wall:.2f} s, CPU {figure.cpu:.2f} s"
        f" ({1000 * figure.cpu / nodes:.2f} ms CPU a node), playbooks: {figure.playbooks or 'none'}"
    )
    for name, (wall, cpu) in sorted(figure.phases.items(), key=lambda p: -p[1][0]):
        print(f"    {name:<30} wall {wall:7.3f} s   CPU {cpu:7.3f} s")


def bench_size(size: int, delay: float, parallel: int) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as temporary:
        directory = Path(temporary)
        simulated = write_fleet(directory, size, delay)
        instrument(simulated)
        options = AppContext(parallel=parallel, state_dir=directory / "state")
        fill = one_pass(options, directory, simulated, frozenset())
        settle = one_pass(options, directory, simulated, frozenset())
        noop = one_pass(options, directory, simulated, frozenset())
        assert noop.result.plan is not None and noop.result.fleet is not None
        if not noop.result.plan.empty or noop.playbooks:
            problems.append(f"{size}: the no-op pass planned or ran something: {noop.playbooks}")
        if noop.result.fleet.unreached:
            problems.append(f"{size}: nodes not reached: {noop.result.fleet.unreached}")
        evict, moved, running = nodes_holding(noop.result.fleet, MOVED_FRACTION)
        move = one_pass(options, directory, simulated, evict)
        assert move.result.plan is not None
        drained = len(move.result.plan.drains)
        if drained < moved or move.result.applied is None:
            problems.append(f"{size}: the move pass drained {drained} of {moved} replicas")
    print(
        f"{size} nodes (+{ROUTERS} routers), {running} replicas running after the fill"
        f" ({fill.wall:.1f} s), settle pass {settle.wall:.1f} s:"
    )
    show("no-op pass", noop, size)
    show(f"move pass ({moved} replicas off {len(evict)} nodes)", move, size)
    figures = {
        "nodes": size,
        "replicas": running,
        "moved": moved,
        "fill_pass_seconds": round(fill.wall, 3),
        "noop": {"wall": round(noop.wall, 3), "cpu": round(noop.cpu, 3),
                 "phases": {k: [round(w, 4), round(c, 4)] for k, (w, c) in noop.phases.items()}},
        "move": {"wall": round(move.wall, 3), "cpu": round(move.cpu, 3),
                 "phases": {k: [round(w, 4), round(c, 4)] for k, (w, c) in move.phases.items()}},
        "sessions": simulated.sessions,
    }  # fmt: skip
    return figures, problems


def bench_sessions(nodes: int, passes: int) -> dict[str, Any]:
    """ctl's CPU per node per pass gathering from `nodes` real sshds on loopback: a login
    each pass, or each node's session kept from the pass before (the first pass, which
    logs in, left out)."""
    figures: dict[str, Any] = {"nodes": nodes, "passes": passes}
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-sshd-") as temporary,
        contextlib.ExitStack() as servers,
    ):
        directory = Path(temporary)
        started = [
            servers.enter_context(running_sshd(directory / f"sshd-{i}")) for i in range(nodes)
        ]
        known_hosts = directory / "known_hosts"
        known_hosts.write_text("".join(server.known_hosts_line() for server in started))
        targets = [
            Target(f"node-{i}", server.address, server.port, "root", str(server.client_key))
            for i, server in enumerate(started)
        ]
        for mode in ("login each pass", "sessions kept"):
            sessions = SessionPool(nodes) if mode == "sessions kept" else None
            spent = []
            for _ in range(passes + 1):
                cpu, wall = time.process_time(), time.perf_counter()
                attempts = gather(targets, known_hosts, sessions=sessions)
                spent.append((time.process_time() - cpu, time.perf_counter() - wall))
                failed = [a.error for a in attempts if a.error is not None]
                if failed:
                    raise SystemExit(f"bench_scale: a loopback sshd was not reached: {failed[0]}")
            cpu_each = sum(c for c, _ in spent[1:]) / passes / nodes
            wall_each = sum(w for _, w in spent[1:]) / passes
            figures[mode] = {
                "cpu_ms_per_node": round(1000 * cpu_each, 2),
                "pass_seconds": round(wall_each, 3),
            }
            print(
                f"  {mode:<16} CPU {1000 * cpu_each:6.2f} ms a node a pass,"
                f" a pass {wall_each:.3f} s"
            )
            if sessions is not None:
                figures[mode]["logins"] = sessions.logins
                sessions.close()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--delay", type=float, default=DELAY, help="seconds a probe takes")
    parser.add_argument("--parallel", type=int, default=AppContext().parallel)
    parser.add_argument("--no-sshd", action="store_true", help="skip the loopback sshd part")
    parser.add_argument("--sshd-nodes", type=int, default=16)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"bench_scale: {platform.python_implementation()} {platform.python_version()},"
        f" probe delay {args.delay * 1000:g} ms, {args.parallel} nodes gathered at once"
    )
    result: dict[str, Any] = {"benchmark": "scale", "delay": args.delay, "sizes": {}}
    problems: list[str] = []
    why_not = "--no-sshd" if args.no_sshd else missing_reason()
    if why_not is None:
        print(f"{args.sshd_nodes} loopback sshds, the real probe, 5 passes each way:")
        result["sessions"] = bench_sessions(args.sshd_nodes, 5)
    else:
        print(f"no loopback sshd part: {why_not}")
    for size in sizes:
        figures, said = bench_size(size, args.delay, args.parallel)
        result["sizes"][str(size)] = figures
        result[f"noop_pass_seconds_{size}"] = figures["noop"]["wall"]
        result[f"move_pass_seconds_{size}"] = figures["move"]["wall"]
        result[f"noop_pass_cpu_seconds_{size}"] = figures["noop"]["cpu"]
        result[f"move_pass_cpu_seconds_{size}"] = figures["move"]["cpu"]
        problems += said
    for problem in problems:
        print(f"FAILED: {problem}")
    print(json.dumps(result, sort_keys=True))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
