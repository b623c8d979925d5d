"""The rendered configuration, loaded by LiteLLM itself: the proxy's own config loader and
`litellm --validate_config` (what the router playbook runs before it writes a config)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.routes.litellm import litellm_config, render
from cli.routes.table import RouteTable, route_table
from tests.builders import hgx, snapshot
from tests.ctl import ctl
from tests.integration.litellm_env import litellm_environment, litellm_venv
from tests.integration.test_routes_cli import ROUTES
from tests.unit.routes.test_routes import ADDRESSES, MODELS, fleet

LOADER = Path(__file__).with_name("litellm_load.py")
KEY = "sk-modelfleet-test-0123456789abcdef"
# What LiteLLM logs about a settings key it drops: any of it while loading ours is a bug.
DROPPED = ("is not a valid argument", "Ignoring this key", "is NOT a valid")


@pytest.fixture(scope="session")
def litellm() -> Path:
    try:
        return litellm_venv()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)


def load_with_litellm(venv: Path, configs: list[Path]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(LOADER), *map(str, configs)],
        capture_output=True, text=True, timeout=600, check=False,
        env=litellm_environment(LITELLM_MASTER_KEY=KEY),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def tables() -> dict[str, RouteTable]:
    return {
        "ready": route_table(MODELS, snapshot(*fleet()), ADDRESSES),
        "degraded": route_table(MODELS, snapshot(*fleet(hgx2_unreachable=True)), ADDRESSES),
        "empty": route_table(MODELS, snapshot(hgx("hgx-1")), ADDRESSES),
    }


def test_litellm_loads_every_rendered_config_as_rendered(litellm: Path, tmp_path: Path) -> None:
    configs = {name: render(table) for name, table in tables().items()}
    example = ctl(*ROUTES, "--litellm")
    assert example.returncode == 1, example.stderr
    configs["example"] = example.stdout
    paths = []
    for name, text in configs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        paths.append(path)
    loaded = dict(zip(configs, load_with_litellm(litellm, paths), strict=True))
    for name, text in configs.items():
        want = yaml.safe_load(text)
        got = loaded[name]
        assert [w for w in got["warnings"] if any(d in w for d in DROPPED)] == [], name
        # Every deployment kept (the proxy silently drops one it cannot use), as written.
        kept = [(d["model_name"], d["model"], d["api_base"], d["id"]) for d in got["deployments"]]
        assert kept == [
            (d["model_name"], d["litellm_params"]["model"], d["litellm_params"]["api_base"],
             d["model_info"]["id"])
            for d in want["model_list"]
        ], name  # fmt: skip
        router = want["router_settings"]
        assert (got["aliases"] or {}) == router.get("model_group_alias", {}), name
        assert (got["fallbacks"] or []) == router.get("fallbacks", []), name
        assert got["num_retries"] == router["num_retries"]
        assert got["allowed_fails"] == router["allowed_fails"]
        assert got["cooldown_time"] == router["cooldown_time"]
        assert got["timeout"] == router["timeout"]
        assert got["background_health_checks"] is True
        assert got["health_check_interval"] == 30
        assert got["master_key"] == KEY  # read from the router's environment
    ready = loaded["ready"]
    providers = {d["id"]: d["provider"] for d in ready["deployments"]}
    assert providers == {
        "big-1": "openai", "mid-1": "hosted_vllm", "small-1": "hosted_vllm",
        "tiny-1": "openai", "embed-1": "hosted_vllm",
    }  # fmt: skip
    assert {d["id"]: d["mode"] for d in ready["deployments"]}["embed-1"] == "embedding"
    # Aliases are model groups to LiteLLM: a client may ask for any of them.
    assert {"chat", "assistant", "chat-small", "embeddings"} <= set(ready["model_names"])
    assert loaded["empty"]["deployments"] == []


def test_litellm_validate_config_accepts_what_ctl_renders(litellm: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(render(tables()["degraded"]))
    done = subprocess.run(
        [str(litellm / "bin" / "litellm"), "--validate_config", "--config", str(path)],
        capture_output=True, text=True, timeout=600, check=False, env=litellm_environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "config OK" in done.stdout
    # ...and refuses what LiteLLM cannot load, which the playbook then never writes.
    broken = yaml.safe_load(path.read_text())
    broken["general_settings"]["health_check_interval"] = "often"
    broken["router_settings"]["health_check_interval"] = 30
    path.write_text(yaml.safe_dump(broken))
    done = subprocess.run(
        [str(litellm / "bin" / "litellm"), "--validate_config", "--config", str(path)],
        capture_output=True, text=True, timeout=600, check=False, env=litellm_environment(),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "config validation failed" in done.stderr


def test_the_config_dict_and_its_yaml_agree() -> None:
    table = tables()["ready"]
    assert yaml.safe_load(render(table)) == litellm_config(table)
