"""The engine specs (cli/engines/specs.py) and the check of every command line against the
options of the engine release's own parser (cli/engines/flags.py, the data of
scripts/engine_flags.py), at catalog load and in `ctl catalog check`. Pure but for one
`ctl` run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.catalog.load import parse_catalog
from cli.engines.flags import (
    DATA_DIR,
    ValueRule,
    accepted_options,
    check_options,
    option_values,
    pooling_only_architectures,
)
from cli.engines.specs import ENGINE_SPECS, Rank, engine_spec, engine_table
from cli.errors import InputError
from cli.shards.engines import command_line, environment
from cli.shards.units import shard_files
from tests.builders import NOW
from tests.ctl import ctl

ROOT = Path(__file__).resolve().parents[3]


def problems_of(text: str) -> list[str]:
    with pytest.raises(InputError) as raised:
        parse_catalog(text, "catalog.yaml")
    return [str(problem) for problem in raised.value.problems]


def one_profile(**fields: object) -> str:
    profile = {"name": "p", "priority": 1, **fields}
    body = ", ".join(f"{key}: {json.dumps(value)}" for key, value in profile.items())
    return f"models:\n  m:\n    source: hf://org/m\n    profiles:\n      - {{{body}}}\n"


def test_vllm_034_refuses_task_embed_naming_the_option_its_replacement_file_line_and_key() -> None:
    text = one_profile(engine="vllm", gpu_class="L40S", gpus_per_node=1, args=["--task", "embed"])
    assert problems_of(text) == [
        "catalog.yaml:5: models.m.profiles[0].args[0]: vLLM 0.34 has no --task: use --runner"
        " pooling (set `embedding: true`), and --convert embed to adapt a generative model"
    ]


def test_ctl_catalog_check_exits_2_on_task_embed(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        one_profile(engine="vllm", gpu_class="L40S", gpus_per_node=1, args=["--task", "embed"])
    )
    result = ctl("catalog", "check", "--catalog", str(catalog))
    assert result.returncode == 2
    assert "args[0]: vLLM 0.34 has no --task: use --runner pooling" in result.stderr


@pytest.mark.parametrize(
    ("engine", "args", "message"),
    [
        ("sglang", ["--enforce-eager"], "SGLang 0.5.23 has no --enforce-eager"),
        ("llama.cpp", ["--ctx-si", "9"], "write the option whole (--ctx-size)"),
        ("vllm", ["--max-model-lenn", "9"], "(did you mean --max-model-len?)"),
        ("llama.cpp", ["--no-mmap"], "llama.cpp 0.3.36 has no --no-mmap"),
        # An abbreviation several options share, refused as argparse's "ambiguous option".
        (
            "sglang",
            ["--pp", "2"],
            "SGLang 0.5.23 reads --pp as any of --pp-async-batch-depth, --pp-max-micro-batch-size",
        ),
        ("vllm", ["--enable-p"], "reads --enable-p as any of --enable-per-request-metrics,"),
    ],
)
def test_an_option_the_release_lacks_is_refused_with_a_hint(
    engine: str, args: list[str], message: str
) -> None:
    gpus = {"gpu_class": "H100", "gpus_per_node": 1}
    [problem] = problems_of(one_profile(engine=engine, args=args, **gpus))
    assert problem.startswith("catalog.yaml:5: models.m.profiles[0].args[0]: ")
    assert message in problem


@pytest.mark.parametrize(
    ("engine", "args", "whole"),
    [
        # argparse's allow_abbrev (SGLang's prepare_server_args, vLLM's serve subparser):
        # a unique prefix is that option, and ctl writes it whole.
        ("sglang", ["--tp", "2"], ["--tp-size", "2"]),
        ("sglang", ["--context-len=9"], ["--context-length=9"]),
        ("vllm", ["--max_model_l", "9"], ["--max-model-len", "9"]),
        ("vllm", ["--compilation-conf.mode", "3"], ["--compilation-config.mode", "3"]),
    ],
)
def test_an_abbreviation_the_parser_expands_is_taken_and_written_whole(
    engine: str, args: list[str], whole: list[str]
) -> None:
    text = one_profile(engine=engine, gpu_class="H100", gpus_per_node=1, args=args)
    assert parse_catalog(text, "catalog.yaml").models["m"].profiles[0].spec.args == tuple(whole)


@pytest.mark.parametrize(
    ("engine", "args", "index", "message"),
    [
        # vllm/config/model.py RunnerOption: Literal["auto", RunnerType], argparse choices.
        (
            "vllm",
            ["--runner", "embed"],
            1,
            "vLLM 0.34's --runner takes one of auto, draft, generate, pooling, not 'embed'",
        ),
        ("vllm", ["--runner=embed"], 0, "takes one of auto, draft, generate, pooling"),
        ("vllm", ["--max-num-seqs", "many"], 1, "--max-num-seqs takes an integer, not 'many'"),
        ("vllm", ["--gpu-memory-utilization", "most"], 1, "takes a number, not 'most'"),
        ("vllm", ["--seed"], 0, "--seed needs a value"),
        ("vllm", ["--seed", "--enforce-eager"], 0, "--seed needs a value"),
        ("sglang", ["--random-seed", "x1"], 1, "--random-seed takes an integer, not 'x1'"),
        # common/arg.cpp: -ngl reads "auto", "all", else std::stoi, which throws on "abc".
        (
            "llama.cpp",
            ["--n-gpu-layers", "abc"],
            1,
            "llama.cpp 0.3.36's --n-gpu-layers takes an integer, not 'abc'",
        ),
        ("llama.cpp", ["--ctx-size", "99999999999"], 1, "takes an integer"),  # out_of_range
        ("llama.cpp", ["--temp", "warm"], 1, "--temp takes a number, not 'warm'"),
        ("llama.cpp", ["--seed=1"], 0, "llama.cpp 0.3.36 has no --seed=1"),
    ],
)
def test_a_value_the_parser_refuses_is_refused_at_its_file_line_and_key(
    engine: str, args: list[str], index: int, message: str
) -> None:
    gpus = {"gpu_class": "H100", "gpus_per_node": 1}
    [problem] = problems_of(one_profile(engine=engine, args=args, **gpus))
    assert problem.startswith(f"catalog.yaml:5: models.m.profiles[0].args[{index}]: ")
    assert message in problem


@pytest.mark.parametrize(
    ("engine", "args"),
    [
        ("vllm", ["--runner", "pooling", "--seed", "-1", "--max-num-seqs=8"]),
        ("vllm", ["--max-model-len", "32k", "--gpu-memory-utilization", "None"]),  # 1K, 2M: any
        ("vllm", ["--max_num_seqs", " 12 "]),  # Python's int() takes the blanks
        ("sglang", ["--tp", "2", "--mem-fraction-static", "0.8"]),
        ("llama.cpp", ["-ngl", "auto", "--n-gpu-layers", "all", "-c", "4096"]),
        ("llama.cpp", ["--ctx-size", "4096k", "--temp", "0.7", "--seed", "-1"]),  # std::stoi
    ],
)
def test_values_the_parser_takes_pass(engine: str, args: list[str]) -> None:
    text = one_profile(engine=engine, gpu_class="H100", gpus_per_node=1, args=args)
    assert parse_catalog(text, "catalog.yaml").models["m"].profiles[0].spec.args


def test_llama_cpp_takes_no_abbreviation() -> None:
    # common/arg.cpp common_params_parse_ex: names are looked up whole in a map.
    [problem] = problems_of(one_profile(engine="llama.cpp", args=["--ctx-siz", "9"]))
    assert "llama.cpp 0.3.36 has no --ctx-siz: write the option whole (--ctx-size)" in problem


def test_an_abbreviated_hf_token_is_refused_as_the_whole_one_is() -> None:
    text = one_profile(engine="vllm", gpu_class="H100", gpus_per_node=1, args=["--hf-tok", "x"])
    assert any("--hf-token puts a token on the command line" in p for p in problems_of(text))


@pytest.mark.parametrize(
    ("engine", "args"),
    [
        ("vllm", ["--max_model_len=4096", "--enable-prefix-caching", "-O3"]),
        ("vllm", ["--no-enable-prefix-caching", "--compilation-config.mode", "3"]),
        ("vllm", ["--runner", "pooling", "--convert", "embed", "--seed", "-1"]),
        ("sglang", ["--tp-size", "1", "--trust-remote-code", "--random-seed", "1"]),
        ("llama.cpp", ["-ngl", "10", "--jinja", "-cb", "--embedding", "value with spaces"]),
        ("llama.cpp", ["--ctx_size", "4096", "--n_gpu_layers", "auto"]),  # "_" reads as "-"
    ],
)
def test_options_the_release_has_pass(engine: str, args: list[str]) -> None:
    text = one_profile(engine=engine, gpu_class="H100", gpus_per_node=1, args=args)
    assert parse_catalog(text, "catalog.yaml").models["m"].profiles[0].spec.args == tuple(args)


def test_gpu_engines_need_gpus_and_each_engine_reads_only_its_sources() -> None:
    assert problems_of(one_profile(engine="vllm")) == [
        "catalog.yaml:5: models.m.profiles[0].engine: vllm runs on GPUs: set gpus_per_node and"
        " gpu_class, or use llama.cpp for a CPU profile"
    ]
    assert problems_of(one_profile(engine="llama.cpp", source="s3://bucket/m.gguf")) == [
        "catalog.yaml:5: models.m.profiles[0].source: llama.cpp cannot read s3:// sources: it"
        " reads hf://, file://, https://, http://"
    ]
    url = one_profile(engine="sglang", gpu_class="H100", gpus_per_node=1, source="https://h/m")
    assert problems_of(url) == [
        "catalog.yaml:5: models.m.profiles[0].source: sglang cannot read https:// sources: it"
        " reads hf://, file://, s3://"
    ]


def test_engine_version_below_the_minimum_or_without_data_is_refused() -> None:
    gpus = {"engine": "vllm", "gpu_class": "H100", "gpus_per_node": 1}
    assert problems_of(one_profile(engine_version="0.17.1", **gpus)) == [
        "catalog.yaml:5: models.m.profiles[0].engine_version: vLLM 0.17.1 is older than 0.18.0,"
        " the first with --shutdown-timeout (vllm#36666), which ctl always writes"
    ]
    [problem] = problems_of(one_profile(engine_version="0.33.0", **gpus))
    assert "no option data for vLLM 0.33.0" in problem
    assert "made it for 0.34.0" in problem
    pinned = parse_catalog(one_profile(engine_version="0.34.0", **gpus), "c.yaml")
    assert pinned.models["m"].profiles[0].spec.engine_version == "0.34.0"


def example_catalogs() -> list[Path]:
    return sorted([ROOT / "examples" / "catalog.yaml", *ROOT.glob("examples/*/*catalog.yaml")])


def every_command_line(path: Path) -> list[tuple[str, str, list[str]]]:
    """Every rank's command line of every profile of a catalog, as ctl would write it."""
    found = []
    for model in parse_catalog(path.read_text(), str(path)).models.values():
        for profile in model.profiles:
            for rank in range(profile.spec.nodes):
                place = Rank(rank, profile.spec.nodes, 8123, "10.0.0.1", gpus=(0,))
                argv = command_line(profile, place)
                found.append((profile.key, profile.spec.engine, argv))
    return found


@pytest.mark.parametrize("path", example_catalogs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_example_command_line_holds_only_options_its_engine_has(path: Path) -> None:
    lines = every_command_line(path)
    assert lines
    for key, engine, argv in lines:
        spec = engine_spec(engine)
        options = accepted_options(engine, spec.pinned_version)
        assert options is not None
        program = len(spec.command)
        assert check_options(spec, spec.pinned_version, argv[program:], options) == [], key


# Real vLLM resolves `--runner auto` to pooling for bge-m3; its GGUF is an embedding model too.
EMBEDDING_MODELS = ("hf://BAAI/bge-m3", "file:///srv/models/bge-m3-q8_0.gguf")


@pytest.mark.parametrize("path", example_catalogs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_example_embedding_model_is_declared_one_and_no_chat_model_is(path: Path) -> None:
    # XLMRobertaModel, bge-m3's architecture, is in vLLM 0.34's _EMBEDDING_MODELS only
    # (vllm/model_executor/models/registry.py): it serves no chat routes. A chat model's
    # profile declared one would serve embeddings only on the nodes that profile picks.
    for model in parse_catalog(path.read_text(), str(path)).models.values():
        for profile in model.profiles:
            assert bool(profile.spec.embedding) == (profile.source in EMBEDDING_MODELS), profile.key


def test_the_example_bge_m3_is_an_embedding_server_in_each_engines_own_mode() -> None:
    catalog = parse_catalog((ROOT / "examples" / "catalog.yaml").read_text(), "c.yaml")
    vllm, cpu = catalog.models["bge-m3"].profiles
    place = Rank(0, 1, 8000, "10.0.0.1", gpus=(0,))
    assert command_line(vllm, place)[-2:] == ["--runner", "pooling"]
    assert command_line(cpu, place)[-1:] == ["--embeddings"]
    assert "--task" not in command_line(vllm, place)


def test_sglang_writes_tp_size_and_vllm_gets_the_serving_address_as_vllm_host_ip() -> None:
    text = (
        "models:\n  big:\n    source: hf://org/big\n    profiles:\n"
        "      - {name: x, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,"
        " nodes: 2, tensor_parallel: 16}\n"
        "      - {name: v, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 1}\n"
    )
    big = parse_catalog(text, "c.yaml").models["big"]
    vllm, sglang = big.profiles
    argv = command_line(sglang, Rank(1, 2, 8000, "10.0.0.1", gpus=tuple(range(8))))
    assert argv[argv.index("--tp-size") + 1] == "16"
    assert "--tp" not in argv
    files = shard_files("hgx-1", "10.1.0.7", "big-1", vllm, Rank(0, 1, 8000, "10.1.0.7"), NOW)
    assert 'VLLM_HOST_IP="10.1.0.7"' in files.env_text.splitlines()
    listening = Rank(0, 1, 8000, "10.1.0.7", listen="192.168.9.9")
    files = shard_files("hgx-1", "10.1.0.7", "big-1", vllm, listening, NOW)
    assert 'VLLM_HOST_IP="192.168.9.9"' in files.env_text.splitlines()
    assert "VLLM_HOST_IP" not in files.env_text.replace("VLLM_HOST_IP=", "", 1)
    assert "VLLM_HOST_IP" not in environment(sglang, Rank(0, 2, 8000, "10.0.0.1", gpus=(0,)))


def test_sglang_answers_health_without_generating_unless_the_catalog_says_otherwise() -> None:
    """The relay's health check has 800 ms; SGLang's /health generates a token first and
    answers after a second at the earliest, so ctl turns the generation off."""
    text = (
        "models:\n  m:\n    source: hf://org/m\n    profiles:\n"
        "      - {name: s, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 1}\n"
        "      - {name: v, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 1}\n"
        "  n:\n    source: hf://org/n\n    profiles:\n"
        "      - {name: s, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 1,"
        " env: {SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: 'true'}}\n"
    )
    catalog = parse_catalog(text, "c.yaml")
    by_engine = {profile.spec.engine: profile for profile in catalog.models["m"].profiles}
    sglang, vllm = by_engine["sglang"], by_engine["vllm"]
    place = Rank(0, 1, 8000, "10.0.0.1", gpus=(0,))
    files = shard_files("hgx-1", "10.0.0.1", "m-1", sglang, place, NOW)
    assert 'SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION="false"' in files.env_text.splitlines()
    assert "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION" not in environment(vllm, place)
    [asked] = catalog.models["n"].profiles
    assert environment(asked, place)["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "true"


def test_a_multi_node_rank_on_a_named_interface_gets_nccl_and_gloo_socket_ifname() -> None:
    text = (
        "models:\n  big:\n    source: hf://org/big\n    profiles:\n"
        "      - {name: x, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8,"
        " nodes: 2, tensor_parallel: 8, pipeline_parallel: 2}\n"
    )
    [profile] = parse_catalog(text, "c.yaml").models["big"].profiles
    place = Rank(1, 2, 8000, "10.9.0.1", gpus=(0,), host_ip="10.9.0.2", socket_ifname="ib0")
    env = environment(profile, place)
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=ib0", "ib0")
    assert env["VLLM_HOST_IP"] == "10.9.0.2"
    alone = environment(profile, Rank(0, 1, 8000, "10.9.0.1", gpus=(0,), socket_ifname="ib0"))
    assert "NCCL_SOCKET_IFNAME" not in alone


def test_llama_server_gets_no_drain_time_and_the_engines_that_drain_do() -> None:
    text = (
        "models:\n  m:\n    source: file:///srv/m.gguf\n    profiles:\n"
        "      - {name: cpu, priority: 1, engine: llama.cpp, drain_seconds: 90}\n"
        "      - {name: gpu, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 1,"
        " drain_seconds: 90}\n"
    )
    gpu, cpu = parse_catalog(text, "c.yaml").models["m"].profiles
    place = Rank(0, 1, 8000, "10.0.0.1")
    assert "TimeoutStopSec=30" in shard_files("n", "10.0.0.1", "m-1", cpu, place, NOW).unit_text
    assert "TimeoutStopSec=120" in shard_files("n", "10.0.0.1", "m-1", gpu, place, NOW).unit_text


def test_each_spec_has_option_data_for_its_pinned_release_made_by_the_script() -> None:
    for name, spec in ENGINE_SPECS.items():
        path = DATA_DIR / f"{name}-{spec.pinned_version}.json"
        data = json.loads(path.read_text())
        assert (data["engine"], data["version"]) == (name, spec.pinned_version)
        assert data["command"] == "python scripts/engine_flags.py"
        assert len(str(data["sha256"])) == 64
        assert data["options"] == sorted(set(data["options"]))
        assert "--host" in data["options"]
        assert "--port" in data["options"]
        assert set(data["values"]) <= set(data["options"])
        assert data["values"]["--port"]["type"] in ("int", "c-int")


def test_the_value_data_holds_what_the_parsers_say() -> None:
    # vllm/config/model.py RunnerOption; common/arg.cpp -ngl; sglang's tp_size: int.
    assert option_values("vllm", "0.34.0")["--runner"].choices == (
        "auto", "draft", "generate", "pooling",
    )  # fmt: skip
    assert option_values("llama.cpp", "0.3.36")["-ngl"] == ValueRule("c-int", words=("all", "auto"))
    assert option_values("sglang", "0.5.23")["--tp-size"] == ValueRule("int")


def test_the_data_holds_what_the_issues_findings_say_of_each_release() -> None:
    vllm = accepted_options("vllm", "0.34.0")
    sglang = accepted_options("sglang", "0.5.23")
    llama = accepted_options("llama.cpp", "0.3.36")
    assert vllm is not None and sglang is not None and llama is not None
    assert "--task" not in vllm
    assert {"--runner", "--convert", "--shutdown-timeout", "--headless"} <= vllm
    assert {"--enable-prefix-caching", "--no-enable-prefix-caching"} <= vllm
    assert "--tp" not in sglang
    assert {"--tp-size", "--tensor-parallel-size", "--is-embedding", "--dist-init-addr"} <= sglang
    assert {"-m", "--alias", "--embeddings", "--model-url", "-hf"} <= llama
    assert "--prompt" not in llama  # llama-cli's, not llama-server's


def test_a_multi_node_vllm_replica_meets_on_the_inventorys_fabric_network() -> None:
    from cli.reconcile.planner import plan_manual
    from tests.builders import hgx, snapshot

    text = (
        "models:\n  big:\n    source: hf://org/big\n    profiles:\n"
        "      - {name: x, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 8,"
        " nodes: 2, tensor_parallel: 8, pipeline_parallel: 2}\n"
        "  one:\n    source: hf://org/one\n    profiles:\n"
        "      - {name: x, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}\n"
    )
    models = parse_catalog(text, "c.yaml")
    fabric = [("ib", ["mlx5_0", "mlx5_1"])]
    fleet = snapshot(hgx("hgx-1", fabrics=fabric), hgx("hgx-2", fabrics=fabric), hgx("hgx-3"))
    addresses = {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2", "hgx-3": "10.0.0.3"}
    networks = {"hgx-1": ("ib0", "10.8.0.1"), "hgx-2": ("ib0", "10.8.0.2")}
    result = plan_manual(models, fleet, ["big", "one"], addresses, None, networks)
    big, one = result.starts
    envs = [dict(line.split("=", 1) for line in f.env_text.splitlines()) for f in big.files]
    assert [
        (e["VLLM_HOST_IP"], e["NCCL_SOCKET_IFNAME"], e["GLOO_SOCKET_IFNAME"]) for e in envs
    ] == [
        ('"10.8.0.1"', '"=ib0"', '"ib0"'),
        ('"10.8.0.2"', '"=ib0"', '"ib0"'),
    ]
    assert '"--master-addr" "10.8.0.1"' in big.files[1].unit_text  # rank 0's fabric address
    assert big.leader.health_url == "http://10.0.0.1:8000"  # served where it always was
    [alone] = [dict(line.split("=", 1) for line in f.env_text.splitlines()) for f in one.files]
    assert alone["VLLM_HOST_IP"] == '"10.0.0.3"'  # one node: the serving address
    assert "NCCL_SOCKET_IFNAME" not in alone


def test_the_inventory_names_the_fabric_network_per_host() -> None:
    from cli.inventory.schema import Host, HostVars, Inventory
    from cli.ops.fleet import rank_networks

    vars_ = HostVars.model_validate({"fabric_interface": "ib0", "fabric_address": "10.8.0.1"})
    hosts = (
        Host(name="a", groups=("all",), address="a", vars=vars_),
        Host(name="b", groups=("all",), address="b"),
    )
    assert rank_networks(Inventory(source="i", hosts=hosts)) == {"a": ("ib0", "10.8.0.1")}
    with pytest.raises(ValueError, match="fabric_interface"):
        HostVars.model_validate({"fabric_interface": "no spaces allowed"})


def test_the_engine_table_says_each_multi_node_engines_stop_order() -> None:
    # docs/reconcile.md (cog): cli/reconcile/apply.py drains rank 0 first for every engine.
    header, _, *rows = engine_table().splitlines()
    assert "| multi-node stop |" in header
    for spec, row in zip(ENGINE_SPECS.values(), rows, strict=True):
        stop = row.split(" | ")[4]
        assert stop.startswith("rank 0 first, waited for") == spec.multi_node, spec.name


def test_the_pooling_only_architectures_are_vllms_registrys() -> None:
    # vllm/model_executor/models/registry.py (0.34.0): bge-m3's XLMRobertaModel is in
    # _EMBEDDING_MODELS only; LlamaModel is too, but loads LlamaForCausalLM, a generator.
    pooling = pooling_only_architectures("vllm", "0.34.0")
    assert {"XLMRobertaModel", "BertModel", "Qwen2ForRewardModel"} <= pooling
    assert not {"LlamaModel", "LlamaForCausalLM", "Qwen2ForCausalLM"} & pooling
    assert pooling_only_architectures("sglang", "0.5.23") == frozenset()


# --------------------------------------------------------------------------- at the edges
# Written against survivors of the mutation run in cli/catalog/load.py (_check_engine): the
# key a source problem names, wherever the source is written, and the scheme it names.


def test_a_source_problem_names_the_key_the_source_is_written_at() -> None:
    on_model = one_profile(engine="llama.cpp").replace("hf://org/m", "s3://bucket/m.gguf")
    assert problems_of(on_model) == [
        "catalog.yaml:3: models.m.source: llama.cpp cannot read s3:// sources: it"
        " reads hf://, file://, https://, http://"
    ]
    assert problems_of(one_profile(engine="llama.cpp", source="http://example.com/a/..")) == [
        "catalog.yaml:5: models.m.profiles[0].source: the file this URL names is '..', a"
        " directory, not a file: name the file (https://HOST/PATH/FILE.gguf), which is staged"
        " under that name"
    ]


def test_the_scheme_an_engine_cannot_read_is_the_sources_own() -> None:
    text = one_profile(engine="llama.cpp", source="s3://bucket/mirror/https://h/m.gguf")
    assert problems_of(text) == [
        "catalog.yaml:5: models.m.profiles[0].source: llama.cpp cannot read s3:// sources: it"
        " reads hf://, file://, https://, http://"
    ]


def test_an_engine_version_without_option_data_names_the_versions_that_have_it() -> None:
    gpus = {"engine": "vllm", "gpu_class": "H100", "gpus_per_node": 1}
    assert problems_of(one_profile(engine_version="0.33.0", **gpus)) == [
        "catalog.yaml:5: models.m.profiles[0].engine_version: no option data for vLLM 0.33.0"
        " (scripts/engine_flags.py has made it for 0.34.0): pin one of those, or add that"
        " release's data"
    ]
