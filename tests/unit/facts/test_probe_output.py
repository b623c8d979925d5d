"""The probe's sections → facts: what is known, what is unknown and said, what fails a node."""

from __future__ import annotations

import pytest

from cli.facts.model import NodeFacts
from cli.facts.probe import ProbeOutputError, facts_from_attempt, facts_from_probe, split_sections
from tests.builders import NOW

MEMINFO = "MemTotal:       65842332 kB\nMemFree:        60000000 kB\nMemAvailable:   61234000 kB\n"
QUERY = (
    "0, GPU-aaaaaaaa-1111-2222-3333-444444444444, NVIDIA H100 80GB HBM3, 00000000:18:00.0,"
    " 81559, 4, 0\n"
    "1, GPU-bbbbbbbb-1111-2222-3333-444444444444, NVIDIA H100 80GB HBM3, 00000000:2A:00.0,"
    " 81559, 30512, 0\n"
)
APPS = "GPU-bbbbbbbb-1111-2222-3333-444444444444, 4121, python3, 30500\n"
TOPO = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\t0-47\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-47\t0\t\tN/A\n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def section(name: str, body: str, status: int | None = 0) -> str:
    end = "" if status is None else f"\n@@modelfleet end {name} {status}\n"
    return f"@@modelfleet begin {name}\n{body}{end}"


def probe_output(**overrides: str) -> str:
    parts = {
        "version": section("version", "1\n"),
        "meminfo": section("meminfo", MEMINFO),
        "cgroup-memory": section("cgroup-memory", "", 127),
        "pci-nvidia": section("pci-nvidia", "0000:18:00.0 0x030200\n"),
        "query-gpu": section("query-gpu", QUERY),
        "compute-apps": section("compute-apps", APPS),
        "topology": section("topology", TOPO),
        "infiniband": section(
            "infiniband",
            "mlx5_0/ports/1/state\t4: ACTIVE\nmlx5_0/ports/1/rate\t400 Gb/sec (4X NDR)\n"
            "mlx5_0/ports/1/link_layer\tInfiniBand\n",
        ),
        "shards": section("shards", ""),
    }
    parts.update(overrides)
    return "".join(parts.values())


def test_a_full_probe_output_becomes_facts() -> None:
    facts = facts_from_probe(probe_output(), NOW)
    assert facts.probe_version == "1"
    assert facts.memory is not None and facts.memory.total_mib == 64299
    assert facts.gpus is not None and [g.memory_used_mib for g in facts.gpus] == [4, 30512]
    assert facts.gpu_processes is not None and facts.gpu_processes[0].pid == 4121
    assert facts.nvlink_domains == ((0, 1),)
    assert facts.hcas is not None and facts.hcas[0].active and facts.hcas[0].rate_gbps == 400
    assert facts.last_reached == NOW and facts.error is None
    assert facts.notes == ()


def test_a_gpu_node_without_nvidia_smi_has_unknown_gpus_not_none() -> None:
    output = probe_output(
        **{
            "query-gpu": section("query-gpu", "nvidia-smi: command not found\n", 127),
            "compute-apps": "",
            "topology": "",
        }
    )
    facts = facts_from_probe(output, NOW)
    assert facts.gpus is None
    assert facts.notes == ("nvidia-smi not found, but 1 NVIDIA device(s) on the PCI bus",)


def test_a_node_without_nvidia_devices_has_no_gpus() -> None:
    output = probe_output(
        **{
            "pci-nvidia": section("pci-nvidia", ""),
            "query-gpu": section("query-gpu", "nvidia-smi: command not found\n", 127),
            "compute-apps": "",
            "topology": "",
        }
    )
    assert facts_from_probe(output, NOW).gpus == ()


def test_a_broken_nvidia_smi_is_said_with_its_first_line() -> None:
    failed = section(
        "query-gpu",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        9,
    )
    facts = facts_from_probe(probe_output(**{"query-gpu": failed}), NOW)
    assert facts.gpus is None
    assert facts.notes[0] == (
        "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate"
        " with the NVIDIA driver."
    )


def test_a_container_is_capped_by_its_cgroup_memory_limit() -> None:
    limited = section("cgroup-memory", f"{8 * 1024**3}\n")
    facts = facts_from_probe(probe_output(**{"cgroup-memory": limited}), NOW)
    assert facts.memory is not None and facts.memory.total_mib == 8192


def test_no_infiniband_directory_means_no_hcas() -> None:
    facts = facts_from_probe(probe_output(infiniband=section("infiniband", "", 127)), NOW)
    assert facts.hcas == ()


def test_an_unreadable_shard_record_fails_the_node_instead_of_freeing_its_gpus() -> None:
    with pytest.raises(ProbeOutputError):
        facts_from_probe(probe_output(shards=section("shards", "{not json\n")), NOW)


def test_output_cut_off_before_the_shards_fails_the_node() -> None:
    with pytest.raises(ProbeOutputError):
        facts_from_probe(probe_output(shards=section("shards", '{"replica"', None)), NOW)


def test_sections_split_on_their_markers_only() -> None:
    sections = split_sections(section("a", "x\n@@modelfleet begin\ny\n") + section("b", "", 3))
    assert sections["a"].text == "x\n@@modelfleet begin\ny"
    assert (sections["b"].text, sections["b"].status) == ("", 3)


def test_an_unreached_node_keeps_what_was_known_and_says_why() -> None:
    before = facts_from_probe(probe_output(), NOW)
    later = NOW.replace(hour=10)
    after = facts_from_attempt(None, "timed out after 10 s", before, later)
    assert (after.gathered_at, after.last_reached, after.error) == (
        later,
        NOW,
        "timed out after 10 s",
    )
    assert after.gpus == before.gpus and after.shards == before.shards


def test_a_node_never_reached_has_no_facts_and_no_last_reached() -> None:
    facts = facts_from_attempt(None, "connection refused on port 22", None, NOW)
    assert facts == NodeFacts(
        gathered_at=NOW, error="connection refused on port 22", unreachable_since=NOW
    )


def test_bad_output_from_a_reached_node_counts_as_unreached() -> None:
    facts = facts_from_attempt("garbage", None, None, NOW)
    assert facts.error is not None and facts.error.startswith("unusable probe output: ")
    assert facts.last_reached is None


RECORD = (
    '{"replica": "m-1", "model": "m", "profile": "p", "rank": 0, "gpus": [0], "engine": "vllm",'
    ' "unit": "modelfleet-m-1-rank0.service"}'
)


@pytest.mark.parametrize(
    ("unit_state", "expected"),
    [
        ("active", "running"),
        ("activating", "starting"),
        ("failed", "failed"),
        ("inactive", "failed"),  # a restarted node: our units are not enabled
        ("reloading", "running"),
        ("deactivating", "failed"),
        ("maintenance", "failed"),
        ("unknown", "running"),  # no systemctl: the record's own word stands
        ("offline", "running"),  # no systemd running: likewise
    ],
)
def test_a_shards_state_comes_from_its_unit(unit_state: str, expected: str) -> None:
    output = probe_output(shards=section("shards", f"{RECORD}\t{unit_state}\n"))
    facts = facts_from_probe(output, NOW)
    (shard,) = facts.shards
    assert (shard.replica, shard.state) == ("m-1", expected)
    assert facts.notes == ()


STOPPED_RECORD = RECORD.replace('"engine"', '"state": "stopped", "engine"')


def test_without_a_unit_state_the_record_says_what_it_is() -> None:
    output = probe_output(shards=section("shards", f"{RECORD}\n{STOPPED_RECORD}\n"))
    facts = facts_from_probe(output, NOW)
    assert [s.state for s in facts.shards] == ["running", "stopped"]
    assert facts.notes == ()


@pytest.mark.parametrize(
    ("word", "shown"),
    [
        ("dead", "'dead'"),
        ("ACTIVE", "'ACTIVE'"),  # systemd's words are lower case
        ("x" * 200, "'" + "x" * 37 + "...'"),  # bounded in the note
        ("active\tfailed", "'active\\tfailed'"),  # two words for one unit
    ],
)
def test_a_word_that_is_no_unit_state_is_a_note_and_the_node_still_counts(
    word: str, shown: str
) -> None:
    worker = RECORD.replace('"m-1"', '"m-2"').replace('"rank": 0', '"rank": 1')
    text = f"{RECORD}\t{word}\n{worker}\tfailed\n"
    facts = facts_from_probe(probe_output(shards=section("shards", text)), NOW)
    assert facts.reached and facts.error is None
    assert [(s.replica, s.state) for s in facts.shards] == [("m-1", "running"), ("m-2", "failed")]
    assert facts.notes == (
        f"shard m-1/0: unit state {shown} is not one systemd has; taken as running, as its"
        " record says",
    )


def test_blank_lines_between_shards_keep_each_state_with_its_record() -> None:
    worker = RECORD.replace('"m-1"', '"m-2"')
    text = f"\n{RECORD}\tinactive\n\n   \n{worker}\tactivating\n"
    facts = facts_from_probe(probe_output(shards=section("shards", text)), NOW)
    assert [(s.replica, s.state) for s in facts.shards] == [("m-1", "failed"), ("m-2", "starting")]


def test_an_unreadable_record_beside_a_good_state_still_fails_the_node() -> None:
    output = probe_output(shards=section("shards", f"{RECORD}\tactive\n{{not json\tfailed\n"))
    facts = facts_from_attempt(output, None, None, NOW)
    assert facts.error is not None
    assert facts.error.startswith("unusable probe output: shard records line 2: not JSON")


TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    "   0: 0101007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
    "   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
    "   2: 0101007F:0016 0100007F:B1E6 01 00000000:00000000 02:000A7F1E 00000000     0\n"
)


def test_listening_ports_are_read_and_connections_ignored() -> None:
    facts = facts_from_probe(probe_output(listening=section("listening", TCP)), NOW)
    assert facts.listening_ports == (22, 8000)


def test_a_port_something_else_listens_on_is_never_given_to_a_shard() -> None:
    import random

    from cli.cluster.snapshot import build_snapshot
    from cli.facts.gpuclass import gpu_class
    from cli.reconcile.planner import plan
    from tests.builders import catalog, facts, hgx, host

    node = hgx("hgx-1")
    busy = facts(node).model_copy(update={"listening_ports": (8000, 8001, 18002)})
    fleet = build_snapshot([host(node)], {"hgx-1": busy}, NOW, gpu_class)
    models = catalog(
        """\
        models:
          m:
            source: hf://org/m
            profiles:
              - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
        """
    )
    (start,) = plan(models, fleet, {}, {}, random.Random(1)).starts
    assert start.files[0].port == 8003  # 8002's rendezvous port 18002 is taken too
