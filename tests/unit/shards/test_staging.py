"""What staging downloads (cli/shards/staging.py): per engine, where the engine then reads
the weights, and one download per store and source when nodes share a store."""

from __future__ import annotations

import pytest

from cli.facts.model import store_directory
from cli.shards.staging import (
    StageJob,
    evictable_directories,
    one_per_share,
    staged_path,
    stages,
    token_destination_problem,
)

STORE = "/var/lib/modelfleet/models"


@pytest.mark.parametrize(
    ("source", "engine", "staged"),
    [
        ("hf://org/m", "vllm", True),
        ("hf://org/m", "sglang", True),
        ("hf://org/m-GGUF", "llama.cpp", False),  # llama-server -hf picks a quantisation
        ("https://x/m.gguf", "llama.cpp", True),
        ("http://x/m.gguf", "llama.cpp", True),
        ("file:///srv/m.gguf", "llama.cpp", False),
        ("file:///srv/m", "vllm", False),
        ("s3://b/m", "vllm", False),
    ],
)
def test_what_is_staged_for_which_engine(source: str, engine: str, staged: bool) -> None:
    assert stages(source, engine) is staged
    assert (staged_path(source, engine, None) is not None) is staged


def test_the_engine_reads_a_hub_repository_as_a_directory_and_a_url_as_its_file() -> None:
    assert staged_path("hf://org/m", "vllm", "/data") == f"/data/{store_directory('hf://org/m')}"
    url = "https://x/a/m.gguf?download=1"
    assert staged_path(url, "llama.cpp", None) == f"{STORE}/{store_directory(url)}/m.gguf"
    assert staged_path("hf://org/m", "vllm", None, staging=False) is None


def job(node: str, source: str = "hf://org/m") -> StageJob:
    return StageJob(node, f"{source}-replica", source, STORE, "d", None)


def test_nodes_sharing_a_store_download_once_on_the_first_by_name() -> None:
    jobs = [job("node-10"), job("node-2"), job("node-3"), job("node-3", "hf://org/other")]
    shares = {"node-10": "nfs-a", "node-2": "nfs-a"}  # node-3 has a store of its own
    downloads, waits_on = one_per_share(jobs, shares)
    assert sorted((d.node, d.source) for d in downloads) == [
        ("node-2", "hf://org/m"), ("node-3", "hf://org/m"), ("node-3", "hf://org/other"),
    ]  # fmt: skip
    assert waits_on == {
        ("node-2", "hf://org/m"): ("node-2", "hf://org/m"),
        ("node-10", "hf://org/m"): ("node-2", "hf://org/m"),  # the share's download
        ("node-3", "hf://org/m"): ("node-3", "hf://org/m"),
        ("node-3", "hf://org/other"): ("node-3", "hf://org/other"),
    }


def test_without_shares_every_node_downloads_for_itself() -> None:
    jobs = [job("node-1"), job("node-2")]
    downloads, waits_on = one_per_share(jobs, {})
    assert [d.node for d in downloads] == ["node-1", "node-2"]
    assert all(job == on for job, on in waits_on.items())


def test_only_weights_no_shard_loads_and_nothing_starting_needs_may_be_evicted() -> None:
    from tests.builders import hgx, shard, snapshot, store

    nodes = snapshot(
        hgx("hgx-1", store=store(10, a=5, b=5, c=5),
            shards=[shard("a-1", "a", [0], source="hf://org/a")]),
        hgx("hgx-2", store=store(10, a=5), shards=[shard("x-1", "x", [0])]),  # says nothing
        hgx("hgx-3", store=store(10, a=5)),
    ).nodes  # fmt: skip
    found = evictable_directories(nodes, {"hgx-1": {"hf://org/c"}})
    assert found == {
        "hgx-1": [store_directory("hf://org/b")],  # a in use, c about to start
        "hgx-3": [store_directory("hf://org/a")],
    }


@pytest.mark.parametrize(
    ("source", "endpoint", "hosts", "refused"),
    [
        ("hf://org/gated", None, (), False),  # to the fleet's own endpoint
        ("hf://org/gated", "https://hf-mirror.internal", (), False),
        ("https://huggingface.co/org/m/resolve/main/m.gguf", None, (), False),
        ("https://HuggingFace.co:443/m.gguf", None, (), False),
        ("https://hf-mirror.internal/m.gguf", "https://hf-mirror.internal/", (), False),
        ("https://files.example/m.gguf", None, ("FILES.example",), False),
        ("https://evil.example/m.gguf", None, (), True),
        ("https://evil.example/m.gguf", "https://hf-mirror.internal", ("files.example",), True),
        ("https://huggingface.co.evil.example/m.gguf", None, (), True),
        ("https://huggingface.co@evil.example/m.gguf", None, (), True),
    ],
)
def test_a_token_goes_only_to_the_hub_endpoint_or_a_host_the_inventory_allows(
    source: str, endpoint: str | None, hosts: tuple[str, ...], refused: bool
) -> None:
    """Issue 25 item 4: the catalog names the source; the inventory says who gets a token."""
    problem = token_destination_problem(source, endpoint, hosts)
    assert (problem is not None) == refused
    if refused:
        assert problem is not None and problem.endswith(
            "nor one the inventory lists in modelfleet_token_hosts: a token goes to no other host"
        )
