"""Catalog schema (docs/catalog.md). Unknown keys are errors: a typo must not be ignored.

The schema checks shapes; `cli.catalog.load` checks what spans several keys (aliases,
fallbacks, parallelism arithmetic) and resolves names, so errors can point at lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from cli.inventory.schema import Label
from cli.shards.specs import ENGINE_NAMES, ENGINE_SPECS

# The engines are the specs' (cli/shards/specs.py): one Literal of their names.
if TYPE_CHECKING:
    Engine = str
else:
    Engine = Literal[ENGINE_NAMES]
ENGINES: tuple[str, ...] = ENGINE_NAMES

# Engines that can split one replica over several nodes. llama.cpp's RPC backend can, but
# it is experimental and not something we start for people.
MULTI_NODE_ENGINES: frozenset[str] = frozenset(n for n, s in ENGINE_SPECS.items() if s.multi_node)
VERSION_PATTERN = r"^\d+(\.\d+){0,3}$"

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
SOURCE_PATTERN = r"^(hf://[^/\s]+/[^\s]+|file:///\S+|s3://\S+|https?://\S+)$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Replicas(Strict):
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=0)  # None: same as min

    @property
    def upper(self) -> int:
        return self.min if self.max is None else self.max


class Profile(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    priority: int
    engine: Engine
    source: str | None = Field(default=None, pattern=SOURCE_PATTERN)
    gpu_class: str | None = None
    gpus_per_node: int = Field(default=0, ge=0)
    nodes: int = Field(default=1, ge=1)
    tensor_parallel: int | None = Field(default=None, ge=1)
    pipeline_parallel: int = Field(default=1, ge=1)
    min_memory_gb: float | None = Field(default=None, gt=0)
    # Memory each of its GPUs must have in all, in GB of 10^9 bytes as GPU makers count
    # (an "80GB" H100 reports 81,559 MiB: 85.5 GB); None: any.
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=100_000)
    # What its weights take in the node's model store, in GB of 10^9 bytes as disks are
    # sold; None: what a node that holds them complete reports, else unknown.
    disk_gb: float | None = Field(default=None, gt=0, le=1_000_000)
    context_length: int | None = Field(default=None, ge=1)  # tokens; each engine's own flag
    threads: int | None = Field(default=None, ge=1)  # llama.cpp CPU threads
    drain_seconds: int = Field(default=30, ge=0)  # time in-flight requests get on a stop
    embedding: bool = False  # an embedding server: the engine's embedding mode (its spec's)
    # The engine release the options are checked against; None: the spec's pinned one.
    engine_version: str | None = Field(default=None, pattern=VERSION_PATTERN)
    # Compared as text, the way inventory labels are read (`gpus: 8` is "8").
    node_selector: dict[Label, Label] = Field(default_factory=dict)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def uses_gpus(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def tp(self) -> int:
        return self.tensor_parallel if self.tensor_parallel is not None else self.gpus_per_node

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def nvlink_group(self) -> int:
        """GPUs on one node that exchange tensor-parallel traffic and want one NVLink domain."""
        return min(self.tp, self.gpus_per_node)


class Model(Strict):
    source: str | None = Field(default=None, pattern=SOURCE_PATTERN)
    aliases: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    replicas: Replicas = Field(default_factory=Replicas)
    profiles: tuple[Profile, ...] = Field(min_length=1)


class CatalogFile(Strict):
    models: dict[str, Model] = Field(default_factory=dict)
