"""Shards on a node with a usable certificate serve TLS (issue 18): each engine gets its own
options for the node's key and certificate, its health check and its route are https, and
its record says the serial it serves; a node without one serves plain HTTP."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import yaml

from cli.catalog.load import parse_catalog
from cli.engines.flags import accepted_options
from cli.engines.specs import ENGINE_SPECS, Rank, engine_spec
from cli.facts.model import NodeCertificate
from cli.pki.paths import NODE_CERT_PATH, NODE_KEY_PATH
from cli.reconcile.planner import plan, serving_certificates
from cli.routes.deploy import router_variables
from cli.routes.litellm import litellm_config, relays, render
from cli.routes.table import route_table
from cli.shards.units import shard_files
from tests.builders import NOW, NodeSpec, catalog, hgx, shard, snapshot


def certificate(serial: str = "1f2e", **changes: object) -> NodeCertificate:
    base = NodeCertificate(
        serial=serial,
        not_before=NOW - timedelta(days=10),
        not_after=NOW + timedelta(days=80),
        dns_names=("node",),
        ip_addresses=("10.0.0.1",),
        issuer="CN=modelfleet CA lab,O=modelfleet",
        key_present=True,
    )
    return base.model_copy(update=changes)


PROFILES = {
    "vllm": "{name: p, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}",
    "sglang": "{name: p, priority: 1, engine: sglang, gpu_class: H100, gpus_per_node: 1}",
    "llama.cpp": "{name: p, priority: 1, engine: llama.cpp, min_memory_gb: 2}",
}


def profile_of(engine: str) -> object:
    text = f"models:\n  m:\n    source: file:///srv/m\n    profiles:\n      - {PROFILES[engine]}\n"
    return parse_catalog(text, "c.yaml").models["m"].profiles[0]


@pytest.mark.parametrize("engine", ENGINE_SPECS)
def test_a_rank_0_with_a_certificate_serves_tls_with_its_engines_own_options(
    engine: str,
) -> None:
    spec = engine_spec(engine)
    place = Rank(0, 1, 8000, "10.0.0.1")
    profile = profile_of(engine)
    files = shard_files("n", "10.0.0.1", "m-1", profile, place, NOW, certificate="1f2e")  # type: ignore[arg-type]
    argv = files.unit_text.split("ExecStart=")[1].splitlines()[0]
    assert f'"{spec.tls_key_option}" "{NODE_KEY_PATH}"' in argv
    assert f'"{spec.tls_cert_option}" "{NODE_CERT_PATH}"' in argv
    assert all(f'"{arg}"' in argv for arg in spec.tls_reload_args)
    # Every option is one the pinned release's parser has.
    options = accepted_options(engine, spec.pinned_version)
    assert options is not None
    assert {spec.tls_key_option, spec.tls_cert_option, *spec.tls_reload_args} <= options
    assert files.health_url == "https://10.0.0.1:8000"
    assert (files.tls, files.certificate) == (True, "1f2e")
    assert '"certificate": "1f2e"' in files.record_text


def test_vllm_and_sglang_reload_a_renewed_certificate_and_llama_server_does_not() -> None:
    assert engine_spec("vllm").reloads_certificate
    assert engine_spec("sglang").reloads_certificate
    assert not engine_spec("llama.cpp").reloads_certificate
    # SGLang's warm-up would check its own certificate for 127.0.0.1 with a CA file.
    assert "--ssl-ca-certs" not in engine_spec("sglang").tls_args("k", "c")


def test_without_a_certificate_and_on_ranks_past_0_nothing_of_tls_is_written() -> None:
    vllm = profile_of("vllm")
    plain = shard_files("n", "10.0.0.1", "m-1", vllm, Rank(0, 1, 8000, "10.0.0.1"), NOW)  # type: ignore[arg-type]
    assert "--ssl" not in plain.unit_text
    assert plain.health_url == "http://10.0.0.1:8000"
    assert (plain.tls, plain.certificate) == (False, None)
    assert "certificate" not in plain.record_text
    worker = shard_files("n", "10.0.0.2", "m-1", vllm, Rank(1, 2, 8000, "10.0.0.1"), NOW,  # type: ignore[arg-type]
                         certificate="1f2e")  # fmt: skip
    assert "--ssl" not in worker.unit_text
    assert worker.health_url is None and not worker.tls


TINY = """
    models:
      tiny:
        source: file:///srv/tiny.gguf
        replicas: {min: 1}
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp, min_memory_gb: 2}
    """


@pytest.mark.parametrize(
    ("cert", "tls"),
    [
        (certificate(), True),
        (certificate(not_after=NOW), False),  # expired this second
        (certificate(not_before=NOW + timedelta(minutes=1)), False),  # not valid yet
        (certificate(key_present=False), False),
        (certificate(problem="not signed by its ca.pem"), False),
        (None, False),
    ],
    ids=["usable", "expired", "not-yet-valid", "no-key", "problem", "none"],
)
def test_a_new_replica_serves_tls_only_on_a_node_whose_certificate_is_usable_now(
    cert: NodeCertificate | None, tls: bool
) -> None:
    fleet = snapshot(NodeSpec("cpu-1", certificate=cert))
    assert serving_certificates(fleet) == ({"cpu-1": "1f2e"} if tls else {})
    made = plan(catalog(TINY), fleet, {}, {"cpu-1": "10.0.0.1"}, random.Random(1))
    [start] = made.starts
    [files] = start.files
    assert files.tls is tls
    assert files.health_url == f"http{'s' if tls else ''}://10.0.0.1:{files.port}"


def test_a_replica_serving_tls_is_relayed_over_https_checked_for_its_node() -> None:
    models = catalog(TINY)
    tls = shard("tiny-1", "tiny", [], profile="cpu", port=8100).model_copy(
        update={"engine": "llama.cpp", "certificate": "1f2e"}
    )
    plain = shard("tiny-2", "tiny", [], profile="cpu", port=8101).model_copy(
        update={"engine": "llama.cpp"}
    )
    fleet = snapshot(NodeSpec("cpu-1", shards=[tls]), hgx("cpu-2", shards=[plain]))
    table = route_table(models, fleet, {"cpu-1": "10.0.0.1", "cpu-2": "10.0.0.2"})
    config = litellm_config(table)
    info = {d["model_info"]["id"]: d["model_info"] for d in config["model_list"]}
    assert info["tiny-1"]["engine_url"] == "https://10.0.0.1:8100/v1"
    assert info["tiny-2"]["engine_url"] == "http://10.0.0.2:8101/v1"
    # LiteLLM speaks plain HTTP to the relay on its own loopback; the relay speaks TLS to
    # the engine that serves it, checking the certificate for the node's name.
    assert "ssl_verify" not in config["litellm_settings"]
    assert "ssl_verify" not in yaml.safe_load(render(table))["litellm_settings"]
    servers = {r["replica"]: r["servers"] for r in relays(table)}
    assert servers["tiny-1"] == [
        {"name": "tiny-1", "address": "10.0.0.1", "port": 8100, "tls": True, "node": "cpu-1",
         "model": "tiny"},
        {"name": "tiny-2", "address": "10.0.0.2", "port": 8101, "tls": False, "node": "cpu-2",
         "model": "tiny"},
    ]  # fmt: skip
    assert [s["name"] for s in servers["tiny-2"]] == ["tiny-2", "tiny-1"]  # the other: backup


def tiny_record(replica: str, serial: str | None, engine: str = "llama.cpp") -> object:
    return shard(replica, "tiny", [], profile="cpu", port=8100).model_copy(
        update={"engine": engine, "certificate": serial, "memory_gib": 2.0}
    )


TWO_TINY = TINY.replace("replicas: {min: 1}", "replicas: {min: 2}")


def test_llama_server_on_a_renewed_certificate_is_replaced_one_replica_a_pass_new_first() -> None:
    fleet = snapshot(
        NodeSpec(
            "cpu-1",
            certificate=certificate("2b"),
            shards=[tiny_record("tiny-1", "1f2e"), tiny_record("tiny-2", "1f2e")],  # type: ignore[list-item]
        )
    )
    made = plan(catalog(TWO_TINY), fleet, {}, {"cpu-1": "10.0.0.1"}, random.Random(1))
    [start] = made.starts
    [drain] = made.drains
    assert drain.replica == "tiny-1" and drain.replacement == start.replica
    assert drain.reason == "serves the node's certificate from before its renewal"
    assert start.files[0].certificate == "2b"  # the new copy serves the renewed one
    assert "restarts tiny-1 on a renewed certificate" in start.reason


def test_a_replica_on_the_current_certificate_or_an_engine_that_reloads_is_left_alone() -> None:
    fleet = snapshot(
        NodeSpec("cpu-1", certificate=certificate("2b"), shards=[tiny_record("tiny-1", "2b")]),  # type: ignore[list-item]
    )
    made = plan(catalog(TINY), fleet, {}, {"cpu-1": "10.0.0.1"}, random.Random(1))
    assert (made.starts, made.drains) == ((), ())


def test_with_no_room_for_the_new_copy_the_old_serves_on_and_says_why() -> None:
    fleet = snapshot(
        NodeSpec("cpu-1", memory_gib=3, certificate=certificate("2b"),
                 shards=[tiny_record("tiny-1", "1f2e")]),  # type: ignore[list-item]
    )  # fmt: skip
    made = plan(catalog(TINY), fleet, {}, {"cpu-1": "10.0.0.1"}, random.Random(1))
    assert (made.starts, made.drains) == ((), ())
    [leave] = made.leaves
    assert leave.replica == "tiny-1"
    assert "old certificate while that is valid" in leave.reason


def test_the_routers_keep_drop_or_get_the_cas_revocation_list() -> None:
    """None: no CA here, the routers keep theirs; "": the CA revoked nothing (an empty
    string would reach Ansible as null, so it is a flag); else the list itself."""
    table = route_table(catalog(TINY), snapshot(NodeSpec("cpu-1")), {"cpu-1": "10.0.0.1"})
    kept = router_variables(table, crl=None)
    assert "modelfleet_router_crl" not in kept and "modelfleet_router_crl_clear" not in kept
    cleared = router_variables(table, crl="")
    assert cleared["modelfleet_router_crl_clear"] is True
    assert "modelfleet_router_crl" not in cleared
    given = router_variables(table, crl="-----BEGIN X509 CRL-----\n...\n")
    assert given["modelfleet_router_crl"].startswith("-----BEGIN X509 CRL-----")
    assert "modelfleet_router_crl_clear" not in given
    assert given["modelfleet_router_tls"] is False  # nothing routed serves TLS
