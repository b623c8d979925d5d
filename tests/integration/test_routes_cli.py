"""`ctl routes` on the shipped example fleet: the table, --json, --litellm, and refusals."""

from __future__ import annotations

import json
import re
import shlex

import yaml

from tests.ctl import ROOT, ctl
from tests.integration.test_examples import EXAMPLES, FLEET_ARGS

ROUTES = ["routes", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS]


def test_routes_on_the_example_fleet_lists_endpoints_fallbacks_and_what_is_missing() -> None:
    result = ctl(*ROUTES)
    assert result.returncode == 1, result.stderr  # most models have no ready replica
    out = result.stdout
    assert re.match(r"NAME +MODEL +READY +ENDPOINTS +FALLBACKS\n", out)
    assert re.search(
        r"\nqwen2\.5-coder-14b +- +1/2 +http://hgx-4:8000/v1 +qwen2\.5-coder-7b\n", out
    )
    assert re.search(r"\ncoder +qwen2\.5-coder-14b +1/2 +http://hgx-4:8000/v1 ", out)
    assert re.search(r"\nchat-small +llama-3\.1-8b +1/1 +http://hgx-2:8000/v1 +-\n", out)
    assert re.search(r"\ndeepseek-v3 +- +0/1 +→ llama-3\.1-8b +llama-3\.1-70b, mistral-small", out)
    assert re.search(r"\nbge-m3 +- +0/2 +- +-\n", out)
    assert "deepseek-v3: no ready replica (none running); llama-3.1-8b answers for it" in out
    assert "bge-m3: no ready replica (none running); it has no fallback" in out
    assert all(len(line) <= 100 for line in out.splitlines()), out


def test_routes_json_on_the_example_fleet() -> None:
    result = ctl(*ROUTES, "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["format"] == "modelfleet.routes/v1"
    assert data["complete"] is False
    models = {m["model"]: m for m in data["models"]}
    assert list(models) == [
        "bge-m3", "qwen2.5-coder-14b", "qwen2.5-coder-7b", "llama-3.2-3b",
        "mistral-small-24b", "llama-3.1-70b", "llama-3.1-8b", "deepseek-v3",
    ]  # fmt: skip
    coder = models["qwen2.5-coder-14b"]
    assert [e["url"] for e in coder["endpoints"]] == ["http://hgx-4:8000/v1"]
    assert coder["endpoints"][0]["replica"] == "qwen2.5-coder-14b-1"
    assert coder["fallbacks"] == ["qwen2.5-coder-7b"]  # "coder-small" in the catalog, resolved
    assert models["llama-3.1-70b"]["fallback_chain"] == ["mistral-small-24b", "llama-3.1-8b"]
    assert models["llama-3.1-70b"]["served_by"] == "llama-3.1-8b"
    assert models["bge-m3"]["missing"] == "none running"
    assert models["bge-m3"]["served_by"] is None
    aliases = {a["alias"]: a for a in data["aliases"]}
    assert aliases["chat"]["model"] == "llama-3.1-70b"
    assert aliases["chat"]["served_by"] == "llama-3.1-8b"
    assert aliases["coder"]["endpoints"] == coder["endpoints"]


def test_routes_litellm_prints_a_config_for_the_ready_replicas() -> None:
    result = ctl(*ROUTES, "--litellm")
    assert result.returncode == 1, result.stderr
    config = yaml.safe_load(result.stdout)
    # Each replica through the router's relay, which knows its engine (engine_url).
    assert [
        (d["model_name"], d["litellm_params"]["api_base"], d["model_info"]["engine_url"])
        for d in config["model_list"]
    ] == [
        (
            "qwen2.5-coder-14b",
            "http://127.0.0.1:4002/qwen2.5-coder-14b-1/v1",
            "http://hgx-4:8000/v1",
        ),
        ("llama-3.1-8b", "http://127.0.0.1:4002/llama-3.1-8b-1/v1", "http://hgx-2:8000/v1"),
    ]
    assert config["router_settings"]["model_group_alias"]["chat"] == "llama-3.1-8b"


def test_routes_apply_refuses_a_snapshot() -> None:
    result = ctl(*ROUTES, "--apply")
    assert result.returncode == 2
    assert "live facts only" in result.stderr


def test_json_and_litellm_together_are_refused_not_one_silently_preferred() -> None:
    result = ctl(*ROUTES, "--json", "--litellm")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: --json and --litellm are two forms of the same table: choose one\n"
    )


def test_every_ctl_routes_example_in_the_docs_is_what_ctl_prints() -> None:
    text = (ROOT / "docs" / "routing.md").read_text()
    examples = re.findall(r"```text\n\$ ctl (routes[^\n]*)\n(.*?)```", text, re.DOTALL)
    assert len(examples) == 2
    for command, shown in examples:
        result = ctl(*shlex.split(command))
        assert result.stdout == shown, command
