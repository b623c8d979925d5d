"""Load config files with the LiteLLM proxy's own loader; print what the proxy made of them.

Run by the tests' LiteLLM (tests/integration/litellm_env.py), not by the project's Python:
`python litellm_load.py CONFIG...` prints a JSON list, one object per file: the router's
deployments (with the provider LiteLLM resolves each model string to), model groups,
aliases, fallbacks, retry and health-check settings, the master key it read, and every
warning LiteLLM logged while loading.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import sys
from typing import Any


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


async def load(path: str) -> dict[str, Any]:
    proxy: Any = importlib.import_module("litellm.proxy.proxy_server")
    litellm: Any = importlib.import_module("litellm")
    collect = Collect()
    for name in ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router"):
        logging.getLogger(name).addHandler(collect)
    try:
        router, _, general = await proxy.ProxyConfig().load_config(
            router=None, config_file_path=path
        )
    finally:
        for name in ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router"):
            logging.getLogger(name).removeHandler(collect)
    deployments = []
    for item in router.model_list:
        params = item["litellm_params"]
        _, provider, _, _ = litellm.get_llm_provider(
            model=params["model"], api_base=params.get("api_base")
        )
        deployments.append(
            {
                "model_name": item["model_name"],
                "model": params["model"],
                "provider": provider,
                "api_base": params.get("api_base"),
                "id": item["model_info"]["id"],
                "mode": item["model_info"].get("mode"),
            }
        )
    return {
        "deployments": deployments,
        "model_names": sorted(router.get_model_names()),
        "aliases": router.model_group_alias,
        "fallbacks": router.fallbacks,
        "num_retries": router.num_retries,
        "allowed_fails": router.allowed_fails,
        "cooldown_time": router.cooldown_time,
        "timeout": router.timeout,
        "background_health_checks": proxy.use_background_health_checks,
        "health_check_interval": proxy.health_check_interval,
        "master_key": proxy.master_key,
        "master_key_setting": general.get("master_key"),
        "warnings": collect.messages,
    }


async def main(paths: list[str]) -> None:
    results = [await load(path) for path in paths]
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
