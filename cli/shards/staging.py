"""Which weights are staged in a node's model store before a shard starts, and where the
engine then reads them.

Pure. An engine that downloads its own weights does it inside its readiness wait, and a
70B model fails that wait; so reconcile stages first (playbooks/stage_weights.yml with
library/modelfleet_stage.py) and starts the engine on the local copy, offline. What is
staged, by engine (its spec's `stages`):

- vLLM and SGLang: `hf://ORG/NAME`, the hub repository whole, into
  `<store>/<store_directory(source)>/`, which the engine loads as a local model directory;
- llama.cpp: `http(s)://…/FILE.gguf`, the one file, into that directory. Its `hf://`
  sources are left to `llama-server -hf`, which picks one quantisation of a repository
  that holds many: staging the whole repository would download every one of them.

`file://` sources are read where they are and never copied; `s3://` is not staged.

A model's token goes with its download (`token_destination_problem`): an `hf://` source's
to the fleet's hub endpoint (`modelfleet_hf_endpoint`, default HUB_ENDPOINT), which the
inventory names; an `https://` source's only when its host is that endpoint's or one the
inventory allows (`modelfleet_token_hosts`), never a host the catalog alone chose.
"""

from __future__ import annotations

import posixpath
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from cli.catalog.load import CatalogProfile
from cli.cluster import name_order
from cli.cluster.snapshot import NodeView
from cli.engines.flags import pooling_only_architectures
from cli.engines.specs import engine_spec
from cli.errors import InputProblem
from cli.facts.model import DEFAULT_MODEL_STORE, StoredWeights, store_directory
from cli.names import file_in, staged_file_name

# A download slower than this is a failed staging, not a slow one: the timeout is this
# rate's time for the weights' size, plus room for listing and a first connection.
MIN_BYTES_PER_SECOND: Final = 8_000_000
BASE_SECONDS: Final = 600
# Without a size (no `disk_gb`, no node holding it yet): room for about 1 TB at that rate.
UNKNOWN_SIZE_SECONDS: Final = 36 * 3600


HUB_ENDPOINT: Final = "https://huggingface.co"  # playbooks/stage_weights.yml's default


def token_destination_problem(
    source: str, endpoint: str | None, token_hosts: Iterable[str]
) -> str | None:
    """Why a token must not go where staging `source` would send it, on a node whose hub
    endpoint is `endpoint` (None: HUB_ENDPOINT) and whose inventory allows `token_hosts`
    besides; None when it may."""
    if source.startswith("hf://"):
        return None  # the inventory's own endpoint is where it goes
    hub = endpoint or HUB_ENDPOINT
    host = (urllib.parse.urlsplit(source).hostname or "").lower()
    allowed = {(urllib.parse.urlsplit(hub).hostname or "").lower()}
    allowed |= {name.lower() for name in token_hosts}
    if host in allowed:
        return None
    return (
        f"it would be sent to {host or 'no host'}, the host of the source {source}, which is"
        f" neither the hub endpoint's ({hub}) nor one the inventory lists in"
        " modelfleet_token_hosts: a token goes to no other host"
    )


def architecture_problem(
    profile: CatalogProfile, node: str, stored: Iterable[StoredWeights]
) -> InputProblem | None:
    """Why `profile` must not start on `node`, whose store holds its weights (`stored`, the
    node's facts): their config.json names only architectures its engine serves as
    embedding models, while the profile is not one — the engine would serve no chat, and
    ctl would route chat to it. None when it may, or nothing says."""
    spec = engine_spec(profile.spec.engine)
    if spec.serves_embeddings(profile.spec):
        return None
    version = profile.spec.engine_version or spec.pinned_version
    pooling = pooling_only_architectures(spec.name, version)
    held = next((w for w in stored if w.source == profile.source), None)
    if held is None or not held.architectures or not set(held.architectures) <= pooling:
        return None
    return profile.problem(
        "embedding",
        f"{profile.model}'s weights on {node} are {', '.join(held.architectures)}, which"
        f" {spec.label} {version} serves only as an embedding model (its model registry):"
        " set `embedding: true`, or use a chat model",
    )


@dataclass(frozen=True)
class StageJob:
    """Weights to put in one node's store before one replica's shards start there."""

    node: str
    replica: str
    source: str
    store: str  # the node's model store directory
    directory: str  # the source's directory under it (store_directory)
    size_bytes: int | None  # what it takes on disk, when known
    token_key: str | None = None  # the profile (model/profile) whose token fetches it

    @property
    def timeout_seconds(self) -> int:
        """How long the download may take before it is a staging failure."""
        if self.size_bytes is None:
            return UNKNOWN_SIZE_SECONDS
        return BASE_SECONDS + self.size_bytes // MIN_BYTES_PER_SECOND


def stages(source: str, engine: str) -> bool:
    """Whether ctl stages this source for this engine before starting it."""
    return source.startswith(engine_spec(engine).stages)


def staged_path(source: str, engine: str, store: str | None, staging: bool = True) -> str | None:
    """Where the engine reads the staged copy on a node whose store is `store` (None: the
    default); None when the source is not staged for this engine or on this node."""
    if not staging or not stages(source, engine):
        return None
    directory = posixpath.join(store or DEFAULT_MODEL_STORE, store_directory(source))
    if source.startswith("hf://"):
        return directory
    return str(file_in(PurePosixPath(directory), staged_file_name(source)))


def one_per_share(
    jobs: Sequence[StageJob], shares: Mapping[str, str]
) -> tuple[list[StageJob], dict[tuple[str, str], tuple[str, str]]]:
    """The downloads to run, one per store and source: nodes that share a store (an NFS
    export: `modelfleet_model_store_shared`, the same name on each) download once, on the
    first of them by name; and for every job, the (node, source) of the download it waits
    on (its own for a store of its own)."""
    downloads: dict[tuple[str, str], StageJob] = {}
    waits_on: dict[tuple[str, str], tuple[str, str]] = {}
    for job in sorted(jobs, key=lambda j: name_order(j.node)):
        store = f"share {shares[job.node]}" if job.node in shares else f"node {job.node}"
        chosen = downloads.setdefault((store, job.source), job)
        waits_on[(job.node, job.source)] = (chosen.node, chosen.source)
    return list(downloads.values()), waits_on


def unused_weights(node: NodeView, also_used: Iterable[str] = ()) -> list[StoredWeights]:
    """The weights stored complete on `node` that the staging step may remove to make room:
    none of its shards loads them, nor anything in `also_used` (what is starting there).
    None at all where a shard does not say what it loads (its record is older than
    `source`, or not believed): nothing there is known to be unused."""
    if node.model_store is None or not _says_what_it_loads(node):
        return []
    used = {s.source for s in node.shards} | set(also_used)
    return [w for w in node.model_store.weights if w.source not in used]


def _says_what_it_loads(node: NodeView) -> bool:
    return not node.invalid_shards and all(s.source is not None for s in node.shards)


def evictable_directories(
    nodes: Iterable[NodeView], starting: Mapping[str, set[str]]
) -> dict[str, list[str]]:
    """Per node that may evict: the store directories of its unused weights."""
    return {
        node.name: [
            store_directory(w.source) for w in unused_weights(node, starting.get(node.name, ()))
        ]
        for node in nodes
        if node.model_store is not None and _says_what_it_loads(node)
    }
