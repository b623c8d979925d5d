"""A shard on a node as files: its systemd unit, its environment file and its record. Pure.

The playbooks only copy these texts into place and start or stop the unit, so what runs
is decided and tested here. Values from the catalog reach systemd quoted, argument by
argument; no shell ever sees them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import PurePosixPath

from cli.catalog.load import CatalogProfile
from cli.engines.specs import engine_spec, host_port
from cli.names import file_in
from cli.shards.engines import Rank, command_line, environment

UNIT_DIR = "/etc/systemd/system"
ENV_DIR = "/etc/modelfleet/shards"
RECORD_DIR = "/var/lib/modelfleet/shards"
# systemd waits this long past the engine's own drain before SIGKILL.
STOP_MARGIN_SECONDS = 30


def stop_seconds(profile: CatalogProfile) -> int:
    """How long systemd waits after SIGTERM: the engine's drain, if it drains, and a margin.

    llama-server does not drain (its spec): `drain_seconds` gives it nothing."""
    drain = profile.spec.drain_seconds if engine_spec(profile.spec.engine).drains else 0
    return drain + STOP_MARGIN_SECONDS


def shard_name(replica: str, rank: int) -> str:
    return f"{replica}-rank{rank}"


def unit_name(replica: str, rank: int) -> str:
    return f"modelfleet-{shard_name(replica, rank)}.service"


def shard_paths(replica: str, rank: int) -> tuple[str, str, str]:
    """Where a shard's unit, environment file and record are on its node; UnsafeNameError
    (cli/names.py) for a replica name that would put one elsewhere."""
    name = shard_name(replica, rank)
    return (
        str(file_in(PurePosixPath(UNIT_DIR), unit_name(replica, rank))),
        str(file_in(PurePosixPath(ENV_DIR), name, ".env")),
        str(file_in(PurePosixPath(RECORD_DIR), name, ".json")),
    )


def systemd_quote(argument: str) -> str:
    """One ExecStart argument: quoted, with systemd's specifiers and variables escaped."""
    escaped = (
        argument.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("%", "%%")
        .replace("$", "$$")
    )
    return f'"{escaped}"'


def base_url(address: str, port: int, tls: bool) -> str:
    """Where a rank 0 serves: `https://` when it serves TLS, an IPv6 address bracketed."""
    return f"{'https' if tls else 'http'}://{host_port(address, port)}"


def environment_file(env: dict[str, str]) -> str:
    """systemd EnvironmentFile lines, values double-quoted."""
    lines = []
    for key, value in sorted(env.items()):
        quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'{key}="{quoted}"')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Fetch:
    """A shard whose engine downloads its weights itself (not staged): the names its
    environment file gives the token and the hub endpoint, which the node's playbook run
    adds (playbooks/start_shards.yml): the token is never in a plan, a variables file or
    an argument, and the endpoint is the node's inventory's."""

    source: str
    token_key: str | None  # the profile (model/profile) whose token it sends; None: none
    token_names: tuple[str, ...]
    endpoint_names: tuple[str, ...]  # for an hf:// source only


@dataclass(frozen=True)
class ShardFiles:
    """Everything a node needs to run one shard, and where it goes."""

    node: str
    replica: str
    model: str
    rank: int
    port: int
    unit: str
    unit_path: str
    unit_text: str
    env_path: str
    env_text: str
    record_path: str
    record_text: str
    health_url: str | None  # rank 0 only: where it says it is ready
    tls: bool = False  # it serves TLS: checked against the CA certificate on its node
    certificate: str | None = None  # the serial of the certificate it serves with
    fetch: Fetch | None = None  # its engine fetches the weights itself


def _fetch(profile: CatalogProfile, staged: str | None) -> Fetch | None:
    spec = engine_spec(profile.spec.engine)
    if staged is not None or not spec.fetches(profile.source):
        return None
    hub = profile.source.startswith("hf://")
    return Fetch(
        source=profile.source,
        token_key=profile.key if profile.token is not None else None,
        token_names=spec.token_environment if profile.token is not None else (),
        endpoint_names=spec.endpoint_environment if hub else (),
    )


def shard_files(
    node: str,
    address: str,
    replica: str,
    profile: CatalogProfile,
    place: Rank,
    started: datetime,
    origin: str = "reconcile",
    command: tuple[str, ...] | None = None,
    staged: str | None = None,
    certificate: str | None = None,
) -> ShardFiles:
    """`certificate`: the serial of the node's certificate where its shards serve TLS
    (a rank 0 only serves: it alone gets the files and says the serial in its record)."""
    specific = place.listen not in ("0.0.0.0", "::")
    if place.host_ip is None:
        # The rank's own address for the engine (VLLM_HOST_IP): where it serves.
        place = replace(place, host_ip=place.listen if specific else address)
    unit = unit_name(replica, place.rank)
    unit_path, env_path, record_path = shard_paths(replica, place.rank)
    tls = certificate is not None and place.rank == 0
    argv = command_line(profile, place, command, staged, tls)
    spec = profile.spec
    unit_text = "\n".join(
        [
            "# Written by modelfleet's ctl; the next reconcile replaces or removes it.",
            "[Unit]",
            f"Description=modelfleet {replica} rank {place.rank}/{place.nodes}"
            f" ({profile.model}, {profile.name}, {spec.engine})",
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=exec",
            f"EnvironmentFile={env_path}",
            "ExecStart=" + " ".join(systemd_quote(a) for a in argv),
            # A replica fails whole: ctl rebuilds it, systemd must not restart one rank.
            "Restart=no",
            "KillSignal=SIGTERM",
            "KillMode=mixed",
            f"TimeoutStopSec={stop_seconds(profile)}",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )
    record = {
        "replica": replica,
        "model": profile.model,
        "profile": profile.name,
        "rank": place.rank,
        "nodes": place.nodes,
        "gpus": list(place.gpus),
        "hcas": list(place.hcas),
        "port": place.port,
        "engine": spec.engine,
        "started": started.isoformat(),
        "memory_gib": spec.min_memory_gb,
        "unit": unit,
        "origin": origin,
        "source": profile.source,
    }
    if tls:
        record["certificate"] = certificate
    if specific:  # not on loopback: where the probe asks it for its load
        record["listen"] = place.listen
    return ShardFiles(
        node=node,
        replica=replica,
        model=profile.model,
        rank=place.rank,
        port=place.port,
        unit=unit,
        unit_path=unit_path,
        unit_text=unit_text,
        env_path=env_path,
        env_text=environment_file(environment(profile, place, staged)),
        record_path=record_path,
        record_text=json.dumps(record, sort_keys=True) + "\n",
        health_url=base_url(address, place.port, tls) if place.rank == 0 else None,
        tls=tls,
        certificate=certificate if tls else None,
        fetch=_fetch(profile, staged),
    )
