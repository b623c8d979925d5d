"""The InfiniBand sysfs parser at its edges: how many files and ports a node may report, the
highest port number, and the order of devices whose names sort differently as text.

Written against survivors of the mutation run in cli/facts/sections/infiniband.py: each case
is one the examples in test_parse.py stepped around.
"""

from __future__ import annotations

import pytest

from cli.facts.parse import MAX_HCA_PORTS, MAX_IB_PORT, FactsParseError
from cli.facts.sections.infiniband import parse_infiniband


def error(files: dict[str, str]) -> str:
    with pytest.raises(FactsParseError) as raised:
        parse_infiniband(files)
    return str(raised.value)


def ports_files(count: int, *, with_rate: bool) -> dict[str, str]:
    """`count` ports of one-port HCAs, each with its state (and rate and link_layer)."""
    files: dict[str, str] = {}
    for i in range(count):
        files[f"mlx5_{i}/ports/1/state"] = "4: ACTIVE\n"
        if with_rate:
            files[f"mlx5_{i}/ports/1/rate"] = "400 Gb/sec (4X NDR)\n"
            files[f"mlx5_{i}/ports/1/link_layer"] = "InfiniBand\n"
    return files


def test_the_most_ports_with_all_three_files_each_are_read() -> None:
    files = ports_files(MAX_HCA_PORTS, with_rate=True)
    assert len(files) == 3 * MAX_HCA_PORTS

    ports = parse_infiniband(files)

    assert len(ports) == MAX_HCA_PORTS
    assert ports[-1].hca == f"mlx5_{MAX_HCA_PORTS - 1}"


def test_one_file_over_three_per_port_is_refused_before_any_is_read() -> None:
    files = ports_files(MAX_HCA_PORTS, with_rate=True)
    files["mlx5_0/ports/2/state"] = "4: ACTIVE\n"

    assert error(files) == "/sys/class/infiniband/: reported 3073 files, more than 3,072"


def test_one_port_over_the_most_is_refused() -> None:
    files = ports_files(MAX_HCA_PORTS + 1, with_rate=False)

    assert error(files) == "/sys/class/infiniband/: reported 1025 HCA ports, more than 1,024"


def test_the_highest_port_number_is_read() -> None:
    (port,) = parse_infiniband({f"mlx5_0/ports/{MAX_IB_PORT}/state": "4: ACTIVE\n"})

    assert port.port == MAX_IB_PORT == 255


@pytest.mark.parametrize(
    ("port", "expected"),
    [
        ("256", "port 256 is more than 255"),
        ("999", "port 999 is more than 255"),
        ("1000", "port '1000' is not a port number"),
        ("0", "port '0' is not a port number"),
    ],
)
def test_a_port_number_over_255_is_refused_naming_the_file(port: str, expected: str) -> None:
    files = {f"mlx5_0/ports/{port}/state": "4: ACTIVE\n"}

    assert error(files) == f"/sys/class/infiniband/mlx5_0/ports/{port}/state: {expected}"


def test_devices_sort_by_name_before_the_name_length_and_numbers_by_value() -> None:
    files = {
        f"{hca}/ports/1/state": "4: ACTIVE\n"
        for hca in ("mlx5_20", "irdma0", "mlx5_19", "bnxt_re0", "mlx5_3")
    }

    ports = parse_infiniband(files)

    assert [port.hca for port in ports] == ["bnxt_re0", "irdma0", "mlx5_3", "mlx5_19", "mlx5_20"]
