"""Gathering facts over SSH from a real sshd on loopback: what is learned, what is refused."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.cluster.snapshot import Reachability
from cli.edges import ssh
from cli.edges.ssh import SessionPool
from cli.facts.gather import Target, gather
from cli.facts.model import store_directory
from cli.facts.parse import parse_meminfo
from cli.facts.probe import facts_from_probe
from cli.inventory.load import load_inventory
from cli.ops.context import AppContext
from cli.ops.fleet import gather_fleet
from tests.builders import NOW
from tests.ctl import ctl
from tests.sshd import Sshd, keygen, missing_reason, running_sshd, silent_listener

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    with running_sshd(tmp_path / "sshd") as server:
        yield server


def target(server: Sshd, name: str = "local", key: Path | None = None) -> Target:
    return Target(name, server.address, server.port, "root", str(key or server.client_key))


def known_hosts(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(lines))
    return path


def test_a_node_with_a_known_host_key_yields_its_facts(sshd: Sshd, tmp_path: Path) -> None:
    (attempt,) = gather([target(sshd)], known_hosts(tmp_path, sshd.known_hosts_line()))
    assert attempt.error is None and attempt.output is not None
    facts = facts_from_probe(attempt.output, NOW)
    local = parse_meminfo(Path("/proc/meminfo").read_text())
    assert facts.memory is not None and local is not None
    assert facts.memory.total_mib == local.total_mib
    assert facts.probe_version == "1"
    assert facts.gpus == () and "no NVIDIA device on the PCI bus" in facts.notes


def test_an_unknown_host_key_is_refused_with_its_fingerprint(sshd: Sshd, tmp_path: Path) -> None:
    (attempt,) = gather([target(sshd)], known_hosts(tmp_path))
    assert attempt.output is None and attempt.error is not None
    assert attempt.error.startswith(
        f"host key not in {tmp_path / 'known_hosts'}: the node offered SHA256:"
    )
    assert not (tmp_path / "known_hosts").read_text()  # nothing was added


def test_a_changed_host_key_is_refused_naming_both_fingerprints(sshd: Sshd, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other")
    kind, blob = other.split()[:2]
    path = known_hosts(tmp_path, f"[{sshd.address}]:{sshd.port} {kind} {blob}\n")
    (attempt,) = gather([target(sshd)], path)
    assert attempt.error is not None
    assert attempt.error.startswith("host key mismatch: known_hosts")
    assert attempt.error.count("SHA256:") == 2 and attempt.error.endswith("; refused")


def test_a_key_the_node_does_not_accept_is_an_authentication_failure(
    sshd: Sshd, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    keygen(stranger)
    (attempt,) = gather(
        [target(sshd, key=stranger)], known_hosts(tmp_path, sshd.known_hosts_line())
    )
    assert attempt.error == "authentication failed for user root"


def test_a_node_that_never_answers_costs_only_its_timeout(sshd: Sshd, tmp_path: Path) -> None:
    with silent_listener() as port:
        hung = Target("hung", "127.0.0.1", port, "root", str(sshd.client_key))
        started = time.monotonic()
        good, bad = gather(
            [target(sshd), hung], known_hosts(tmp_path, sshd.known_hosts_line()), connect_timeout=1
        )
        elapsed = time.monotonic() - started
    assert good.error is None
    assert bad.error == "no SSH answer within 1 s"
    assert elapsed < 5


def test_a_probe_that_hangs_is_cut_off_at_the_command_timeout(tmp_path: Path) -> None:
    with running_sshd(tmp_path / "slow", force_command="sleep 30") as slow:
        started = time.monotonic()
        (attempt,) = gather(
            [target(slow)], known_hosts(tmp_path, slow.known_hosts_line()), command_timeout=1
        )
        assert time.monotonic() - started < 5
    assert attempt.error == "timed out running the probe"


def test_a_closed_port_is_connection_refused(sshd: Sshd, tmp_path: Path) -> None:
    with silent_listener() as port:
        pass  # closed again: nothing listens there now
    closed = Target("gone", "127.0.0.1", port, "root", str(sshd.client_key))
    (attempt,) = gather([closed], known_hosts(tmp_path, sshd.known_hosts_line()))
    assert attempt.error == f"connection refused on port {port}"


def write_inventory(
    tmp_path: Path, server: Sshd, cordoned: bool = False, store: Path | None = None
) -> Path:
    directory = tmp_path / "inventory"
    directory.mkdir(exist_ok=True)
    cordon = '\n      cordoned: "disk replacement"' if cordoned else ""
    if store is not None:
        cordon += f"\n      modelfleet_model_store: {store}"
    (directory / "hosts.yml").write_text(
        f"""all:
  hosts:
    local:
      ansible_host: {server.address}
      ansible_port: {server.port}
      ansible_user: root
      ansible_ssh_private_key_file: {server.client_key}
      labels: {{role: test}}{cordon}
"""
    )
    (directory / ".known_hosts").write_text(server.known_hosts_line())
    return directory


def test_an_unreached_node_keeps_its_last_facts_and_turns_lost_only_much_later(
    tmp_path: Path,
) -> None:
    options = AppContext(state_dir=tmp_path / "state", connect_timeout=2)
    with running_sshd(tmp_path / "sshd") as server:
        inventory_dir = write_inventory(tmp_path, server)
        inventory = load_inventory(inventory_dir)
        first = gather_fleet(inventory, inventory_dir, options, now=NOW)
    assert first.unreached == {}
    memory = first.facts["local"].memory
    # The server is gone now: a blip five minutes later, then a long silence.
    blip = gather_fleet(inventory, inventory_dir, options, now=NOW + timedelta(minutes=5))
    assert set(blip.unreached) == {"local"}
    node = blip.snapshot.node("local")
    assert node.reachability is Reachability.UNREACHABLE
    assert blip.facts["local"].memory == memory  # last known facts kept
    assert blip.facts["local"].last_reached == NOW
    later = gather_fleet(inventory, inventory_dir, options, now=NOW + timedelta(hours=2))
    assert later.snapshot.node("local").reachability is Reachability.LOST


def test_the_inventorys_model_store_is_the_one_the_node_reports(tmp_path: Path) -> None:
    store = tmp_path / "models"  # the sshd runs here: the node's filesystem is this one
    weights = store / store_directory("hf://org/m")
    weights.mkdir(parents=True)
    (weights / ".modelfleet-complete").write_text('{"source": "hf://org/m", "bytes": 5}\n')
    options = AppContext(state_dir=tmp_path / "state")
    with running_sshd(tmp_path / "sshd") as server:
        inventory_dir = write_inventory(tmp_path, server, store=store)
        fleet = gather_fleet(load_inventory(inventory_dir), inventory_dir, options, now=NOW)
    reported = fleet.facts["local"].model_store
    assert reported is not None, fleet.facts["local"].notes
    assert (reported.path, reported.present) == (str(store), True)
    assert [(w.source, w.bytes) for w in reported.weights] == [("hf://org/m", 5)]


def test_gathering_never_clears_a_cordon(tmp_path: Path) -> None:
    options = AppContext(state_dir=tmp_path / "state")
    with running_sshd(tmp_path / "sshd") as server:
        inventory_dir = write_inventory(tmp_path, server, cordoned=True)
        before = (inventory_dir / "hosts.yml").read_text()
        fleet = gather_fleet(load_inventory(inventory_dir), inventory_dir, options, now=NOW)
    assert fleet.snapshot.node("local").cordon == "disk replacement"
    assert (inventory_dir / "hosts.yml").read_text() == before


def run_ctl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ctl(*args, env={"XDG_STATE_HOME": str(tmp_path / "state")})


def test_ctl_nodes_gathers_live_and_shows_memory(sshd: Sshd, tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, sshd)
    result = run_ctl(tmp_path, "nodes", "--inventory", str(inventory))
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "STATUS", "CERT", "GPUS", "MEM"]
    local = parse_meminfo(Path("/proc/meminfo").read_text())
    assert local is not None
    memory = row.split()[4]
    assert abs(float(memory) - local.total_mib / 1024) < 1, row


def test_ctl_facts_saves_a_snapshot_that_ctl_nodes_reads(sshd: Sshd, tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, sshd, cordoned=True)
    saved = tmp_path / "snapshot"
    result = run_ctl(tmp_path, "facts", "--inventory", str(inventory), "--save", str(saved))
    assert result.returncode == 0, result.stderr
    assert "saved 1 nodes to" in result.stdout
    data = json.loads((saved / "local.json").read_text())
    assert data["host_vars"]["cordoned"] == "disk replacement"
    shown = run_ctl(tmp_path, "nodes", "--inventory", str(inventory), "--facts", str(saved))
    assert re.search(r"^local +Cordoned ", shown.stdout, flags=re.MULTILINE), shown.stdout


def add_a_node_that_is_down(inventory: Path, sshd: Sshd) -> int:
    """A host `gone` beside the real one, on a port where nothing listens; that port."""
    with silent_listener() as port:
        pass  # closed again: a node whose sshd is down
    hosts = inventory / "hosts.yml"
    hosts.write_text(
        hosts.read_text()
        + f"    gone:\n      ansible_host: 127.0.0.1\n      ansible_port: {port}\n"
        + f"      ansible_user: root\n      ansible_ssh_private_key_file: {sshd.client_key}\n"
    )
    return port


def test_ctl_facts_json_has_every_node_and_says_which_were_not_reached(
    sshd: Sshd, tmp_path: Path
) -> None:
    inventory = write_inventory(tmp_path, sshd)
    port = add_a_node_that_is_down(inventory, sshd)
    result = run_ctl(tmp_path, "facts", "--json", "--inventory", str(inventory))
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["format"] == "modelfleet.fleet-facts/v1"
    assert document["complete"] is False
    assert document["unreached"] == {"gone": f"connection refused on port {port}"}
    assert set(document["nodes"]) == {"local", "gone"}
    local = parse_meminfo(Path("/proc/meminfo").read_text())
    assert local is not None
    assert document["nodes"]["local"]["format"] == "modelfleet.facts/v1"
    assert document["nodes"]["local"]["memory"]["total_mib"] == local.total_mib
    assert document["nodes"]["gone"]["memory"] is None  # never reached: nothing known


def test_an_unreached_node_is_named_with_why_and_the_exit_code_says_partial(
    sshd: Sshd, tmp_path: Path
) -> None:
    inventory = write_inventory(tmp_path, sshd)
    (inventory / ".known_hosts").write_text("")
    result = run_ctl(tmp_path, "--timeout", "2", "nodes", "--inventory", str(inventory))
    assert result.returncode == 1
    assert re.search(
        rf"local: unreachable: host key not in {re.escape(str(inventory))}/\.known_hosts: "
        r"the node offered SHA256:\S+; check it and add it",
        " ".join(result.stdout.split()),
    ), result.stdout
    assert re.search(r"^local +Unreachable ", result.stdout, flags=re.MULTILINE)


def test_place_json_is_complete_only_when_every_node_was_reached(
    sshd: Sshd, tmp_path: Path
) -> None:
    inventory = write_inventory(tmp_path, sshd)
    port = add_a_node_that_is_down(inventory, sshd)
    (tmp_path / "catalog.yaml").write_text(
        "models:\n  tiny:\n    source: hf://org/tiny\n    profiles:\n"
        "      - {name: cpu, priority: 1, engine: llama.cpp}\n"
    )
    result = run_ctl(
        tmp_path, "place", "tiny", "--dry-run", "--json",
        "--inventory", str(inventory), "--catalog", str(tmp_path / "catalog.yaml"),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert [p["placed"] for p in document["placements"]] == [True]
    assert document["complete"] is False
    assert document["unreached"] == {"gone": f"connection refused on port {port}"}


def test_reconcile_after_a_quiet_spell_leaves_a_node_seen_failing_once_unreachable(
    tmp_path: Path,
) -> None:
    """Issue 28's reproduction: facts last gathered long before, the node cut, a dry run
    with a short --lost-after. The node has been seen failing once: Unreachable, its
    replica left alone; only --lost-after of watched failure makes it Lost."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "models:\n  chat:\n    source: file:///srv/chat.gguf\n    profiles:\n"
        "      - {name: cpu, priority: 1, engine: llama.cpp}\n"
    )
    with running_sshd(tmp_path / "sshd") as server:
        inventory = write_inventory(tmp_path, server)
        assert run_ctl(tmp_path, "nodes", "--inventory", str(inventory)).returncode == 0
    # The cache as a controller left it days ago: the node reached, running chat-1.
    (cached,) = (tmp_path / "state" / "modelfleet" / "facts").glob("*/local.json")
    record = json.loads(cached.read_text())
    long_ago = "2020-01-01T00:00:00Z"
    record.update(gathered_at=long_ago, last_reached=long_ago)
    record["shards"] = [
        {"replica": "chat-1", "model": "chat", "profile": "cpu", "rank": 0, "nodes": 1,
         "gpus": [], "port": 8000, "engine": "llama.cpp", "state": "running",
         "origin": "reconcile", "source": "file:///srv/chat.gguf"}
    ]  # fmt: skip
    cached.write_text(json.dumps(record))

    def dry_run() -> dict[str, Any]:
        result = run_ctl(
            tmp_path, "--lost-after", "3s", "--timeout", "2", "reconcile", "--dry-run",
            "--json", "--catalog", str(catalog), "--inventory", str(inventory),
        )  # fmt: skip
        assert result.returncode == 1, result.stderr  # the node is not reached: partial
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    blip = dry_run()["plan"]
    assert blip["stops"] == [] and blip["starts"] == [], blip
    state = json.loads(cached.read_text())
    assert state["last_reached"] == "2020-01-01T00:00:00Z"
    first_failure = state["unreachable_since"]
    time.sleep(3.5)
    watched = dry_run()["plan"]
    assert json.loads(cached.read_text())["unreachable_since"] == first_failure
    assert [stop["replica"] for stop in watched["stops"]] == ["chat-1"], watched
    assert "local lost" in watched["stops"][0]["reason"]


def test_the_controllers_passes_reuse_a_nodes_session_and_open_a_broken_one_again(
    tmp_path: Path,
) -> None:
    sessions = SessionPool(8)
    options = AppContext(state_dir=tmp_path / "state", connect_timeout=5, sessions=sessions)
    with running_sshd(tmp_path / "sshd") as server:
        inventory_dir = write_inventory(tmp_path, server)
        inventory = load_inventory(inventory_dir)
        first = gather_fleet(inventory, inventory_dir, options, now=NOW)
        (kept,) = sessions._sessions.values()
        second = gather_fleet(inventory, inventory_dir, options, now=NOW)
        assert first.unreached == second.unreached == {}
        assert sessions.logins == 1 and list(sessions._sessions.values()) == [kept]
        # The node drops the connection: its sshd's process for this session is killed (the
        # shell's parent), as a restart of sshd or of the node would.
        known = ssh.keys_for(
            ssh.load_known_hosts(inventory_dir / ".known_hosts"), server.address, server.port
        )
        dropped = sessions.run(
            server.address, server.port, "root", server.client_key, known, 5,
            "kill -KILL $PPID; sleep 5", b"", 10,
        )  # fmt: skip
        assert dropped.status == -1  # no exit status: the connection died under it
        third = gather_fleet(inventory, inventory_dir, options, now=NOW)
        assert third.unreached == {} and third.facts["local"].memory is not None
        assert sessions.logins == 2
    sessions.close()


def test_a_kept_session_is_never_used_past_a_change_of_the_nodes_pinned_key(
    tmp_path: Path,
) -> None:
    sessions = SessionPool(8)
    options = AppContext(state_dir=tmp_path / "state", connect_timeout=5, sessions=sessions)
    with running_sshd(tmp_path / "sshd") as server:
        inventory_dir = write_inventory(tmp_path, server)
        inventory = load_inventory(inventory_dir)
        assert gather_fleet(inventory, inventory_dir, options, now=NOW).unreached == {}
        # known_hosts now pins another key: the kept session, opened under the old pin, is
        # not used, and the login under the new one is refused.
        (inventory_dir / ".known_hosts").write_text(
            f"[{server.address}]:{server.port} {keygen(tmp_path / 'other')}\n"
        )
        refused = gather_fleet(inventory, inventory_dir, options, now=NOW)
    assert "host key mismatch" in refused.unreached["local"]
    assert sessions.logins == 1 and len(sessions) == 0  # the old session closed, none kept
