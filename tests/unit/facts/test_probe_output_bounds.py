"""Bounded work per node: a hostile probe answer is a note on its node, never a traceback."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.facts.probe import facts_from_attempt, facts_from_probe, split_sections
from tests.builders import NOW

ROW = "{i}, GPU-{i}, NVIDIA H100, 00000000:{b:02X}:00.0, 81559, 0, 0"
PROBE = Path(__file__).resolve().parents[3] / "cli" / "facts" / "probe.sh"
SHARD = '{"replica": "r", "model": "m", "profile": "p", "rank": 0, "engine": "vllm"'


def section(name: str, body: str, status: int = 0) -> str:
    return f"@@modelfleet begin {name}\n{body}\n@@modelfleet end {name} {status}\n"


def probe(gpus: str, shards: str = "") -> str:
    return (
        section("meminfo", "MemTotal: 1048576 kB\nMemAvailable: 524288 kB")
        + section("query-gpu", gpus)
        + section("compute-apps", "")
        + section("infiniband", "", 127)
        + section("shards", shards)
    )


def rows(count: int) -> str:
    return "\n".join(ROW.format(i=i, b=i % 256) for i in range(count))


def test_300000_gpu_rows_refuse_the_gpu_list_of_that_node_with_a_note() -> None:
    facts = facts_from_probe(probe(rows(300_000)), NOW)
    assert facts.gpus is None
    assert "nvidia-smi --query-gpu: reported 300000 GPUs, more than 1,024" in facts.notes
    assert facts.memory is not None and facts.memory.total_mib == 1024  # the rest is read


def test_1024_gpu_rows_are_read() -> None:
    facts = facts_from_probe(probe(rows(1024)), NOW)
    assert facts.gpus is not None and len(facts.gpus) == 1024


def test_a_5000_digit_gpu_index_is_a_note() -> None:
    facts = facts_from_probe(probe("1" * 5000 + ", GPU-1, H100, [N/A], 1, 1, 0"), NOW)
    assert facts.gpus is None
    assert any("index '1111" in note and "out of range" in note for note in facts.notes)


def test_a_5000_digit_end_mark_status_is_no_end_mark() -> None:
    sections = split_sections(
        "@@modelfleet begin version\n1\n@@modelfleet end version " + "7" * 5000
    )
    assert sections["version"].status is None  # cut off, as if the probe died there


def test_a_shard_claiming_10_to_the_12_nodes_makes_the_node_unusable_not_believed() -> None:
    output = probe("No devices were found", SHARD + ', "nodes": 1000000000000}')
    facts = facts_from_attempt(output, None, None, NOW)
    assert facts.shards == ()
    assert facts.error == (
        "unusable probe output: shard records line 1: nodes 1000000000000 is more than 1,024"
    )


def test_nan_and_out_of_range_numbers_in_a_shard_record_are_refused() -> None:
    for tail, why in [
        (', "memory_gib": NaN}', "not JSON: NaN is not a number a record may hold"),
        (', "memory_gib": 1e400}', "memory_gib inf is not a size"),
        (', "port": 70000}', "port 70000 is out of range (1 to 65,535)"),
        (', "gpus": [5000]}', "GPU 5000 is out of range (0 to 1,023)"),
        (', "rank": ' + "9" * 5000 + "}", "not JSON: "),
    ]:
        facts = facts_from_attempt(probe("No devices were found", SHARD + tail), None, None, NOW)
        assert facts.error is not None and why in facts.error, (tail, facts.error)


LINES = st.one_of(
    st.text(max_size=200),
    st.builds(lambda n: n * "9", st.integers(4290, 5000)),
    st.sampled_from(
        ["@@modelfleet begin query-gpu", "@@modelfleet end query-gpu 0",
         "@@modelfleet begin shards", "@@modelfleet end shards 0",
         "@@modelfleet begin topology", "@@modelfleet end topology 0",
         "@@modelfleet begin meminfo", "@@modelfleet end meminfo 0",
         "@@modelfleet begin infiniband", "@@modelfleet end infiniband 0",
         "@@modelfleet begin cgroup-memory", "@@modelfleet end cgroup-memory 0",
         "@@modelfleet begin listening", "@@modelfleet end listening 0",
         "0, GPU-0, H100, [N/A], 1, 1, 0", "GPU0\tGPU1", "GPU0\t X \tNV4", SHARD + "}",
         "mlx5_0/ports/1/state\t4: ACTIVE", "MemTotal: 1 kB", "x" * 20_000]
    ),
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(LINES, max_size=40))
def test_random_probe_lines_give_facts_or_an_error_never_an_exception(lines: list[str]) -> None:
    facts = facts_from_attempt("\n".join(lines), None, None, NOW)
    assert facts.gathered_at == NOW
    assert (facts.error is None) == (facts.last_reached == NOW)


@settings(max_examples=200)
@given(st.binary(max_size=4096))
def test_random_bytes_give_facts_or_an_error_never_an_exception(data: bytes) -> None:
    facts = facts_from_attempt(data.decode("utf-8", errors="replace"), None, None, NOW)
    assert facts.gathered_at == NOW


def test_the_real_probe_sends_only_listening_sockets_not_every_connection() -> None:
    # A router holds thousands of connections: its whole TCP table is megabytes a pass.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    accepted = [server.accept()[0] for _ in clients]
    try:
        output = subprocess.run(
            ["sh", "-s"], input=PROBE.read_text(), capture_output=True, text=True, timeout=60,
            check=True,
        ).stdout  # fmt: skip
    finally:
        for sock in (*clients, *accepted, server):
            sock.close()
    rows = split_sections(output)["listening"].text.splitlines()
    assert rows and all(row.split()[3] == "0A" for row in rows), rows[:3]
    assert port in (facts_from_probe(output, NOW).listening_ports or ())
