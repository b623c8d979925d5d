"""`ctl targets`' target groups, on the routing tests' synthetic fleet. Pure."""

from __future__ import annotations

from cli.routes.table import route_table
from cli.routes.targets import file_sd, scrape_targets
from tests.builders import NodeSpec, snapshot
from tests.unit.routes.test_routes import ADDRESSES, MODELS, fleet


def groups(specs: list[NodeSpec], ports: dict[str, int | None] | None = None) -> list[dict]:  # type: ignore[type-arg]
    shot = snapshot(*specs)
    table = route_table(MODELS, shot, ADDRESSES)
    return file_sd(scrape_targets(table, shot, ADDRESSES, ports or {}))


def test_every_ready_replica_is_a_target_at_its_rank_0_with_its_labels() -> None:
    found = groups(fleet())
    assert found == [
        {
            "targets": ["10.0.0.1:8000"],  # rank 0 of big-1; rank 1 on hgx-2 is not scraped
            "labels": {"kind": "replica", "model": "big", "replica": "big-1", "node": "hgx-1",
                       "engine": "sglang"},
        },
        {
            "targets": ["10.0.0.2:8004"],
            "labels": {"kind": "replica", "model": "mid", "replica": "mid-1", "node": "hgx-2",
                       "engine": "vllm"},
        },
        {
            "targets": ["10.0.0.1:8001"],  # small-2 is starting: not yet
            "labels": {"kind": "replica", "model": "small", "replica": "small-1",
                       "node": "hgx-1", "engine": "vllm"},
        },
        {
            "targets": ["10.0.1.1:8000"],  # cordoned: still serving, still scraped
            "labels": {"kind": "replica", "model": "tiny", "replica": "tiny-1", "node": "cpu-1",
                       "engine": "llama.cpp"},
        },
        {
            "targets": ["10.0.0.1:8003"],
            "labels": {"kind": "replica", "model": "embed", "replica": "embed-1",
                       "node": "hgx-1", "engine": "vllm"},
        },
        {
            # A model the catalog no longer has still runs until reconcile stops it.
            "targets": ["10.0.0.3:8005"],
            "labels": {"kind": "replica", "model": "gone", "replica": "gone-1", "node": "hgx-3",
                       "engine": "vllm"},
        },
    ]  # fmt: skip


def test_a_replica_on_a_node_not_answering_is_left_out_and_its_exporter_kept() -> None:
    specs = fleet(hgx2_unreachable=True)
    specs[1].listening = [9100, 8004]
    found = groups(specs)
    assert "mid-1" not in {g["labels"].get("replica") for g in found}
    assert found[-1] == {"targets": ["10.0.0.2:9100"], "labels": {"kind": "node", "node": "hgx-2"}}


def test_an_exporter_is_named_where_its_port_listens_on_the_inventory_port() -> None:
    specs = fleet()
    specs[0].listening = [9100]  # hgx-1: the default port
    specs[2].listening = [9100]  # hgx-3 says its exporter is elsewhere, and 9100 is not it
    specs[3].listening = [9200]
    ports: dict[str, int | None] = {"hgx-3": 9101, "cpu-1": 9200}
    found = [g for g in groups(specs, ports) if g["labels"]["kind"] == "node"]
    assert found == [  # in the snapshot's node order
        {"targets": ["10.0.1.1:9200"], "labels": {"kind": "node", "node": "cpu-1"}},
        {"targets": ["10.0.0.1:9100"], "labels": {"kind": "node", "node": "hgx-1"}},
    ]


def test_a_replica_serving_tls_is_scraped_over_https_and_an_ipv6_host_bracketed() -> None:
    specs = fleet()
    small = specs[0].shards[1]
    specs[0].shards = [small.model_copy(update={"certificate": "1f2e"})]
    specs[0].listening = [9100]
    shot = snapshot(*specs)
    addresses = {**ADDRESSES, "hgx-1": "fd00::1"}
    table = route_table(MODELS, shot, addresses)
    found = file_sd(scrape_targets(table, shot, addresses, {}))
    small_group = next(g for g in found if g["labels"].get("replica") == "small-1")
    assert small_group["targets"] == ["[fd00::1]:8001"]
    assert small_group["labels"]["__scheme__"] == "https"
    assert all("__scheme__" not in g["labels"] for g in found if g is not small_group)
    assert {"targets": ["[fd00::1]:9100"], "labels": {"kind": "node", "node": "hgx-1"}} in found
