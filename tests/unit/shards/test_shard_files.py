"""Engine command lines and shard files: what each rank runs, quoted, pinned to its GPUs."""

from __future__ import annotations

import json
import shlex

from cli.catalog.load import CatalogProfile
from cli.shards.engines import Rank, command_line, environment
from cli.shards.units import environment_file, shard_files, systemd_quote
from tests.builders import NOW, catalog

CATALOG = catalog(
    """\
    models:
      llama-70b:
        source: hf://meta-llama/Llama-3.1-70B-Instruct
        profiles:
          - {name: tp4pp2, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 4,
             nodes: 2, tensor_parallel: 4, pipeline_parallel: 2, context_length: 32768,
             args: ["--enable-prefix-caching"]}
          - {name: sg, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8, nodes: 2,
             tensor_parallel: 16}
      coder:
        source: file:///srv/models/coder-q4_k_m.gguf
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp, threads: 16, context_length: 8192,
             min_memory_gb: 24, env: {LLAMA_ARG_FLASH_ATTN: "1"}}
    """
)


def profile(model: str, name: str) -> CatalogProfile:
    return next(p for p in CATALOG.models[model].profiles if p.name == name)


WORKER = Rank(rank=1, nodes=2, port=8000, master_address="10.0.0.3", gpus=(4, 5, 6, 7),
              hcas=("mlx5_0", "mlx5_2"))  # fmt: skip


def test_a_vllm_worker_rank_is_headless_and_joins_rank_0() -> None:
    argv = command_line(profile("llama-70b", "tp4pp2"), WORKER)
    assert argv == [
        "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct",
        "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "llama-70b",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
        "--max-model-len", "32768", "--shutdown-timeout", "30",
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.3",
        "--master-port", "18000", "--headless", "--enable-prefix-caching",
    ]  # fmt: skip


def test_an_sglang_rank_meets_the_others_at_dist_init_addr() -> None:
    argv = command_line(profile("llama-70b", "sg"), WORKER)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--dist-init-addr" in argv
    assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.3:18000"
    assert argv[argv.index("--tp-size") + 1] == "16"
    assert "--tp" not in argv  # SGLang has no --tp: only argparse prefix matching took it
    assert argv[argv.index("--node-rank") + 1] == "1"


def test_an_sglang_rank_0_on_ipv6_is_bracketed_in_dist_init_addr() -> None:
    # SGLang's NetworkAddress.parse (srt/utils/network.py, 0.5.23) refuses fd00::1:18000.
    place = Rank(rank=1, nodes=2, port=8000, master_address="fd00::1")
    argv = command_line(profile("llama-70b", "sg"), place)
    assert argv[argv.index("--dist-init-addr") + 1] == "[fd00::1]:18000"


def test_llama_server_gets_threads_context_host_and_port() -> None:
    place = Rank(rank=0, nodes=1, port=8002, master_address="cpu-1")
    argv = command_line(profile("coder", "cpu"), place)
    assert argv == [
        "llama-server", "-m", "/srv/models/coder-q4_k_m.gguf", "--host", "0.0.0.0",
        "--port", "8002", "--alias", "coder", "--threads", "16", "--ctx-size", "8192", "--metrics",
    ]  # fmt: skip


def test_gpus_are_pinned_in_nvidia_smi_order_and_hcas_matched_exactly() -> None:
    env = environment(profile("llama-70b", "tp4pp2"), WORKER)
    assert env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "4,5,6,7",
        "NCCL_IB_HCA": "=mlx5_0,mlx5_2",
    }


def test_a_cpu_shard_sees_no_gpu_and_keeps_the_profiles_env() -> None:
    place = Rank(rank=0, nodes=1, port=8002, master_address="cpu-1")
    env = environment(profile("coder", "cpu"), place)
    assert env == {"CUDA_VISIBLE_DEVICES": "", "LLAMA_ARG_FLASH_ATTN": "1"}


def test_systemd_quoting_keeps_each_argument_whole_and_inert() -> None:
    assert systemd_quote('a "b" $HOME 100% \\') == '"a \\"b\\" $$HOME 100%% \\\\"'
    assert systemd_quote("x; rm -rf /") == '"x; rm -rf /"'


def test_an_environment_file_quotes_values() -> None:
    assert environment_file({"B": 'say "hi"', "A": "1"}) == 'A="1"\nB="say \\"hi\\""\n'


def test_shard_files_name_the_unit_env_and_record_of_one_rank() -> None:
    files = shard_files(
        "hgx-4", "10.0.0.4", "llama-70b-2", profile("llama-70b", "tp4pp2"), WORKER, NOW
    )
    assert files.unit == "modelfleet-llama-70b-2-rank1.service"
    assert files.unit_path == "/etc/systemd/system/modelfleet-llama-70b-2-rank1.service"
    assert files.env_path == "/etc/modelfleet/shards/llama-70b-2-rank1.env"
    assert files.record_path == "/var/lib/modelfleet/shards/llama-70b-2-rank1.json"
    assert files.health_url is None  # workers serve no API
    assert "Restart=no" in files.unit_text
    assert "TimeoutStopSec=60" in files.unit_text
    exec_line = next(x for x in files.unit_text.splitlines() if x.startswith("ExecStart="))
    assert shlex.split(exec_line.removeprefix("ExecStart="))[:3] == [
        "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"
    ]  # fmt: skip
    record = json.loads(files.record_text)
    assert (record["replica"], record["rank"], record["nodes"], record["gpus"]) == (
        "llama-70b-2", 1, 2, [4, 5, 6, 7]
    )  # fmt: skip
    assert record["hcas"] == ["mlx5_0", "mlx5_2"] and record["origin"] == "reconcile"


def test_rank_0_says_where_to_check_its_health() -> None:
    place = Rank(rank=0, nodes=1, port=8002, master_address="cpu-1")
    files = shard_files("cpu-1", "10.0.0.9", "coder-1", profile("coder", "cpu"), place, NOW)
    assert files.health_url == "http://10.0.0.9:8002"


def test_a_shard_listens_where_its_node_says() -> None:
    place = Rank(rank=0, nodes=1, port=8002, master_address="10.0.0.9", listen="10.0.0.9")
    argv = command_line(profile("coder", "cpu"), place)
    assert argv[argv.index("--host") + 1] == "10.0.0.9"
    default = Rank(rank=0, nodes=1, port=8002, master_address="10.0.0.9")
    argv = command_line(profile("coder", "cpu"), default)
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_a_shard_on_one_address_says_it_in_its_record_for_the_probe() -> None:
    # The probe reads a rank 0's /metrics where its engine listens: loopback does not
    # reach an engine bound to the node's listen_address.
    place = Rank(rank=0, nodes=1, port=8002, master_address="10.0.0.9", listen="10.0.0.9")
    files = shard_files("cpu-1", "10.0.0.9", "coder-1", profile("coder", "cpu"), place, NOW)
    assert json.loads(files.record_text)["listen"] == "10.0.0.9"
    everywhere = Rank(rank=0, nodes=1, port=8002, master_address="10.0.0.9")
    files = shard_files("cpu-1", "10.0.0.9", "coder-1", profile("coder", "cpu"), everywhere, NOW)
    assert "listen" not in json.loads(files.record_text)


FETCHING = catalog(
    """\
    models:
      gated:
        source: hf://meta-llama/Llama-3.1-8B-Instruct
        token: {env: HF_TOKEN}
        profiles:
          - {name: gpu, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 1}
          - {name: cpu, priority: 1, engine: llama.cpp, source: hf://org/gguf}
      open:
        source: https://models.example.net/m.gguf
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp}
    """
)


def fetching(model: str, name: str) -> CatalogProfile:
    return next(p for p in FETCHING.models[model].profiles if p.name == name)


def test_an_engine_fetching_its_own_weights_is_told_where_its_token_and_hub_go() -> None:
    # huggingface_hub's HF_TOKEN/HF_ENDPOINT for vLLM; llama.cpp's --hf-token env HF_TOKEN
    # and common_get_model_endpoint's MODEL_ENDPOINT (common/arg.cpp, common.cpp).
    place = Rank(rank=0, nodes=1, port=8000, master_address="10.0.0.1", gpus=(0,))
    vllm = shard_files("n", "10.0.0.1", "gated-1", fetching("gated", "gpu"), place, NOW)
    llama = shard_files("n", "10.0.0.1", "gated-1", fetching("gated", "cpu"), place, NOW)
    assert vllm.fetch is not None and llama.fetch is not None
    assert (vllm.fetch.token_key, vllm.fetch.token_names) == ("gated/gpu", ("HF_TOKEN",))
    assert vllm.fetch.endpoint_names == ("HF_ENDPOINT",)
    assert (llama.fetch.token_names, llama.fetch.endpoint_names) == (
        ("HF_TOKEN",), ("MODEL_ENDPOINT",),
    )  # fmt: skip
    assert "HF_HUB_OFFLINE" not in vllm.env_text and "HF_TOKEN" not in vllm.env_text


def test_a_staged_source_or_a_file_is_not_fetched_and_a_url_gets_no_hub_endpoint() -> None:
    place = Rank(rank=0, nodes=1, port=8000, master_address="10.0.0.1", gpus=(0,))
    staged = shard_files(
        "n", "10.0.0.1", "gated-1", fetching("gated", "gpu"), place, NOW, staged="/m/x"
    )
    assert staged.fetch is None and 'HF_HUB_OFFLINE="1"' in staged.env_text
    assert (
        shard_files("n", "10.0.0.1", "coder-1", profile("coder", "cpu"), place, NOW).fetch is None
    )
    url = shard_files("n", "10.0.0.1", "open-1", fetching("open", "cpu"), place, NOW).fetch
    assert url is not None and (url.token_key, url.token_names, url.endpoint_names) == (
        None,
        (),
        (),
    )
