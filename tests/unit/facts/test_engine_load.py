"""The engines' load: the stand-in queues as the real engines do and says so in /metrics at
their names, and the facts probe reads it over loopback into each replica's load
(cli/facts/sections/load.py), reading the engine's text as untrusted input."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cli.engines.specs import ENGINE_SPECS, LoadMetrics
from cli.facts.model import ReplicaLoad, ShardRecord
from cli.facts.probe import facts_from_probe, split_sections
from cli.facts.sections.load import (
    MAX_METRICS_BYTES,
    MAX_METRICS_LINES,
    load_from_metrics,
    parse_exposition,
    parse_metrics_section,
)
from tests.builders import NOW
from tests.ctl import ROOT
from tests.unit.doubles import test_standin_engine
from tests.unit.doubles.test_standin_engine import (
    LOCALHOST,
    Engines,
    chat,
    free_port,
    http,
    probe,
    vllm_args,
    wait_for,
)

engines = test_standin_engine.engines  # the fixture: the programs as a node has them

PROBE = ROOT / "cli" / "facts" / "probe.sh"


def _metrics_of(engine: str) -> LoadMetrics:
    metrics = ENGINE_SPECS[engine].load_metrics
    assert metrics is not None
    return metrics


VLLM, SGLANG, LLAMA = _metrics_of("vllm"), _metrics_of("sglang"), _metrics_of("llama.cpp")
REFUSED = "its /metrics was not read: 'error ConnectionRefusedError'"


def _load_until(base: str, wanted: tuple[float, float], metrics_name: str = "vllm") -> ReplicaLoad:
    spec = _metrics_of(metrics_name)
    deadline = time.monotonic() + 15
    load = ReplicaLoad(replica="r")
    while time.monotonic() < deadline:
        answer = http(f"{base}/metrics")
        assert answer.status == 200
        load = load_from_metrics("r", spec, answer.body.decode())
        if (load.running, load.waiting) == wanted:
            return load
        time.sleep(0.2)  # each look is a connection left in TIME_WAIT: a few, not hundreds
    raise AssertionError(f"the load never became {wanted}: {load}")


def test_requests_beyond_max_num_seqs_wait_in_vllms_queue_and_its_metrics_say_so(
    engines: Engines,
) -> None:
    port = free_port()
    vllm = engines.start(
        "vllm",
        vllm_args(port, "--max-num-seqs", "2"),
        port,
        {"MODELFLEET_STANDIN_TOKEN_SECONDS": "0.05"},  # some 30 words: 1.5 s an answer
    )
    vllm.wait_healthy()
    idle = _load_until(vllm.base, (0, 0))
    assert idle.kv_use == 0 and idle.note is None

    answers: list[int] = []
    clients = [
        threading.Thread(target=lambda: answers.append(chat(vllm.base, "tiny", "hi").status))
        for _ in range(5)
    ]
    for client in clients:
        client.start()
    busy = _load_until(vllm.base, (2, 3))
    assert busy.kv_use == 1.0  # both slots in use
    for client in clients:
        client.join(30)
    assert answers == [200] * 5
    _load_until(vllm.base, (0, 0))
    # The text itself, as vLLM writes it: gauges labelled model_name and engine.
    text = http(f"{vllm.base}/metrics").body.decode()
    assert "# TYPE vllm:num_requests_waiting gauge" in text
    assert 'vllm:num_requests_running{model_name="tiny",engine="0"} 0.0' in text


def test_sglang_serves_metrics_only_with_enable_metrics(engines: Engines) -> None:
    def start(*extra: str) -> str:
        port = free_port()
        args = ["--model-path", "/m", "--host", LOCALHOST, "--port", str(port),
                "--served-model-name", "big", "--skip-server-warmup", *extra]  # fmt: skip
        engine = engines.start("sglang", args, port)
        engine.wait_healthy()
        return engine.base

    without = start()
    assert http(f"{without}/metrics").status == 404
    with_metrics = start("--enable-metrics", "--max-running-requests", "1")
    load = _load_until(with_metrics, (0, 0), "sglang")
    assert (load.kv_use, load.note) == (0, None)
    assert 'sglang:num_queue_reqs{model_name="big"' in http(f"{with_metrics}/metrics").body.decode()


def test_llama_server_says_501_without_metrics_and_guards_them_with_its_api_key(
    engines: Engines,
) -> None:
    def start(*extra: str) -> str:
        port = free_port()
        args = ["-m", "m.gguf", "--host", LOCALHOST, "--port", str(port), *extra]
        engine = engines.start("llama-server", args, port)
        engine.wait_healthy()
        return engine.base

    without = start()
    answer = http(f"{without}/metrics")
    assert answer.status == 501
    assert "Start it with `--metrics`" in answer.body.decode()
    keyed = start("--metrics", "--parallel", "2", "--api-key", "k")
    assert http(f"{keyed}/metrics").status == 401
    open_one = start("--metrics")
    load = _load_until(open_one, (0, 0), "llama.cpp")
    assert load.kv_use is None
    assert load.note == "this engine has no KV-use gauge"


def test_the_standin_refuses_a_max_num_seqs_below_one(engines: Engines) -> None:
    done = engines.run("vllm", vllm_args(free_port(), "--max-num-seqs", "0"))
    assert done.returncode == 2
    assert "at least 1" in done.stderr


# --------------------------------------------------------------------------- the parser


def test_the_exposition_format_is_read_with_labels_escapes_and_special_values() -> None:
    text = (
        "# HELP x A help line, ignored.\n"
        "# TYPE x gauge\n"
        'x{a="b",c="say \\"hi\\"\\n"} 1.5e1 1700000000000\n'
        "y NaN\n"
        "z +Inf\n"
        "w 3\n"
    )
    exposition = parse_exposition(text)
    assert exposition.bad == 0
    assert exposition.types == {"x": "gauge"}
    [x, y, z, w] = exposition.samples
    assert (x.name, x.labels, x.value) == ("x", (("a", "b"), ("c", 'say \\"hi\\"\\n')), 15.0)
    assert y.value != y.value and z.value == float("inf") and w.value == 3


@pytest.mark.parametrize(
    "line",
    [
        "x 1_000",  # Python's float() takes it; the format does not
        "x infinity",
        'x{a="b" 1',
        "x{a=b} 1",
        'x{a="b"}',
        "9x 1",
        "x 1 2 3",
        "\x1b[31mx 1",
    ],
)
def test_a_line_not_in_the_format_is_counted_and_skipped_never_fatal(line: str) -> None:
    exposition = parse_exposition(f"{line}\nvllm:num_requests_running 4\n")
    assert exposition.bad == 1
    assert [s.name for s in exposition.samples] == ["vllm:num_requests_running"]


def test_a_figure_the_engine_cannot_say_is_unknown_with_its_reason_never_zero() -> None:
    load = load_from_metrics(
        "r",
        VLLM,
        "# TYPE vllm:num_requests_running counter\nvllm:num_requests_running 3\n"
        "vllm:num_requests_waiting -1\nvllm:kv_cache_usage_perc 1.7\nbad line here\n",
    )
    assert (load.running, load.waiting, load.kv_use) == (None, None, None)
    assert load.note is not None
    for said in ("1 line(s) not in the Prometheus text format, first 'bad line here'",
                 "vllm:num_requests_running is a 'counter', not a gauge",
                 "vllm:num_requests_waiting is not a count",
                 "vllm:kv_cache_usage_perc 1.7 is more than 1"):  # fmt: skip
        assert said in load.note
    assert load_from_metrics("r", VLLM, "").note is not None
    assert load_from_metrics("r", VLLM, "x 1\n" * MAX_METRICS_BYTES).running is None


def test_data_parallel_engines_are_summed_and_the_fullest_kv_cache_counts() -> None:
    text = "".join(
        f'vllm:num_requests_running{{model_name="m",engine="{e}"}} {e + 1}\n'
        f'vllm:num_requests_waiting{{model_name="m",engine="{e}"}} {2 * e}\n'
        f'vllm:kv_cache_usage_perc{{model_name="m",engine="{e}"}} {0.25 * (e + 1)}\n'
        for e in range(3)
    )
    load = load_from_metrics("r", VLLM, text)
    assert (load.running, load.waiting, load.kv_use, load.note) == (6, 6, 0.75, None)


def _record(replica: str, rank: int = 0, engine: str = "vllm", port: int = 8000) -> ShardRecord:
    return ShardRecord(replica=replica, model="m", profile="p", rank=rank, engine=engine,
                       port=port)  # fmt: skip


def test_a_node_speaks_only_for_the_replicas_whose_rank_0_it_runs() -> None:
    shards = [_record("chat-1"), _record("big-1", rank=1)]
    text = (
        "replica\tchat-1\t200\n|vllm:num_requests_running 1\n|vllm:num_requests_waiting 2\n"
        "replica\tbig-1\t200\n|vllm:num_requests_running 9\n"
        "replica\tother-1\t200\n|vllm:num_requests_running 9\n"
        "replica\tchat-1\t200\n|vllm:num_requests_running 9\n"
        "garbage\n"
    )
    notes: list[str] = []
    [load] = parse_metrics_section(text, shards, notes)
    assert (load.replica, load.running, load.waiting) == ("chat-1", 1, 2)
    assert notes == [
        "metrics: load of 'big-1' ignored: not a replica whose rank 0 is here",
        "metrics: load of 'other-1' ignored: not a replica whose rank 0 is here",
        "metrics: load of 'chat-1' ignored: reported twice",
        "metrics line 10: not a replica's header 'garbage'",
    ]


def test_an_engine_that_did_not_answer_has_an_unknown_load_that_says_why() -> None:
    text = "replica\ta\t501\n|{}\nreplica\tb\terror\tConnectionRefusedError\n"
    notes: list[str] = []
    a, b = parse_metrics_section(text, [_record("a"), _record("b")], notes)
    assert (a.running, a.note) == (None, "its /metrics answered HTTP 501")
    assert (b.running, b.note) == (None, REFUSED)
    assert notes == []


# --------------------------------------------------------------------------- the real probe


def _run_probe(shard_dir: Path, path: str = "/usr/bin:/bin") -> str:
    done = subprocess.run(
        ["sh", "-s", "--", str(shard_dir / "no-store")],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        env={**os.environ, "MODELFLEET_SHARD_DIR": str(shard_dir), "PATH": path},
        timeout=60,
        check=True,
    )
    return done.stdout


def _write_record(shard_dir: Path, replica: str, port: int, engine: str = "vllm") -> None:
    shard_dir.mkdir(exist_ok=True)
    record = _record(replica, engine=engine, port=port)
    (shard_dir / f"{replica}-rank0.json").write_text(record.model_dump_json())


def test_the_real_probe_asks_each_local_engine_over_loopback(
    engines: Engines, tmp_path: Path
) -> None:
    port = free_port()
    vllm = engines.start(
        "vllm", vllm_args(port, "--max-num-seqs", "1"), port,
        {"MODELFLEET_STANDIN_TOKEN_SECONDS": "0.1"},
    )  # fmt: skip
    vllm.wait_healthy()
    shards = tmp_path / "shards"
    _write_record(shards, "tiny-1", port)
    _write_record(shards, "gone-1", free_port())  # nothing listens there
    clients = [threading.Thread(target=chat, args=(vllm.base, "tiny", "hi")) for _ in range(3)]
    for client in clients:
        client.start()
    _load_until(vllm.base, (1, 2))
    facts = facts_from_probe(_run_probe(shards), NOW)
    for client in clients:
        client.join(30)
    assert facts.replica_load is not None, facts.notes
    loads = {load.replica: load for load in facts.replica_load}
    assert (loads["tiny-1"].running, loads["tiny-1"].waiting, loads["tiny-1"].kv_use) == (1, 2, 1)
    gone = loads["gone-1"]
    assert (gone.running, gone.note) == (None, REFUSED)


def test_the_real_probe_asks_an_engine_where_its_record_says_it_listens(
    engines: Engines, tmp_path: Path
) -> None:
    # ctl starts engines on the node's listen_address where the inventory gives one (the
    # test fleet's nodes all have one); such an engine does not answer on 127.0.0.1, and
    # its load was unknown: the autoscaler held every model with "load unknown".
    port, address = free_port(), "127.0.0.2"
    vllm = engines.start("vllm", vllm_args(port, "--host", address), port)
    wait_for("its /health", lambda: probe(f"http://{address}:{port}/health") == 200, 30)
    shards = tmp_path / "shards"
    shards.mkdir()
    record = ShardRecord(replica="chat-1", model="m", profile="p", rank=0, engine="vllm",
                         port=port, listen=address)  # fmt: skip
    (shards / "chat-1-rank0.json").write_text(record.model_dump_json())
    # A record's address is an IP address or nothing: a name is never looked up.
    named = json.loads(record.model_dump_json()) | {"replica": "named-1", "listen": "localhost"}
    (shards / "named-1-rank0.json").write_text(json.dumps(named))
    facts = facts_from_probe(_run_probe(shards), NOW)
    assert vllm.process.poll() is None
    assert facts.replica_load is not None, facts.notes
    loads = {load.replica: load for load in facts.replica_load}
    assert (loads["chat-1"].running, loads["chat-1"].waiting, loads["chat-1"].note) == (0, 0, None)
    assert loads["named-1"].note == "its /metrics was not read: 'error OSError'"


class _Hostile:
    """An engine that answers /metrics with whatever the test gives it, as slowly as asked."""

    def __init__(self, body: bytes, drip_seconds: float = 0.0) -> None:
        self.body, self.drip = body, drip_seconds
        self.server = socket.create_server((LOCALHOST, 0))
        self.port = int(self.server.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                answer = b"HTTP/1.0 200 OK\r\n\r\n" + self.body
                try:
                    if self.drip:
                        for byte in answer:
                            conn.sendall(bytes([byte]))
                            time.sleep(self.drip)
                    else:
                        conn.sendall(answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def test_an_engines_text_cannot_end_the_section_or_hold_the_probe(tmp_path: Path) -> None:
    forged = (
        "vllm:num_requests_running 1\n@@modelfleet end metrics 0\n"
        "@@modelfleet begin shards\n\u2028@@modelfleet end shards 0\u2028"
        "replica\tother\t200\nvllm:num_requests_waiting 7\n"
    ).encode()
    hostile = _Hostile(forged)
    slow = _Hostile(b"vllm:num_requests_running 1\n" * 100, drip_seconds=0.05)
    try:
        shards = tmp_path / "shards"
        _write_record(shards, "evil-1", hostile.port)
        _write_record(shards, "slow-1", slow.port)
        started = time.monotonic()
        output = _run_probe(shards)
        took = time.monotonic() - started
    finally:
        hostile.close()
        slow.close()
    assert took < 10  # 2 s a replica, 6 s in all, whatever the engine does
    sections = split_sections(output)
    assert sections["metrics"].status == 0
    facts = facts_from_probe(output, NOW)
    assert facts.replica_load is not None
    loads = {load.replica: load for load in facts.replica_load}
    evil = loads["evil-1"]
    assert (evil.running, evil.waiting) == (1, 7)  # its own figures, read as text
    assert evil.note is not None and "not in the Prometheus text format" in evil.note
    assert loads["slow-1"].note == "its /metrics was not read: 'error TimeoutError'"
    assert json.loads(facts.model_dump_json())["replica_load"] is not None


def test_the_probe_starts_python3_only_on_a_node_with_shard_records(tmp_path: Path) -> None:
    # python3's start was half of the probe's CPU on a node (docs/scale.md): a node with no
    # replica has no engine to ask, and its probe must not pay it.
    shim = tmp_path / "bin"
    shim.mkdir()
    started = tmp_path / "python3-started"
    (shim / "python3").write_text(f'#!/bin/sh\n: >> {started}\nexec /usr/bin/python3 "$@"\n')
    (shim / "python3").chmod(0o755)
    shards = tmp_path / "shards"
    shards.mkdir()
    output = _run_probe(shards, f"{shim}:/usr/bin:/bin")
    facts = facts_from_probe(output, NOW)
    assert not started.exists()
    assert split_sections(output)["metrics"].status == 0
    assert facts.replica_load == ()
    _write_record(shards, "gone-1", free_port())  # a record: now its engine is asked
    output = _run_probe(shards, f"{shim}:/usr/bin:/bin")
    assert started.exists()
    loads = facts_from_probe(output, NOW).replica_load
    assert loads is not None and [load.replica for load in loads] == ["gone-1"]


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/facts/sections/load.py: the bounds on
# a body's size, lines and note, and the lines a report or body may hold between its figures.

GAUGES = [
    "vllm:num_requests_running 1",
    "vllm:num_requests_waiting 2",
    "vllm:kv_cache_usage_perc 0.5",
]


def test_a_body_of_20000_lines_is_read_whole_and_past_them_nothing_is_read() -> None:
    whole = "\n".join(["# c"] * (20_000 - len(GAUGES)) + GAUGES)
    load = load_from_metrics("r", VLLM, whole)
    assert (load.running, load.waiting, load.kv_use, load.note) == (1, 2, 0.5, None)

    load = load_from_metrics("r", VLLM, "# c\n" + whole)
    assert (load.running, load.waiting, load.kv_use) == (1, 2, None)
    assert load.note == "read only its first 20,000 lines; no vllm:kv_cache_usage_perc"


def test_a_body_of_256_kib_is_read_and_one_character_more_is_not() -> None:
    figures = "\n".join(GAUGES) + "\n"
    padding = MAX_METRICS_BYTES - len(figures)
    body = figures + "\n".join(["#" + "c" * 99] * (padding // 101)) + "\n"
    body += "#" * (MAX_METRICS_BYTES - len(body))
    assert len(body) == MAX_METRICS_BYTES == 262_144

    assert load_from_metrics("r", VLLM, body).note is None
    assert load_from_metrics("r", VLLM, body + "#") == ReplicaLoad(
        replica="r", note="/metrics is larger than 262,144"
    )


def test_blank_lines_between_samples_end_nothing_and_bad_lines_are_all_counted() -> None:
    exposition = parse_exposition("a 1\n\n\nb 2\n")
    assert [s.name for s in exposition.samples] == ["a", "b"]
    assert (exposition.bad, exposition.first_bad, exposition.cut) == (0, None, False)

    exposition = parse_exposition("x 1_000\na 1\ny z\n")
    assert (exposition.bad, exposition.first_bad) == (2, "x 1_000")


def test_a_body_of_exactly_the_line_bound_is_read_whole_and_one_line_more_is_cut() -> None:
    whole = parse_exposition("a 1\n" * MAX_METRICS_LINES)
    assert (len(whole.samples), whole.cut) == (MAX_METRICS_LINES, False)
    unended = parse_exposition("\n".join(["a 1"] * MAX_METRICS_LINES))
    assert (len(unended.samples), unended.cut) == (MAX_METRICS_LINES, False)
    over = parse_exposition("a 1\n" * (MAX_METRICS_LINES + 1))
    assert (len(over.samples), over.cut) == (MAX_METRICS_LINES, True)


def test_a_declared_type_is_shown_in_at_most_20_characters() -> None:
    text = "# TYPE vllm:num_requests_running abcdefghijklmnopqrstu\n" + "\n".join(GAUGES)

    load = load_from_metrics("r", VLLM, text)

    assert load.running is None
    assert load.note == "vllm:num_requests_running is a 'abcdefghijklmnopq...', not a gauge"


def test_a_note_saying_every_trouble_at_once_is_cut_to_512_characters() -> None:
    text = "\n".join(
        ["\x01" * 80]
        + [f"# TYPE {name} {'x' * 30}" for name in (VLLM.running, VLLM.waiting, VLLM.kv_use)]
        + ["# c"] * 20_000
    )

    load = load_from_metrics("r", VLLM, text)

    assert load.note is not None and len(load.note) == 512
    assert load.note.startswith("1 line(s) not in the Prometheus text format, first '\\x01")


def test_bodies_of_many_lines_and_blank_lines_between_reports_are_read() -> None:
    text = (
        "replica\ta\t200\n|vllm:num_requests_running 1\n|vllm:num_requests_waiting 2\n"
        "\n"
        "replica\tb\t200\n|vllm:num_requests_running 3\n|vllm:num_requests_waiting 4\n"
    )
    notes: list[str] = []
    a, b = parse_metrics_section(text, [_record("a"), _record("b")], notes)
    assert (a.running, a.waiting, b.running, b.waiting) == (1, 2, 3, 4)


def test_a_body_too_large_to_send_is_said_as_the_probe_said_it() -> None:
    notes: list[str] = []
    (load,) = parse_metrics_section("replica\ta\ttoo-large\n", [_record("a")], notes)
    assert load == ReplicaLoad(replica="a", note="its /metrics was not read: 'too-large '")


def test_an_engine_ctl_knows_no_metrics_of_has_an_unknown_load_and_the_next_is_read() -> None:
    text = "replica\ta\t200\n|tgi_queue_size 1\nreplica\tb\t200\n|vllm:num_requests_running 3\n"
    notes: list[str] = []

    a, b = parse_metrics_section(text, [_record("a", engine="tgi"), _record("b")], notes)

    assert a == ReplicaLoad(replica="a", note="no known metrics")
    assert (b.replica, b.running) == ("b", 3)
    assert notes == []
