"""The routing table as a LiteLLM proxy configuration (config.yaml). Pure.

- `model_list`: one deployment per ready replica. `model_name` is the catalog model;
  `litellm_params.model` is the provider prefix and the name the engine serves (ctl passes
  the model's name as vLLM's and SGLang's --served-model-name and llama-server's --alias);
  `api_base` the replica's rank 0, `http://ADDRESS:PORT/v1`; `model_info.id` the replica, so
  the router's own logs and `/v1/model/info` name replicas as `ctl` does.
- `router_settings.model_group_alias`: each alias → its model. A model with no ready replica
  is itself aliased to the fallback that answers for it (the table's `served_by`), and so
  are its aliases: LiteLLM has no deployment to try for it.
- `router_settings.fallbacks`: for each model and each alias (LiteLLM looks fallbacks up by
  the name asked for, not the model it is an alias of), its fallback chain — past the
  model that answers for it — keeping the models that have a ready replica. They cover
  replicas that stop answering between two updates of the router.
- health checks and retries: `RouterSettings`.

Providers (each engine spec's `litellm_provider`, cli/engines/specs.py): vLLM is LiteLLM's
`hosted_vllm` (its OpenAI-compatible server, no API key
needed); SGLang and llama-server are OpenAI-compatible servers, LiteLLM's `openai` provider,
which wants some key, so every deployment says `api_key: none` (no engine is started with
--api-key by ctl). The master key clients use is read from the router's environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import yaml

from cli.catalog.schema import NAME_PATTERN
from cli.engines.specs import ENGINE_SPECS
from cli.routes.table import ReplicaRoute, RouteTable

# The LiteLLM the rendering is tested against (tests load it with this version) and that
# the router playbook installs unless the inventory pins another.
LITELLM_VERSION: Final = "1.108.7"
# Beside this module: every package LiteLLM's proxy needs, at the versions tested with it.
LITELLM_CONSTRAINTS: Final = "litellm-constraints.txt"

PROVIDERS: Final = {name: spec.litellm_provider for name, spec in ENGINE_SPECS.items()}
MASTER_KEY_ENV: Final = "LITELLM_MASTER_KEY"
# The router's trust bundle (playbooks/deploy_router.yml): the fleet CA's certificate and,
# once a node certificate was revoked, the CA's CRL, which files/modelfleet_router_tls.py
# makes LiteLLM's SSL context check.
ROUTER_TRUST: Final = "/etc/modelfleet/router/trust.pem"
# LiteLLM replaces a config string that starts with `os.environ/` by that variable's value
# (litellm/proxy/proxy_server.py, ProxyConfig._check_for_os_environ_vars, and
# litellm/secret_managers/main.py get_secret, which also reads `oidc/...` as a token
# request), so no name from a node may reach the file unless it is a catalog name.
SAFE_NAME: Final = re.compile(NAME_PATTERN)


def _refuse_references(route: ReplicaRoute) -> None:
    for what, value in (("replica", route.replica), ("model", route.model)):
        if SAFE_NAME.fullmatch(value) is None or "os.environ/" in value:
            raise ValueError(f"{what} name {value!r} is not a catalog name; not written")


@dataclass(frozen=True)
class RouterSettings:
    """How the router treats replicas; the defaults suit model servers on a private network.

    num_retries: tries on the same model (another replica when one is healthy, at once;
    after a back-off of about a second when the model has a single replica) before its
    fallbacks. allowed_fails / cooldown_time: a replica that fails this many times in a
    minute is skipped this long. A replica that stopped answering is taken out by the
    next `ctl reconcile` or `ctl routes --apply` anyway.
    """

    num_retries: int = 1
    allowed_fails: int = 1
    cooldown_time: int = 30  # seconds
    request_timeout: int = 600  # seconds: long generations are normal
    background_health_checks: bool = True
    health_check_interval: int = 30  # seconds


def deployment(route: ReplicaRoute) -> dict[str, Any]:
    _refuse_references(route)
    provider = PROVIDERS.get(route.engine, "openai")
    info: dict[str, Any] = {"id": route.replica}
    if route.embedding:
        info["mode"] = "embedding"  # so its health check embeds rather than chats
    return {
        "model_name": route.model,
        "litellm_params": {
            "model": f"{provider}/{route.model}",
            "api_base": route.url,
            "api_key": "none",
        },
        "model_info": info,
    }


def litellm_config(table: RouteTable, settings: RouterSettings | None = None) -> dict[str, Any]:
    """The configuration as data; `render` writes it."""
    settings = settings or RouterSettings()
    served = {route.model for route in table.models if route.ready}
    aliases: dict[str, str] = {}
    fallbacks: list[dict[str, list[str]]] = []
    for route in table.models:
        target = route.served_by
        if target is None:
            continue  # nothing answers: LiteLLM says the model does not exist
        names = [route.model, *route.aliases]
        if route.ready:
            aliases |= dict.fromkeys(route.aliases, route.model)
            chain = [m for m in route.chain if m in served]
        else:
            aliases |= dict.fromkeys(names, target)
            after = route.chain[route.chain.index(target) + 1 :]
            chain = [m for m in after if m in served]
        if chain:
            fallbacks += [{name: chain} for name in names]
    router: dict[str, Any] = {
        "num_retries": settings.num_retries,
        "allowed_fails": settings.allowed_fails,
        "cooldown_time": settings.cooldown_time,
        "timeout": settings.request_timeout,
    }
    if aliases:
        router["model_group_alias"] = aliases
    if fallbacks:
        router["fallbacks"] = fallbacks
    litellm_settings: dict[str, Any] = {"request_timeout": settings.request_timeout}
    if any(route.tls for route in table.deployments):
        # Engines serving TLS are checked against the fleet's CA, as the router's own node
        # has it from onboarding, and the CA's CRL: the bundle deploy_router.yml writes.
        # Set for the whole router: LiteLLM 1.108.7's openai and hosted_vllm clients read
        # only the global litellm.ssl_verify (llms/openai/common_utils.py,
        # get_ssl_configuration() with no argument), never a deployment's own `ssl_verify`
        # (tested on the test fleet: a deployment's was ignored).
        litellm_settings["ssl_verify"] = ROUTER_TRUST
    return {
        "model_list": [deployment(r) for r in table.deployments],
        "router_settings": router,
        "litellm_settings": litellm_settings,
        "general_settings": {
            "master_key": f"os.environ/{MASTER_KEY_ENV}",
            "background_health_checks": settings.background_health_checks,
            "health_check_interval": settings.health_check_interval,
        },
    }


def deployment_ids(table: RouteTable) -> list[str]:
    """The `model_info.id`s the router serves once it has this table: the ready replicas."""
    return sorted(route.replica for route in table.deployments)


def render(table: RouteTable, settings: RouterSettings | None = None) -> str:
    # No timestamp: the same table must give the same bytes, or every pass would reload.
    header = (
        "# LiteLLM proxy configuration, written by modelfleet's `ctl` from its routing table.\n"
        "# Every update replaces it whole (docs/routing.md): change the catalog, not this file.\n"
    )
    body = yaml.safe_dump(litellm_config(table, settings), sort_keys=False, width=100)
    return header + body
