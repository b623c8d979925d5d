"""The fake executor is no more forgiving than a node: what a node refuses, it refuses."""

from __future__ import annotations

from cli.facts.model import ShardRecord
from cli.reconcile.apply import ShardFailure
from cli.reconcile.planner import RunningShard, Stop
from cli.shards.units import ShardFiles
from tests.builders import shard
from tests.fakes.executor import FakeFleet


def files(node: str, record: ShardRecord) -> ShardFiles:
    unit = f"modelfleet-{record.replica}-rank{record.rank}.service"
    return ShardFiles(
        node=node, replica=record.replica, model=record.model, rank=record.rank,
        port=record.port or 0, unit=unit, unit_path=f"/etc/systemd/system/{unit}",
        unit_text="", env_path="", env_text="", record_path="",
        record_text=record.model_dump_json(), health_url=None,
    )  # fmt: skip


def running(fake: FakeFleet, node: str, record: ShardRecord) -> None:
    fake.records[(node, f"modelfleet-{record.replica}-rank{record.rank}.service")] = record


def test_a_shard_on_a_gpu_another_replica_holds_fails_to_start() -> None:
    fake = FakeFleet()
    running(fake, "hgx-1", shard("a-1", "a", [0, 1], port=8000))
    failures = fake.start([files("hgx-1", shard("b-1", "b", [1, 2], port=8001))])
    assert failures == {
        ("hgx-1", "modelfleet-b-1-rank0.service"): ShardFailure("GPU 1 is in use by a-1")
    }
    assert fake.running() == {"a-1"}


def test_a_shard_on_a_bound_port_fails_to_start() -> None:
    fake = FakeFleet()
    running(fake, "hgx-1", shard("a-1", "a", [0], port=8000))
    failures = fake.start([files("hgx-1", shard("b-1", "b", [1], port=8000))])
    assert failures == {
        ("hgx-1", "modelfleet-b-1-rank0.service"): ShardFailure(
            "port 8000: address already in use (a-1)"
        )
    }


def test_rank_0_of_a_multi_node_replica_also_binds_its_rendezvous_port() -> None:
    fake = FakeFleet()
    running(fake, "hgx-1", shard("big-1", "big", [0], port=8000, nodes=2))
    failures = fake.start([files("hgx-1", shard("b-1", "b", [1], port=18000))])
    assert failures == {
        ("hgx-1", "modelfleet-b-1-rank0.service"): ShardFailure(
            "port 18000: address already in use (big-1)"
        )
    }


def test_the_same_gpu_and_port_on_another_node_is_no_clash() -> None:
    fake = FakeFleet()
    running(fake, "hgx-1", shard("a-1", "a", [0], port=8000))
    assert fake.start([files("hgx-2", shard("b-1", "b", [0], port=8000))]) == {}
    assert fake.running() == {"a-1", "b-1"}


def test_a_stop_can_fail_and_leaves_the_shard_running() -> None:
    record = shard("a-1", "a", [0], port=8000)
    fake = FakeFleet(fail_stop={"a-1"})
    running(fake, "hgx-1", record)
    stop = Stop("a-1", "a", (RunningShard("hgx-1", record),), "retired", drain=True)
    assert fake.stop([stop]) == {
        ("hgx-1", "modelfleet-a-1-rank0.service"): "modelfleet-a-1-rank0.service did not stop"
    }
    assert fake.running() == {"a-1"}


def test_a_shard_that_dies_after_it_started_is_found_when_verified() -> None:
    fake = FakeFleet(die={("big-1", 1)}, journal={("big-1", 1): ("NCCL error",)})
    worker = files("hgx-2", shard("big-1", "big", [0], 1, port=8000, nodes=2))
    assert fake.start([worker]) == {}  # systemctl start returned: the unit had begun
    leader = files("hgx-1", shard("big-1", "big", [0], 0, port=8000, nodes=2))
    assert fake.start([leader], verify=[worker]) == {
        ("hgx-2", "modelfleet-big-1-rank1.service"): ShardFailure(
            "unit failed: its process exited with status 1", ("NCCL error",)
        )
    }
    assert fake.verified == [(), ("big-1/1",)]
