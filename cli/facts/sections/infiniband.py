"""The InfiniBand section: the HCA ports read from /sys/class/infiniband."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

from cli.facts.model import (
    HcaPort,
)
from cli.facts.parse import (
    MAX_HCA_PORTS,
    MAX_IB_PORT,
    FactsParseError,
    _is_whole_number,
    _quote,
)

# --------------------------------------------------------------------------- InfiniBand sysfs

_SYSFS_PREFIX = "/sys/class/infiniband/"
_PORT_FILE = re.compile(r"^(?P<hca>[^/]+)/ports/(?P<port>[^/]+)/(?P<file>[^/]+)$")
_PORT_FILES = frozenset({"state", "rate", "link_layer"})
_STATE = re.compile(r"^\d+:\s*(?P<name>[A-Z_]+)$")
_RATE = re.compile(r"^(?P<gbps>\d{1,6}(?:\.\d{1,6})?) Gb/sec(?: \([^)]*\))?$")
_LINK_LAYERS: Final[dict[str, Literal["InfiniBand", "Ethernet"]]] = {
    "InfiniBand": "InfiniBand",
    "Ethernet": "Ethernet",
}


def _natural(text: str) -> tuple[tuple[int, str], ...]:
    """Sort key that puts mlx5_2 before mlx5_10."""
    # A run of digits compares by its length, then its text: no int() of a huge run.
    return tuple(
        (len(part.lstrip("0")), part.lstrip("0")) if _is_whole_number(part) else (0, part)
        for part in re.split(r"(\d+)", text)
    )


def parse_infiniband(files: Mapping[str, str]) -> tuple[HcaPort, ...]:
    """HCA ports from sysfs files: keys like `mlx5_0/ports/1/state`, values their contents.

    `state` ("4: ACTIVE") is required for each port; `rate` ("400 Gb/sec (4X NDR)") becomes
    Gb/s and `link_layer` InfiniBand/Ethernet, both None when absent or empty. A link layer
    the model has no name for (OmniPath) is reported as None. Keys may carry the
    `/sys/class/infiniband/` prefix; files other than these three are ignored.
    """
    if len(files) > 3 * MAX_HCA_PORTS:
        raise FactsParseError(
            _SYSFS_PREFIX, 0, f"reported {len(files)} files, more than {3 * MAX_HCA_PORTS:,}"
        )
    ports: dict[tuple[str, int], dict[str, tuple[str, str]]] = {}
    for key, content in files.items():
        relative = key.removeprefix(_SYSFS_PREFIX)
        match = _PORT_FILE.fullmatch(relative)
        if match is None or match.group("file") not in _PORT_FILES:
            continue
        where = _SYSFS_PREFIX + relative
        port_text = match.group("port")
        if not _is_whole_number(port_text) or len(port_text) > 3 or int(port_text) < 1:
            raise FactsParseError(where, 0, f"port {_quote(port_text)} is not a port number")
        if int(port_text) > MAX_IB_PORT:
            raise FactsParseError(where, 0, f"port {port_text} is more than {MAX_IB_PORT}")
        ports.setdefault((match.group("hca"), int(port_text)), {})[match.group("file")] = (
            where,
            content.strip(),
        )

    if len(ports) > MAX_HCA_PORTS:
        raise FactsParseError(
            _SYSFS_PREFIX, 0, f"reported {len(ports)} HCA ports, more than {MAX_HCA_PORTS:,}"
        )
    result: list[HcaPort] = []
    for (hca, port), port_files in sorted(
        ports.items(), key=lambda item: (_natural(item[0][0]), item[0][1])
    ):
        if "state" not in port_files:
            raise FactsParseError(
                f"{_SYSFS_PREFIX}{hca}/ports/{port}", 0, "has rate or link_layer but no state"
            )
        where, state_text = port_files["state"]
        state = _STATE.fullmatch(state_text)
        if state is None:
            raise FactsParseError(where, 1, f"expected 'N: STATE', got {_quote(state_text)}")

        rate_gbps: float | None = None
        if "rate" in port_files and port_files["rate"][1]:
            where, rate_text = port_files["rate"]
            rate = _RATE.fullmatch(rate_text)
            if rate is None:
                raise FactsParseError(
                    where, 1, f"expected 'N Gb/sec (...)', got {_quote(rate_text)}"
                )
            rate_gbps = float(rate.group("gbps"))

        link_layer: Literal["InfiniBand", "Ethernet"] | None = None
        if "link_layer" in port_files:
            link_layer = _LINK_LAYERS.get(port_files["link_layer"][1])

        result.append(
            HcaPort(
                hca=hca,
                port=port,
                state=state.group("name"),
                rate_gbps=rate_gbps,
                link_layer=link_layer,
            )
        )
    return tuple(result)
