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
- `api_base` is not the engine's address but the router's relay for the replica,
  `http://127.0.0.1:RELAY_PORT/REPLICA/v1`: HAProxy on the router (deploy_router.yml, from
  `relays`) health-checks each replica every second, connects with a short timeout, takes
  a replica that stops answering out within 3 s and sends its requests to another replica
  of the model, and speaks TLS to the engines, checking their certificates
  (docs/routing.md, "Dead replicas"). LiteLLM has no connect timeout of its own to set
  (its OpenAI clients connect within the whole request timeout) and no way to end a
  request in flight on a replica that hangs.

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
from urllib.parse import urlsplit

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
# Where LiteLLM reaches the replicas: HAProxy's relay on the router's loopback, one path
# prefix per replica (deploy_router.yml).
RELAY_HOST: Final = "127.0.0.1"
RELAY_PORT: Final = 4002
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
    fallbacks. allowed_fails / cooldown_time: a replica that fails more than this many
    times in a minute is skipped this long. A replica that stopped answering is taken out
    by the next `ctl reconcile` or `ctl routes --apply` anyway.
    """

    num_retries: int = 1
    # 0: a replica that failed once is skipped at once, so the one retry goes to another
    # replica. With 1, the retry of a request the relay could not deliver (in the second
    # or two before its checks take a dead replica out) picked the same replica half the
    # time, and failed (the dead-node fleet test saw it).
    allowed_fails: int = 0
    # A replica the relay has taken out answers 503 at once, so skipping it for long saves
    # little; a short cooldown lets it back soon after the relay has.
    cooldown_time: int = 5  # seconds
    request_timeout: int = 600  # seconds: long generations are normal
    background_health_checks: bool = True
    health_check_interval: int = 30  # seconds
    relay_port: int = RELAY_PORT


def relay_url(route: ReplicaRoute, relay_port: int = RELAY_PORT) -> str:
    return f"http://{RELAY_HOST}:{relay_port}/{route.replica}/v1"


def deployment(route: ReplicaRoute, relay_port: int = RELAY_PORT) -> dict[str, Any]:
    _refuse_references(route)
    provider = PROVIDERS.get(route.engine, "openai")
    info: dict[str, Any] = {"id": route.replica, "engine_url": route.url}
    if route.embedding:
        info["mode"] = "embedding"  # so its health check embeds rather than chats
    return {
        "model_name": route.model,
        "litellm_params": {
            "model": f"{provider}/{route.model}",
            "api_base": relay_url(route, relay_port),
            "api_key": "none",
            # A streamed answer whose first token (or next one) is this late is given up
            # and tried elsewhere; a whole answer is bounded by `timeout` alone, and a
            # replica that hangs is cut by the relay's health check instead.
            "stream_timeout": route.first_token_seconds,
        },
        "model_info": info,
    }


def relays(table: RouteTable) -> list[dict[str, Any]]:
    """What HAProxy relays to, per ready replica: its engine's address and port, whether it
    serves TLS and the node name its certificate is checked for; and as backups, the
    other ready replicas of its model, which take its requests while it is out."""
    servers: dict[str, dict[str, Any]] = {}
    for route in table.deployments:
        _refuse_references(route)
        url = urlsplit(route.url or "")
        if url.hostname is None or url.port is None or route.node is None:
            raise ValueError(f"replica {route.replica} has no address to relay to")
        servers[route.replica] = {
            "name": route.replica,
            "address": url.hostname,
            "port": url.port,
            "tls": url.scheme == "https",
            "node": route.node,
            "model": route.model,
        }
    return [
        {
            "replica": name,
            "servers": [
                server,
                *(
                    other
                    for other in servers.values()
                    if other["model"] == server["model"] and other["name"] != name
                ),
            ],
        }
        for name, server in servers.items()
    ]


# The router's auth hook (playbooks/files/modelfleet_router_keys.py): the master key and
# the teams' keys, installed into LiteLLM's virtualenv by deploy_router.yml.
KEYS_HOOK = "modelfleet_router_keys.authenticate"


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
    # No ssl_verify: LiteLLM speaks plain HTTP to the relay on its own loopback, and the
    # relay speaks TLS to the engines, checking their certificates (deploy_router.yml).
    litellm_settings: dict[str, Any] = {
        "request_timeout": settings.request_timeout,
        # The teams' keys (cli/routes/keys.py): LiteLLM checks what the hook answers — an
        # expired key here, a model the key lacks with `custom_auth_run_common_checks`.
        "enable_post_custom_auth_checks": True,
    }
    return {
        "model_list": [deployment(r, settings.relay_port) for r in table.deployments],
        "router_settings": router,
        "litellm_settings": litellm_settings,
        "general_settings": {
            "master_key": f"os.environ/{MASTER_KEY_ENV}",
            "custom_auth": KEYS_HOOK,
            "custom_auth_run_common_checks": True,
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
