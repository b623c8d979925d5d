"""Each engine ctl runs, in one place: one `EngineSpec` per engine. Pure.

A spec says how the engine's command line is built (single node and multi-node), its
environment, where it says it is healthy and ready, how it stops (whether SIGTERM drains,
and for how long), how it serves embeddings, which model sources it reads, the LiteLLM
provider that talks to it, the release its options are checked against (the data made by
scripts/engine_flags.py) and the oldest release that takes every command line ctl writes.

Adding an engine is adding a spec here, its stand-in (tests/fakes/engine.py), its option
data (scripts/engine_flags.py) and its docs; everything else reads the specs. This module
imports nothing of ctl, so the catalog's schema and loader can use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

# Where ranks of a multi-node replica meet: rank 0's address at this offset from the port.
RENDEZVOUS_OFFSET = 10000

# The sources an engine downloads over HTTP itself, a token with them where it has one
# (s3:// is read with the node's own cloud credentials, file:// is local).
FETCHED_SOURCES = ("hf://", "https://", "http://")


@dataclass(frozen=True)
class Rank:
    """One shard's place in its replica."""

    rank: int
    nodes: int
    port: int
    master_address: str  # rank 0's address, as the other ranks reach it
    gpus: tuple[int, ...] = ()
    hcas: tuple[str, ...] = ()
    listen: str = "0.0.0.0"  # the address the engine serves on
    # This rank's own address for the engine's control traffic (vLLM's VLLM_HOST_IP):
    # the address it serves on, or its fabric address when the replica spans nodes.
    host_ip: str | None = None
    # The network interface ranks of a multi-node replica talk over (NCCL_SOCKET_IFNAME,
    # GLOO_SOCKET_IFNAME), from the inventory's `fabric_interface`.
    socket_ifname: str | None = None

    @property
    def rendezvous_port(self) -> int:
        return self.port + RENDEZVOUS_OFFSET


class ProfileSpec(Protocol):
    """What a command line reads of a catalog profile (cli/catalog/schema.py Profile)."""

    @property
    def engine(self) -> str: ...
    @property
    def uses_gpus(self) -> bool: ...
    @property
    def tp(self) -> int: ...
    @property
    def pipeline_parallel(self) -> int: ...
    @property
    def context_length(self) -> int | None: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def drain_seconds(self) -> int: ...
    @property
    def embedding(self) -> bool: ...
    @property
    def args(self) -> tuple[str, ...]: ...


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 address bracketed: `[fd00::1]:18000`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def model_argument(source: str) -> str:
    """What the engine loads: `hf://Org/Name` → `Org/Name`, `file:///p` → `/p`."""
    if source.startswith("hf://"):
        return source.removeprefix("hf://")
    if source.startswith("file://"):
        return source.removeprefix("file://")
    return source


Builder = Callable[[ProfileSpec, str, str, Rank], list[str]]


@dataclass(frozen=True)
class LoadMetrics:
    """The gauges an engine's `/metrics` says its load with (Prometheus text format)."""

    running: str  # requests it is generating for now
    waiting: str  # requests queued behind them
    kv_use: str | None  # the share of its KV cache in use, 0 to 1; None: it has no such gauge


@dataclass(frozen=True)
class EngineSpec:
    name: str  # the catalog's `engine`
    label: str  # for people
    command: tuple[str, ...]  # the program ctl starts
    build: Builder  # the arguments after the program, before the profile's own `args`
    # The release whose parser the command lines are checked against, and its package.
    pinned_version: str
    package: str
    package_kind: str  # "wheel" or "sdist"
    # The oldest release that takes every command line ctl writes, and why.
    min_version: str
    min_version_why: str
    needs_gpus: bool
    multi_node: bool
    sources: tuple[str, ...]  # the model sources it reads, as URL prefixes
    # The sources ctl stages in the node's model store before starting it (cli/shards/
    # staging.py), and the environment that keeps it from fetching anything itself then.
    stages: tuple[str, ...]
    offline_environment: Mapping[str, str]
    # Where it reads, when it fetches weights itself (a source not staged), the token it
    # sends and the hub (or mirror) it fetches `hf://` sources from.
    token_environment: tuple[str, ...]
    endpoint_environment: tuple[str, ...]
    embedding_args: tuple[str, ...]  # what `embedding: true` adds
    litellm_provider: str
    health_path: str  # 200 once it serves
    ready_path: str  # lists the served model
    drains: bool  # SIGTERM lets requests in flight finish
    stop: str  # how SIGTERM stops it, for the docs
    # How a multi-node replica being retired stops, and why, for the docs: rank 0 first
    # and waited for, then the other ranks (cli/reconcile/apply.py, for every engine).
    stop_order: str
    start: str  # the command line, for the docs
    multi_node_start: str  # what multi-node adds, for the docs
    # How its parser reads option names: vLLM takes --foo_bar for --foo-bar.
    underscores_are_dashes: bool = False
    # vLLM's FlexibleArgumentParser: `--json-arg.key value`, `--list-arg+ value` and
    # `-O3` (vllm/utils/argparse_utils.py parse_args).
    dotted_options: bool = False
    # Its parser is Python's argparse: `--option=value`, and a value after its option
    # unless it looks like an option itself. Not: every token is looked up whole and
    # the one after an option that takes a value is its value (llama.cpp's).
    argparse: bool = False
    # Its parser takes a unique prefix of a `--` option for the option (argparse's
    # allow_abbrev, its default), and refuses a prefix that several options share.
    abbreviations: bool = False
    # Options it no longer has, with what to write instead (from the engine's own hints).
    replacements: Mapping[str, str] = field(default_factory=dict)
    environment: Callable[[ProfileSpec, Rank], dict[str, str]] | None = None
    # Other spellings of `embedding_args` that mean the same to the engine's parser.
    embedding_aliases: tuple[tuple[str, ...], ...] = ()
    # How it serves TLS: its options for the key and certificate files, and those that make
    # it reload them when they change (a renewal); none: it must be restarted to serve a
    # renewed certificate.
    tls_key_option: str = ""
    tls_cert_option: str = ""
    tls_reload_args: tuple[str, ...] = ()
    tls: str = ""  # for the docs
    # Its load, read by the facts probe from its /metrics (cli/facts/sections/load.py);
    # `metrics_args` is what its command line needs for it to serve them.
    load_metrics: LoadMetrics | None = None
    metrics_args: tuple[str, ...] = ()

    def tls_args(self, key: str, cert: str) -> list[str]:
        return [self.tls_key_option, key, self.tls_cert_option, cert, *self.tls_reload_args]

    @property
    def reloads_certificate(self) -> bool:
        return bool(self.tls_reload_args)

    def serves_embeddings(self, profile: ProfileSpec) -> bool:
        """`embedding: true`, or the profile's own args already hold the embedding args."""
        if profile.embedding:
            return True
        args: list[str] = []
        for token in profile.args:  # --runner=pooling reads as --runner pooling
            name, equals, value = token.partition("=")
            args += [option_name(self, name), value] if equals else [option_name(self, token)]
        for wanted in (self.embedding_args, *self.embedding_aliases):
            if any(tuple(args[i : i + len(wanted)]) == wanted for i in range(len(args))):
                return True
        return False

    def reads(self, source: str) -> bool:
        return source.startswith(self.sources)

    def fetches(self, source: str) -> bool:
        """It downloads `source` itself, from the hub or the URL, when not staged."""
        return self.reads(source) and source.startswith(FETCHED_SOURCES)


def option_name(spec: EngineSpec, token: str) -> str:
    """How the engine's parser names an option token: `--max_model_len=5` → `--max-model-len`
    (llama.cpp's looks `--seed=1` up whole, and has no such option)."""
    name = token.partition("=")[0] if spec.argparse else token
    if spec.underscores_are_dashes and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


# --------------------------------------------------------------------------- vLLM


def _vllm(profile: ProfileSpec, model: str, source: str, place: Rank) -> list[str]:
    argv = [
        model_argument(source),
        "--host", place.listen,
        "--port", str(place.port),
        "--served-model-name", model,
    ]  # fmt: skip
    if profile.uses_gpus:
        argv += [
            "--tensor-parallel-size", str(profile.tp),
            "--pipeline-parallel-size", str(profile.pipeline_parallel),
        ]  # fmt: skip
    if profile.context_length is not None:
        argv += ["--max-model-len", str(profile.context_length)]
    argv += ["--shutdown-timeout", str(profile.drain_seconds)]
    if profile.embedding:
        argv += list(VLLM.embedding_args)
    if place.nodes > 1:
        argv += [
            "--nnodes", str(place.nodes),
            "--node-rank", str(place.rank),
            "--master-addr", place.master_address,
            "--master-port", str(place.rendezvous_port),
        ]  # fmt: skip
        if place.rank > 0:
            argv.append("--headless")  # workers serve no API; rank 0 does
    return argv


def _vllm_environment(profile: ProfileSpec, place: Rank) -> dict[str, str]:  # noqa: ARG001
    # Rank 0 binds its message queue on VLLM_HOST_IP, else the default route's address,
    # which on a node with two networks may be the wrong one (vllm/utils/network_utils.py
    # get_ip). The serving address unless the placement gave a fabric address.
    env: dict[str, str] = {}
    host_ip = place.host_ip or (place.listen if place.listen not in ("0.0.0.0", "::") else None)
    if host_ip is not None:
        env["VLLM_HOST_IP"] = host_ip
    return env


VLLM = EngineSpec(
    name="vllm",
    label="vLLM",
    command=("vllm", "serve"),
    build=_vllm,
    pinned_version="0.34.0",
    package="vllm",
    package_kind="wheel",
    min_version="0.18.0",
    min_version_why="the first with --shutdown-timeout (vllm#36666), which ctl always writes",
    needs_gpus=True,
    multi_node=True,
    sources=("hf://", "file://", "s3://"),
    stages=("hf://",),
    # huggingface_hub's constants.py: no request to the hub, files from disk only.
    offline_environment={"HF_HUB_OFFLINE": "1"},
    # huggingface_hub's constants.py, which vLLM downloads with.
    token_environment=("HF_TOKEN",),
    endpoint_environment=("HF_ENDPOINT",),
    embedding_args=("--runner", "pooling"),
    litellm_provider="hosted_vllm",
    health_path="/health",
    ready_path="/v1/models",
    drains=True,
    stop="drains: `--shutdown-timeout drain_seconds`; `/health` says 200 meanwhile, new "
    "requests are aborted",
    # vllm/entrypoints/cli/serve.py run_headless: SIGTERM raises SystemExit at once.
    stop_order="rank 0 first, waited for, then the others: a `--headless` rank exits at once "
    "on SIGTERM (entrypoints/cli/serve.py), which would take rank 0's workers away mid-drain",
    start="`vllm serve MODEL --host H --port P --served-model-name NAME "
    "--tensor-parallel-size TP --pipeline-parallel-size PP [--max-model-len N] "
    "--shutdown-timeout S [--runner pooling]`",
    multi_node_start="`--nnodes N --node-rank R --master-addr RANK0 --master-port P+10000`, "
    "`--headless` on ranks > 0; `VLLM_HOST_IP`",
    underscores_are_dashes=True,
    dotted_options=True,
    # vllm/entrypoints/cli/serve.py: `subparsers.add_parser("serve", ...)` makes a
    # FlexibleArgumentParser (vllm/utils/argparse_utils.py) without allow_abbrev=False.
    argparse=True,
    abbreviations=True,
    replacements={
        # vllm/utils/argparse_utils.py FlexibleArgumentParser.error's hint.
        "--task": "use --runner pooling (set `embedding: true`), and --convert embed to "
        "adapt a generative model",
    },
    environment=_vllm_environment,
    # vllm/entrypoints/common/cli_args.py (0.34): uvicorn serves TLS from these; the
    # refresher (vllm/entrypoints/launchers/utils/ssl.py) watches both files with
    # watchfiles and loads the pair again into the live SSL context when they change.
    tls_key_option="--ssl-keyfile",
    tls_cert_option="--ssl-certfile",
    tls_reload_args=("--enable-ssl-refresh",),
    tls="`--ssl-keyfile --ssl-certfile --enable-ssl-refresh`: reloads a renewed certificate; "
    "client certificates (mTLS) possible with `--ssl-ca-certs CA --ssl-cert-reqs 2`",
    # vllm/v1/metrics/loggers.py (PrometheusStatLogger): served on /metrics without any
    # option, labelled model_name and engine; kv_cache_usage_perc replaced gpu_cache_usage_perc.
    load_metrics=LoadMetrics(
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
    ),
)

# --------------------------------------------------------------------------- SGLang


def _sglang(profile: ProfileSpec, model: str, source: str, place: Rank) -> list[str]:
    argv = [
        "--model-path", model_argument(source),
        "--host", place.listen,
        "--port", str(place.port),
        "--served-model-name", model,
        "--tp-size", str(max(profile.tp, 1)),
    ]  # fmt: skip
    if profile.pipeline_parallel > 1:
        argv += ["--pp-size", str(profile.pipeline_parallel)]
    if profile.context_length is not None:
        argv += ["--context-length", str(profile.context_length)]
    argv += list(SGLANG.metrics_args)
    if profile.embedding:
        argv += list(SGLANG.embedding_args)
    if place.nodes > 1:
        argv += [
            "--nnodes", str(place.nodes),
            "--node-rank", str(place.rank),
            # SGLang's NetworkAddress.parse (srt/utils/network.py) refuses a bare IPv6.
            "--dist-init-addr", host_port(place.master_address, place.rendezvous_port),
        ]  # fmt: skip
    return argv


def _sglang_environment(profile: ProfileSpec, place: Rank) -> dict[str, str]:  # noqa: ARG001
    # SGLang's /health runs a one-token generation through the scheduler and answers after
    # at least one second (sglang/srt/entrypoints/http_server.py health_generate: it sleeps
    # 1 s before it looks for the answer); the router's relay gives a health check 800 ms
    # (playbooks/deploy_router.yml), so every check would fail and take the replica out.
    # False makes /health answer at once, still 503 while starting and while it drains;
    # /health_generate keeps the generation for whoever wants it (sglang/srt/environ.py).
    return {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"}


SGLANG = EngineSpec(
    name="sglang",
    label="SGLang",
    command=("python3", "-m", "sglang.launch_server"),
    build=_sglang,
    pinned_version="0.5.23",
    package="sglang",
    package_kind="wheel",
    min_version="0.5.23",
    min_version_why="the release ctl's command lines are checked against; older ones are not",
    needs_gpus=True,
    multi_node=True,
    sources=("hf://", "file://", "s3://"),
    stages=("hf://",),
    offline_environment={"HF_HUB_OFFLINE": "1"},
    token_environment=("HF_TOKEN",),  # huggingface_hub's, as vLLM's
    endpoint_environment=("HF_ENDPOINT",),
    embedding_args=("--is-embedding",),
    litellm_provider="openai",
    health_path="/health",
    ready_path="/v1/models",
    drains=True,
    stop="drains without a bound, still taking new requests; `/health` says 503; ranks > 0 "
    "ignore SIGTERM until rank 0 tells them to stop",
    stop_order="rank 0 first, waited for, then the others: they stop when rank 0 tells them, "
    "so their own stop then finds them gone rather than waiting out its timeout",
    start="`python3 -m sglang.launch_server --model-path MODEL --host H --port P "
    "--served-model-name NAME --tp-size TP [--pp-size PP] [--context-length N] "
    "--enable-metrics [--is-embedding]`",
    multi_node_start="`--nnodes N --node-rank R --dist-init-addr RANK0:P+10000` (an IPv6 "
    "RANK0 bracketed: `[fd00::1]:18000`)",
    # sglang/srt/server_args.py prepare_server_args: argparse.ArgumentParser(prog=...).
    argparse=True,
    abbreviations=True,
    # sglang/srt/arg_groups/serving_hook.py handle_ssl_validation (0.5.23): both files or
    # neither; --enable-ssl-refresh reloads them (sglang/srt/entrypoints/ssl_utils.py).
    # Not --ssl-ca-certs: with it, the server's warm-up request verifies its own
    # certificate for 127.0.0.1 when it listens on 0.0.0.0 (ServerArgs.url), which a node
    # certificate does not name, and the server never becomes ready.
    tls_key_option="--ssl-keyfile",
    tls_cert_option="--ssl-certfile",
    tls_reload_args=("--enable-ssl-refresh",),
    tls="`--ssl-keyfile --ssl-certfile --enable-ssl-refresh`: reloads a renewed certificate; "
    "no client certificates (its HTTP server says mTLS is not supported)",
    # sglang/srt/metrics/collector.py (SchedulerMetricsCollector); /metrics is served only
    # with --enable-metrics (sglang/srt/entrypoints/http_server.py).
    load_metrics=LoadMetrics(
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"
    ),
    metrics_args=("--enable-metrics",),
    environment=_sglang_environment,
)

# --------------------------------------------------------------------------- llama.cpp


def _llama_cpp(profile: ProfileSpec, model: str, source: str, place: Rank) -> list[str]:
    if source.startswith("hf://"):
        argv = ["-hf", model_argument(source)]
    elif source.startswith(("https://", "http://")):
        argv = ["--model-url", source]
    else:
        argv = ["-m", model_argument(source)]
    argv += ["--host", place.listen, "--port", str(place.port), "--alias", model]
    if profile.threads is not None:
        argv += ["--threads", str(profile.threads)]
    if profile.context_length is not None:
        argv += ["--ctx-size", str(profile.context_length)]
    if profile.uses_gpus:
        argv += ["--n-gpu-layers", "999"]  # all layers on the GPUs it was given
    argv += list(LLAMA_CPP.metrics_args)
    if profile.embedding:
        argv += list(LLAMA_CPP.embedding_args)
    return argv


LLAMA_CPP = EngineSpec(
    name="llama.cpp",
    label="llama.cpp",
    command=("llama-server",),
    build=_llama_cpp,
    pinned_version="0.3.36",
    package="llama-cpp-python",
    package_kind="sdist",
    min_version="0.3.36",
    min_version_why="the llama-cpp-python release whose vendored llama.cpp ctl's command "
    "lines are checked against; older ones are not",
    needs_gpus=False,
    multi_node=False,
    sources=("hf://", "file://", "https://", "http://"),
    # One file by URL; its hf:// repositories hold a file per quantisation: -hf picks one.
    stages=("https://", "http://"),
    offline_environment={},  # `-m PATH` reads the file and nothing else
    # common/arg.cpp common_params_parse_ex: "_" becomes "-" in a token starting "--".
    underscores_are_dashes=True,
    # common/arg.cpp: --hf-token's set_env("HF_TOKEN"), sent as a bearer token by every
    # download (-hf and --model-url alike, common/download.cpp); common.cpp
    # common_get_model_endpoint: MODEL_ENDPOINT, else HF_ENDPOINT, else the hub.
    token_environment=("HF_TOKEN",),
    endpoint_environment=("MODEL_ENDPOINT",),
    embedding_args=("--embeddings",),
    embedding_aliases=(("--embedding",),),
    litellm_provider="openai",
    health_path="/health",
    ready_path="/v1/models",
    drains=False,
    stop="does not drain: SIGTERM stops it at once, dropping requests in flight; a second "
    "signal exits 1; `drain_seconds` does nothing",
    stop_order="—",
    start="`llama-server -m PATH` (or `-hf ORG/NAME`, `--model-url URL`) `--host H --port P "
    "--alias NAME [--threads T] [--ctx-size N] --metrics [--embeddings]`",
    multi_node_start="—",
    # common/arg.cpp (the llama.cpp in llama-cpp-python 0.3.36, built with OpenSSL):
    # cpp-httplib's SSLServer reads them once, at start.
    tls_key_option="--ssl-key-file",
    tls_cert_option="--ssl-cert-file",
    tls="`--ssl-key-file --ssl-cert-file`: read once, so ctl restarts it, one replica at a "
    "time, after a renewal; no client certificates",
    # tools/server/server-context.cpp's metrics handler, which answers 501 without
    # --metrics. The llama.cpp of 0.3.36 has no KV-use gauge (llamacpp:kv_cache_usage_ratio
    # was removed before it: its binary names none), so KV use is unknown.
    load_metrics=LoadMetrics("llamacpp:requests_processing", "llamacpp:requests_deferred", None),
    metrics_args=("--metrics",),
)

ENGINE_SPECS: dict[str, EngineSpec] = {spec.name: spec for spec in (VLLM, SGLANG, LLAMA_CPP)}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_SPECS)


def engine_spec(name: str) -> EngineSpec:
    return ENGINE_SPECS[name]


def tls_table() -> str:
    """docs/routing.md's table (cog): how each engine serves TLS with the node's certificate."""
    lines = ["| engine | TLS |", "|---|---|"]
    lines += [f"| {spec.label} | {spec.tls} |" for spec in ENGINE_SPECS.values()]
    return "\n".join(lines) + "\n"


def engine_table() -> str:
    """docs/reconcile.md's engine table (cog): how each engine starts, stops and is checked."""
    lines = [
        "| engine | command line | multi-node | SIGTERM | multi-node stop | health, ready |"
        " checked against |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in ENGINE_SPECS.values():
        multi = spec.multi_node_start if spec.multi_node else "—"
        lines.append(
            f"| {spec.label} | {spec.start} | {multi} | {spec.stop} | {spec.stop_order} | "
            f"`{spec.health_path}`, `{spec.ready_path}` | {spec.package} "
            f"{spec.pinned_version} (from {spec.min_version}: {spec.min_version_why}) |"
        )
    return "\n".join(lines) + "\n"
