"""The local test fleet itself (scripts/testfleet): real sshd per node, own address, own host
key, the generated inventory, the fake hardware as the probe reads it, stop and start."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from cli.facts.parse import (
    parse_compute_apps,
    parse_meminfo,
    parse_mig_modes,
    parse_query_gpu,
    parse_topology,
)
from cli.facts.probe import gpu_queries, split_sections
from cli.facts.sections.infiniband import parse_infiniband
from cli.inventory.load import load_inventory
from cli.pki.paths import PKI_DIR
from tests import testfleet as fleet_script
from tests.ctl import ctl_environment
from tests.fakes import nvidia_smi
from tests.integration.conftest import LiveFleet
from tests.testfleet.router import stop_router

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "cli" / "facts" / "probe.sh"


def known_hosts_entries(path: Path) -> dict[str, str]:
    """address → "ssh-ed25519 AAAA..." from a known_hosts file."""
    entries: dict[str, str] = {}
    for line in path.read_text().splitlines():
        host, key_type, key = line.split()[:3]
        entries[host] = f"{key_type} {key}"
    return entries


def served_host_key(address: str) -> str:
    """The ed25519 host key the sshd on address:22 presents (ssh-keyscan trusts nothing)."""
    result = subprocess.run(
        ["ssh-keyscan", "-T", "10", "-t", "ed25519", address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1, (result.stdout, result.stderr)
    host, key_type, key = lines[0].split()
    assert host == address
    return f"{key_type} {key}"


def ssh_refuses(address: str) -> bool:
    try:
        socket.create_connection((address, 22), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def wildcard_listener_on_22() -> bool:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000:0016" and fields[3] == "0A":
            return True
    return False


def test_each_node_answers_on_its_own_address_with_its_own_host_key(testfleet: LiveFleet) -> None:
    known = known_hosts_entries(testfleet.known_hosts)
    assert set(known) == {node.address for node in testfleet.nodes}
    served: dict[str, str] = {}
    for node in testfleet.nodes:
        assert node.address == f"127.0.1.{node.index}"
        served[node.name] = served_host_key(node.address)
        assert served[node.name] == known[node.address], node.name
        result = testfleet.ssh(node.name, "hostname")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == node.name
    first, second = testfleet.nodes[0], testfleet.nodes[1]
    assert served[first.name] != served[second.name]
    assert len(set(served.values())) == len(served)  # no two nodes share a key


def test_each_sshd_listens_on_its_own_loopback_address_only(testfleet: LiveFleet) -> None:
    assert not wildcard_listener_on_22()
    for node in testfleet.nodes:
        result = testfleet.ssh(node.name, "/usr/sbin/sshd", "-T")
        assert result.returncode == 0, result.stderr
        listen = [line for line in result.stdout.splitlines() if line.startswith("listenaddress ")]
        assert listen == [f"listenaddress {node.address}:22"]


def test_a_node_presenting_another_nodes_key_is_refused(
    testfleet: LiveFleet, tmp_path: Path
) -> None:
    first, second = testfleet.nodes[0], testfleet.nodes[1]
    known = known_hosts_entries(testfleet.known_hosts)
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{first.address} {known[second.address]}\n")
    command = [
        f"UserKnownHostsFile={wrong}" if part.startswith("UserKnownHostsFile=") else part
        for part in testfleet.ssh_command(first.name, "true")
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_the_inventory_describes_the_fleet(testfleet: LiveFleet) -> None:
    inventory = load_inventory(testfleet.inventory_dir)
    assert inventory.names() == testfleet.names
    for node in testfleet.nodes:
        host = inventory.host(node.name)
        assert host.address == node.address
        assert host.port == 22
        assert host.user == "root"
        assert host.private_key_file == str(testfleet.key)
        assert Path(str(host.private_key_file)).is_absolute()
        assert host.vars.labels == dict(node.spec.labels)
        assert [(f.name, f.hcas, f.rate_gbps) for f in host.vars.fabrics] == [
            (f.name, f.hcas, f.rate_gbps) for f in node.spec.fabrics
        ]
    group_vars = yaml.safe_load((testfleet.inventory_dir / "group_vars" / "all.yml").read_text())
    assert group_vars["ansible_ssh_common_args"] == (
        f"-o UserKnownHostsFile={testfleet.known_hosts} -o StrictHostKeyChecking=yes"
    )
    # ctl's default known_hosts is .known_hosts next to the inventory: the same keys.
    assert (testfleet.inventory_dir / ".known_hosts").read_text() == (
        testfleet.known_hosts.read_text()
    )
    assert testfleet.key.stat().st_mode & 0o777 == 0o600


def probe(testfleet: LiveFleet, name: str) -> dict[str, tuple[str, int | None]]:
    """The facts probe run over ssh on a node: section → (text, exit status), the one
    nvidia-smi run for the GPUs read as the three queries it stands for."""
    result = testfleet.ssh(name, "sh", "-s", stdin=PROBE.read_text())
    assert result.returncode == 0, result.stderr
    sections = gpu_queries(split_sections(result.stdout))
    return {name: (section.text, section.status) for name, section in sections.items()}


def test_the_probe_reads_each_nodes_fake_hardware(testfleet: LiveFleet) -> None:
    for node in testfleet.nodes:
        spec = node.spec
        sections = probe(testfleet, node.name)

        memory = parse_meminfo(sections["meminfo"][0])
        assert memory is not None
        assert memory.total_mib == int(spec.memory_gib * 1024), node.name
        assert memory.available_mib is not None
        assert memory.available_mib < memory.total_mib

        if spec.gpus is None:
            assert sections["query-gpu"] == ("nvidia-smi: command not found", 127)
            assert sections["pci-nvidia"] == ("", 0)
        else:
            assert sections["gpus"][1] == 0  # one run: no field refused
            assert "mig" in sections and "retired-pages" in sections
            text, status = sections["query-gpu"]
            assert status == 0
            gpus = parse_query_gpu(text)
            assert [gpu.name for gpu in gpus] == [spec.gpus.model] * spec.gpus.count
            assert [gpu.memory_total_mib for gpu in gpus] == [spec.gpus.memory_mib] * len(gpus)
            modes = parse_mig_modes(sections["mig"][0])
            has_mig = spec.gpus.has_mig()
            assert modes == {
                gpu: (gpu in spec.gpus.mig_enabled if has_mig else None)
                for gpu in range(spec.gpus.count)
            }
            processes = parse_compute_apps(sections["compute-apps"][0])
            assert [p.pid for p in processes] == [p.pid for p in spec.gpus.processes]
            assert parse_topology(sections["topology"][0]) == spec.gpus.nvlink_domains()
            devices = sections["pci-nvidia"][0].splitlines()
            assert len(devices) == spec.gpus.count
            assert all(line.endswith(" 0x030200") for line in devices)

        text, status = sections["infiniband"]
        if not spec.hcas:
            assert status == 127  # no /sys/class/infiniband, as on a host without RDMA
        else:
            assert status == 0
            files = dict(line.split("\t", 1) for line in text.splitlines())
            ports = parse_infiniband(files)
            assert [(p.hca, p.state, p.link_layer) for p in ports] == [
                (hca.name, hca.state, hca.link_layer) for hca in spec.hcas
            ]
            active = [p.rate_gbps for p in ports if p.active]
            assert active == [float(h.rate_gbps) for h in spec.hcas if h.state == "ACTIVE"]


def test_nvidia_smi_answers_as_the_python_fake(testfleet: LiveFleet) -> None:
    """/usr/bin/nvidia-smi is the fake's sh fast path (the probe's command lines,
    answered from outputs precomputed at setup) in front of the Python fake (anything else):
    on every node, its stdout, stderr and exit status are the Python fake's."""
    invocations = {**nvidia_smi.PROBE_INVOCATIONS, "list": ("-L",), "other": ("topo", "-mp")}
    python_fake = f"/{fleet_script.NVIDIA_SMI_FAKE}"
    lines = ["d=$(mktemp -d) || exit 1", "head -n 1 /usr/bin/nvidia-smi"]
    for name, argv in invocations.items():
        for side, program in (("a", "nvidia-smi"), ("b", python_fake)):
            command = shlex.join([program, *argv])
            lines.append(f'{command} >"$d/{side}.out" 2>"$d/{side}.err"; echo $? >"$d/{side}.st"')
        lines.append(
            f'for x in out err st; do cmp -s "$d/a.$x" "$d/b.$x" || echo "{name}: $x differs"; done'
        )
        lines.append(f'echo "{name}: $(cat "$d/a.st")"')
    lines.append('rm -r "$d"')
    checked = 0
    for node in testfleet.nodes:
        if node.spec.gpus is None or node.spec.gpus.driver == "missing":
            continue
        result = testfleet.ssh(node.name, "sh", "-s", stdin="\n".join(lines) + "\n")
        assert result.returncode == 0, result.stderr
        report = result.stdout.splitlines()
        assert report[0] == "#!/bin/sh", node.name
        assert not [line for line in report if line.endswith(" differs")], (node.name, report)
        expected = "9" if node.spec.gpus.driver == "broken" else "0"
        assert f"query-gpu: {expected}" in report, (node.name, report)
        checked += 1
    if not checked:
        pytest.skip("no node of this fleet has an nvidia-smi")


def test_the_fake_hardware_hides_nothing_real(testfleet: LiveFleet) -> None:
    """The sysfs directories covered for the fakes still hold what the host's held."""
    host_classes = {path.name for path in Path("/sys/class").iterdir()}
    for node in testfleet.nodes:
        result = testfleet.ssh(node.name, "ls", "/sys/class", "/sys/class/net")
        assert result.returncode == 0, result.stderr
        listed = set(result.stdout.split())
        assert host_classes - {"infiniband"} <= listed
        assert "lo" in listed


def test_one_node_stops_and_starts_while_the_others_stay_up(fleet_exclusive: LiveFleet) -> None:
    fleet = fleet_exclusive
    node = fleet.nodes[-1]
    others = [other for other in fleet.nodes if other is not node]
    key_before = served_host_key(node.address)

    fleet.stop(node.name)
    assert fleet.state(node.name) == "down"
    assert ssh_refuses(node.address)
    for other in others:
        assert fleet.state(other.name) == "up"
        assert fleet.ssh(other.name, "true").returncode == 0

    fleet.start(node.name)
    assert fleet.state(node.name) == "up"
    assert served_host_key(node.address) == key_before
    result = fleet.ssh(node.name, "cat", "/proc/meminfo")
    assert result.returncode == 0
    memory = parse_meminfo(result.stdout)
    assert memory is not None and memory.total_mib == int(node.spec.memory_gib * 1024)


DOCS_STATE = Path("/var/tmp/modelfleet-testfleet")
# The docs start from bare nodes: no replica and no certificate. A run killed inside
# test_fleet_tls once left two nodes a 50-minute certificate, which the shared fleet kept
# and `ctl nodes` then rightly showed as expired.
CLEAN_UNITS = (
    f"rm -rf {PKI_DIR};"
    " for unit in $(systemctl list-units 'modelfleet-*-rank*' --all --plain --no-legend"
    ' | awk \'{print $1}\'); do systemctl kill -s KILL "$unit"; systemctl stop "$unit";'
    " done; rm -f /etc/systemd/system/modelfleet-*-rank*.service /etc/modelfleet/shards/*"
    " /var/lib/modelfleet/shards/*; systemctl daemon-reload; systemctl reset-failed"
)


def fenced(text: str, heading: str, language: str) -> list[str]:
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)\n```", section, flags=re.DOTALL)


def docs_commands() -> list[str]:
    blocks = fenced((ROOT / "docs" / "testfleet.md").read_text(), "Use", "sh")
    assert len(blocks) == 1
    return blocks[0].splitlines()


def test_the_readme_try_it_commands_are_the_docs_first_steps() -> None:
    blocks = fenced((ROOT / "README.md").read_text(), "Try it on a local fleet", "sh")
    assert len(blocks) == 1
    readme = blocks[0].splitlines()
    assert readme == [
        "scripts/testfleet up 3 --router node-3",
        ".venv/bin/ctl reconcile --catalog examples/testfleet/catalog.yaml"
        " -i /var/tmp/modelfleet-testfleet/inventory",
    ]
    docs = docs_commands()
    assert [line for line in docs if line in readme] == readme  # the same, in that order
    # and nothing in the docs' block is a bare ctl, which is not on PATH after the README
    assert not [line for line in docs if line.startswith("ctl ")]


def test_the_docs_commands_run_as_written(fleet_exclusive: LiveFleet, tmp_path: Path) -> None:
    fleet = fleet_exclusive
    if fleet.state_dir != DOCS_STATE:
        pytest.skip(f"the docs name {DOCS_STATE}; this fleet is in {fleet.state_dir}")
    nodes = [node.name for node in fleet.nodes[:3]]
    for node in nodes:  # nothing of an earlier test's running: the docs start from nothing
        subprocess.run(fleet.ssh_command(node, CLEAN_UNITS), check=True, timeout=120)
    stop_router(fleet, "node-3")
    docs = (ROOT / "docs" / "testfleet.md").read_text()
    shown = docs.split("`ctl nodes` says:\n\n```\n", 1)[1].split("\n```", 1)[0]
    environment = {**ctl_environment(), "XDG_STATE_HOME": str(tmp_path / "state")}
    printed: dict[str, str] = {}
    try:
        for command in docs_commands():
            run = command
            if command.startswith("scripts/testfleet up 3 ") and len(fleet.nodes) > 3:
                # A bigger shared fleet stays whole: `up 3` would stop the nodes beyond 3.
                run = command.replace(" up 3 ", f" up {len(fleet.nodes)} ")
            done = subprocess.run(
                run, shell=True, cwd=ROOT, env=environment, capture_output=True, text=True,
                timeout=600, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            printed[command] = done.stdout
        nodes_command = ".venv/bin/ctl nodes -i /var/tmp/modelfleet-testfleet/inventory"
        assert printed[nodes_command] == shown + "\n"
        apply = next(c for c in printed if c.startswith(".venv/bin/ctl reconcile --catalog"))
        lines = printed[apply].splitlines()
        started = sorted(line for line in lines if line.startswith("started "))
        assert started == [
            "started big-1",
            "started chat-1",
            "started chat-2",
            "started embed-1",
            "started tiny-1",
        ]
        routes = next(c for c in printed if c.startswith(".venv/bin/ctl routes"))
        rows = [line.split() for line in printed[routes].splitlines()[1:] if line[:1].strip()]
        ready = {row[0]: row[2] for row in rows if len(row) > 2}
        assert {m: ready.get(m) for m in ("chat", "big", "embed", "tiny")} == {
            "chat": "2/2",
            "big": "1/1",
            "embed": "1/1",
            "tiny": "1/1",
        }
        # up put working engines there: chat-1's stand-in answers as vLLM does
        probe = (
            "import urllib.request as u; print(u.urlopen('http://127.0.1.1:8000/v1/models').status)"
        )
        models = fleet.ssh(nodes[0], "python3", "-c", shlex.quote(probe))
        assert models.stdout == "200\n", models.stderr
        # node-3 drained while a client asked the router: nothing failed, and embed and tiny
        # answered from node-3, then from their new replicas elsewhere
        drain = next(c for c in printed if c.startswith("scripts/testfleet requests"))
        seen = dict(re.findall(r"^  (\S+): (.*)$", printed[drain], flags=re.MULTILINE))
        assert set(seen) == {"chat-small", "embed", "tiny"}, printed[drain]
        for model, line in seen.items():
            sent, failed = map(int, re.findall(r"(\d+) (?:sent|failed)", line))
            assert sent >= 10 and failed == 0, (model, line)
        for model in ("embed", "tiny"):
            answered = dict(re.findall(r"(node-\d+) (\d+)", seen[model]))
            assert "node-3" in answered and set(answered) - {"node-3"}, (model, seen[model])
        assert "drain  embed-1" in printed[drain] and "drain  tiny-1" in printed[drain]
    finally:
        for node in nodes:
            subprocess.run(fleet.ssh_command(node, CLEAN_UNITS), check=False, timeout=120)
        stop_router(fleet, "node-3")
        # the shared fleet's inventory as the fixture made it: no router, nothing cordoned
        subprocess.run(
            ["scripts/testfleet", "up", str(len(fleet.nodes))], cwd=ROOT, env=environment,
            capture_output=True, check=False, timeout=600,
        )  # fmt: skip
