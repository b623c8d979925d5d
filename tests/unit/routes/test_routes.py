"""The routing table and its LiteLLM configuration, on synthetic snapshots. Pure."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from cli.catalog.load import CatalogProfile
from cli.catalog.schema import Profile
from cli.errors import InputError
from cli.facts.model import ShardRecord
from cli.reconcile.planner import plan
from cli.routes.deploy import litellm_constraints_file, router_variables
from cli.routes.litellm import (
    LITELLM_VERSION,
    deployment_ids,
    litellm_config,
    render,
)
from cli.routes.table import (
    State,
    endpoint_url,
    fallback_chain,
    route_table,
    routes_json,
    serves_embeddings,
)
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, snapshot
from tests.unit.project.test_pure_core import FORBIDDEN, imported_roots

MODELS_YAML = """\
    models:
      big:
        source: hf://org/big
        aliases: [chat, assistant]
        fallbacks: [mid, small]
        replicas: {min: 1}
        profiles:
          - {name: x16, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 8,
             nodes: 2, tensor_parallel: 16}
      mid:
        source: hf://org/mid
        fallbacks: [tiny]
        replicas: {min: 1}
        profiles:
          - {name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2}
      small:
        source: hf://org/small
        aliases: [chat-small]
        replicas: {min: 2}
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      tiny:
        source: file:///srv/tiny.gguf
        replicas: {min: 1}
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 2}
      embed:
        source: hf://org/embed
        aliases: [embeddings]
        replicas: {min: 1}
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1,
             embedding: true}
      spare:
        source: hf://org/spare
        replicas: {min: 0}
        profiles:
          - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
    """
MODELS = catalog(MODELS_YAML)
ADDRESSES = {"hgx-1": "10.0.0.1", "hgx-2": "10.0.0.2", "hgx-3": "10.0.0.3", "cpu-1": "10.0.1.1"}


def record(replica: str, model: str, profile: str, engine: str, **kwargs: object) -> ShardRecord:
    base = shard(replica, model, [], profile=profile, **kwargs)  # type: ignore[arg-type]
    return base.model_copy(update={"engine": engine})


def fleet(*, hgx2_unreachable: bool = False, hgx3_lost: bool = False) -> list[NodeSpec]:
    return [
        hgx("hgx-1", shards=[
            record("big-1", "big", "x16", "sglang", rank=0, nodes=2, port=8000),
            record("small-1", "small", "x1", "vllm", port=8001),
            record("small-2", "small", "x1", "vllm", port=8002, state="starting"),
            record("embed-1", "embed", "x1", "vllm", port=8003),
        ]),
        hgx("hgx-2", shards=[
            record("big-1", "big", "x16", "sglang", rank=1, nodes=2, port=8000),
            record("mid-1", "mid", "x2", "vllm", port=8004),
        ], unreachable_for=timedelta(minutes=1) if hgx2_unreachable else None),
        hgx("hgx-3", shards=[
            record("gone-1", "gone", "x1", "vllm", port=8005),
            record("mid-2", "mid", "x2", "vllm", port=8006, state="failed"),
        ], unreachable_for=timedelta(hours=2) if hgx3_lost else None),
        NodeSpec("cpu-1", cordoned="disk replacement", shards=[
            record("tiny-1", "tiny", "cpu", "llama.cpp", port=8000),
        ]),
    ]  # fmt: skip


def test_every_ready_replica_is_an_endpoint_at_its_rank_0() -> None:
    table = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    endpoints = {r.model: [e.url for e in r.endpoints] for r in table.models}
    assert endpoints == {
        "big": ["http://10.0.0.1:8000/v1"],  # rank 0 on hgx-1, rank 1 on hgx-2
        "mid": ["http://10.0.0.2:8004/v1"],
        "small": ["http://10.0.0.1:8001/v1"],  # small-2 is still starting
        "tiny": ["http://10.0.1.1:8000/v1"],  # a cordon stops placements, not traffic
        "embed": ["http://10.0.0.1:8003/v1"],
        "spare": [],
    }
    assert table.complete
    assert [r.replica for r in table.unrouted] == ["gone-1"]


def test_replicas_that_are_not_ready_say_why() -> None:
    table = route_table(MODELS, snapshot(*fleet(hgx2_unreachable=True)), ADDRESSES)
    states = {r.replica: (r.state, r.reason) for m in table.models for r in m.replicas}
    assert states["small-2"] == (State.STARTING, "starting")
    assert states["mid-2"] == (State.FAILED, "failed: rank 0 on hgx-3")
    assert states["big-1"] == (
        State.UNREACHABLE, "on unreachable node hgx-2: timed out after 10 s"
    )  # fmt: skip
    big = table.model("big")
    assert big.missing == "big-1 on unreachable node hgx-2: timed out after 10 s"
    assert big.served_by == "small"  # mid (first) has no ready replica either
    assert not table.complete
    lost = route_table(MODELS, snapshot(*fleet(hgx3_lost=True)), ADDRESSES)
    assert lost.model("mid").replicas[1].reason == "on lost node hgx-3: timed out after 10 s"


def test_a_replica_missing_a_rank_or_without_a_port_is_not_ready() -> None:
    nodes = [hgx("hgx-1", shards=[
        record("big-1", "big", "x16", "sglang", rank=1, nodes=2, port=8000),
        record("small-1", "small", "x1", "vllm").model_copy(update={"port": None}),
    ])]  # fmt: skip
    table = route_table(MODELS, snapshot(*nodes), ADDRESSES)
    assert table.model("big").missing == "big-1 failed: rank 0 missing"
    assert table.model("big").replicas[0].node is None
    assert table.model("small").missing == "small-1 failed: rank 0 records no port"


def test_a_model_with_nothing_running_and_one_nobody_wants() -> None:
    table = route_table(MODELS, snapshot(hgx("hgx-1")), ADDRESSES)
    assert table.model("small").missing == "none running"
    assert table.model("spare").missing == "none wanted (replicas.min 0)"
    assert table.model("spare").served_by is None
    assert not table.complete


def test_fallbacks_are_the_catalogs_order_then_theirs_breadth_first() -> None:
    assert MODELS.models["big"].fallbacks == ("mid", "small")
    assert fallback_chain(MODELS, "big") == ("mid", "small", "tiny")
    assert fallback_chain(MODELS, "mid") == ("tiny",)
    assert fallback_chain(MODELS, "tiny") == ()
    chained = catalog(
        """\
        models:
          a: {source: hf://o/a, fallbacks: [b, c], profiles: [{name: p, priority: 1, engine: sglang,
             gpu_class: H100, gpus_per_node: 1}]}
          b: {source: hf://o/b, fallbacks: [d, c], profiles: [{name: p, priority: 1, engine: sglang,
             gpu_class: H100, gpus_per_node: 1}]}
          c: {source: hf://o/c, fallbacks: [d], profiles: [{name: p, priority: 1, engine: sglang,
             gpu_class: H100, gpus_per_node: 1}]}
          d: {source: hf://o/d, profiles: [{name: p, priority: 1, engine: sglang,
             gpu_class: H100, gpus_per_node: 1}]}
        """
    )
    assert fallback_chain(chained, "a") == ("b", "c", "d")


def test_withdrawn_replicas_leave_and_started_ones_join() -> None:
    current = snapshot(
        hgx("hgx-1", shards=[record("small-1", "small", "x1", "vllm", port=8001)]), hgx("hgx-2")
    )
    the_plan = plan(MODELS, current, {}, ADDRESSES, random.Random(1))
    started = [s for s in the_plan.starts if s.model == "small"]
    assert [s.replica for s in started] == ["small-2"]
    table = route_table(MODELS, current, ADDRESSES, withdrawn={"small-1"}, started=started)
    small = table.model("small")
    assert [r.replica for r in small.endpoints] == ["small-2"]
    assert small.endpoints[0].url == "http://10.0.0.2:8000/v1"  # its rank 0, as started
    assert started[0].leader.health_url == "http://10.0.0.2:8000"
    assert {r.replica: r.state for r in small.replicas}["small-1"] is State.WITHDRAWN


def test_embedding_servers_are_told_apart_by_their_profiles_embedding_key() -> None:
    table = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    assert table.model("embed").endpoints[0].embedding
    assert not table.model("small").endpoints[0].embedding
    config = litellm_config(table)
    info = {d["model_info"]["id"]: d["model_info"] for d in config["model_list"]}
    assert info["embed-1"] == {
        "id": "embed-1", "engine_url": "http://10.0.0.1:8003/v1", "mode": "embedding"
    }  # fmt: skip
    assert info["small-1"]["id"] == "small-1"
    assert "mode" not in info["small-1"]


@pytest.mark.parametrize(
    ("engine", "args", "embedding"),
    [
        ("vllm", ["--runner", "pooling"], True),
        ("vllm", ["--runner=pooling"], True),
        ("vllm", ["--runner", "generate"], False),
        ("vllm", ["--max-model-len", "512"], False),
        ("sglang", ["--is-embedding"], True),
        ("sglang", ["--is-embedding-model"], False),
        ("llama.cpp", ["--embeddings"], True),
        ("llama.cpp", ["--embedding"], True),
        ("llama.cpp", ["--pooling", "mean"], False),
    ],
)
def test_args_that_already_hold_the_engines_embedding_mode_make_an_embedding_server(
    engine: str, args: list[str], embedding: bool
) -> None:
    # The engine spec's own embedding arguments, written by hand instead of `embedding: true`.
    profile = CatalogProfile(
        "m",
        Profile(name="p", priority=1, engine=engine, gpu_class="H100", gpus_per_node=1,
                args=tuple(args)),
        "hf://org/m",
    )  # fmt: skip
    assert serves_embeddings(profile) is embedding


def test_an_ipv6_address_is_bracketed() -> None:
    assert endpoint_url("fd00::7", 8000) == "http://[fd00::7]:8000/v1"
    assert endpoint_url("10.0.0.1", 8000) == "http://10.0.0.1:8000/v1"


def test_the_litellm_config_has_a_deployment_per_ready_replica() -> None:
    table = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    config = litellm_config(table)
    assert [d["model_name"] for d in config["model_list"]] == [
        "big",
        "mid",
        "small",
        "tiny",
        "embed",
    ]
    params = {d["model_info"]["id"]: d["litellm_params"] for d in config["model_list"]}
    # LiteLLM reaches each replica through the router's relay (HAProxy), which checks it.
    assert params["big-1"] == {
        "model": "openai/big", "api_base": "http://127.0.0.1:4002/big-1/v1", "api_key": "none",
        "stream_timeout": 60,
    }  # fmt: skip
    info = {d["model_info"]["id"]: d["model_info"] for d in config["model_list"]}
    assert info["big-1"] == {"id": "big-1", "engine_url": "http://10.0.0.1:8000/v1"}
    assert params["mid-1"]["model"] == "hosted_vllm/mid"
    assert params["tiny-1"]["model"] == "openai/tiny"
    assert deployment_ids(table) == ["big-1", "embed-1", "mid-1", "small-1", "tiny-1"]
    router = config["router_settings"]
    assert router["model_group_alias"] == {
        "chat": "big", "assistant": "big", "chat-small": "small", "embeddings": "embed"
    }  # fmt: skip
    # LiteLLM looks fallbacks up by the name asked for: aliases get their model's.
    assert router["fallbacks"] == [
        {"big": ["mid", "small", "tiny"]},
        {"chat": ["mid", "small", "tiny"]},
        {"assistant": ["mid", "small", "tiny"]},
        {"mid": ["tiny"]},
    ]
    # docs/routing.md: one more try on the same model; a replica failing once is skipped
    # for 5 s; 600 s for a long generation; every deployment health-checked every 30 s.
    settings = {k: v for k, v in router.items() if k not in ("model_group_alias", "fallbacks")}
    assert settings == {"num_retries": 1, "allowed_fails": 0, "cooldown_time": 5, "timeout": 600}
    # The teams' keys: the router's hook answers, LiteLLM checks expiry and models.
    assert config["litellm_settings"] == {
        "request_timeout": 600,
        "enable_post_custom_auth_checks": True,
    }
    assert config["general_settings"] == {
        "master_key": "os.environ/LITELLM_MASTER_KEY",
        "custom_auth": "modelfleet_router_keys.authenticate",
        "custom_auth_run_common_checks": True,
        "background_health_checks": True,
        "health_check_interval": 30,
    }


def test_a_model_without_a_ready_replica_is_aliased_to_the_fallback_answering() -> None:
    table = route_table(MODELS, snapshot(*fleet(hgx2_unreachable=True)), ADDRESSES)
    router = litellm_config(table)["router_settings"]
    # big and mid are down: big's name and aliases go to small, the first that answers,
    # and fall back on past it; mid goes to tiny.
    assert router["model_group_alias"]["big"] == "small"
    assert router["model_group_alias"]["chat"] == "small"
    assert router["model_group_alias"]["mid"] == "tiny"
    assert {"chat": ["tiny"]} in router["fallbacks"]
    assert all("mid" not in chain for f in router["fallbacks"] for chain in f.values())


def test_a_model_nothing_answers_for_is_left_out() -> None:
    table = route_table(MODELS, snapshot(hgx("hgx-1")), ADDRESSES)
    config = litellm_config(table)
    assert config["model_list"] == []
    assert "model_group_alias" not in config["router_settings"]
    assert "fallbacks" not in config["router_settings"]


def test_the_same_table_renders_the_same_bytes_whenever_it_was_taken() -> None:
    first = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    later = type(first)(first.at + timedelta(hours=1), first.models, first.aliases)
    assert render(first) == render(later)
    assert yaml.safe_load(render(first)) == litellm_config(first)


def test_routes_json_follows_the_documented_shape() -> None:
    table = route_table(MODELS, snapshot(*fleet(hgx2_unreachable=True)), ADDRESSES)
    data = routes_json(table)
    assert data["format"] == "modelfleet.routes/v1"
    assert data["at"] == NOW.isoformat()
    assert data["complete"] is False
    big = next(m for m in data["models"] if m["model"] == "big")
    assert big["ready"] is False
    assert big["endpoints"] == []
    assert big["fallbacks"] == ["mid", "small"]
    assert big["fallback_chain"] == ["mid", "small", "tiny"]
    assert big["served_by"] == "small"
    assert big["missing"].startswith("big-1 on unreachable node hgx-2")
    assert big["replicas"][0]["state"] == "unreachable"
    small = next(m for m in data["models"] if m["model"] == "small")
    assert small["endpoints"] == [
        {"replica": "small-1", "profile": "x1", "engine": "vllm", "node": "hgx-1",
         "url": "http://10.0.0.1:8001/v1", "state": "ready", "reason": None}
    ]  # fmt: skip
    chat = next(a for a in data["aliases"] if a["alias"] == "chat")
    assert chat == {"alias": "chat", "model": "big", "ready": False, "served_by": "small",
                    "endpoints": []}  # fmt: skip
    assert [r["replica"] for r in data["unrouted"]] == ["gone-1"]


def test_the_routes_core_imports_no_edge_library() -> None:
    root = Path(__file__).resolve().parents[3] / "cli" / "routes"
    for name in ("table.py", "litellm.py"):
        source = (root / name).read_text(encoding="utf-8")
        assert imported_roots(root / name) & FORBIDDEN == set(), name
        for call in ("open(", ".read_text(", ".write_text(", "subprocess", "socket"):
            assert call not in source, f"{name} uses {call}"


def test_the_routers_get_the_tested_dependencies_of_the_tested_litellm() -> None:
    shipped = litellm_constraints_file().read_text("utf-8")
    pins = dict(
        line.split("==", 1) for line in shipped.splitlines() if line and not line.startswith("#")
    )
    # The constraints pin litellm itself: they must be for the version ctl installs.
    assert pins["litellm"] == LITELLM_VERSION
    assert len(pins) > 50  # the proxy's whole tree, not just litellm
    variables = router_variables(route_table(MODELS, snapshot(hgx("hgx-1")), ADDRESSES))
    assert variables["modelfleet_router_tested_constraints"] == shipped
    assert variables["modelfleet_router_tested_version"] == LITELLM_VERSION


def test_the_relay_and_the_first_token_timeout_come_from_the_table_and_the_profiles() -> None:
    # A profile's first_token_seconds becomes its replicas' stream_timeout; LiteLLM reaches
    # every replica through the router's relay, which is told each engine's address and
    # the other replicas of its model (its backups).
    models = catalog(
        """\
        models:
          mid:
            source: hf://org/mid
            replicas: {min: 2}
            profiles:
              - {name: x2, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 2,
                 first_token_seconds: 240}
        """
    )
    assert models.models["mid"].profiles[0].spec.first_token_seconds == 240
    shards = [record("mid-1", "mid", "x2", "vllm", port=8004)]
    other = [record("mid-2", "mid", "x2", "vllm", port=8006)]
    table = route_table(
        models, snapshot(hgx("hgx-2", shards=shards), hgx("hgx-3", shards=other)), ADDRESSES
    )
    config = litellm_config(table)
    params = {d["model_info"]["id"]: d["litellm_params"] for d in config["model_list"]}
    assert params["mid-1"]["stream_timeout"] == 240
    assert params["mid-2"]["api_base"] == "http://127.0.0.1:4002/mid-2/v1"
    variables = router_variables(table)
    assert variables["modelfleet_router_relay_port"] == 4002
    relayed = {r["replica"]: r["servers"] for r in variables["modelfleet_router_relays"]}
    assert [(s["name"], s["address"], s["port"]) for s in relayed["mid-1"]] == [
        ("mid-1", "10.0.0.2", 8004), ("mid-2", "10.0.0.3", 8006)
    ]  # fmt: skip
    assert [s["name"] for s in relayed["mid-2"]] == ["mid-2", "mid-1"]
    with pytest.raises(InputError, match=r"first_token_seconds: must be at least 1, not 0"):
        catalog(
            """\
            models:
              m:
                source: hf://org/m
                profiles:
                  - {name: p, priority: 1, engine: vllm, first_token_seconds: 0}
            """
        )
