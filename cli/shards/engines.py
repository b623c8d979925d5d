"""Engine command lines, from a profile and where its replica was placed. Pure.

Every value is one argv element; nothing here is ever joined into a shell line, and the
systemd unit quotes each element (cli/shards/units.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cli.catalog.load import CatalogProfile

DEFAULT_COMMANDS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm", "serve"),
    "sglang": ("python3", "-m", "sglang.launch_server"),
    "llama.cpp": ("llama-server",),
}
# Where ranks of a multi-node replica meet: rank 0's address at this offset from the port.
RENDEZVOUS_OFFSET = 10000


@dataclass(frozen=True)
class Rank:
    """One shard's place in its replica."""

    rank: int
    nodes: int
    port: int
    master_address: str  # rank 0's address, as the other ranks reach it
    gpus: tuple[int, ...] = ()
    hcas: tuple[str, ...] = ()
    listen: str = "0.0.0.0"  # the address the engine serves on

    @property
    def rendezvous_port(self) -> int:
        return self.port + RENDEZVOUS_OFFSET


def model_argument(source: str) -> str:
    """What the engine loads: `hf://Org/Name` → `Org/Name`, `file:///p` → `/p`."""
    if source.startswith("hf://"):
        return source.removeprefix("hf://")
    if source.startswith("file://"):
        return source.removeprefix("file://")
    return source


def command_line(
    profile: CatalogProfile, place: Rank, command: tuple[str, ...] | None = None
) -> list[str]:
    spec = profile.spec
    argv = list(command or DEFAULT_COMMANDS[spec.engine])
    if spec.engine == "vllm":
        argv += _vllm(profile, place)
    elif spec.engine == "sglang":
        argv += _sglang(profile, place)
    else:
        argv += _llama_cpp(profile, place)
    return [*argv, *spec.args]


def _vllm(profile: CatalogProfile, place: Rank) -> list[str]:
    spec = profile.spec
    argv = [
        model_argument(profile.source),
        "--host", place.listen,
        "--port", str(place.port),
        "--served-model-name", profile.model,
    ]  # fmt: skip
    if spec.uses_gpus:
        argv += [
            "--tensor-parallel-size", str(spec.tp),
            "--pipeline-parallel-size", str(spec.pipeline_parallel),
        ]  # fmt: skip
    if spec.context_length is not None:
        argv += ["--max-model-len", str(spec.context_length)]
    argv += ["--shutdown-timeout", str(spec.drain_seconds)]
    if place.nodes > 1:
        argv += [
            "--nnodes", str(place.nodes),
            "--node-rank", str(place.rank),
            "--master-addr", place.master_address,
            "--master-port", str(place.rendezvous_port),
        ]  # fmt: skip
        if place.rank > 0:
            argv.append("--headless")  # workers serve no API; rank 0 does
    return argv


def _sglang(profile: CatalogProfile, place: Rank) -> list[str]:
    spec = profile.spec
    argv = [
        "--model-path", model_argument(profile.source),
        "--host", place.listen,
        "--port", str(place.port),
        "--served-model-name", profile.model,
        "--tp", str(spec.tp),
    ]  # fmt: skip
    if spec.pipeline_parallel > 1:
        argv += ["--pp-size", str(spec.pipeline_parallel)]
    if spec.context_length is not None:
        argv += ["--context-length", str(spec.context_length)]
    if place.nodes > 1:
        argv += [
            "--nnodes", str(place.nodes),
            "--node-rank", str(place.rank),
            "--dist-init-addr", f"{place.master_address}:{place.rendezvous_port}",
        ]  # fmt: skip
    return argv


def _llama_cpp(profile: CatalogProfile, place: Rank) -> list[str]:
    spec = profile.spec
    source = profile.source
    if source.startswith("hf://"):
        argv = ["-hf", model_argument(source)]
    elif source.startswith(("https://", "http://")):
        argv = ["--model-url", source]
    else:
        argv = ["-m", model_argument(source)]
    argv += ["--host", place.listen, "--port", str(place.port), "--alias", profile.model]
    if spec.threads is not None:
        argv += ["--threads", str(spec.threads)]
    if spec.context_length is not None:
        argv += ["--ctx-size", str(spec.context_length)]
    if spec.uses_gpus:
        argv += ["--n-gpu-layers", "999"]  # all layers on the GPUs it was given
    return argv


def environment(profile: CatalogProfile, place: Rank) -> dict[str, str]:
    """The shard's environment: its GPUs pinned, its fabric's HCAs and nothing else."""
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
    env.update(profile.spec.env)
    return env
