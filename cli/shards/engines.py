"""Engine command lines and environments, from a profile and where its replica was placed.

Pure. What each engine's command line holds is its spec's (cli/engines/specs.py); this
module adds the profile's own `args` and the environment every GPU shard gets. Every
value is one argv element; nothing here is ever joined into a shell line, and the
systemd unit quotes each element (cli/shards/units.py).
"""

from __future__ import annotations

from cli.catalog.load import CatalogProfile
from cli.engines.specs import ENGINE_SPECS, RENDEZVOUS_OFFSET, Rank, engine_spec, model_argument
from cli.pki.paths import NODE_CERT_PATH, NODE_KEY_PATH

__all__ = ["DEFAULT_COMMANDS", "RENDEZVOUS_OFFSET", "Rank", "command_line", "environment",
           "model_argument"]  # fmt: skip

DEFAULT_COMMANDS: dict[str, tuple[str, ...]] = {
    name: spec.command for name, spec in ENGINE_SPECS.items()
}


def command_line(
    profile: CatalogProfile,
    place: Rank,
    command: tuple[str, ...] | None = None,
    staged: str | None = None,
    tls: bool = False,
) -> list[str]:
    """The engine's argv; `staged`: the local copy of the weights it loads instead of
    fetching the source (cli/shards/staging.py); `tls`: it serves TLS with the node's key
    and certificate (a rank 0 only: the other ranks serve no API)."""
    spec = engine_spec(profile.spec.engine)
    argv = list(command or spec.command)
    source = profile.source if staged is None else f"file://{staged}"
    argv += spec.build(profile.spec, profile.model, source, place)
    if tls and place.rank == 0:
        argv += spec.tls_args(NODE_KEY_PATH, NODE_CERT_PATH)
    return [*argv, *profile.spec.args]


def environment(profile: CatalogProfile, place: Rank, staged: str | None = None) -> dict[str, str]:
    """The shard's environment: its GPUs pinned, its fabric's HCAs, the engine's own, and
    with staged weights what keeps the engine offline."""
    env: dict[str, str] = {}
    if profile.spec.uses_gpus:
        # nvidia-smi numbers GPUs in PCI order; CUDA's default order is "fastest first".
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in place.gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if place.hcas:
        # "=" makes NCCL match names exactly: without it mlx5_1 also selects mlx5_10.
        env["NCCL_IB_HCA"] = "=" + ",".join(place.hcas)
    if place.socket_ifname is not None and place.nodes > 1:
        # The rendezvous and NCCL's bootstrap on the fabric's interface, not whichever
        # interface the default route uses.
        env["NCCL_SOCKET_IFNAME"] = "=" + place.socket_ifname
        env["GLOO_SOCKET_IFNAME"] = place.socket_ifname
    spec = engine_spec(profile.spec.engine)
    if spec.environment is not None:
        env.update(spec.environment(profile.spec, place))
    if staged is not None:
        env.update(spec.offline_environment)
    env.update(profile.spec.env)
    return env
