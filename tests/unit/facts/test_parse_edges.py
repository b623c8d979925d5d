"""The probe-output parsers at their edges: how long a quoted value may be before it is cut,
the exact cgroup "no limit" boundary, lines to skip wherever they stand, the section, line
and field an error names, NV0, and /proc/net/tcp rows just long enough.

Written against survivors of the mutation run in cli/facts/parse.py: each case is one the
examples in test_parse.py stepped around.
"""

from __future__ import annotations

import pytest

from cli.facts.model import Gpu, GpuProcess, Memory
from cli.facts.parse import (
    FactsParseError,
    apply_cgroup_limit,
    parse_compute_apps,
    parse_listening_ports,
    parse_meminfo,
    parse_mig_modes,
    parse_query_gpu,
    parse_shard_records,
    parse_topology,
)

HOST = Memory(total_mib=15961, available_mib=14488)


def cgroup_error(limit: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        apply_cgroup_limit(HOST, limit)
    return str(raised.value)


def test_a_quoted_value_of_sixty_characters_is_shown_whole() -> None:
    value = "x" * 60
    assert cgroup_error(value) == (
        f"cgroup memory limit line 1: expected 'max' or a number of bytes, got '{value}'"
    )


def test_a_quoted_value_over_sixty_characters_is_cut_to_sixty_with_dots() -> None:
    value = "abcdefghij" * 6 + "k"  # 61 characters
    assert cgroup_error(value) == (
        "cgroup memory limit line 1: expected 'max' or a number of bytes, got "
        "'abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefg...'"
    )


def test_a_cgroup_limit_of_exactly_one_eib_is_no_limit() -> None:
    assert apply_cgroup_limit(HOST, "1152921504606846976\n") == HOST  # 1 << 60
    assert apply_cgroup_limit(None, "1152921504606846976\n") is None
    assert apply_cgroup_limit(HOST, "1152921504606846975\n") == Memory(
        total_mib=15961, available_mib=14488
    )
    assert apply_cgroup_limit(None, "1152921504606846975\n") == Memory(total_mib=1099511627775)


def test_a_meminfo_key_is_the_text_before_the_first_colon() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_meminfo("MemTotal: 16 kB: extra\n")
    assert str(raised.value) == (
        "/proc/meminfo line 1: cannot read MemTotal from 'MemTotal: 16 kB: extra'"
    )


def test_no_devices_found_is_skipped_wherever_it_stands() -> None:
    text = "No devices were found\n0, GPU-a, NVIDIA L4, 00000000:01:00.0, 23034, 0, 0\n"
    assert parse_query_gpu(text) == (
        Gpu(
            index=0,
            uuid="GPU-a",
            name="NVIDIA L4",
            pci_bus_id="00000000:01:00.0",
            memory_total_mib=23034,
            memory_used_mib=0,
            ecc_uncorrected=0,
        ),
    )


def test_memory_used_with_a_unit_is_refused_naming_the_field() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_query_gpu("0, GPU-a, NVIDIA L4, 00000000:01:00.0, 23034, 12 MiB, 0\n")
    assert str(raised.value) == (
        "nvidia-smi --query-gpu line 1: memory.used '12 MiB' is not a whole number"
        " (the probe must use --format=csv,noheader,nounits)"
    )


def test_no_running_processes_is_skipped_wherever_it_stands() -> None:
    text = "No running processes found\nGPU-a, 4242, /usr/bin/python3, 20480\n"
    assert parse_compute_apps(text) == (
        GpuProcess(
            gpu_uuid="GPU-a", pid=4242, process_name="/usr/bin/python3", used_memory_mib=20480
        ),
    )


def test_a_process_without_a_gpu_uuid_is_refused_naming_the_field() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_compute_apps("[N/A], 4242, /usr/bin/python3, 20480\n")
    assert str(raised.value) == (
        "nvidia-smi --query-compute-apps line 1: gpu_uuid is missing ('[N/A]')"
    )


def topology_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_topology(text)
    return str(raised.value)


def test_a_gpu_column_given_twice_is_refused_at_the_header_line() -> None:
    text = "topology of node-1\n\tGPU0\tGPU1\tGPU0\tCPU Affinity\nGPU0\t X \tNV4\tNV4\t0-7\n"
    assert topology_error(text) == "nvidia-smi topo -m line 2: column GPU0 appears twice"


def test_a_short_row_is_refused_naming_the_row() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\n"
    assert topology_error(text) == (
        "nvidia-smi topo -m line 3: row GPU1 has 1 cells, the header has 2 columns"
    )


def test_every_missing_row_is_named() -> None:
    text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tNV4\tNV4\t0-7\n"
    assert topology_error(text) == "nvidia-smi topo -m line 1: no row for GPU1, GPU2"


def test_blank_lines_and_nic_rows_between_gpu_rows_are_skipped() -> None:
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\n"
        "GPU0\t X \tNV4\tPXB\t0-7\n"
        "\n"
        "NIC0\tPXB\tSYS\t X \n"
        "GPU1\tNV4\t X \tSYS\t0-7\n"
    )
    assert parse_topology(text) == ((0, 1),)


def test_nothing_after_the_legend_is_read_as_a_row() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\n"
        "GPU0\t X \tSYS\t0-7\n"
        "GPU1\tSYS\t X \t0-7\n"
        "\n"
        "Legend:\n"
        "\n"
        "GPU0 X = Self\n"
    )
    assert parse_topology(text) == ((0,), (1,))


def test_nv0_is_no_nvlink() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV0\t0-7\nGPU1\tNV0\t X \t0-7\n"
    assert parse_topology(text) == ((0,), (1,))


def test_a_bad_shard_record_field_inside_a_list_is_named_by_its_path() -> None:
    record = (
        '{"replica": "m-1", "model": "m", "profile": "p", "rank": 0, "engine": "vllm",'
        ' "gpus": [0, "one"]}'
    )
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(record + "\n")
    assert str(raised.value) == (
        "shard records line 1: gpus.1: Input should be a valid integer, unable to parse"
        " string as an integer"
    )


def test_a_tcp_row_of_four_fields_is_enough() -> None:
    assert parse_listening_ports("0: 00000000:1F40 00000000:0000 0A\n") == (8000,)


def test_a_tcp_row_whose_local_address_has_no_port_is_refused() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_listening_ports("0: 00000000 00000000:0000 0A 00000000:00000000\n")
    assert str(raised.value) == "/proc/net/tcp line 1: not a /proc/net/tcp row"


def test_the_port_is_the_hex_after_the_last_colon_of_the_local_address() -> None:
    assert parse_listening_ports("0: 0000:0000:1F40 00000000:0000 0A\n") == (8000,)


def test_an_empty_key_in_a_shard_record_is_refused_without_an_empty_path() -> None:
    record = '{"replica": "m-1", "model": "m", "profile": "p", "rank": 0, "engine": "vllm", "": 1}'
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(record + "\n")
    assert str(raised.value) == "shard records line 1: Extra inputs are not permitted"


def topology_of(columns: int) -> str:
    """A header of GPU0 and `columns - 1` NICs, and GPU0's row across them."""
    nics = [f"NIC{i}" for i in range(columns - 1)]
    header = "\t" + "\t".join(["GPU0", *nics]) + "\tCPU Affinity\n"
    return header + "GPU0\t X \t" + "\t".join("SYS" for _ in nics) + "\t0-7\n"


def test_a_topology_of_2048_columns_is_read_and_one_more_refused_at_the_header() -> None:
    assert parse_topology(topology_of(2048)) == ((0,),)

    assert topology_error(topology_of(2049)) == (
        "nvidia-smi topo -m line 1: reported 2049 columns, more than 2,048"
    )


def test_a_gpu_number_of_1024_is_refused_where_it_stands() -> None:
    column = "topology of node-1\n\tGPU0\tGPU1024\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n"
    assert topology_error(column) == (
        "nvidia-smi topo -m line 2: 'GPU1024': a GPU number of 1,024 or more"
    )

    row = "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\nGPU1024\tSYS\t0-7\n"
    assert topology_error(row) == (
        "nvidia-smi topo -m line 3: 'GPU1024': a GPU number of 1,024 or more"
    )


SHARD_FIELDS = '{"replica": "r-0", "model": "m", "profile": "p", "engine": "vllm"'


def shard_with(fields: str) -> str:
    return f"{SHARD_FIELDS}, {fields}}}\n"


@pytest.mark.parametrize(
    "fields",
    [
        '"rank": 1023, "nodes": 1024',
        '"rank": 0, "gpus": [' + ", ".join(str(i) for i in range(1024)) + "]",
        '"rank": 0, "gpus": [1023]',
        '"rank": 0, "hcas": [' + ", ".join(f'"mlx5_{i}:1"' for i in range(1024)) + "]",
        '"rank": 0, "port": 1',
        '"rank": 0, "port": 65535',
        '"rank": 0, "memory_gib": 0',
        '"rank": 0, "memory_gib": 1073741824',
    ],
    ids=[
        "1024-nodes",
        "1024-gpus",
        "gpu-1023",
        "1024-hcas",
        "port-1",
        "port-65535",
        "no-memory",
        "1-eib-memory",
    ],
)
def test_a_shard_record_at_each_bound_is_believed(fields: str) -> None:
    (record,) = parse_shard_records(shard_with(fields))
    assert record.replica == "r-0"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ('"rank": 1024, "nodes": 1025', "nodes 1025 is more than 1,024"),
        ('"rank": 1024, "nodes": 1024', "rank 1024 is more than 1,023"),
        (
            '"rank": 0, "gpus": [' + ", ".join(str(i) for i in range(1025)) + "]",
            "claims 1025 GPUs, more than 1,024",
        ),
        ('"rank": 0, "gpus": [1024]', "GPU 1024 is out of range (0 to 1,023)"),
        ('"rank": 0, "gpus": [3, 3]', "claims a GPU twice"),
        (
            '"rank": 0, "hcas": [' + ", ".join(f'"mlx5_{i}:1"' for i in range(1025)) + "]",
            "claims 1025 HCAs, more than 1,024",
        ),
        ('"rank": 0, "port": 0', "port 0 is out of range (1 to 65,535)"),
        ('"rank": 0, "port": 65536', "port 65536 is out of range (1 to 65,535)"),
        ('"rank": 0, "memory_gib": -1', "memory_gib -1.0 is not a size (0 to 1.07374e+09 GiB)"),
        (
            '"rank": 0, "memory_gib": 1073741825',
            "memory_gib 1073741825.0 is not a size (0 to 1.07374e+09 GiB)",
        ),
    ],
    ids=[
        "1025-nodes",
        "rank-1024",
        "1025-gpus",
        "gpu-1024",
        "gpu-twice",
        "1025-hcas",
        "port-0",
        "port-65536",
        "negative-memory",
        "memory-over-1-eib",
    ],
)
def test_a_shard_record_past_a_bound_is_refused_naming_it(fields: str, problem: str) -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_shard_records(shard_with(fields))
    assert str(raised.value) == f"shard records line 1: {problem}"


def test_a_gpu_number_below_1024_is_read_in_the_topology() -> None:
    text = "\tGPU0\tGPU1023\tCPU Affinity\nGPU0\t X \tSYS\t0-7\nGPU1023\tSYS\t X \t0-7\n"
    assert parse_topology(text) == ((0,), (1023,))


def test_a_cgroup_limit_is_at_most_the_largest_u64() -> None:
    assert apply_cgroup_limit(HOST, f"{(1 << 64) - 1}\n") == HOST  # no limit
    assert cgroup_error(f"{1 << 64}\n") == (
        "cgroup memory limit line 1: limit '18446744073709551616' is out of range"
        " (at most 18,446,744,073,709,551,615)"
    )


GPU_ROW = "{index}, GPU-{index}, NVIDIA L4, 00000000:01:00.0, 23034, {used}, 0\n"


def query_gpu_error(text: str) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_query_gpu(text)
    return str(raised.value)


def test_a_gpu_figure_of_more_than_18_digits_is_refused_naming_the_field() -> None:
    assert query_gpu_error(GPU_ROW.format(index=0, used="9" * 19)) == (
        f"nvidia-smi --query-gpu line 1: memory.used '{'9' * 19}' is out of range"
        " (at most 999,999,999,999,999,999)"
    )


def test_gpu_index_1023_is_read_and_1024_refused() -> None:
    (gpu,) = parse_query_gpu(GPU_ROW.format(index=1023, used=0))
    assert gpu.index == 1023
    assert query_gpu_error(GPU_ROW.format(index=1024, used=0)) == (
        "nvidia-smi --query-gpu line 1: index '1024' is out of range (at most 1,023)"
    )


def test_no_devices_found_is_not_counted_among_the_gpus() -> None:
    rows = "".join(GPU_ROW.format(index=i, used=0) for i in range(1024))
    assert len(parse_query_gpu("No devices were found\n" + rows)) == 1024
    assert query_gpu_error(rows + GPU_ROW.format(index=0, used=0)) == (
        "nvidia-smi --query-gpu: reported 1025 GPUs, more than 1,024"
    )


def test_a_mig_mode_nvidia_smi_does_not_print_is_refused_naming_the_section() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_mig_modes("0, Maybe\n")
    assert str(raised.value) == (
        "nvidia-smi --query-gpu=index,mig.mode.current line 1: MIG mode 'Maybe' is not"
        " Enabled or Disabled"
    )


APP_ROW = "GPU-a, {pid}, /usr/bin/python3, 20480\n"


def test_more_processes_than_a_node_may_run_are_refused_and_no_processes_is_not_one() -> None:
    rows = "".join(APP_ROW.format(pid=i + 1) for i in range(16_384))
    assert len(parse_compute_apps("No running processes found\n" + rows)) == 16_384
    with pytest.raises(FactsParseError) as raised:
        parse_compute_apps(rows + APP_ROW.format(pid=20_000))
    assert str(raised.value) == (
        "nvidia-smi --query-compute-apps: reported 16385 processes, more than 16,384"
    )


def test_a_pid_past_the_kernels_limit_is_refused() -> None:
    with pytest.raises(FactsParseError) as raised:
        parse_compute_apps(APP_ROW.format(pid=4_194_305))
    assert str(raised.value) == (
        "nvidia-smi --query-compute-apps line 1: pid '4194305' is out of range (at most 4,194,304)"
    )
