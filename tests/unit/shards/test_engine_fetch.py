"""Weights an engine fetches itself (staging off, or llama.cpp's `hf://`): the token and
the hub endpoint reach its 0600 environment file on the node through the start playbook,
as staging's token does, never through a plan, a variables file or an argument."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cli.catalog.load import CatalogProfile
from cli.edges.ansible import PlaybookRun
from cli.ops.executor import AnsibleExecutor
from cli.shards.engines import Rank
from cli.shards.units import shard_files
from tests.builders import NOW, catalog

TOKEN = "hf_" + "fetchedbyvllm" * 3

CATALOG = catalog(
    """\
    models:
      gated:
        source: hf://meta-llama/Llama-3.1-8B-Instruct
        token: {env: HF_TOKEN}
        profiles:
          - {name: gpu, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
)


class RecordingExecutor(AnsibleExecutor):
    """The real executor up to ansible-playbook, whose run it records instead."""

    def __init__(self, tmp_path: Path, **tokens: Any) -> None:
        super().__init__(tmp_path / "inventory", tmp_path / "known_hosts", tmp_path, **tokens)
        self.calls: list[tuple[str, dict[str, Any], Mapping[str, str]]] = []

    def _run(
        self,
        playbook: str,
        variables: dict[str, Any],
        hosts: list[str],
        secrets: Mapping[str, str] | None = None,
    ) -> PlaybookRun:
        self.calls.append((playbook, variables, dict(secrets or {})))
        return PlaybookRun(playbook, 0, (), self.log_dir / "ansible.log", 0.0)


def gated() -> CatalogProfile:
    return CATALOG.models["gated"].profiles[0]


def test_the_token_goes_to_the_playbook_by_a_neutral_name_never_in_its_variables(
    tmp_path: Path,
) -> None:
    place = Rank(rank=0, nodes=1, port=8000, master_address="10.0.0.1", gpus=(0,))
    files = shard_files("hgx-1", "10.0.0.1", "gated-1", gated(), place, NOW)
    executor = RecordingExecutor(tmp_path, token_values={"gated/gpu": TOKEN})

    assert executor.start([files]) == {}

    [(playbook, variables, secrets)] = executor.calls
    assert playbook == "start_shards.yml"
    assert TOKEN not in json.dumps(variables)
    [shard] = variables["modelfleet_shards"]["hgx-1"]
    assert files.env_path not in [f["path"] for f in shard["files"]]  # the playbook's to write
    fetch = shard["fetch"]
    assert (fetch["path"], fetch["mode"], fetch["content"]) == (
        files.env_path, 0o600, files.env_text,
    )  # fmt: skip
    assert (fetch["token_names"], fetch["endpoint_names"]) == (["HF_TOKEN"], ["HF_ENDPOINT"])
    assert secrets == {fetch["token_env"]: TOKEN} and fetch["token_var"] is None


def test_a_token_in_an_inventory_variable_is_named_not_read(tmp_path: Path) -> None:
    place = Rank(rank=0, nodes=1, port=8000, master_address="10.0.0.1", gpus=(0,))
    files = shard_files("hgx-1", "10.0.0.1", "gated-1", gated(), place, NOW)
    executor = RecordingExecutor(tmp_path, token_variables={"gated/gpu": "vault_hf_token"})
    executor.start([files])
    [(_, variables, secrets)] = executor.calls
    [shard] = variables["modelfleet_shards"]["hgx-1"]
    assert (shard["fetch"]["token_env"], shard["fetch"]["token_var"]) == (None, "vault_hf_token")
    assert secrets == {}
