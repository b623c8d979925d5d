"""The stand-in engine (tests/fakes/engine.py), started as ctl starts the real ones.

Each test runs it as subprocesses on 127.0.0.1, on free ports, with a 0.2 s load: as
`vllm` and `llama-server` (copies under those names, so that it tells which engine to be
from its name) and as `python -m sglang.launch_server` (a copy in a temporary package).
The engine is never imported: every check goes through its command line, its HTTP API,
its exit code and its stderr log, which is what ctl and the fleet tests see.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import pytest

from tests.fakes.hub import run_hub

ENGINE = Path(__file__).resolve().parents[2] / "fakes" / "engine.py"
FLAG_DATA = Path(__file__).resolve().parents[3] / "cli" / "engines" / "engine_flags"
HOSTNAME = socket.gethostname()
LOCALHOST = "127.0.0.1"
# No proxy from the environment may come between the tests and 127.0.0.1.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Answer:
    status: int
    body: bytes

    def json(self) -> dict[str, object]:
        return cast(dict[str, object], json.loads(self.body))


def http(url: str, payload: object | None = None, timeout: float = 10.0) -> Answer:
    data = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with OPENER.open(request, timeout=timeout) as response:
            return Answer(response.status, response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read())


def probe(url: str) -> int | None:
    """The status of GET url, or None when nothing accepts the connection."""
    try:
        return http(url, timeout=2.0).status
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return None
        raise


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)


def health_until_ok(base: str, timeout: float = 10.0) -> list[int | None]:
    """Every /health status seen from now until the first 200 (None: refused)."""
    seen: list[int | None] = []
    deadline = time.monotonic() + timeout
    while not seen or seen[-1] != 200:
        if time.monotonic() > deadline:
            raise AssertionError(f"/health never said 200; it said {seen[-5:]}")
        seen.append(probe(f"{base}/health"))
        time.sleep(0.01)
    return seen


def content_of(answer: Answer) -> str:
    [choice] = cast(list[dict[str, object]], answer.json()["choices"])
    return cast(dict[str, str], choice["message"])["content"]


def chat(base: str, model: str, text: str) -> Answer:
    return http(
        f"{base}/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": text}]},
    )


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    port: int

    @property
    def base(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    def events(self) -> list[dict[str, object]]:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [
            cast(dict[str, object], json.loads(line.removeprefix("standin: ")))
            for line in lines
            if line.startswith("standin: {")
        ]

    def event_names(self) -> list[str]:
        return [str(event["event"]) for event in self.events()]

    def event(self, name: str) -> dict[str, object]:
        return next(event for event in self.events() if event["event"] == name)

    def wait_event(self, name: str, timeout: float = 10.0) -> None:
        wait_for(f"the {name!r} event", lambda: name in self.event_names(), timeout)

    def wait_healthy(self, timeout: float = 10.0) -> None:
        wait_for("/health to say 200", lambda: probe(f"{self.base}/health") == 200, timeout)

    def debug(self) -> dict[str, object]:
        return http(f"{self.base}/debug/standin").json()


MODEL_FILES = ("m.gguf", "models/smol.gguf", "models/e.gguf", "models/tiny.gguf")


@dataclass
class Engines:
    """The programs as a node has them, and the processes started from them."""

    root: Path
    running: list[Running] = field(default_factory=list)

    def __post_init__(self) -> None:
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        for name in ("vllm", "llama-server"):
            shutil.copy(ENGINE, bin_dir / name)
        package = self.root / "site" / "sglang"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        shutil.copy(ENGINE, package / "launch_server.py")
        # The real parsers' options, installed beside it as on a test-fleet node.
        shutil.copytree(FLAG_DATA, self.root / "engine_flags")
        # The model files the tests give llama-server (paths relative to the engines'
        # working directory, the root): the stand-in refuses one it cannot open.
        (self.root / "models").mkdir()
        for name in MODEL_FILES:
            (self.root / name).write_bytes(b"GGUF")

    def command(self, engine: str) -> list[str]:
        if engine == "sglang":
            return [sys.executable, "-m", "sglang.launch_server"]
        return [sys.executable, str(self.root / "bin" / engine)]

    def environment(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("MODELFLEET_", "CUDA_", "NCCL_"))
        }
        env.update(
            MODELFLEET_STANDIN_LOAD_SECONDS="0.2",
            MODELFLEET_STANDIN_SGLANG_HEALTH_SECONDS="0.05",
            MODELFLEET_STANDIN_RENDEZVOUS_SECONDS="10",
            MODELFLEET_STANDIN_CONFIG=str(self.root / "no-config.json"),
            PYTHONPATH=str(self.root / "site"),
            MODELFLEET_STANDIN_FLAGS=str(self.root / "engine_flags"),
        )
        env.update(extra or {})
        return env

    def start(
        self,
        engine: str,
        args: Sequence[str],
        port: int = 0,
        env: dict[str, str] | None = None,
        name: str = "engine",
    ) -> Running:
        log_path = self.root / f"{name}-{len(self.running)}.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            [*self.command(engine), *args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(env),
            cwd=self.root,
        )
        running = Running(process, log_path, log_file, port)
        self.running.append(running)
        return running

    def run(self, engine: str, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command(engine), *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=self.environment(None),
            cwd=self.root,
            check=False,
        )

    def close(self) -> None:
        for running in self.running:
            if running.process.poll() is None:
                running.process.kill()
                running.process.wait(timeout=10)
            running.log_file.close()


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    fleet = Engines(tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


def vllm_args(port: int, *extra: str) -> list[str]:
    """`vllm serve` as ctl writes it (cli/shards/engines.py)."""
    return [
        "serve", "/models/tiny-llama",
        "--host", LOCALHOST,
        "--port", str(port),
        "--served-model-name", "tiny",
        "--tensor-parallel-size", "2",
        "--pipeline-parallel-size", "1",
        *extra,
    ]  # fmt: skip


def test_single_node_vllm_listens_only_once_loaded_then_answers_health_models_and_chat(
    engines: Engines,
) -> None:
    port = free_port()
    gpus = {"CUDA_VISIBLE_DEVICES": "2,3", "NCCL_IB_HCA": "=mlx5_1"}
    args = vllm_args(port, "--max-model-len", "2048", "--shutdown-timeout", "5")
    extra = ["--enable-prefix-caching", "--kv-cache-dtype", "fp8"]  # not the stand-in's
    vllm = engines.start("vllm", [*args, *extra], port, gpus)

    vllm.wait_event("loading")
    assert probe(f"{vllm.base}/health") is None  # bound, not listening, as vLLM while loading
    vllm.wait_healthy()
    health = http(f"{vllm.base}/health")
    assert (health.status, health.body) == (200, b"")  # vLLM's /health has no body

    models = http(f"{vllm.base}/v1/models").json()
    assert models["object"] == "list"
    [card] = cast(list[dict[str, object]], models["data"])
    assert (card["id"], card["owned_by"], card["root"]) == ("tiny", "vllm", "/models/tiny-llama")
    assert card["max_model_len"] == 2048

    answer = chat(vllm.base, "tiny", "hello there")
    assert answer.status == 200
    completion = answer.json()
    assert (completion["object"], completion["model"]) == ("chat.completion", "tiny")
    [choice] = cast(list[dict[str, object]], completion["choices"])
    message = cast(dict[str, str], choice["message"])
    assert (message["role"], choice["finish_reason"]) == ("assistant", "stop")
    assert "tiny" in message["content"]
    assert HOSTNAME in message["content"]
    usage = cast(dict[str, int], completion["usage"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0

    debug = vllm.debug()
    assert (debug["personality"], debug["invoked_as"], debug["rank"]) == ("vllm", "vllm", 0)
    assert cast(dict[str, object], debug["options"])["tensor_parallel_size"] == 2
    assert debug["unknown_args"] == extra
    env = cast(dict[str, str | None], debug["env"])
    assert (env["CUDA_VISIBLE_DEVICES"], env["NCCL_IB_HCA"]) == ("2,3", "=mlx5_1")

    start = vllm.event("start")
    assert cast(list[str], start["argv"])[1:] == [*args, *extra]
    assert cast(dict[str, str | None], start["env"])["NCCL_IB_HCA"] == "=mlx5_1"
    names = vllm.event_names()
    assert names.index("loaded") < names.index("listening") < names.index("ready")
    assert "request" in names


def test_vllm_refuses_a_model_name_it_does_not_serve_with_an_openai_404(
    engines: Engines,
) -> None:
    port = free_port()
    vllm = engines.start("vllm", vllm_args(port, "--shutdown-timeout", "5"), port)
    vllm.wait_healthy()

    answer = chat(vllm.base, "gpt-4o", "hello")

    assert answer.status == 404
    error = cast(dict[str, object], answer.json()["error"])
    assert error == {
        "message": "The model `gpt-4o` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


def test_llama_server_says_503_loading_model_until_loaded_then_serves_its_alias(
    engines: Engines,
) -> None:
    port = free_port()
    args = [
        "-m", "models/smol.gguf",
        "--host", LOCALHOST,
        "--port", str(port),
        "--alias", "smol",
        "--threads", "4",
        "--ctx_size", "8192",  # common/arg.cpp reads "_" in a "--" name as "-"
        "--n-gpu-layers", "999",
    ]  # fmt: skip
    llama = engines.start("llama-server", args, port)

    seen = health_until_ok(llama.base)
    assert 503 in seen  # it listens at once, and says so while loading
    assert seen.index(503) < seen.index(200)
    llama.wait_event("ready")
    assert http(f"{llama.base}/health").json() == {"status": "ok"}

    [card] = cast(list[dict[str, object]], http(f"{llama.base}/v1/models").json()["data"])
    assert (card["id"], card["owned_by"]) == ("smol", "llamacpp")

    # Single-model mode: whatever model is asked for, the one loaded answers.
    answer = chat(llama.base, "gpt-3.5-turbo", "hi")
    assert answer.status == 200
    assert "smol" in content_of(answer)
    assert HOSTNAME in content_of(answer)

    debug = llama.debug()
    assert (debug["personality"], debug["invoked_as"]) == ("llama-server", "llama-server")
    options = cast(dict[str, object], debug["options"])
    assert (options["threads"], options["ctx_size"], options["n_gpu_layers"]) == (4, 8192, "999")
    assert debug["unknown_args"] == []


def test_sglang_runs_as_python_m_sglang_launch_server_and_is_healthy_after_its_warmup(
    engines: Engines,
) -> None:
    port = free_port()
    args = [
        "--model-path", "/models/big",
        "--host", LOCALHOST,
        "--port", str(port),
        "--served-model-name", "big",
        "--tp", "2",
        "--pp-size", "2",
        "--context-length", "4096",
    ]  # fmt: skip
    sglang = engines.start("sglang", args, port)

    seen = health_until_ok(sglang.base)
    assert seen[0] is None  # not listening while loading
    assert 503 in seen  # listening, warming up
    health = http(f"{sglang.base}/health")
    assert (health.status, health.body) == (200, b"")

    debug = sglang.debug()
    assert (debug["personality"], debug["invoked_as"]) == (
        "sglang",
        "python3 -m sglang.launch_server",
    )
    assert (debug["tensor_parallel"], debug["pipeline_parallel"]) == (2, 2)

    [card] = cast(list[dict[str, object]], http(f"{sglang.base}/v1/models").json()["data"])
    assert (card["id"], card["owned_by"], card["max_model_len"]) == ("big", "sglang", 4096)
    answer = chat(sglang.base, "big", "hello")
    assert answer.status == 200
    text = json.dumps(answer.json())
    assert "big answered from" in text
    assert HOSTNAME in text


def test_a_two_rank_vllm_replica_serves_only_once_rank_1_joins_and_dies_with_it(
    engines: Engines,
) -> None:
    port, master_port = free_port(), free_port()
    multi = [
        "--nnodes", "2",
        "--master-addr", LOCALHOST,
        "--master-port", str(master_port),
    ]  # fmt: skip
    args = vllm_args(port, "--shutdown-timeout", "5", *multi)
    rank0 = engines.start("vllm", [*args, "--node-rank", "0"], port, name="rank0")

    rank0.wait_event("waiting-for-ranks")
    time.sleep(0.5)  # more than the load time: alone, rank 0 must not get ready
    assert rank0.process.poll() is None
    assert probe(f"{rank0.base}/health") is None
    assert "ready" not in rank0.event_names()

    rank1 = engines.start("vllm", [*args, "--node-rank", "1", "--headless"], name="rank1")
    rank0.wait_healthy()
    workers = cast(list[dict[str, object]], rank0.debug()["workers"])
    assert [(w["rank"], w["hostname"]) for w in workers] == [(1, HOSTNAME)]
    assert "2 node(s)" in json.dumps(chat(rank0.base, "tiny", "hello").json())
    rank1.wait_event("ready")
    assert "listening" not in rank1.event_names()  # --headless: no API on rank 1

    rank1.process.kill()  # a dead shard

    assert rank0.process.wait(timeout=5) == 1
    assert "lost rank 1" in str(rank0.event("fatal")["reason"])


def test_sglang_rank_1_answers_its_own_health_and_exits_non_zero_when_rank_0_goes_away(
    engines: Engines,
) -> None:
    port0, port1, dist_port = free_port(), free_port(), free_port()

    def args(port: int, rank: int) -> list[str]:
        return [
            "--model-path", "/models/big",
            "--host", LOCALHOST,
            "--port", str(port),
            "--served-model-name", "big",
            "--tp", "1",
            "--pp-size", "2",
            "--nnodes", "2",
            "--node-rank", str(rank),
            "--dist-init-addr", f"{LOCALHOST}:{dist_port}",
        ]  # fmt: skip

    rank1 = engines.start("sglang", args(port1, 1), port1, name="rank1")  # rank 1 first: it retries
    time.sleep(0.3)
    rank0 = engines.start("sglang", args(port0, 0), port0, name="rank0")
    rank0.wait_healthy()
    rank1.wait_healthy()  # SGLang's ranks past 0 serve a dummy /health

    rank0.process.kill()

    assert rank1.process.wait(timeout=5) == 1
    assert "lost rank 0" in str(rank1.event("fatal")["reason"])


def test_vllm_accepts_headless_on_node_rank_0_and_serves_no_http(engines: Engines) -> None:
    # vllm/entrypoints/cli/serve.py ServeSubcommand.cmd runs run_headless for --headless on
    # any rank, rank 0 included (data-parallel headless engines): no API server, exit 0.
    port = free_port()
    headless = engines.start("vllm", vllm_args(port, "--headless"), name="headless")

    headless.wait_event("ready")
    assert headless.process.poll() is None
    assert "listening" not in headless.event_names()
    assert probe(f"http://{LOCALHOST}:{port}/health") is None

    headless.process.send_signal(signal.SIGTERM)
    assert headless.process.wait(timeout=5) == 0


def test_a_rank_that_cannot_reach_rank_0_gives_up_like_a_failed_nccl_init(
    engines: Engines,
) -> None:
    port, master_port = free_port(), free_port()
    multi = ["--nnodes", "2", "--node-rank", "1", "--headless"]
    rendezvous = ["--master-addr", LOCALHOST, "--master-port", str(master_port)]
    rank1 = engines.start(
        "vllm",
        vllm_args(port, *multi, *rendezvous),
        env={"MODELFLEET_STANDIN_RENDEZVOUS_SECONDS": "1"},
    )

    assert rank1.process.wait(timeout=10) == 1
    assert "cannot reach rank 0" in str(rank1.event("rendezvous-failed")["reason"])


def test_sigterm_lets_a_request_in_flight_finish_refuses_new_ones_and_exits_zero(
    engines: Engines,
) -> None:
    port = free_port()
    vllm = engines.start("vllm", vllm_args(port, "--shutdown-timeout", "10"), port)
    vllm.wait_healthy()
    answers: list[Answer] = []
    asking = threading.Thread(target=lambda: answers.append(chat(vllm.base, "tiny", "sleep 2")))
    asking.start()
    wait_for("the request to be in flight", lambda: vllm.debug()["in_flight"] == 1)

    vllm.process.send_signal(signal.SIGTERM)
    vllm.wait_event("drain")

    assert probe(f"{vllm.base}/health") == 200  # vLLM's /health says 200 while it drains
    refused = http(f"{vllm.base}/v1/chat/completions", {"model": "tiny", "messages": []})
    assert refused.status == 503
    assert vllm.process.poll() is None  # still draining
    asking.join(timeout=10)
    [answer] = answers
    assert answer.status == 200
    assert "tiny answered from" in json.dumps(answer.json())
    assert vllm.process.wait(timeout=10) == 0
    names = vllm.event_names()
    assert names.index("drain") < names.index("drained") < names.index("exit")


def test_vllm_without_a_shutdown_timeout_aborts_requests_in_flight_on_sigterm(
    engines: Engines,
) -> None:
    port = free_port()
    vllm = engines.start("vllm", vllm_args(port), port)  # --shutdown-timeout defaults to 0
    vllm.wait_healthy()
    answers: list[Answer] = []
    asking = threading.Thread(target=lambda: answers.append(chat(vllm.base, "tiny", "sleep 30")))
    asking.start()
    wait_for("the request to be in flight", lambda: vllm.debug()["in_flight"] == 1)

    vllm.process.send_signal(signal.SIGTERM)

    asking.join(timeout=5)
    [answer] = answers
    assert answer.status == 500
    assert vllm.process.wait(timeout=5) == 0


def test_sglang_refuses_a_bare_ipv6_rendezvous_address_as_it_starts(engines: Engines) -> None:
    # NetworkAddress.parse (sglang/srt/utils/network.py, 0.5.23), from the distributed
    # bootstrap: a ValueError once the arguments are parsed, so exit 1, not argparse's 2.
    args = ["--model-path", "m", "--nnodes", "2", "--dist-init-addr", "fd00::1:18000"]
    result = engines.run("sglang", args)

    assert result.returncode == 1
    assert "Use [fd00::1]:18000 instead" in result.stderr
    assert '"event": "start"' not in result.stderr


@pytest.mark.parametrize(
    ("engine", "args", "code"),
    [
        ("vllm", ["serve", "m", "--port"], 2),
        ("vllm", ["serve", "m", "--port", "eighty"], 2),
        ("vllm", ["bench", "m"], 2),
        ("sglang", ["--host", LOCALHOST], 2),  # no --model-path
        ("sglang", ["--model-path", "m", "--pp", "2"], 2),  # ambiguous, as argparse says
        ("sglang", ["--model-path", "m", "--nnodes", "2"], 2),  # no --dist-init-addr
        ("llama-server", ["-m", "m.gguf", "--port", "x"], 1),  # llama-server's own code
        ("llama-server", ["--port", "8080"], 1),  # no model
        ("llama-server", ["-m", "m.gguf", "--port=8080"], 1),  # names only whole, no `=`
    ],
)
def test_bad_command_lines_exit_with_the_code_of_the_real_parser(
    engines: Engines, engine: str, args: list[str], code: int
) -> None:
    result = engines.run(engine, args)

    assert result.returncode == code
    assert "error" in result.stderr
    assert '"event": "start"' not in result.stderr


def test_the_engine_to_be_comes_from_the_name_it_is_started_by(engines: Engines) -> None:
    anonymous = subprocess.run(
        [sys.executable, str(ENGINE), "serve", "m"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert anonymous.returncode == 2
    assert "cannot tell which engine to be" in anonymous.stderr

    version = engines.run("vllm", ["--version"])
    assert (version.returncode, version.stdout.strip()) == (0, "0.0.0+modelfleet.standin")

    # Tests may say which engine to be instead; the flag never reaches the engine's parser.
    told = subprocess.run(
        [sys.executable, str(ENGINE), "--version", "--personality", "llama-server"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (told.returncode, told.stdout) == (0, "")
    assert told.stderr.startswith("version: ")  # llama-server prints it on stderr


@pytest.mark.parametrize(
    ("engine", "args", "code", "said"),
    [
        (
            "vllm",
            ["serve", "m", "--task", "embed"],
            2,
            ["unrecognized arguments: --task embed", "Hint: --task is not a vllm serve option"],
        ),
        ("vllm", ["serve", "m", "--max-model-lenn", "9"], 2, ["unrecognized arguments"]),
        ("sglang", ["--model-path", "m", "--enforce-eager"], 2, ["unrecognized arguments"]),
        ("llama-server", ["-m", "m.gguf", "--no-mmap"], 1, ["invalid argument: --no-mmap"]),
    ],
)
def test_an_option_the_real_parser_lacks_is_refused_as_the_real_engine_refuses_it(
    engines: Engines, engine: str, args: list[str], code: int, said: list[str]
) -> None:
    result = engines.run(engine, args)

    assert result.returncode == code
    for text in said:
        assert text in result.stderr
    assert '"event": "start"' not in result.stderr


@pytest.mark.parametrize(
    ("engine", "args", "code", "said"),
    [
        (
            "vllm",
            ["serve", "m", "--runner", "embed"],
            2,
            ["vllm serve: error: argument --runner: invalid choice: 'embed'", "pooling"],
        ),
        ("vllm", ["serve", "m", "--seed=abc"], 2, ["argument --seed: invalid int value: 'abc'"]),
        (
            "vllm",  # optional_type(int): "" and None are None, the rest must be an int
            ["serve", "m", "--max-log-len", "None", "--max-cpu-loras", "x"],
            2,
            ["argument --max-cpu-loras: Value x cannot be converted to <class 'int'>."],
        ),
        ("vllm", ["serve", "m", "--runner"], 2, ["argument --runner: expected one argument"]),
        ("sglang", ["--model-path", "m", "--dtype", "fp7"], 2, ["invalid choice: 'fp7'"]),
        (
            "llama-server",
            ["-m", "m.gguf", "-ngl", "all", "--n-gpu-layers", "abc"],
            1,
            ['error while handling argument "--n-gpu-layers": stoi', "to show complete usage"],
        ),
        ("llama-server", ["-m", "m.gguf", "-c", "3000000000"], 1, ['"-c": stoi']),
        ("llama-server", ["-m", "m.gguf", "-ngl"], 1, ["expected value for argument"]),
    ],
)  # fmt: skip
def test_a_value_the_real_parser_refuses_is_refused_with_its_message(
    engines: Engines, engine: str, args: list[str], code: int, said: list[str]
) -> None:
    """Values of options the stand-in does not simulate, checked from the data of
    scripts/engine_flags.py as the real parsers check them (issue 31, point 7)."""
    result = engines.run(engine, args)

    assert result.returncode == code
    for text in said:
        assert text in result.stderr
    assert '"event": "start"' not in result.stderr


def test_values_the_real_parser_takes_are_taken(engines: Engines) -> None:
    port = free_port()
    args = vllm_args(port, "--convert", "embed", "--seed", "-1", "--max-log-len", "None")
    vllm = engines.start("vllm", args, port)
    vllm.wait_healthy()
    assert vllm.debug()["unknown_args"] == [
        "--convert", "embed", "--seed", "-1", "--max-log-len", "None",
    ]  # fmt: skip
    port = free_port()
    llama = ["-m", "m.gguf", "--port", str(port), "-ngl", "auto", "-c", "4096tokens"]
    engines.start("llama-server", llama, port).wait_healthy()  # std::stoi reads "4096"


def test_options_the_real_parser_has_are_taken_and_argparse_abbreviations_expanded(
    engines: Engines,
) -> None:
    port = free_port()
    args = ["--model-path", "m", "--host", LOCALHOST, "--port", str(port), "--tp", "2"]
    sglang = engines.start("sglang", [*args, "--random-seed", "7", "--skip-server-warmup"], port)
    sglang.wait_healthy()
    debug = sglang.debug()
    assert debug["tensor_parallel"] == 2  # --tp, argparse's abbreviation of --tp-size
    assert debug["unknown_args"] == ["--random-seed", "7"]  # real, not simulated


def test_the_standins_own_flags_are_every_one_an_option_of_the_real_parser() -> None:
    from tests.fakes import engine

    for personality, flags in (
        ("vllm", engine.VLLM_FLAGS),
        ("sglang", engine.SGLANG_FLAGS),
        ("llama-server", engine.LLAMA_FLAGS),
    ):
        accepted = engine.accepted_options(personality)  # type: ignore[arg-type]
        assert [name for flag in flags for name in flag.names if name not in accepted] == []


def test_without_the_option_data_the_standin_refuses_to_start(engines: Engines) -> None:
    empty = engines.root / "no-flags"
    empty.mkdir()
    result = subprocess.run(
        [*engines.command("vllm"), "serve", "m"],
        capture_output=True, text=True, timeout=30, check=False,
        env={**engines.environment(None), "MODELFLEET_STANDIN_FLAGS": str(empty)},
    )  # fmt: skip
    assert result.returncode == 2
    assert "no option data for vllm" in result.stderr


def sglang_args(port: int, *extra: str) -> list[str]:
    return [
        "--model-path", "/models/big", "--host", LOCALHOST, "--port", str(port),
        "--served-model-name", "big", "--tp-size", "1", *extra,
    ]  # fmt: skip


def test_sglang_keeps_taking_new_requests_while_it_drains_and_says_503_on_health(
    engines: Engines,
) -> None:
    port = free_port()
    sglang = engines.start("sglang", sglang_args(port, "--skip-server-warmup"), port)
    sglang.wait_healthy()
    answers: list[Answer] = []
    asking = threading.Thread(target=lambda: answers.append(chat(sglang.base, "big", "sleep 2")))
    asking.start()
    wait_for("the request to be in flight", lambda: sglang.debug()["in_flight"] == 1)

    sglang.process.send_signal(signal.SIGTERM)
    sglang.wait_event("drain")

    assert probe(f"{sglang.base}/health") == 503
    late = chat(sglang.base, "big", "hello after SIGTERM")
    assert late.status == 200  # taken and answered while draining
    asking.join(timeout=10)
    assert [a.status for a in answers] == [200]
    assert sglang.process.wait(timeout=15) == 0


def test_sglang_rank_1_ignores_sigterm_until_rank_0_stops_the_replica(
    engines: Engines,
) -> None:
    port0, port1, dist_port = free_port(), free_port(), free_port()
    multi = ["--nnodes", "2", "--dist-init-addr", f"{LOCALHOST}:{dist_port}"]
    rank0 = engines.start("sglang", sglang_args(port0, *multi, "--node-rank", "0"), port0)
    rank1 = engines.start("sglang", sglang_args(port1, *multi, "--node-rank", "1"), port1)
    rank0.wait_healthy()
    rank1.wait_event("ready")

    rank1.process.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert rank1.process.poll() is None  # waits for rank 0's broadcast
    assert probe(f"{rank0.base}/health") == 200

    rank0.process.send_signal(signal.SIGTERM)
    assert rank0.process.wait(timeout=15) == 0
    assert rank1.process.wait(timeout=10) == 0
    assert "rank 0 stopped" in str(rank1.event("shutdown")["reason"])


def test_llama_server_does_not_drain_and_dies_by_sigterm_while_loading(
    engines: Engines,
) -> None:
    port = free_port()
    args = ["-m", "m.gguf", "--host", LOCALHOST, "--port", str(port), "--alias", "tiny"]
    llama = engines.start("llama-server", args, port)
    llama.wait_healthy()
    answers: list[Answer | None] = []

    def ask() -> None:
        try:
            answers.append(chat(llama.base, "tiny", "sleep 30"))
        except (urllib.error.URLError, ConnectionError):
            answers.append(None)  # dropped unanswered

    asking = threading.Thread(target=ask)
    asking.start()
    wait_for("the request to be in flight", lambda: llama.debug()["in_flight"] == 1)
    started = time.monotonic()
    llama.process.send_signal(signal.SIGTERM)
    assert llama.process.wait(timeout=10) == 0
    assert time.monotonic() - started < 5  # no drain: it stops at once
    asking.join(timeout=10)
    assert answers == [None]

    loading = engines.start(
        "llama-server", args, port, env={"MODELFLEET_STANDIN_LOAD_SECONDS": "30"}
    )
    loading.wait_event("loading")
    loading.process.send_signal(signal.SIGTERM)
    # Its handler is installed only once the model is loaded (server.cpp): killed.
    assert loading.process.wait(timeout=10) == -signal.SIGTERM


def test_llama_server_downloads_a_model_url_into_its_cache_before_it_listens(
    engines: Engines, tmp_path: Path
) -> None:
    (tmp_path / "hub" / "files").mkdir(parents=True)
    (tmp_path / "hub" / "files" / "smol.gguf").write_bytes(b"GGUF" + b"\0" * 300_000)
    cache = tmp_path / "llama-cache"
    with run_hub(tmp_path / "hub") as hub:
        url = f"{hub.endpoint}/files/smol.gguf"
        for attempt in (1, 2):
            port = free_port()
            args = ["--model-url", url, "--host", LOCALHOST, "--port", str(port), "--alias", "s"]
            llama = engines.start("llama-server", args, port, env={"LLAMA_CACHE": str(cache)})
            llama.wait_event("ready")
            assert (cache / "smol.gguf").read_bytes() == (
                hub.root / "files" / "smol.gguf"
            ).read_bytes()
            # fetched once: a second start finds it in the cache
            assert hub.bytes_sent == 300_004, attempt
            llama.process.kill()
            llama.process.wait(timeout=10)


@pytest.mark.parametrize(("generation", "slow"), [("true", True), ("false", False)])
def test_sglang_health_waits_for_a_one_token_generation_unless_the_variable_turns_it_off(
    engines: Engines, generation: str, slow: bool
) -> None:
    # sglang/srt/entrypoints/http_server.py health_generate: SGLANG_ENABLE_HEALTH_ENDPOINT_
    # GENERATION (default true) makes /health generate a token first.
    port = free_port()
    env = {
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": generation,
        "MODELFLEET_STANDIN_SGLANG_HEALTH_SECONDS": "1.5",
    }
    sglang = engines.start("sglang", sglang_args(port), port, env=env)
    sglang.wait_event("ready")
    started = time.monotonic()
    assert probe(f"{sglang.base}/health") == 200
    took = time.monotonic() - started
    assert (took >= 1.5) if slow else (took < 1.0), took


def embed(base: str, model: str, text: str | list[str]) -> Answer:
    return http(f"{base}/v1/embeddings", {"model": model, "input": text})


def test_pooling_models_serve_embeddings_and_generate_models_refuse_them(
    engines: Engines,
) -> None:
    """Issue 31, point 7.2: vLLM --runner pooling, SGLang --is-embedding and llama-server
    --embeddings serve /v1/embeddings in OpenAI's shape; without them each engine refuses
    it as the real one does."""
    starts: dict[str, Callable[..., list[str]]] = {
        "vllm": vllm_args,
        "sglang": lambda port, *extra: sglang_args(port, "--skip-server-warmup", *extra),
        "llama-server": lambda port, *extra: [
            "-m", "models/e.gguf", "--host", LOCALHOST, "--port", str(port), "-a", "big",
            *extra,
        ],
    }  # fmt: skip
    pooling = {"vllm": ["--runner", "pooling"], "sglang": ["--is-embedding"],
               "llama-server": ["--embeddings"]}  # fmt: skip
    refused: dict[str, tuple[int, str | dict[str, str]]] = {
        "vllm": (404, {"detail": "Not Found"}),
        "sglang": (400, "does not appear to be an embedding model"),
        "llama-server": (501, "Start it with `--embeddings`"),
    }
    for engine, args in starts.items():
        name = "tiny" if engine == "vllm" else "big"
        port = free_port()
        running = engines.start(engine, args(port, *pooling[engine]), port)
        running.wait_healthy()
        answer = embed(running.base, name, ["hello there", "hello there", "bye"])
        assert answer.status == 200, (engine, answer.body)
        body = answer.json()
        assert (body["object"], body["model"]) == ("list", name)
        data = cast(list[dict[str, object]], body["data"])
        assert [(d["object"], d["index"]) for d in data] == [("embedding", i) for i in range(3)]
        vectors = [cast(list[float], d["embedding"]) for d in data]
        assert vectors[0] == vectors[1] != vectors[2]  # the same text, the same vector
        assert all(isinstance(x, float) for x in vectors[0]) and len(vectors[0]) > 1
        assert cast(dict[str, int], body["usage"])["prompt_tokens"] == 5
        if engine == "vllm":  # a pooling runner registers no generate routes
            assert chat(running.base, name, "hello").json() == {"detail": "Not Found"}
            answer = http(f"{running.base}/v1/completions", {"model": name, "prompt": "hi"})
            assert (answer.status, answer.json()) == (404, {"detail": "Not Found"})
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=10)

        port = free_port()
        generating = engines.start(engine, args(port), port)
        generating.wait_healthy()
        status, said = refused[engine]
        answer = embed(generating.base, name, "hello")
        assert answer.status == status, (engine, answer.body)
        assert said == answer.json() if isinstance(said, dict) else said in answer.body.decode()
        generating.process.send_signal(signal.SIGTERM)
        generating.process.wait(timeout=10)


def test_sglang_is_embedding_fails_a_chat_request_as_sglang_does(engines: Engines) -> None:
    # SGLang routes chat whatever its model: an embedding model's output has no text, and
    # its chat serving's KeyError is a 500 (serving_base.py handle_request).
    port = free_port()
    sglang = engines.start("sglang", sglang_args(port, "--is-embedding"), port)
    sglang.wait_healthy()
    answer = chat(sglang.base, "big", "hello")
    assert answer.status == 500
    assert answer.json() == {
        "object": "error", "message": "Internal server error: 'text'",
        "type": "InternalServerError", "param": None, "code": 500,
    }  # fmt: skip
    assert http(f"{sglang.base}/get_model_info").json()["is_generation"] is False


def test_llama_server_exits_when_its_model_file_cannot_be_opened(engines: Engines) -> None:
    """llama.cpp opens the -m file as it starts loading (listening already): a path with no
    file ends it, exit 1, with the real build's lines; the file there, it serves."""
    port = free_port()
    args = ["-m", "models/absent.gguf", "--host", LOCALHOST, "--port", str(port), "-a", "t"]
    missing = engines.start("llama-server", args, port)
    assert missing.process.wait(timeout=10) == 1
    log = missing.log_path.read_text()
    assert (
        "gguf_init_from_file: failed to open GGUF file 'models/absent.gguf'"
        " (No such file or directory)"
    ) in log
    assert "llama_server: exiting due to model loading error" in log
    assert '"event": "ready"' not in log

    (engines.root / "models" / "absent.gguf").write_bytes(b"GGUF")
    there = engines.start("llama-server", args, port)
    there.wait_healthy()
    assert chat(there.base, "t", "hello").status == 200
