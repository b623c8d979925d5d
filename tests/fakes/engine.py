#!/usr/bin/python3 -I
"""A stand-in for the LLM engines ctl runs: vLLM, SGLang and llama.cpp's llama-server.

The test fleet has no GPUs, so its nodes get this one file under the three names ctl
starts (see docs/standin-engine.md for the install paths and the sources of every flag):

    vllm serve MODEL --host H --port P --served-model-name NAME ...      (an executable)
    python3 -m sglang.launch_server --model-path MODEL ...              (sglang/launch_server.py)
    llama-server -m PATH | -hf REPO | --model-url URL --alias NAME ...  (an executable)

It reads the command line as the real program does: an option the pinned release's own
parser does not have is refused as that parser refuses it (the options are the data of
scripts/engine_flags.py, installed beside it), and so is a value that parser refuses
(the same data's types and choices); the options it simulates have the real names and
aliases, and the real ones it does not simulate are accepted and recorded. Then
it behaves as the real server does where ctl can see it:

- when it listens: vLLM binds its port at once but only listens once the engine is up
  (connections are refused meanwhile); SGLang listens once the model is loaded and says
  503 until its warm-up request has run; llama-server listens at once and says 503
  "Loading model" until loaded.
- its HTTP API: /health, /v1/models, /v1/chat/completions, /v1/completions with each
  engine's status codes and bodies. A last user message "sleep N" makes the answer wait N
  seconds, so that a test can have a request in flight.
- multi-node replicas: ranks ≠ 0 connect to rank 0's rendezvous address (vLLM:
  --master-addr/--master-port, SGLang: --dist-init-addr) and rank 0 serves only once all
  have joined. A rank that cannot meet the others in time exits 1, as a failed NCCL init
  does; a replica that loses a rank exits 1, as NCCL does; ranks lose rank 0 likewise.
- SIGTERM: vLLM aborts in-flight requests, or with --shutdown-timeout S answers 503 to new
  ones (and 200 on /health) and lets those in flight finish for up to S seconds; SGLang
  drains without a bound, taking new requests meanwhile, and its ranks past 0 wait for
  rank 0; llama-server does not drain: it stops listening and drops what is in flight.
  Then it exits 0.

Every event is a line on stderr, `standin: {json}` (start with the argv and the GPU/NCCL
environment, ready, each request, drain, exit), and GET /debug/standin, which no real
engine has, returns the same facts as JSON.

Exit codes: 0 after a shutdown, 1 on rendezvous failure or a lost rank (and, as the real
llama-server does, on bad llama-server arguments), 2 on bad arguments (argparse's code).
Standard library only: it runs under a node's own python3.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Final, Literal, NoReturn, cast

Personality = Literal["vllm", "sglang", "llama-server"]
PERSONALITIES: Final[tuple[Personality, ...]] = ("vllm", "sglang", "llama-server")

LOAD_ENV: Final = "MODELFLEET_STANDIN_LOAD_SECONDS"
RENDEZVOUS_ENV: Final = "MODELFLEET_STANDIN_RENDEZVOUS_SECONDS"
TOKEN_ENV: Final = "MODELFLEET_STANDIN_TOKEN_SECONDS"
CONFIG_ENV: Final = "MODELFLEET_STANDIN_CONFIG"
HEALTH_ENV: Final = "MODELFLEET_STANDIN_SGLANG_HEALTH_SECONDS"
DEFAULT_SGLANG_HEALTH_SECONDS: Final = 1.0
CONFIG_PATH: Final = "/etc/modelfleet-fake/standin.json"
# What the shard's environment file sets, recorded so that tests can see what ctl passed.
RECORDED_ENV: Final = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2

DEFAULT_LOAD_SECONDS: Final = 1.0
# How many requests each engine runs at once when its command line does not say. vLLM:
# max_num_seqs, 256 for the OpenAI server on a GPU (vllm/engine/arg_utils.py,
# EngineArgs._set_default_args). SGLang: max_running_requests, derived from the KV pool's
# size when not given (sglang/srt/managers/scheduler.py); the stand-in has no pool and
# takes vLLM's figure. llama-server: --parallel -1 ("auto") becomes 4 slots
# (tools/server/server-context.cpp, load_model).
DEFAULT_MAX_RUNNING: Final[dict[str, int]] = {"vllm": 256, "sglang": 256, "llama-server": 4}
# PyTorch's default process-group timeout, which both vLLM and SGLang fall back to.
DEFAULT_RENDEZVOUS_SECONDS: Final = 600.0
HEARTBEAT_SECONDS: Final = 1.0
SILENCE_SECONDS: Final = 10.0  # a peer this quiet is gone even without a FIN
SGLANG_WATCHDOG_SECONDS: Final = 5.0  # SGLang's sigterm_watchdog polls this often
MAX_SLEEP_SECONDS: Final = 3600.0
POLL_SECONDS: Final = 0.05
HANDSHAKE_SECONDS: Final = 10.0
# watchfiles.awatch, which vLLM's and SGLang's certificate refreshers use: a batch of file
# changes is yielded once `step` (50 ms) passes without another, at most `debounce`
# (1.6 s) after the first.
WATCH_STEP_SECONDS: Final = 0.05
WATCH_DEBOUNCE_SECONDS: Final = 1.6
VERSION: Final = "0.0.0+modelfleet.standin"


def certificate_serial(path: str) -> str | None:
    """The serial of the PEM certificate at `path`, hex as ctl writes it (standard library
    only: the stand-in runs under a node's own python3)."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return None
    return str(decoded.get("serialNumber", "")).lower().lstrip("0") or None


def _stamps(paths: Sequence[str]) -> tuple[tuple[int, int, int] | None, ...]:
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            info = Path(path).stat()
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(stamps)


def log_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- command line


class UsageError(Exception):
    """A command line the real program would refuse, with the message it would print."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}", self.format_usage())


Kind = Literal["str", "int", "float", "flag", "list", "size", "optional"]


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    dest: str
    kind: Kind = "str"
    default: object = None
    env: str | None = None  # llama-server reads LLAMA_ARG_* when the flag is absent


def _human_int(text: str) -> int:
    """vLLM's sizes: 2048, 32k (×1000), 32K (×1024), 1m, 1M."""
    match = re.fullmatch(r"(-?\d+)([kKmMgG]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid size value: {text!r}")
    number, unit = int(match.group(1)), match.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    return number * scale[unit]


VLLM_FLAGS: Final = (
    Flag(("--model",), "model"),
    Flag(("--host",), "host"),
    Flag(("--port",), "port", "int", 8000),
    Flag(("--served-model-name",), "served_model_name", "list"),
    Flag(("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "int", 1),
    Flag(("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", "int", 1),
    Flag(("--data-parallel-size", "-dp"), "data_parallel_size", "int", 1),
    Flag(("--max-model-len",), "max_model_len", "size"),
    Flag(("--nnodes", "-n"), "nnodes", "int", 1),
    Flag(("--node-rank", "-r"), "node_rank", "int", 0),
    Flag(("--master-addr",), "master_addr", "str", "127.0.0.1"),
    Flag(("--master-port",), "master_port", "int", 29501),
    Flag(("--headless",), "headless", "flag", False),
    Flag(("--shutdown-timeout",), "shutdown_timeout", "int", 0),
    Flag(("--distributed-timeout-seconds",), "distributed_timeout_seconds", "int"),
    Flag(("--distributed-executor-backend",), "distributed_executor_backend"),
    Flag(("--api-server-count",), "api_server_count", "int"),
    Flag(("--api-key",), "api_key", "list"),
    Flag(("--gpu-memory-utilization",), "gpu_memory_utilization", "float"),
    Flag(("--dtype",), "dtype"),
    Flag(("--trust-remote-code",), "trust_remote_code", "flag", False),
    Flag(("--enforce-eager",), "enforce_eager", "flag", False),
    Flag(("--max-num-seqs",), "max_num_seqs", "int"),
    # vllm/entrypoints/common/cli_args.py (0.34) FrontendArgs, handed to uvicorn.
    Flag(("--ssl-keyfile",), "ssl_keyfile"),
    Flag(("--ssl-certfile",), "ssl_certfile"),
    Flag(("--ssl-ca-certs",), "ssl_ca_certs"),
    Flag(("--ssl-cert-reqs",), "ssl_cert_reqs", "int", 0),
    Flag(("--enable-ssl-refresh",), "enable_ssl_refresh", "flag", False),
)

SGLANG_FLAGS: Final = (
    Flag(("--model-path", "--model"), "model_path"),
    Flag(("--tokenizer-path",), "tokenizer_path"),
    Flag(("--host",), "host", "str", "127.0.0.1"),
    Flag(("--port",), "port", "int", 30000),
    Flag(("--served-model-name",), "served_model_name"),
    # `--tp`, the spelling of SGLang's docs, works only as argparse's abbreviation of
    # --tp-size (check_against_parser expands it, as argparse does).
    Flag(("--tensor-parallel-size", "--tp-size"), "tp_size", "int", 1),
    Flag(("--pipeline-parallel-size", "--pp-size"), "pp_size", "int", 1),
    Flag(("--data-parallel-size", "--dp-size"), "dp_size", "int", 1),
    Flag(("--nnodes",), "nnodes", "int", 1),
    Flag(("--node-rank",), "node_rank", "int", 0),
    Flag(("--dist-init-addr", "--nccl-init-addr"), "dist_init_addr"),
    Flag(("--dist-timeout",), "dist_timeout", "int"),
    Flag(("--context-length",), "context_length", "int"),
    Flag(("--mem-fraction-static",), "mem_fraction_static", "float"),
    Flag(("--api-key",), "api_key"),
    Flag(("--skip-server-warmup",), "skip_server_warmup", "flag", False),
    Flag(("--trust-remote-code",), "trust_remote_code", "flag", False),
    Flag(("--base-gpu-id",), "base_gpu_id", "int", 0),
    Flag(("--log-level",), "log_level", "str", "info"),
    Flag(("--enable-metrics",), "enable_metrics", "flag", False),
    Flag(("--max-running-requests",), "max_running_requests", "int"),
    Flag(("--disable-cuda-graph",), "disable_cuda_graph", "flag", False),
    Flag(("--is-embedding",), "is_embedding", "flag", False),
    # sglang/srt/server_args.py (0.5.23), checked by arg_groups/serving_hook.py.
    Flag(("--ssl-keyfile",), "ssl_keyfile"),
    Flag(("--ssl-certfile",), "ssl_certfile"),
    Flag(("--ssl-ca-certs",), "ssl_ca_certs"),
    Flag(("--ssl-keyfile-password",), "ssl_keyfile_password"),
    Flag(("--enable-ssl-refresh",), "enable_ssl_refresh", "flag", False),
)

LLAMA_FLAGS: Final = (
    Flag(("-m", "--model"), "model", env="LLAMA_ARG_MODEL"),
    Flag(("-mu", "--model-url"), "model_url", env="LLAMA_ARG_MODEL_URL"),
    Flag(("-hf", "-hfr", "--hf-repo"), "hf_repo", env="LLAMA_ARG_HF_REPO"),
    Flag(("-hff", "--hf-file"), "hf_file", env="LLAMA_ARG_HF_FILE"),
    Flag(("-a", "--alias"), "alias", env="LLAMA_ARG_ALIAS"),
    Flag(("--host",), "host", "str", "127.0.0.1", env="LLAMA_ARG_HOST"),
    Flag(("--port",), "port", "int", 8080, env="LLAMA_ARG_PORT"),
    Flag(("-t", "--threads"), "threads", "int", -1, env="LLAMA_ARG_THREADS"),
    Flag(("-tb", "--threads-batch"), "threads_batch", "int"),
    Flag(("-c", "--ctx-size"), "ctx_size", "int", 0, env="LLAMA_ARG_CTX_SIZE"),
    Flag(("-n", "--predict", "--n-predict"), "n_predict", "int", -1),
    Flag(("-b", "--batch-size"), "batch_size", "int"),
    Flag(("-ub", "--ubatch-size"), "ubatch_size", "int"),
    Flag(("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", env="LLAMA_ARG_N_GPU_LAYERS"),
    Flag(("-sm", "--split-mode"), "split_mode"),
    Flag(("-ts", "--tensor-split"), "tensor_split"),
    Flag(("-mg", "--main-gpu"), "main_gpu", "int"),
    Flag(("-dev", "--device"), "device"),
    Flag(("-np", "--parallel"), "parallel", "int", -1, env="LLAMA_ARG_N_PARALLEL"),
    Flag(("-fa", "--flash-attn"), "flash_attn", "optional"),
    Flag(("--embedding", "--embeddings"), "embedding", "flag", False, env="LLAMA_ARG_EMBEDDINGS"),
    Flag(("--rerank", "--reranking"), "reranking", "flag", False),
    Flag(("--api-key",), "api_key", env="LLAMA_API_KEY"),
    Flag(("--jinja",), "jinja", "flag", False),
    Flag(("--no-jinja",), "no_jinja", "flag", False),
    Flag(("--metrics",), "metrics", "flag", False),
    Flag(("--no-webui",), "no_webui", "flag", False),
    Flag(("-cb", "--cont-batching"), "cont_batching", "flag", False),
    Flag(("-nocb", "--no-cont-batching"), "no_cont_batching", "flag", False),
    Flag(("--chat-template",), "chat_template"),
    Flag(("--reasoning-format",), "reasoning_format"),
    Flag(("-to", "--timeout"), "timeout", "int"),
    Flag(("--threads-http",), "threads_http", "int"),
    Flag(("-ctk", "--cache-type-k"), "cache_type_k"),
    Flag(("-ctv", "--cache-type-v"), "cache_type_v"),
    Flag(("--rpc",), "rpc"),
    Flag(("--pooling",), "pooling"),
    Flag(("-s", "--seed"), "seed", "int"),
    Flag(("--log-disable",), "log_disable", "flag", False),
    Flag(("-v", "--verbose", "--log-verbose"), "verbose", "flag", False),
    # common/arg.cpp: both, or the server is plain HTTP (tools/server/server.cpp).
    Flag(("--ssl-key-file",), "ssl_key_file", env="LLAMA_ARG_SSL_KEY_FILE"),
    Flag(("--ssl-cert-file",), "ssl_cert_file", env="LLAMA_ARG_SSL_CERT_FILE"),
)
FLASH_ATTN_VALUES: Final = ("on", "off", "auto")


# The options each engine release's parser accepts, made by scripts/engine_flags.py from the
# released package (cli/engines/engine_flags/ENGINE-VERSION.json). On a test-fleet node they
# are installed in /etc/modelfleet-fake/engine_flags; in a checkout they are found from here.
FLAGS_ENV: Final = "MODELFLEET_STANDIN_FLAGS"
FLAGS_DIRS: Final = (
    "/etc/modelfleet-fake/engine_flags",
    str(Path(__file__).resolve().parents[2] / "cli" / "engines" / "engine_flags"),
)
DATA_ENGINE: Final[dict[str, str]] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llama-server": "llama.cpp",
}


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.stem.rpartition("-")[2]))


def option_data(personality: Personality) -> dict[str, object]:
    """The newest data file for this engine, as scripts/engine_flags.py wrote it."""
    chosen = os.environ.get(FLAGS_ENV)
    folders = [chosen] if chosen else list(FLAGS_DIRS)
    engine = DATA_ENGINE[personality]
    for folder in folders:
        files = sorted(Path(folder).glob(f"{engine}-*.json"), key=_version_key)
        if files:
            with files[-1].open(encoding="utf-8") as handle:
                return cast(dict[str, object], json.load(handle))
    raise UsageError(
        f"standin: error: no option data for {engine} in {', '.join(folders)}: install"
        " cli/engines/engine_flags/*.json there (docs/standin-engine.md)"
    )


def accepted_options(personality: Personality) -> frozenset[str]:
    """The real parser's options, from the newest data file for this engine."""
    return frozenset(str(o) for o in cast(list[object], option_data(personality)["options"]))


def _data_name(personality: Personality, token: str) -> str:
    """The option a token names, as the real parser looks it up."""
    name = token.partition("=")[0]
    if personality == "vllm" and name.startswith("--"):
        name = name.split(".", 1)[0].rstrip("+")  # --json-arg.key value
    if personality == "vllm" and name.startswith("-O"):
        name = "--optimization-level"
    return name


def check_against_parser(
    personality: Personality, argv: Sequence[str], accepted: frozenset[str]
) -> list[str]:
    """argv with abbreviations expanded as argparse does; a UsageError for an option the
    real parser refuses, with its message.

    vLLM's and SGLang's parsers are argparse with allow_abbrev (its default): a unique
    prefix of an option stands for it, two or more make it ambiguous (argparse.py
    `_parse_optional`). llama.cpp's common_params_parse takes names only whole
    (common/arg.cpp: `throw std::invalid_argument("error: invalid argument: " + arg)`)."""
    out: list[str] = []
    unknown: list[str] = []
    after_unknown = False
    for index, token in enumerate(argv):
        if token == "--":
            out.extend(argv[index:])
            break
        if not _is_option(token):
            if after_unknown:  # argparse leaves an unknown option's values over too
                unknown.append(token)
            out.append(token)
            continue
        after_unknown = False
        if personality == "llama-server":
            # common/arg.cpp common_params_parse_ex: "_" is "-" in a "--" token, which is
            # then looked up whole (no abbreviations, no `=value`).
            whole = "--" + token[2:].replace("_", "-") if token.startswith("--") else token
            if whole not in accepted:
                raise UsageError(f"error: invalid argument: {token}")
            out.append(whole)
            continue
        name, equals, value = token.partition("=")
        if _data_name(personality, token) in accepted:
            out.append(token)
            continue
        matches = sorted(o for o in accepted if name.startswith("--") and o.startswith(name))
        if len(matches) == 1:
            out.append(matches[0] + equals + value)
        elif len(matches) > 1:
            prog = "vllm serve" if personality == "vllm" else "launch_server.py"
            raise UsageError(
                f"{prog}: error: ambiguous option: {name} could match {', '.join(matches)}"
            )
        else:
            unknown.append(token)
            out.append(token)
            after_unknown = not equals
    if unknown:
        prog = "vllm serve" if personality == "vllm" else "launch_server.py"
        message = f"{prog}: error: unrecognized arguments: {' '.join(unknown)}"
        if personality == "vllm" and any(u.partition("=")[0] == "--task" for u in unknown):
            # vllm/utils/argparse_utils.py FlexibleArgumentParser.error
            message += (
                "\n\nHint: --task is not a vllm serve option. For embedding, reranking, or"
                " reward models, use --runner pooling. To adapt a generative model for"
                " pooling, also use --convert embed, --convert classify, or --convert reward."
            )
        raise UsageError(message)
    return out


# ------------------------------------------------------------------ values of options
#
# The values the real parsers check, of the options the stand-in does not simulate (and,
# for llama-server, of those it does): the "values" of the same data files, which
# scripts/engine_flags.py reads statically from the released parsers, vLLM 0.34.0's
# vllm/engine/arg_utils.py `_compute_kwargs` and vllm/entrypoints/common/cli_args.py,
# SGLang 0.5.23's sglang/srt/arg_groups/arg_utils.py `add_cli_args_from_dataclass`, and
# llama.cpp's common/arg.cpp (as llama-cpp-python 0.3.36 vendors it). It is ctl's data
# too (cli/engines/flags.py check_options): the stand-in refuses what those releases
# refuse, but it is no independent check of that data; its refusals are the engines'
# own messages, which ctl's are not. What the data leaves out is taken unchecked.


@dataclass(frozen=True)
class ValueRule:
    kind: str = ""  # int, float (argparse's type=); c-int, c-float, c-unsigned (std::sto*)
    choices: tuple[object, ...] = ()  # after conversion by `kind`
    words: tuple[str, ...] = ()  # llama.cpp: taken before converting (`-ngl auto`)
    none: bool = False  # vLLM's optional_type: "" and "None" are None


def value_rules(personality: Personality) -> dict[str, ValueRule]:
    raw = cast(dict[str, dict[str, object]], option_data(personality).get("values", {}))
    return {
        option: ValueRule(
            kind=str(rule.get("type", "")),
            choices=tuple(cast(list[object], rule.get("choices", []))),
            words=tuple(str(word) for word in cast(list[object], rule.get("words", []))),
            none=bool(rule.get("none", False)),
        )
        for option, rule in raw.items()
    }


def _vllm_optional_type(kind: Callable[[str], object]) -> Callable[[str], object]:
    """vllm/engine/arg_utils.py optional_type(parse_type(kind)), with its message."""

    def _optional_type(value: str) -> object:
        if value in ("", "None"):
            return None
        try:
            return kind(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"Value {value} cannot be converted to {kind}."
            ) from error

    return _optional_type


def _argparse_value(prog: str, name: str, rule: ValueRule, written: list[str]) -> None:
    """Let argparse read the option as the real parser declares it: its refusal is then
    argparse's own, in this Python's wording (`invalid choice: ...`), exit 2."""
    kind: Callable[[str], object] = {"int": int, "float": float}.get(rule.kind, str)
    choices: list[object] | None = list(rule.choices) or None
    if rule.none:
        kind = _vllm_optional_type(kind)
        if choices is not None:
            choices.append(None)  # _compute_kwargs appends None to an optional's choices
    parser = _Parser(prog=prog, allow_abbrev=False)
    parser.add_argument(name, type=kind, choices=choices)
    parser.parse_args(written)


_C_INTEGER: Final = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")
_C_FLOAT: Final = re.compile(
    r"[ \t\n\v\f\r]*([+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|0[xX][0-9a-fA-F.]+"
    r"|[iI][nN][fF]|[nN][aA][nN]))"
)


def _c_conversion_fails(kind: str, value: str) -> str | None:
    """The std::sto* that refuses `value` (its what(), as libstdc++ names it), or None:
    leading white space and a sign, then digits; what follows is ignored; out_of_range
    past int's (stoi), unsigned long's (stoul) or float's (stof) range."""
    if kind in ("c-int", "c-unsigned"):
        found = _C_INTEGER.match(value)
        number = None if found is None else int(found.group(1))
        if kind == "c-int":
            return None if number is not None and -(2**31) <= number < 2**31 else "stoi"
        return None if number is not None and abs(number) < 2**64 else "stoul"
    if kind == "c-float":
        found = _C_FLOAT.match(value)
        if found is None:
            return "stof"
        text = found.group(1)
        real = float.fromhex(text) if "x" in text.lower() else float(text)
        finite = abs(real) <= 3.4028234663852886e38 or "inf" in text.lower()
        return None if finite else "stof"
    return None


def check_values(personality: Personality, argv: Sequence[str], simulated: frozenset[str]) -> None:
    """A UsageError, with the real parser's message, for the first option whose value
    that parser refuses. `argv` is check_against_parser's (names whole)."""
    rules = value_rules(personality)
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--":
            return
        if not _is_option(token):
            continue
        if personality == "llama-server":
            rule = rules.get(token)
            if rule is None:
                continue
            # common/arg.cpp common_params_parse_ex: the next token is the value, whatever
            # it is; a handler's exception becomes this message, and main() returns 1.
            if index >= len(argv):
                what: str | None = "expected value for argument"
            else:
                value = argv[index]
                index += 1
                what = None if value in rule.words else _c_conversion_fails(rule.kind, value)
            if what is not None:
                raise UsageError(
                    f'error while handling argument "{token}": {what}\n\nusage:\n{token}\n\n'
                    "to show complete usage, run with -h"
                )
            continue
        name, equals, value = token.partition("=")
        rule = rules.get(name)
        if rule is None or name in simulated or "." in name:
            continue
        prog = "vllm serve" if personality == "vllm" else "launch_server.py"
        if equals:
            _argparse_value(prog, name, rule, [token])
        elif index < len(argv) and not _is_option(argv[index]):
            _argparse_value(prog, name, rule, [name, argv[index]])
            index += 1
        else:
            _argparse_value(prog, name, rule, [name])  # "expected one argument"


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and re.fullmatch(r"-\d+(\.\d*)?", token) is None


def split_unknown(argv: Sequence[str], flags: Sequence[Flag]) -> tuple[list[str], list[str]]:
    """The tokens the parser knows, and the unknown options with their values.

    An unknown `--flag` takes the next token as its value unless that is an option too
    (the real parsers know which flags take values; this one can only guess).
    """
    kinds: dict[str, Kind] = {name: flag.kind for flag in flags for name in flag.names}
    kinds["-h"] = kinds["--help"] = "flag"
    known: list[str] = []
    unknown: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--":
            known.extend(argv[index - 1 :])
            break
        if not _is_option(token):
            known.append(token)
            continue
        name, equals, _ = token.partition("=")
        kind = kinds.get(name)
        if kind is None:
            unknown.append(token)
            if not equals and index < len(argv) and not _is_option(argv[index]):
                unknown.append(argv[index])
                index += 1
            continue
        known.append(token)
        if equals or kind == "flag":
            continue
        if kind == "list":
            while index < len(argv) and not _is_option(argv[index]):
                known.append(argv[index])
                index += 1
        elif kind == "optional":
            if index < len(argv) and argv[index] in FLASH_ATTN_VALUES:
                known.append(argv[index])
                index += 1
        elif index < len(argv):
            known.append(argv[index])
            index += 1
    return known, unknown


def _stoi(text: str) -> int:
    """llama.cpp's int options: std::stoi, which reads "4096tokens" as 4096."""
    if _c_conversion_fails("c-int", text):
        raise ValueError(text)
    return int(cast(re.Match[str], _C_INTEGER.match(text)).group(1))


def build_parser(
    prog: str, flags: Sequence[Flag], positional_model: bool, integer: Callable[[str], int] = int
) -> _Parser:
    parser = _Parser(prog=prog, allow_abbrev=False)
    if positional_model:
        parser.add_argument("model_tag", nargs="?", default=None, metavar="model_tag")
    for flag in flags:
        if flag.kind == "flag":
            parser.add_argument(*flag.names, dest=flag.dest, action="store_true")
            continue
        if flag.kind == "list":
            parser.add_argument(*flag.names, dest=flag.dest, nargs="+", default=flag.default)
            continue
        if flag.kind == "optional":
            parser.add_argument(*flag.names, dest=flag.dest, nargs="?", const="on")
            continue
        converters: dict[str, Callable[[str], object]] = {
            "str": str,
            "int": integer,
            "float": float,
            "size": _human_int,
        }
        parser.add_argument(
            *flag.names, dest=flag.dest, type=converters[flag.kind], default=flag.default
        )
    return parser


def _namespace(parsed: argparse.Namespace) -> dict[str, object]:
    return {key: cast(object, value) for key, value in vars(parsed).items()}


def _int_value(values: Mapping[str, object], key: str) -> int:
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"error: {key}: expected an integer, got {value!r}")
    return value


def _optional_int(values: Mapping[str, object], key: str) -> int | None:
    return None if values.get(key) is None else _int_value(values, key)


def _optional_str(values: Mapping[str, object], key: str) -> str | None:
    value = values.get(key)
    return None if value is None else str(value)


def _str_list(values: Mapping[str, object], key: str) -> list[str]:
    value = values.get(key)
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in cast(list[object], value)]
    return [str(value)]


def split_host_port(address: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port`, as SGLang's --dist-init-addr takes it.

    A bare IPv6 address is refused, as NetworkAddress.parse (sglang/srt/utils/network.py,
    0.5.23) refuses it: `fd00::1:18000` could be fd00::1 port 18000 or fd00::1:18000."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = address.rpartition(":")
        if ":" in host and _is_ipv6(host):
            # A ValueError at start (srt/distributed/bootstrap.py), not argparse's exit 2.
            raise StartError(
                f"Bare IPv6 address without brackets is ambiguous: {address!r}. "
                f"Use [{host}]:{port_text} instead."
            )
    if not host or not port_text.isdigit():
        raise UsageError(f"error: invalid address {address!r}: expected host:port")
    return host, int(port_text)


def _is_ipv6(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return False
    return True


@dataclass
class Options:
    """A command line, read: what the engine was asked to be."""

    personality: Personality
    model: str
    served_names: list[str]
    host: str
    port: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rendezvous: tuple[str, int] | None = None  # rank 0's address, when nnodes > 1
    headless: bool = False
    context_length: int | None = None
    # vLLM: seconds to let requests finish after SIGTERM (0: abort them); None: no bound.
    shutdown_timeout: float | None = 0.0
    rendezvous_timeout: float | None = None  # from the command line, if it says
    api_keys: list[str] = field(default_factory=list)
    skip_warmup: bool = False
    tls: Tls | None = None  # serves HTTPS
    max_running: int = 1  # requests it runs at once; the others wait in its queue
    metrics: bool = True  # serves /metrics (SGLang: --enable-metrics; llama-server: --metrics)
    # A pooling model (vLLM --runner pooling, SGLang --is-embedding, llama-server
    # --embeddings): it serves /v1/embeddings.
    embedding: bool = False
    parsed: dict[str, object] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Tls:
    """How the engine was asked to serve TLS (the files are read when it starts serving)."""

    key: str | None
    cert: str | None
    ca: str | None = None
    cert_reqs: int = 0  # ssl.CERT_NONE; vLLM's --ssl-cert-reqs 2 asks for client certificates
    refresh: bool = False  # reload key and certificate when their files change


def _vllm_tls(values: Mapping[str, object]) -> Tls | None:
    # uvicorn's Config: TLS when either file is given (is_ssl); the files are read, and
    # a missing certificate fails, only when it starts serving (Config.load).
    key, cert = _optional_str(values, "ssl_keyfile"), _optional_str(values, "ssl_certfile")
    if key is None and cert is None:
        return None
    return Tls(
        key,
        cert,
        _optional_str(values, "ssl_ca_certs"),
        _int_value(values, "ssl_cert_reqs"),
        bool(values["enable_ssl_refresh"]),
    )


def _sglang_tls(values: Mapping[str, object]) -> Tls | None:
    """sglang/srt/arg_groups/serving_hook.py handle_ssl_validation (0.5.23): a ValueError
    before anything starts, which the launcher exits 1 with."""
    key, cert = _optional_str(values, "ssl_keyfile"), _optional_str(values, "ssl_certfile")
    ca = _optional_str(values, "ssl_ca_certs")
    refresh = bool(values["enable_ssl_refresh"])
    if key and not cert:
        raise StartError("--ssl-keyfile requires --ssl-certfile to be specified as well.")
    if cert and not key:
        raise StartError("--ssl-certfile requires --ssl-keyfile to be specified as well.")
    for path, option, what in ((key, "--ssl-keyfile", "SSL key file"),
                               (cert, "--ssl-certfile", "SSL certificate file"),
                               (ca, "--ssl-ca-certs", "SSL CA certificates file")):  # fmt: skip
        if path and not Path(path).is_file():
            raise StartError(f"{what} not found: '{path}'. Please check the {option} path.")
    if refresh and not (key and cert):
        raise StartError(
            "--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile to be specified."
        )
    if not (key and cert):
        return None
    return Tls(key, cert, ca, 0, refresh)


def _llama_tls(values: Mapping[str, object]) -> Tls | None:
    # tools/server/server.cpp: an SSLServer only when both files are given.
    key, cert = _optional_str(values, "ssl_key_file"), _optional_str(values, "ssl_cert_file")
    return Tls(key, cert) if key and cert else None


class StartError(Exception):
    """A command line the parser took but the engine refuses as it starts: exit 1."""


def _check_topology(options: Options) -> None:
    if options.tensor_parallel < 1 or options.pipeline_parallel < 1:
        raise UsageError("error: tensor and pipeline parallel sizes must be at least 1")
    if options.nnodes < 1:
        raise UsageError(f"error: nnodes must be at least 1, got {options.nnodes}")
    if not 0 <= options.node_rank < options.nnodes:
        raise UsageError(f"error: node rank {options.node_rank} is not in [0, {options.nnodes})")
    if not 0 <= options.port <= 65535:
        raise UsageError(f"error: port {options.port} is out of range")


def _value_of(tokens: Sequence[str], option: str) -> str | None:
    """The last value given to `option` (`--opt v` or `--opt=v`) among `tokens`."""
    found: str | None = None
    for index, token in enumerate(tokens):
        name, equals, value = token.partition("=")
        if name == option:
            found = value if equals else (tokens[index + 1] if index + 1 < len(tokens) else None)
    return found


def _names(flags: Sequence[Flag]) -> frozenset[str]:
    return frozenset(name for flag in flags for name in flag.names)


def _dashes(token: str) -> str:
    """vLLM's FlexibleArgumentParser takes --foo_bar for --foo-bar."""
    if not token.startswith("--"):
        return token
    name, equals, value = token.partition("=")
    return name.replace("_", "-") + equals + value


def parse_vllm(argv: Sequence[str]) -> Options:
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError(
            "vllm: error: the following arguments are required: subparser",
            "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n",
        )
    if argv[0] != "serve":
        raise UsageError(
            f"vllm: error: argument subparser: invalid choice: {argv[0]!r} (the stand-in"
            " only knows 'serve')"
        )
    tokens = [_dashes(token) for token in argv[1:]]
    tokens = check_against_parser("vllm", tokens, accepted_options("vllm"))
    check_values("vllm", tokens, _names(VLLM_FLAGS))
    known, unknown = split_unknown(tokens, VLLM_FLAGS)
    values = _namespace(build_parser("vllm serve", VLLM_FLAGS, True).parse_args(known))
    model = (
        _optional_str(values, "model_tag") or _optional_str(values, "model") or "Qwen/Qwen3-0.6B"
    )
    nnodes = _int_value(values, "nnodes")
    options = Options(
        personality="vllm",
        model=model,
        served_names=_str_list(values, "served_model_name") or [model],
        host=_optional_str(values, "host") or "",
        port=_int_value(values, "port"),
        tensor_parallel=_int_value(values, "tensor_parallel_size"),
        pipeline_parallel=_int_value(values, "pipeline_parallel_size"),
        nnodes=nnodes,
        node_rank=_int_value(values, "node_rank"),
        headless=bool(values["headless"]),
        context_length=_optional_int(values, "max_model_len"),
        shutdown_timeout=float(_int_value(values, "shutdown_timeout")),
        api_keys=_str_list(values, "api_key")
        or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else []),
        parsed=values,
        unknown=unknown,
    )
    timeout = _optional_int(values, "distributed_timeout_seconds")
    options.rendezvous_timeout = None if timeout is None else float(timeout)
    options.tls = _vllm_tls(values)
    options.max_running = _max_running("vllm", _optional_int(values, "max_num_seqs"))
    options.embedding = _value_of(unknown, "--runner") == "pooling"
    if options.shutdown_timeout is not None and options.shutdown_timeout < 0:
        raise UsageError(f"error: Invalid wait timeout: {options.shutdown_timeout:g}")
    _check_topology(options)
    if nnodes > 1:
        options.rendezvous = (str(values["master_addr"]), _int_value(values, "master_port"))
        if options.node_rank > 0 and not options.headless:
            options.warnings.append(
                f"node rank {options.node_rank} runs without --headless; vLLM's multi-node"
                " docs start every rank but 0 with --headless"
            )
    # vllm/entrypoints/cli/serve.py ServeSubcommand.cmd: `if args.headless: run_headless(args)`
    # on any node rank, rank 0 included (data-parallel headless engines): no API server.
    return options


def parse_sglang(argv: Sequence[str]) -> Options:
    argv = check_against_parser("sglang", argv, accepted_options("sglang"))
    check_values("sglang", argv, _names(SGLANG_FLAGS))
    known, unknown = split_unknown(argv, SGLANG_FLAGS)
    values = _namespace(build_parser("launch_server.py", SGLANG_FLAGS, False).parse_args(known))
    model = _optional_str(values, "model_path")
    if model is None:
        raise UsageError(
            "launch_server.py: error: the following arguments are required: --model-path"
        )
    options = Options(
        personality="sglang",
        model=model,
        served_names=[_optional_str(values, "served_model_name") or model],
        host=str(values["host"]),
        port=_int_value(values, "port"),
        tensor_parallel=_int_value(values, "tp_size"),
        pipeline_parallel=_int_value(values, "pp_size"),
        nnodes=_int_value(values, "nnodes"),
        node_rank=_int_value(values, "node_rank"),
        context_length=_optional_int(values, "context_length"),
        shutdown_timeout=None,  # SGLang drains until nothing is left, however long
        api_keys=_str_list(values, "api_key"),
        skip_warmup=bool(values["skip_server_warmup"]),
        parsed=values,
        unknown=unknown,
    )
    timeout = _optional_int(values, "dist_timeout")
    options.rendezvous_timeout = None if timeout is None else float(timeout)
    _check_topology(options)
    options.tls = _sglang_tls(values)
    options.max_running = _max_running("sglang", _optional_int(values, "max_running_requests"))
    # SGLang serves /metrics only with --enable-metrics (sglang/srt/entrypoints/
    # http_server.py adds the route when server_args.enable_metrics).
    options.metrics = bool(values["enable_metrics"])
    options.embedding = bool(values["is_embedding"])
    if options.nnodes > 1:
        address = _optional_str(values, "dist_init_addr")
        if address is None:
            raise UsageError("launch_server.py: error: --dist-init-addr is needed with --nnodes")
        options.rendezvous = split_host_port(address)
    return options


def parse_llama(argv: Sequence[str]) -> Options:
    argv = check_against_parser("llama-server", argv, accepted_options("llama-server"))
    check_values("llama-server", argv, _names(LLAMA_FLAGS))
    known, unknown = split_unknown(argv, LLAMA_FLAGS)
    values = _namespace(build_parser("llama-server", LLAMA_FLAGS, False, _stoi).parse_args(known))
    given = {token.partition("=")[0] for token in known}
    for flag in LLAMA_FLAGS:  # the environment fills in what the command line leaves out
        if flag.env is None or not os.environ.get(flag.env) or given & set(flag.names):
            continue
        text = os.environ[flag.env]
        try:
            if flag.kind == "flag":
                values[flag.dest] = text.lower() in ("1", "true", "on", "enabled")
            elif flag.kind == "int":
                values[flag.dest] = _stoi(text)
            else:
                values[flag.dest] = text
        except ValueError as error:
            # common/arg.cpp common_params_parse_ex, reading the environment.
            raise UsageError(
                f'error while handling environment variable "{flag.env}": stoi\n\n'
            ) from error
    model = (
        _optional_str(values, "model")
        or _optional_str(values, "hf_repo")
        or _optional_str(values, "model_url")
    )
    if model is None:
        raise UsageError(
            "error: no model (-m, -hf or --model-url): llama-server's router mode is not"
            " simulated by the stand-in"
        )
    aliases = [a for a in (_optional_str(values, "alias") or "").split(",") if a]
    context = _int_value(values, "ctx_size")
    options = Options(
        personality="llama-server",
        model=model,
        served_names=aliases or [model],
        host=str(values["host"]),
        port=_int_value(values, "port"),
        context_length=context or None,
        shutdown_timeout=0.0,  # llama-server stops at once
        api_keys=[k for k in (_optional_str(values, "api_key") or "").split(",") if k],
        parsed=values,
        unknown=unknown,
        tls=_llama_tls(values),
    )
    parallel = _int_value(values, "parallel")
    options.max_running = _max_running("llama-server", parallel if parallel > 0 else None)
    options.metrics = bool(values["metrics"])  # server.cpp: 501 on /metrics without it
    options.embedding = bool(values["embedding"])  # --embedding(s) or LLAMA_ARG_EMBEDDINGS
    _check_topology(options)
    return options


def _max_running(personality: Personality, given: int | None) -> int:
    if given is None:
        return DEFAULT_MAX_RUNNING[personality]
    if given < 1:
        raise UsageError(f"error: requests at once must be at least 1, got {given}")
    return given


PARSERS: Final[dict[Personality, Callable[[Sequence[str]], Options]]] = {
    "vllm": parse_vllm,
    "sglang": parse_sglang,
    "llama-server": parse_llama,
}


def detect_personality(argv0: str, module: str | None) -> Personality | None:
    """Which engine to be, from how this file was started."""
    if module is not None and module.endswith("launch_server"):
        return "sglang"  # python3 -m sglang.launch_server
    path = Path(argv0)
    if path.name == "launch_server.py" and path.parent.name == "sglang":
        return "sglang"
    if path.name.startswith("vllm"):
        return "vllm"
    if path.name.startswith("llama-server"):
        return "llama-server"
    return None


def take_personality_override(argv: Sequence[str]) -> tuple[Personality | None, list[str]]:
    """`--personality NAME` (tests only; no real engine has it), removed from argv."""
    rest: list[str] = []
    chosen: str | None = None
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--personality" and index < len(argv):
            chosen = argv[index]
            index += 1
        elif token.startswith("--personality="):
            chosen = token.partition("=")[2]
        else:
            rest.append(token)
    if chosen is None:
        return None, rest
    aliases: dict[str, Personality] = {
        "vllm": "vllm",
        "sglang": "sglang",
        "llama-server": "llama-server",
        "llama.cpp": "llama-server",
        "llama": "llama-server",
    }
    if chosen not in aliases:
        raise UsageError(f"standin: error: unknown --personality {chosen!r}")
    return aliases[chosen], rest


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """The stand-in's own knobs: from the environment, else a node's config file."""

    load_seconds: float = DEFAULT_LOAD_SECONDS
    rendezvous_seconds: float = DEFAULT_RENDEZVOUS_SECONDS
    # Seconds per generated token (a word of its answer), so that load builds a queue.
    token_seconds: float = 0.0
    # Whether the llama-server stood in for was built with OpenSSL, as the project's
    # build is (a build without it refuses the TLS files: see main).
    llama_server_ssl: bool = True
    # SGLang's /health generates one token through the scheduler (see Engine._health).
    sglang_health_seconds: float = 1.0

    @staticmethod
    def load(environ: Mapping[str, str]) -> Settings:
        file_values: dict[str, object] = {}
        path = environ.get(CONFIG_ENV) or CONFIG_PATH
        try:
            with open(path, encoding="utf-8") as handle:  # noqa: PTH123
                loaded = cast(object, json.load(handle))
            if isinstance(loaded, dict):
                file_values = cast(dict[str, object], loaded)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as error:
            raise UsageError(f"standin: error: cannot read {path}: {error}") from error

        def number(env: str, key: str, default: float) -> float:
            raw = environ.get(env)
            value: object = raw if raw is not None else file_values.get(key, default)
            try:
                result = float(cast(str, value))
            except (TypeError, ValueError) as error:
                message = f"standin: error: {env} must be a number, got {value!r}"
                raise UsageError(message) from error
            if result < 0:
                raise UsageError(f"standin: error: {env} must not be negative, got {result:g}")
            return result

        return Settings(
            load_seconds=number(LOAD_ENV, "load_seconds", DEFAULT_LOAD_SECONDS),
            rendezvous_seconds=number(
                RENDEZVOUS_ENV, "rendezvous_seconds", DEFAULT_RENDEZVOUS_SECONDS
            ),
            token_seconds=number(TOKEN_ENV, "token_seconds", 0.0),
            llama_server_ssl=file_values.get("llama_server_ssl", True) is not False,
            sglang_health_seconds=number(
                HEALTH_ENV, "sglang_health_seconds", DEFAULT_SGLANG_HEALTH_SECONDS
            ),
        )


# --------------------------------------------------------------------------- rendezvous


class Peer:
    """One rendezvous connection: JSON lines both ways, heartbeats, loss detection."""

    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[Peer, dict[str, object]], None],
        on_lost: Callable[[Peer, str], None],
    ) -> None:
        self.sock = sock
        self.on_message = on_message
        self.on_lost = on_lost
        self.rank: int | None = None
        self.info: dict[str, object] = {}
        self.closed = False
        self._send_lock = threading.Lock()
        self._last_heard = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self._read, name="standin-peer", daemon=True).start()

    def send(self, message: Mapping[str, object]) -> bool:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                return False
        return True

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _read(self) -> None:
        self.sock.settimeout(HEARTBEAT_SECONDS)
        buffer = b""
        while not self.closed:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                if time.monotonic() - self._last_heard > SILENCE_SECONDS:
                    self._lost(f"no heartbeat for {SILENCE_SECONDS:g} s")
                    return
                continue
            except OSError as error:
                self._lost(f"connection error: {error}")
                return
            if not chunk:
                self._lost("connection closed")
                return
            self._last_heard = time.monotonic()
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    message = cast(object, json.loads(line))
                except ValueError:
                    self._lost("garbled rendezvous message")
                    return
                if isinstance(message, dict) and message.get("type") != "ping":
                    self.on_message(self, cast(dict[str, object], message))

    def _lost(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()
            self.on_lost(self, reason)


# --------------------------------------------------------------------------- HTTP


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    events: list[bytes] | None = None  # server-sent events, for stream=true
    drop: bool = False  # close the connection unanswered (llama-server dropping a request)


def json_reply(status: int, payload: object) -> Reply:
    return Reply(status, json.dumps(payload).encode())


def openai_error(status: int, message: str, kind: str, param: str | None = None) -> Reply:
    error = {"message": message, "type": kind, "param": param, "code": status}
    return json_reply(status, {"error": error})


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        self.engine = engine
        self.tls_context: ssl.SSLContext | None = None  # set when it serves HTTPS
        super().__init__(address, StandinHandler, bind_and_activate=False)

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, address = self.socket.accept()
        if self.tls_context is not None:
            # The handshake happens in the request's own thread, as uvicorn and
            # cpp-httplib do: a slow or failing client never holds up the next accept.
            with self.engine.tls_lock:
                conn = self.tls_context.wrap_socket(
                    conn, server_side=True, do_handshake_on_connect=False
                )
        return conn, address

    def finish_request(self, request: socket.socket | tuple[bytes, socket.socket],
                       client_address: tuple[str, int] | str) -> None:  # fmt: skip
        if isinstance(request, ssl.SSLSocket):
            try:
                request.settimeout(HANDSHAKE_SECONDS)
                request.do_handshake()
                request.settimeout(None)
            except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
                self.engine.log("tls-handshake-failed", client=str(client_address),
                                reason=str(error))  # fmt: skip
                return
        super().finish_request(request, client_address)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's FQDN, which may wait on DNS.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = cast(tuple[str, int], self.socket.getsockname()[:2])
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])


class StandinHTTPServer6(StandinHTTPServer):
    address_family = socket.AF_INET6


class StandinHandler(BaseHTTPRequestHandler):
    server: StandinHTTPServer

    def version_string(self) -> str:
        return {"vllm": "uvicorn", "sglang": "uvicorn", "llama-server": "llama.cpp"}[
            self.server.engine.opts.personality
        ]

    def log_message(self, format: str, *args: object) -> None:
        """The engine logs each request itself, as JSON."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        engine = self.server.engine
        started = time.monotonic()
        body = b""
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
        path = self.path.partition("?")[0]
        headers = {key.lower(): value for key, value in self.headers.items()}
        reply = engine.handle(method, path, headers, body)
        engine.log(
            "request",
            method=method,
            path=path,
            status=None if reply.drop else reply.status,
            dropped=reply.drop,
            client=self.client_address[0],
            seconds=round(time.monotonic() - started, 3),
        )
        if reply.drop:
            self.close_connection = True
            return
        try:
            self.send_response(reply.status)
            if reply.events is not None:
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for event in reply.events:
                    self.wfile.write(event)
                    self.wfile.flush()
                return
            if reply.body:
                self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; so would uvicorn's response


# --------------------------------------------------------------------------- the engine

Phase = Literal["starting", "rendezvous", "loading", "warmup", "ready", "draining", "stopped"]


EMBEDDING_WIDTH: Final = 16


def _embedding(text: str) -> list[float]:
    """A unit vector that depends only on the text: the same input, the same embedding."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [byte / 255.0 - 0.5 for byte in digest[:EMBEDDING_WIDTH]]
    norm = math.sqrt(sum(value * value for value in raw)) or 1.0
    return [round(value / norm, 6) for value in raw]


def _sglang_error(status: int, message: str, kind: str) -> Reply:
    """sglang/srt/entrypoints/openai/serving_base.py create_error_response: ErrorResponse,
    not wrapped in {"error": ...}."""
    error = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return json_reply(status, error)


def _sleep_request(text: str) -> float:
    match = re.match(r"\s*sleep\s+(\d+(?:\.\d+)?)", text, re.IGNORECASE)
    return min(float(match.group(1)), MAX_SLEEP_SECONDS) if match else 0.0


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in cast(list[object], content):
            if isinstance(part, dict):
                text = cast(dict[str, object], part).get("text")
                if isinstance(text, str):
                    parts.append(text)
        return " ".join(parts)
    return ""


class Engine:
    """One rank of one replica: its rendezvous, its HTTP server and its life."""

    def __init__(self, opts: Options, settings: Settings, invoked_as: str) -> None:
        self.opts = opts
        self.settings = settings
        self.invoked_as = invoked_as
        self.hostname = socket.gethostname()
        self.phase: Phase = "starting"
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.in_flight = 0
        # Of those in flight: generating now, and waiting for one of the max_running slots.
        self.running = 0
        self.waiting = 0
        self.slots = threading.Condition(self.lock)
        self.draining = False
        self.abort = threading.Event()  # wakes in-flight requests to give up
        self.lost = threading.Event()  # a rank of the replica is gone
        self.lost_reason = ""
        self.shutdown_message = threading.Event()  # rank 0 said it is stopping cleanly
        self.signals = 0
        self.http: StandinHTTPServer | None = None
        self.serving = False  # serve_forever runs (shutdown() would wait forever if not)
        self.listener: socket.socket | None = None  # rank 0's rendezvous socket
        self.workers: dict[int, Peer] = {}
        self.world_formed = False
        self.master: Peer | None = None  # a worker's link to rank 0
        self.start_message = threading.Event()
        self.rejected = ""
        self.ready_at = 0.0
        self.tls_serial: str | None = None  # of the certificate it serves now
        # vLLM and SGLang reload the certificate on the event loop that also starts every
        # handshake, so the two never overlap; the stand-in's threads take this lock for
        # the same order. Without it a connection made mid-reload copies the new
        # certificate without its key and fails its handshake (CI saw it once), and
        # OpenSSL's context, mutated by two threads at once, can crash the process.
        self.tls_lock = threading.Lock()
        self._log_lock = threading.Lock()

    # ----------------------------------------------------------------- logging

    def log(self, event: str, **fields: object) -> None:
        record: dict[str, object] = {
            "ts": round(time.time(), 3),
            "personality": self.opts.personality,
            "rank": self.opts.node_rank,
            "event": event,
            **fields,
        }
        with self._log_lock:
            log_line("standin: " + json.dumps(record, default=str))

    def native(self, text: str) -> None:
        """A line shaped like the real engine's own log (approximate, for humans)."""
        with self._log_lock:
            log_line(text)

    @property
    def is_worker(self) -> bool:
        return self.opts.node_rank > 0

    def environment(self) -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in RECORDED_ENV}

    # ----------------------------------------------------------------- life

    def run(self) -> int:
        self.log(
            "start",
            argv=sys.argv,
            invoked_as=self.invoked_as,
            pid=os.getpid(),
            hostname=self.hostname,
            env=self.environment(),
            model=self.opts.model,
            served_model_names=self.opts.served_names,
            nnodes=self.opts.nnodes,
            tensor_parallel=self.opts.tensor_parallel,
            pipeline_parallel=self.opts.pipeline_parallel,
            unknown_args=self.opts.unknown,
            load_seconds=self.settings.load_seconds,
        )
        for warning in self.opts.warnings:
            self.log("warning", message=warning)
        if self.opts.unknown:
            self.log("unknown-args", args=self.opts.unknown)
        if self.opts.personality == "llama-server":
            # llama-server installs its handler only once the model is loaded
            # (tools/server/server.cpp:494-500, after load_model at :478): a SIGTERM
            # while loading kills it by the signal's default action.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        else:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        code = EXIT_FAILURE
        try:
            code = self._run_worker() if self.is_worker else self._run_rank0()
        finally:
            self._close_everything(clean=code == EXIT_OK)
        self.phase = "stopped"
        self.log("exit", code=code)
        return code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if (
            self.opts.personality == "sglang"
            and self.is_worker
            and signum == signal.SIGTERM
            and self.phase in ("loading", "ready")
        ):
            # SGLang's ranks past 0 cannot drain on their own: they wait for rank 0's
            # ShutdownReq broadcast (sglang/srt/entrypoints/engine.py:1261-1273).
            self.native(
                f"SIGTERM received on node_rank {self.opts.node_rank}; waiting for the rank-0"
                " ShutdownReq broadcast to stop the schedulers."
            )
            return
        self.signals += 1
        if self.signals > 1 and self.opts.personality == "llama-server":
            # llama-server: "Received second interrupt, terminating immediately."
            log_line("Received second interrupt, terminating immediately.")
            os._exit(EXIT_FAILURE)

    def _wait(self, seconds: float) -> str | None:
        """Sleep, unless something ends it: 'signal', 'lost' or 'shutdown' (worker only)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.signals:
                return "signal"
            if self.lost.is_set():
                return "lost"
            if self.shutdown_message.is_set():
                return "shutdown"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(POLL_SECONDS, remaining))

    def _rendezvous_timeout(self) -> float:
        if self.opts.rendezvous_timeout is not None:
            return self.opts.rendezvous_timeout
        return self.settings.rendezvous_seconds

    def _run_headless_rank0(self) -> int:
        """vllm/entrypoints/cli/serve.py run_headless: the engines start and serve no HTTP;
        a signal ends them and the process exits 0."""
        if self.opts.nnodes > 1:
            code = self._form_world()
            if code is not None:
                return code
        self.native("INFO Launching 1 data parallel engine(s) in headless mode.")
        self.phase = "loading"
        self.log("loading", seconds=self.settings.load_seconds)
        interrupted = self._wait(self.settings.load_seconds)
        if interrupted == "lost":
            return self._die(self.lost_reason)
        if interrupted is None:
            self.phase = "ready"
            self.log("ready", headless=True, workers=self._worker_list())
            interrupted = self._wait(3600.0 * 24 * 365)
        if interrupted == "lost":
            return self._die(self.lost_reason)
        self.log("stopping", reason="signal")
        return EXIT_OK

    def _run_rank0(self) -> int:
        p = self.opts.personality
        if self.opts.headless:
            return self._run_headless_rank0()
        try:
            http = self.http = self._make_http_server()
            if p == "vllm":
                # vLLM binds its port before building the engine (so nothing else takes
                # it), but uvicorn listens only once the engine is up.
                http.server_bind()
            if p == "llama-server":  # llama-server listens at once and says 503 meanwhile
                http.server_bind()
                self._listen()
        except OSError as error:
            self.log("fatal", reason=f"cannot bind {self.opts.host}:{self.opts.port}: {error}")
            return EXIT_FAILURE
        except StartError as error:
            self.log("fatal", reason=str(error))
            return EXIT_FAILURE
        if self.opts.nnodes > 1:
            code = self._form_world()
            if code is not None:
                return code
        if p == "llama-server":
            failure = self._llama_model_unreadable()
            if failure is not None:
                self.log("fatal", reason=failure)
                return EXIT_FAILURE
        self.phase = "loading"
        self.log("loading", seconds=self.settings.load_seconds)
        interrupted = self._wait(self.settings.load_seconds)
        if interrupted:
            return self._stop_during_startup(interrupted)
        self.log("loaded")
        try:
            if p == "sglang":
                http.server_bind()
            if p != "llama-server":
                self._listen()
        except OSError as error:
            self.log("fatal", reason=f"cannot listen on {self.opts.port}: {error}")
            return EXIT_FAILURE
        except StartError as error:
            self.log("fatal", reason=str(error))
            return EXIT_FAILURE
        if p == "sglang" and not self.opts.skip_warmup:
            # SGLang serves HTTP, then sends itself a warm-up request; /health says 503
            # until that has come back.
            self.phase = "warmup"
            warmup = min(1.0, self.settings.load_seconds)
            self.log("warmup", seconds=warmup)
            interrupted = self._wait(warmup)
            if interrupted:
                return self._stop_during_startup(interrupted)
            failure = self._sglang_warmup_tls()
            if failure is not None:
                self.log("fatal", reason=f"warm-up request failed: {failure}")
                return EXIT_FAILURE
        self.phase = "ready"
        self.ready_at = time.monotonic()
        if p == "llama-server":  # tools/server/server.cpp:494-500
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.log("ready", url=self._url(), workers=self._worker_list())
        self.native(
            {
                "vllm": "INFO:     Application startup complete.",
                "sglang": "The server is fired up and ready to roll!",
                "llama-server": f"main: server is listening on {self._url()}"
                " - starting the main loop",
            }[p]
        )
        while True:
            interrupted = self._wait(3600.0)
            if interrupted == "signal":
                return self._drain()
            if interrupted == "lost":
                return self._die(self.lost_reason)

    def _stop_during_startup(self, why: str) -> int:
        if why == "lost":
            return self._die(self.lost_reason)
        self.log("stopped-during-startup", phase=self.phase)
        if self.opts.personality == "vllm" and not self.is_worker:
            # vLLM's start-up SIGTERM handler raises KeyboardInterrupt("terminated").
            self.native("KeyboardInterrupt: terminated")
            return EXIT_FAILURE
        return EXIT_OK

    def _llama_model_unreadable(self) -> str | None:
        """llama-server's `-m` file opened as it starts loading (it listens already, saying
        503): one it cannot open ends the server, exit 1, in milliseconds. The lines are
        the real 0.3.36 build's (ggml/src/gguf.cpp gguf_init_from_file, src/llama.cpp,
        tools/server/server.cpp main: "exiting due to model loading error"). Only that it
        opens is checked: the stand-in reads no weights."""
        path = _optional_str(self.opts.parsed, "model")
        if path is None:
            return None  # -hf or --model-url: fetched into the cache, not a path of ours
        try:
            with Path(path).open("rb"):
                return None
        except OSError as error:
            why = error.strerror or str(error)
        self.native(f"srv    load_model: loading model '{path}'")
        self.native(f"gguf_init_from_file: failed to open GGUF file '{path}' ({why})")
        self.native(
            "llama_model_load: error loading model: llama_model_loader: failed to load model"
            f" from {path}"
        )
        self.native(f"srv    load_model: failed to load model, '{path}'")
        self.native("srv  llama_server: exiting due to model loading error")
        return f"failed to load model, '{path}': {why}"

    def _die(self, reason: str) -> int:
        """A rank is gone: the engine is dead, as after an NCCL error."""
        self.log("fatal", reason=reason)
        with self.lock:
            self.draining = True
        self.phase = "stopped"
        self.abort.set()
        self._wait_in_flight(2.0)
        return EXIT_FAILURE

    def _drain(self) -> int:
        with self.lock:
            self.draining = True
            in_flight = self.in_flight
        self.phase = "draining"
        p = self.opts.personality
        timeout = self.opts.shutdown_timeout
        self.log("drain", in_flight=in_flight, timeout=timeout)
        if p == "llama-server":
            # llama-server stops its HTTP server and its task queue: new connections are
            # refused and requests in flight are dropped.
            self._stop_http()
            self.abort.set()
            self._wait_in_flight(2.0)
        elif p == "vllm":
            # --shutdown-timeout 0 (vLLM's default) aborts what is in flight at once.
            self._wait_in_flight(timeout or 0.0)
            if self.in_flight:
                if timeout:
                    self.log("drain-timeout", aborting=self.in_flight)
                self.abort.set()
                self._wait_in_flight(2.0)
        else:
            # SGLang's sigterm_watchdog looks every 5 s and exits once nothing is left.
            while True:
                ticks = int((time.monotonic() - self.ready_at) // SGLANG_WATCHDOG_SECONDS) + 1
                next_tick = self.ready_at + ticks * SGLANG_WATCHDOG_SECONDS
                time.sleep(max(0.0, next_tick - time.monotonic()))
                if not self.in_flight:
                    break
                self.native(f"Gracefully exiting... remaining number of requests {self.in_flight}")
        self.log("drained")
        return EXIT_OK

    def _wait_in_flight(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)

    def _close_everything(self, clean: bool) -> None:
        for peer in list(self.workers.values()):
            if not peer.closed:
                if clean:
                    peer.send({"type": "shutdown"})  # a clean stop: the ranks exit 0
                peer.close()  # otherwise they see rank 0 vanish, and fail
        if self.master is not None and not self.master.closed:
            self.master.close()
        if self.listener is not None:
            self.listener.close()
        self._stop_http()

    # ----------------------------------------------------------------- HTTP server

    def _make_http_server(self) -> StandinHTTPServer:
        host = self.opts.host
        server_class = StandinHTTPServer6 if ":" in host else StandinHTTPServer
        return server_class((host, self.opts.port), self)

    def _listen(self) -> None:
        assert self.http is not None
        self.http.tls_context = self._tls_context()
        self.http.server_activate()
        threading.Thread(
            target=self.http.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="standin-http",
            daemon=True,
        ).start()
        self.serving = True
        self.log("listening", url=self._url())

    def _sglang_warmup_tls(self) -> str | None:
        """SGLang's warm-up request (http_server.py _execute_server_warmup) goes to
        ServerArgs.url(), 127.0.0.1 when it listens on 0.0.0.0, and with --ssl-ca-certs
        verifies the server's certificate against it for that host (serving_hook.py
        ssl_verify_of): made here for real; why it failed, or None."""
        tls = self.opts.tls
        if tls is None or tls.ca is None:
            return None
        host = self.opts.host if self.opts.host not in ("", "0.0.0.0") else "127.0.0.1"
        context = ssl.create_default_context(cafile=tls.ca)
        try:
            with (
                socket.create_connection((host, self.opts.port), timeout=HANDSHAKE_SECONDS) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                return None
        except OSError as error:
            return str(error)

    def _tls_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, as uvicorn's create_ssl_context (vLLM, SGLang) or
        cpp-httplib's SSLServer (llama-server) makes it from the files; StartError if they
        cannot be read, which the real servers exit 1 on."""
        tls = self.opts.tls
        if tls is None:
            return None
        if tls.cert is None:  # uvicorn Config.load: `assert self.ssl_certfile`
            raise StartError("AssertionError: a key file (--ssl-keyfile) but no certificate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(tls.cert, tls.key)
            if tls.ca is not None:
                context.load_verify_locations(tls.ca)
        except OSError as error:  # ssl.SSLError too
            raise StartError(f"cannot load the TLS key and certificate: {error}") from error
        context.verify_mode = ssl.VerifyMode(tls.cert_reqs)
        self.tls_serial = certificate_serial(tls.cert)
        self.log("tls", certificate=tls.cert, serial=self.tls_serial, refresh=tls.refresh)
        if tls.refresh and tls.key is not None:
            threading.Thread(
                target=self._refresh_certificate,
                args=(context, tls.cert, tls.key),
                name="standin-ssl-refresh",
                daemon=True,
            ).start()
        return context

    def _refresh_certificate(self, context: ssl.SSLContext, cert: str, key: str) -> None:
        """vLLM's and SGLang's SSLCertRefresher: on a batch of changes to either file, load
        the pair again into the live context; a failure is logged and the server goes on
        (with what OpenSSL left in the context, as theirs does)."""
        last = _stamps((cert, key))
        while True:
            time.sleep(WATCH_STEP_SECONDS)
            now = _stamps((cert, key))
            if now == last:
                continue
            began = time.monotonic()
            while time.monotonic() - began < WATCH_DEBOUNCE_SECONDS:
                time.sleep(WATCH_STEP_SECONDS)
                again = _stamps((cert, key))
                if again == now:
                    break
                now = again
            last = now
            try:
                with self.tls_lock:
                    context.load_cert_chain(cert, key)
            except OSError as error:
                self.log("tls-reload-failed", reason=str(error))
                continue
            self.tls_serial = certificate_serial(cert)
            self.log("tls-reloaded", serial=self.tls_serial)

    def _stop_http(self) -> None:
        server, self.http = self.http, None
        if server is None:
            return
        if self.serving:
            self.serving = False
            server.shutdown()
        server.server_close()

    def _url(self) -> str:
        host = self.opts.host or "0.0.0.0"
        scheme = "https" if self.opts.tls is not None else "http"
        return (
            f"{scheme}://[{host}]:{self.opts.port}"
            if ":" in host
            else f"{scheme}://{host}:{self.opts.port}"
        )

    # ----------------------------------------------------------------- rank 0's rendezvous

    def _form_world(self) -> int | None:
        """Wait for every other rank to join; an exit code if they do not."""
        assert self.opts.rendezvous is not None
        host, port = self.opts.rendezvous
        self.phase = "rendezvous"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            # torch.distributed's store listens on every address at the master port; the
            # stand-in listens on the master address only, so that the test fleet's nodes,
            # which share one network namespace, can each hold the same port.
            listener.bind((host, port))
            listener.listen(64)
        except OSError as error:
            listener.close()
            self.log("fatal", reason=f"cannot listen for ranks on port {port}: {error}")
            return EXIT_FAILURE
        self.listener = listener
        threading.Thread(target=self._accept, name="standin-accept", daemon=True).start()
        threading.Thread(target=self._heartbeat, name="standin-heartbeat", daemon=True).start()
        timeout = self._rendezvous_timeout()
        self.log("waiting-for-ranks", port=port, nnodes=self.opts.nnodes, timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                joined = len(self.workers)
                if joined == self.opts.nnodes - 1:
                    self.world_formed = True
                    peers = list(self.workers.values())
                    break
            if self.signals:
                return self._stop_during_startup("signal")
            if time.monotonic() >= deadline:
                missing = sorted(set(range(1, self.opts.nnodes)) - set(self.workers))
                self.log(
                    "rendezvous-failed",
                    reason=f"timed out after {timeout:g} s",
                    missing_ranks=missing,
                )
                return EXIT_FAILURE
            time.sleep(POLL_SECONDS)
        for peer in peers:
            peer.send({"type": "start", "hostname": self.hostname})
        self.log("world-formed", workers=self._worker_list())
        return None

    def _accept(self) -> None:
        listener = self.listener
        assert listener is not None
        while True:
            try:
                sock, address = listener.accept()
            except OSError:
                return  # closed
            peer = Peer(sock, self._on_worker_message, self._on_worker_lost)
            peer.info = {"address": address[0]}
            peer.start()

    def _heartbeat(self) -> None:
        while self.phase != "stopped":
            for peer in list(self.workers.values()):
                peer.send({"type": "ping"})
            if self.master is not None:
                self.master.send({"type": "ping"})
            time.sleep(HEARTBEAT_SECONDS)

    def _on_worker_message(self, peer: Peer, message: dict[str, object]) -> None:
        if message.get("type") != "join":
            return
        rank = message.get("rank")
        reason = ""
        expected = {
            "nnodes": self.opts.nnodes,
            "personality": self.opts.personality,
            "model": self.opts.model,
            "tensor_parallel": self.opts.tensor_parallel,
            "pipeline_parallel": self.opts.pipeline_parallel,
        }
        with self.lock:
            if self.world_formed:
                reason = "the world has already formed; restart the whole replica"
            elif not isinstance(rank, int) or not 0 < rank < self.opts.nnodes:
                reason = f"rank {rank!r} is not in [1, {self.opts.nnodes})"
            elif rank in self.workers:
                reason = f"rank {rank} has already joined"
            else:
                for key, value in expected.items():
                    if message.get(key) != value:
                        reason = f"{key} is {message.get(key)!r} there, {value!r} here"
                        break
            if not reason:
                assert isinstance(rank, int)
                peer.rank = rank
                peer.info.update({key: message.get(key) for key in ("hostname", "pid", "env")})
                self.workers[rank] = peer
        if reason:
            self.log("rank-rejected", rank=rank, reason=reason)
            peer.send({"type": "reject", "reason": reason})
            peer.close()
            return
        self.log("rank-joined", rank=rank, hostname=peer.info.get("hostname"))
        peer.send({"type": "welcome"})

    def _on_worker_lost(self, peer: Peer, reason: str) -> None:
        if peer.rank is None:
            return
        with self.lock:
            if not self.world_formed:
                # Before the world forms a rank may come back; the store waits for it.
                self.workers.pop(peer.rank, None)
                formed = False
            else:
                formed = True
        if not formed:
            self.log("rank-left", rank=peer.rank, reason=reason)
            return
        if self.phase in ("draining", "stopped"):
            return
        self.lost_reason = f"lost rank {peer.rank} ({peer.info.get('hostname')}): {reason}"
        self.lost.set()

    def _worker_list(self) -> list[dict[str, object]]:
        return [{"rank": rank, **peer.info} for rank, peer in sorted(self.workers.items())]

    # ----------------------------------------------------------------- a worker's life

    def _run_worker(self) -> int:
        assert self.opts.rendezvous is not None
        host, port = self.opts.rendezvous
        self.phase = "rendezvous"
        timeout = self._rendezvous_timeout()
        deadline = time.monotonic() + timeout
        self.log("joining", master=f"{host}:{port}", timeout=timeout)
        if self.opts.personality == "vllm":
            self.native(
                "INFO Launching vLLM headless multiproc executor, with head node address"
                f" {host}:{port} for torch.distributed process group."
            )
        while True:
            if self.signals:
                return self._stop_during_startup("signal")
            try:
                sock = socket.create_connection((host, port), timeout=2.0)
                break
            except OSError as error:
                if time.monotonic() >= deadline:
                    self.log(
                        "rendezvous-failed",
                        reason=f"cannot reach rank 0 at {host}:{port} in {timeout:g} s: {error}",
                    )
                    return EXIT_FAILURE
                time.sleep(0.2)
        self.master = Peer(sock, self._on_master_message, self._on_master_lost)
        self.master.start()
        self.master.send(
            {
                "type": "join",
                "rank": self.opts.node_rank,
                "nnodes": self.opts.nnodes,
                "personality": self.opts.personality,
                "model": self.opts.model,
                "tensor_parallel": self.opts.tensor_parallel,
                "pipeline_parallel": self.opts.pipeline_parallel,
                "hostname": self.hostname,
                "pid": os.getpid(),
                "env": self.environment(),
            }
        )
        threading.Thread(target=self._heartbeat, name="standin-heartbeat", daemon=True).start()
        while not self.start_message.is_set():
            if self.rejected:
                self.log("rendezvous-failed", reason=f"rank 0 refused: {self.rejected}")
                return EXIT_FAILURE
            if self.signals:
                return self._stop_during_startup("signal")
            if self.lost.is_set():
                self.log("rendezvous-failed", reason=self.lost_reason)
                return EXIT_FAILURE
            if time.monotonic() >= deadline:
                self.log("rendezvous-failed", reason=f"the world did not form in {timeout:g} s")
                return EXIT_FAILURE
            time.sleep(POLL_SECONDS)
        self.log("world-formed", master=f"{host}:{port}")
        self.phase = "loading"
        self.log("loading", seconds=self.settings.load_seconds)
        outcome = self._wait(self.settings.load_seconds)
        if outcome is None and self.opts.personality == "sglang":
            # SGLang's ranks past 0 serve a dummy /health once their schedulers are up.
            try:
                self.http = self._make_http_server()
                self.http.server_bind()
                self._listen()
            except OSError as error:
                self.log("fatal", reason=f"cannot serve health on {self.opts.port}: {error}")
                return EXIT_FAILURE
        if outcome is None:
            self.phase = "ready"
            self.log("ready", master=f"{host}:{port}")
            outcome = self._wait(3600.0 * 24 * 365)
        if outcome == "lost":
            self.log("fatal", reason=self.lost_reason)
            return EXIT_FAILURE
        if outcome == "shutdown":
            self.log("shutdown", reason="rank 0 stopped")
            return EXIT_OK
        self.log("stopping", reason="signal")  # SIGTERM: vLLM's headless mode exits cleanly
        return EXIT_OK

    def _on_master_message(self, peer: Peer, message: dict[str, object]) -> None:
        kind = message.get("type")
        if kind == "start":
            self.start_message.set()
        elif kind == "reject":
            self.rejected = str(message.get("reason"))
        elif kind == "shutdown":
            self.shutdown_message.set()

    def _on_master_lost(self, peer: Peer, reason: str) -> None:
        if self.phase == "stopped" or self.shutdown_message.is_set() or self.rejected:
            return
        self.lost_reason = f"lost rank 0: {reason}"
        self.lost.set()

    # ----------------------------------------------------------------- requests

    def begin_request(self) -> bool:
        with self.lock:
            # SGLang keeps taking new requests while it drains: nothing in its generate
            # path looks at gracefully_exit, which only /health reads
            # (sglang/srt/entrypoints/http_server.py:731-733), and its sigterm_watchdog
            # waits for every request, new ones too
            # (sglang/srt/managers/tokenizer_manager.py:3508-3539).
            sglang_drain = self.opts.personality == "sglang" and self.phase == "draining"
            if self.draining and not sglang_drain:
                return False
            self.in_flight += 1
            return True

    def end_request(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        p = self.opts.personality
        if path == "/debug/standin" and method == "GET":
            return json_reply(200, self.debug_info())
        if self.is_worker:  # SGLang's dummy health server on ranks past 0
            if method == "GET" and path in ("/health", "/health_generate", "/ping"):
                return Reply(200)
            return json_reply(404, {"detail": "Not Found"})
        if self.draining:
            health = method == "GET" and path in HEALTH_PATHS[p]
            if p == "vllm" and health and self.phase == "draining":
                # vLLM's /health asks the engine client, which raises only when the engine
                # is dead (vllm/entrypoints/serve/instrumentator/health.py:23-33), and the
                # HTTP server runs until the engine's drain ends
                # (vllm/entrypoints/launchers/launcher.py:262-283): 200 while it drains.
                return Reply(200)
            if not (p == "sglang" and self.phase == "draining" and not health):
                return self._refuse_draining(path)
        if method == "GET" and path in HEALTH_PATHS[p]:
            return self._health()
        if p == "llama-server" and self.phase != "ready":
            return self._llama_loading()
        if method == "GET" and path == "/metrics":
            return self._metrics_reply(headers)
        if path.startswith("/v1/") and not self._authorized(headers):
            return self._unauthorized()
        if method == "GET" and path == "/v1/models":
            return json_reply(200, self._models())
        if method == "GET" and path == "/version" and p == "vllm":
            return json_reply(200, {"version": VERSION})
        if method == "GET" and path == "/get_model_info" and p == "sglang":
            return json_reply(
                200,
                {
                    "model_path": self.opts.model,
                    "tokenizer_path": self.opts.model,
                    "is_generation": not self.opts.embedding,
                },
            )
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            if self.opts.embedding and p == "vllm":
                # vllm/entrypoints/launchers/api_server/routers.py register_api_routers
                # registers the generate routes only `if "generate" in supported_tasks`,
                # which a pooling runner's are not: FastAPI's 404 for a route it lacks.
                return json_reply(404, {"detail": "Not Found"})
            if self.opts.embedding and p == "sglang":
                # SGLang registers the route whatever the model; the request reaches the
                # embedding model, whose output has no "text" (managers/tokenizer_manager.py
                # _handle_batch_output), and serving_chat.py's reading of it raises KeyError,
                # which serving_base.py handle_request answers as a 500.
                return _sglang_error(500, "Internal server error: 'text'", "InternalServerError")
            # llama-server (llama.cpp in llama-cpp-python 0.3.36) registers and serves them
            # with --embeddings too (tools/server/server.cpp; no check of params.embedding in
            # server-context.cpp handle_completions_impl).
            return self._generate(path == "/v1/chat/completions", body)
        if method == "POST" and path == "/v1/embeddings":
            return self._embeddings(body)
        if p == "llama-server":
            return json_reply(
                404,
                {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
            )
        return json_reply(404, {"detail": "Not Found"})

    def _health(self) -> Reply:
        p = self.opts.personality
        if self.phase == "ready" and p == "sglang" and _sglang_health_generates():
            # sglang/srt/entrypoints/http_server.py health_generate: a one-token generation
            # through the scheduler before the 200, unless the variable turns it off.
            time.sleep(self.settings.sglang_health_seconds)
        if self.phase == "ready":
            # vLLM and SGLang answer an empty 200; llama-server says {"status": "ok"}.
            return json_reply(200, {"status": "ok"}) if p == "llama-server" else Reply(200)
        if p == "llama-server":
            return self._llama_loading()
        return Reply(503)

    def _llama_loading(self) -> Reply:
        error = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        return json_reply(503, {"error": error})

    def _refuse_draining(self, path: str) -> Reply:
        if path in HEALTH_PATHS[self.opts.personality] or self.opts.personality == "sglang":
            return Reply(503)
        return openai_error(503, "The server is shutting down.", "ServiceUnavailableError")

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        if not self.opts.api_keys:
            return True
        given = headers.get("authorization", "")
        return any(given == f"Bearer {key}" for key in self.opts.api_keys)

    def _unauthorized(self) -> Reply:
        if self.opts.personality == "llama-server":
            error = {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
            return json_reply(401, {"error": error})
        return json_reply(401, {"error": "Unauthorized"})

    def _models(self) -> dict[str, object]:
        p = self.opts.personality
        owner = {"vllm": "vllm", "sglang": "sglang", "llama-server": "llamacpp"}[p]
        cards: list[dict[str, object]] = []
        for name in self.opts.served_names[: 1 if p == "llama-server" else None]:
            card: dict[str, object] = {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": owner,
            }
            if p == "vllm":
                card.update(
                    root=self.opts.model,
                    parent=None,
                    max_model_len=self.opts.context_length or 4096,
                )
            elif p == "sglang":
                card.update(root=name, max_model_len=self.opts.context_length or 4096)
            else:
                card["meta"] = {"n_ctx_train": self.opts.context_length or 4096}
            cards.append(card)
        return {"object": "list", "data": cards}

    def _generate(self, chat: bool, body: bytes) -> Reply:
        p = self.opts.personality
        try:
            request = cast(object, json.loads(body or b"{}"))
        except ValueError:
            return openai_error(400, "The request body is not valid JSON.", "BadRequestError")
        if not isinstance(request, dict):
            return openai_error(400, "The request body must be a JSON object.", "BadRequestError")
        fields = cast(dict[str, object], request)
        if chat:
            messages = fields.get("messages")
            if not isinstance(messages, list) or not messages:
                return openai_error(
                    400, "messages: a non-empty list is required", "BadRequestError", "messages"
                )
            prompt = ""
            for message in reversed(cast(list[object], messages)):
                entry = cast(dict[str, object], message) if isinstance(message, dict) else {}
                if entry.get("role") == "user":
                    prompt = _message_text(entry.get("content"))
                    break
        else:
            raw = fields.get("prompt")
            prompt = raw if isinstance(raw, str) else _message_text(raw)
        asked = fields.get("model")
        if p == "vllm" and asked is not None and asked not in self.opts.served_names:
            return openai_error(
                404, f"The model `{asked}` does not exist.", "NotFoundError", "model"
            )
        # SGLang and llama-server (single-model mode) serve whatever name they are asked
        # for with their one model, and echo the name back.
        served = asked if asked in self.opts.served_names else self.opts.served_names[0]
        name = asked if isinstance(asked, str) and asked else served
        if not self.begin_request():
            return self._refuse_draining("")
        try:
            if not self._take_slot():
                aborted = True
            else:
                try:
                    tokens = len(self.answer(served, prompt).split())
                    seconds = _sleep_request(prompt) + tokens * self.settings.token_seconds
                    aborted = self.abort.wait(seconds) if seconds > 0 else self.abort.is_set()
                finally:
                    self._give_slot()
            if aborted:
                if p == "llama-server":
                    return Reply(0, drop=True)
                return openai_error(
                    500,
                    "The request was aborted: the engine is shutting down.",
                    "InternalServerError",
                )
            return self._completion(chat, name, served, prompt, fields.get("stream") is True)
        finally:
            self.end_request()

    def _embeddings(self, body: bytes) -> Reply:
        """POST /v1/embeddings, OpenAI's shape in each engine's variant."""
        p = self.opts.personality
        if not self.opts.embedding:
            if p == "llama-server":  # server-context.cpp handle_embeddings_impl
                return json_reply(501, {"error": {
                    "code": 501, "type": "not_supported_error",
                    "message": "This server does not support embeddings. Start it with"
                    " `--embeddings`",
                }})  # fmt: skip
            if p == "sglang":  # managers/tokenizer_manager.py _validate_one_request
                return _sglang_error(
                    400,
                    "This model does not appear to be an embedding model by default. Please"
                    " add `--is-embedding` when launching the server or try another model.",
                    "BadRequest",
                )
            return json_reply(404, {"detail": "Not Found"})  # vLLM: no pooling routes
        try:
            request = cast(object, json.loads(body or b"{}"))
        except ValueError:
            return openai_error(400, "The request body is not valid JSON.", "BadRequestError")
        fields = cast(dict[str, object], request) if isinstance(request, dict) else {}
        raw = fields.get("input")
        texts = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else None
        if not texts:
            return openai_error(400, "input: a string or a non-empty list", "BadRequestError")
        asked = fields.get("model")
        if p == "vllm" and asked is not None and asked not in self.opts.served_names:
            return openai_error(
                404, f"The model `{asked}` does not exist.", "NotFoundError", "model"
            )
        name = asked if isinstance(asked, str) and asked else self.opts.served_names[0]
        if not self.begin_request():
            return self._refuse_draining("")
        try:
            data = [
                {"object": "embedding", "index": index, "embedding": _embedding(str(text))}
                for index, text in enumerate(cast(list[object], texts))
            ]
        finally:
            self.end_request()
        tokens = sum(max(1, len(str(text).split())) for text in cast(list[object], texts))
        usage: dict[str, object] = {"prompt_tokens": tokens, "total_tokens": tokens}
        payload: dict[str, object] = {"object": "list", "data": data, "model": name}
        if p == "vllm":  # vllm/entrypoints/pooling/embed/protocol.py EmbeddingResponse
            payload.update(id=f"embd-{uuid.uuid4().hex}", created=int(time.time()))
        if p != "llama-server":  # llama-server's usage has the two counts only
            usage.update(completion_tokens=0, prompt_tokens_details=None)
        payload["usage"] = usage
        return json_reply(200, payload)

    def _take_slot(self) -> bool:
        """Wait in the queue for one of the engine's max_running slots, as the real
        schedulers hold a request waiting while their batch is full; False: aborted."""
        with self.slots:
            self.waiting += 1
            try:
                while self.running >= self.opts.max_running:
                    if self.abort.is_set():
                        return False
                    self.slots.wait(POLL_SECONDS)
            finally:
                self.waiting -= 1
            self.running += 1
            return True

    def _give_slot(self) -> None:
        with self.slots:
            self.running -= 1
            self.slots.notify()

    def metrics(self) -> Reply:
        """The load gauges at the names, types and labels the pinned engines use.

        vLLM (vllm/v1/metrics/loggers.py, PrometheusStatLogger): gauges labelled
        model_name and engine (the engine core's index, "0"); KV use 0 to 1.
        SGLang (sglang/srt/metrics/collector.py, SchedulerMetricsCollector): gauges
        labelled with the served model_name (and the engine type and ranks); token_usage 0 to
        1. llama-server (tools/server/server-context.cpp, the metrics handler): unlabelled
        gauges; the llama.cpp of llama-cpp-python 0.3.36 has no KV-use gauge (its binary
        names only requests_processing and requests_deferred), so none is served.
        The stand-in has no KV cache: it reports the share of its slots in use."""
        with self.lock:
            running, waiting = self.running, self.waiting
        usage = running / self.opts.max_running
        name = self.opts.served_names[0]
        p = self.opts.personality
        if p == "vllm":
            labels = f'{{model_name="{name}",engine="0"}}'
            gauges = [
                ("vllm:num_requests_running", "Number of requests in model execution batches.",
                 running),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                 waiting),
                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage),
            ]  # fmt: skip
        elif p == "sglang":
            labels = f'{{model_name="{name}",engine_type="unified",tp_rank="0",pp_rank="0"}}'
            gauges = [
                ("sglang:num_running_reqs", "The number of running requests.", running),
                ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                 waiting),
                ("sglang:token_usage", "The token usage.", usage),
            ]  # fmt: skip
        else:
            labels = ""
            gauges = [
                ("llamacpp:requests_processing", "Number of requests processing", running),
                ("llamacpp:requests_deferred", "Number of requests deferred", waiting),
            ]
        lines: list[str] = []
        for metric, help_text, value in gauges:
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge",
                      f"{metric}{labels} {float(value)}"]  # fmt: skip
        body = ("\n".join(lines) + "\n").encode()
        return Reply(200, body, "text/plain; version=0.0.4; charset=utf-8")

    def _metrics_reply(self, headers: Mapping[str, str]) -> Reply:
        p = self.opts.personality
        if not self.opts.metrics:
            if p == "llama-server":
                message = "This server does not support metrics endpoint. Start it with `--metrics`"
                error = {"code": 501, "message": message, "type": "not_supported_error"}
                return json_reply(501, {"error": error})
            return json_reply(404, {"detail": "Not Found"})
        # llama-server's API key guards every path but its public ones (/health, /models):
        # /metrics too (tools/server/server-http.cpp, public_endpoints).
        if p == "llama-server" and not self._authorized(headers):
            return self._unauthorized()
        return self.metrics()

    def answer(self, served: str, prompt: str) -> str:
        o = self.opts
        return (
            f"{served} answered from {self.hostname} ({o.personality} stand-in, rank 0 of"
            f" {o.nnodes} node(s), tensor-parallel {o.tensor_parallel}, pipeline-parallel"
            f" {o.pipeline_parallel}). You said: {prompt[:200]}"
        )

    def _completion(self, chat: bool, name: str, served: str, prompt: str, stream: bool) -> Reply:
        content = self.answer(served, prompt)
        prompt_tokens = max(1, len(prompt.split()))
        completion_tokens = len(content.split())
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if stream:
            return Reply(200, events=list(self._stream(chat, ident, created, name, content)))
        choice: dict[str, object] = {"index": 0, "logprobs": None, "finish_reason": "stop"}
        if chat:
            choice["message"] = {"role": "assistant", "content": content}
        else:
            choice["text"] = content
        return json_reply(
            200,
            {
                "id": ident,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": name,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    def _stream(
        self, chat: bool, ident: str, created: int, name: str, content: str
    ) -> Iterator[bytes]:
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(piece: dict[str, object]) -> bytes:
            chunk = {"id": ident, "object": kind, "created": created, "model": name}
            chunk["choices"] = [{"index": 0, **piece}]
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        if chat:
            yield event({"delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            yield event({"delta": {"content": content}, "finish_reason": None})
            yield event({"delta": {}, "finish_reason": "stop"})
        else:
            yield event({"text": content, "finish_reason": None})
            yield event({"text": "", "finish_reason": "stop"})
        yield b"data: [DONE]\n\n"

    def debug_info(self) -> dict[str, object]:
        return {
            "standin": True,
            "note": "modelfleet's stand-in engine; /debug/standin is in no real engine's API",
            "personality": self.opts.personality,
            "invoked_as": self.invoked_as,
            "argv": sys.argv,
            "pid": os.getpid(),
            "hostname": self.hostname,
            "rank": self.opts.node_rank,
            "nnodes": self.opts.nnodes,
            "phase": self.phase,
            "in_flight": self.in_flight,
            "running": self.running,
            "waiting": self.waiting,
            "max_running": self.opts.max_running,
            "token_seconds": self.settings.token_seconds,
            "model": self.opts.model,
            "served_model_names": self.opts.served_names,
            "tensor_parallel": self.opts.tensor_parallel,
            "pipeline_parallel": self.opts.pipeline_parallel,
            "rendezvous": None
            if self.opts.rendezvous is None
            else f"{self.opts.rendezvous[0]}:{self.opts.rendezvous[1]}",
            "shutdown_timeout": self.opts.shutdown_timeout,
            "options": self.opts.parsed,
            "unknown_args": self.opts.unknown,
            "env": self.environment(),
            "workers": self._worker_list(),
            "load_seconds": self.settings.load_seconds,
            "tls_serial": self.tls_serial,
        }


HEALTH_PATHS: Final[dict[Personality, tuple[str, ...]]] = {
    "vllm": ("/health", "/ping"),
    "sglang": ("/health", "/health_generate"),
    "llama-server": ("/health", "/v1/health"),
}


# --------------------------------------------------------------------------- main


def _wants_version(personality: Personality, args: Sequence[str]) -> bool:
    # vllm: -v/--version; llama-server: --version (its -v is --verbose); SGLang's
    # launch_server has no such flag.
    if personality == "vllm":
        return args[:1] in (["-v"], ["--version"])
    return personality == "llama-server" and "--version" in args


def _sglang_health_generates() -> bool:
    """SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION, an EnvBool defaulting to true
    (sglang/srt/environ.py): false, 0, no or n turn /health's generation off."""
    value = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true")
    return value.strip().lower() not in ("false", "0", "no", "n")


def main(argv: Sequence[str] | None = None, module: str | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    personality: Personality | None = None
    try:
        override, args = take_personality_override(args)
        personality = override or detect_personality(sys.argv[0], module)
        if personality is None:
            raise UsageError(
                "standin: error: cannot tell which engine to be from how it was started"
                f" ({sys.argv[0]!r}); install it as vllm, llama-server or"
                " sglang/launch_server.py, or pass --personality"
            )
        if _wants_version(personality, args):
            if personality == "llama-server":
                log_line(f"version: 0 ({VERSION})\nbuilt with the modelfleet stand-in")
            else:
                sys.stdout.write(VERSION + "\n")
            return EXIT_OK
        options = PARSERS[personality](args)
        settings = Settings.load(os.environ)
    except StartError as error:
        log_line(f"ValueError: {error}")
        log_line("standin: " + json.dumps({"event": "bad-arguments", "exit": EXIT_FAILURE}))
        return EXIT_FAILURE
    except UsageError as error:
        if error.usage:
            sys.stderr.write(error.usage)
        log_line(error.message)
        # argparse exits 2; llama-server's own parser makes main() return 1.
        code = EXIT_FAILURE if personality == "llama-server" else EXIT_USAGE
        log_line("standin: " + json.dumps({"event": "bad-arguments", "exit": code}))
        return code
    if personality == "llama-server" and options.tls and not settings.llama_server_ssl:
        # tools/server/server.cpp (llama.cpp in llama-cpp-python 0.3.36), main: without
        # CPPHTTPLIB_OPENSSL_SUPPORT both SSL files are an error and main returns 1.
        log_line("Server is built without SSL support")
        return EXIT_FAILURE
    invoked_as = f"python3 -m {module}" if module else Path(sys.argv[0]).name
    url = _optional_str(options.parsed, "model_url") if personality == "llama-server" else None
    if url is not None and _optional_str(options.parsed, "model") is None:
        failure = _download_model_url(url)
        if failure is not None:
            log_line(failure)
            return EXIT_FAILURE
    return Engine(options, settings, invoked_as).run()


def _download_model_url(url: str) -> str | None:
    """llama-server --model-url: the file is downloaded into llama.cpp's cache before the
    server starts (common/arg.cpp: common_params_parse_ex → common_params_handle_model →
    common_download_model, at argument parsing, so nothing listens meanwhile), to
    $LLAMA_CACHE or ~/.cache/llama.cpp/, named by the URL's last path element; a file
    already there with the size the server gives is not fetched again (upstream compares
    the ETag it kept). Returns why it failed, or None."""
    cache = Path(os.environ.get("LLAMA_CACHE") or Path.home() / ".cache" / "llama.cpp")
    target = cache / (urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1] or "model.gguf")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        head = urllib.request.Request(url, method="HEAD")  # upstream asks for the ETag first
        with urllib.request.urlopen(head, timeout=60) as response:
            size = int(response.headers.get("Content-Length") or -1)
        if target.exists() and target.stat().st_size == size:
            return None
        with urllib.request.urlopen(url, timeout=60) as response:
            partial = target.with_name(target.name + ".downloadInProgress")
            with partial.open("wb") as out:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
            partial.replace(target)
    except (OSError, ValueError) as error:
        return f"common_download_file_single: failed to download {url}: {error}"
    return None


if __name__ == "__main__":
    _spec = globals().get("__spec__")
    _module = getattr(_spec, "name", None)
    sys.exit(main(module=_module if isinstance(_module, str) else None))
