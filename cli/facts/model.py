"""The node facts model, which is also the JSON snapshot format (docs/facts.md).

`None` always means "not reported" and is never read as zero or as false: a node whose
probe could not read its memory is not a node without memory.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from cli.inventory.schema import HostVars

FACTS_FORMAT: Final = "modelfleet.facts/v1"

ShardState = Literal["running", "starting", "failed", "stopped"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Memory(Strict):
    """From /proc/meminfo, and a cgroup limit when the node is a container (the smaller wins)."""

    total_mib: int = Field(ge=0)
    available_mib: int | None = Field(default=None, ge=0)


class Gpu(Strict):
    """One row of `nvidia-smi --query-gpu`."""

    index: int = Field(ge=0)
    uuid: str
    name: str
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    # Uncorrected ECC errors since the driver loaded (volatile); None on GPUs without ECC.
    ecc_uncorrected: int | None = None
    # MIG mode (mig.mode.current): a GPU split into MIG slices is no whole GPU to give a
    # shard. None: the GPU has no MIG mode, or the probe did not ask (an older probe).
    mig_enabled: bool | None = None
    # Memory repairs the GPU waits for (cli/facts/sections/gpuhealth.py): pages pending
    # retirement (retired_pages.pending, before Ampere), rows pending remapping and a
    # remapping that failed (remapped_rows.pending, .failure: Ampere and newer). None: not
    # reported (a GPU or driver without the feature), never read as "none pending".
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # Fields nvidia-smi answered with an error of the GPU's (`ERR!`, `[GPU requires reset]`,
    # `[GPU is lost]`), as "FIELD: VALUE": a GPU that cannot answer is not one to trust.
    faults: tuple[str, ...] = ()

    def hardware_problem(self) -> str | None:
        """Why this GPU's hardware is not fit for a shard, as its probe reports it; None
        when nothing says so (an unknown field is not a bad one)."""
        if self.faults:
            return f"nvidia-smi reports {', '.join(self.faults)}"
        if self.remapped_rows_failure:
            return "a memory row remapping failed (replace the GPU)"
        if self.remapped_rows_pending:
            return "memory rows pending remapping (reset the GPU or reboot the node)"
        if self.retired_pages_pending:
            return "memory pages pending retirement (reset the GPU or reboot the node)"
        return None


class GpuProcess(Strict):
    """One row of `nvidia-smi --query-compute-apps`."""

    gpu_uuid: str
    pid: int
    process_name: str
    used_memory_mib: int | None = None


class HcaPort(Strict):
    """One port of an RDMA device, from /sys/class/infiniband/DEV/ports/N/."""

    hca: str
    port: int = Field(ge=1)
    state: str  # ACTIVE, DOWN, INIT, ARMED, POLLING...
    rate_gbps: float | None = None
    link_layer: Literal["InfiniBand", "Ethernet"] | None = None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


class ShardRecord(Strict):
    """What a node says about one shard of ours running on it.

    Written by the start playbook beside the shard's systemd unit, and read back by the
    probe with the unit's state, so `ctl` needs no database: the nodes are the record.
    """

    replica: str
    model: str
    profile: str
    rank: int = Field(ge=0)
    nodes: int = Field(default=1, ge=1)  # ranks in the replica
    gpus: tuple[int, ...] = ()
    hcas: tuple[str, ...] = ()
    port: int | None = None
    engine: str
    started: datetime | None = None
    memory_gib: float | None = None  # the profile's min_memory_gb, reserved on the node
    unit: str | None = None  # its systemd unit
    # Who asked for it: `reconcile` keeps replicas.min; a replica started by `ctl place`
    # is kept while the model stays within replicas.max.
    origin: Literal["reconcile", "manual"] = "reconcile"
    # The weights it loads (the catalog's source), so that weights no shard uses can be
    # told apart and evicted; None in records written before ctl said it: then none on
    # that node is evicted.
    source: str | None = Field(default=None, max_length=4096)
    # What systemd said of the unit at probe time (cli/facts/parse.py, UNIT_STATES):
    # active → running, activating → starting, failed or inactive → failed (its record is
    # there, so it should run). Kept as the record says when the node could not tell (no
    # systemctl); `stopped` is only ever a record's own word.
    state: ShardState = "running"
    # The serial of the node certificate its engine was started with, serving TLS; None:
    # plain HTTP. An engine that cannot reload its certificate is restarted after a renewal.
    certificate: str | None = Field(default=None, max_length=64)
    # The address its engine listens on where that is not every address (the node's
    # listen_address): the probe asks its /metrics there. None: every address (the probe
    # asks over loopback), or a record from before ctl said it.
    listen: str | None = Field(default=None, max_length=64)

    @property
    def holds(self) -> bool:
        """Its process may still run, holding its GPUs and memory: running or starting. A
        failed unit's processes are gone (systemd stops the unit's whole cgroup)."""
        return self.state in ("running", "starting")

    @property
    def serving(self) -> bool:
        return self.state == "running"


# The store's layout, which the staging step writes and the probe reads (docs/facts.md):
# each source's files in STORE/store_directory(source)/, and, once a download is verified,
# the marker file COMPLETE_MARKER there holding a `StoredWeights` as JSON.
DEFAULT_MODEL_STORE: Final = "/var/lib/modelfleet/models"
COMPLETE_MARKER: Final = ".modelfleet-complete"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def store_directory(source: str) -> str:
    """The directory a source's weights live in under the store: readable, and unique by
    a digest of the whole source (`hf://a/b-c` and `hf://a-b/c` read alike)."""
    readable = _UNSAFE.sub("-", source).strip("-.")[:100]
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return f"{readable}-{digest}"


class StoredWeights(Strict):
    """A source stored complete in the model store: its marker file's content."""

    source: str  # as the catalog writes it, e.g. hf://Qwen/Qwen2.5-Coder-14B-Instruct
    bytes: int = Field(ge=0)  # what the verified download holds on disk
    completed: datetime | None = None  # when the download was verified
    # Its config.json's `architectures`, where it has one (a hub repository's model).
    architectures: tuple[Annotated[str, StringConstraints(max_length=100)], ...] = Field(
        default=(), max_length=16
    )


class ModelStore(Strict):
    """The directory model weights are staged in (`modelfleet_model_store`), and its
    filesystem as statfs reports it."""

    path: str
    # False: the directory does not exist yet (the staging step makes it); the figures
    # are then those of the filesystem of `measured`, its nearest existing parent.
    present: bool
    measured: str
    total_bytes: int = Field(ge=0)
    free_bytes: int = Field(ge=0)  # what an unprivileged writer may still use (f_bavail)
    weights: tuple[StoredWeights, ...] = ()  # sources stored complete, in directory order

    def holds(self, source: str) -> bool:
        return any(w.source == source for w in self.weights)

    @property
    def stored_bytes(self) -> int:
        return sum(w.bytes for w in self.weights)


class NodeCertificate(Strict):
    """The node's TLS certificate, /etc/modelfleet/pki/node.pem, as the probe read it, with
    what it needs beside it: whether node.key exists (never its contents) and the node's
    ca.pem. `problem` is judged when the facts were gathered; `usable` judges the
    validity dates again at any moment."""

    serial: str  # hex, as cli/pki/certs.py serial_hex writes it
    not_before: datetime  # aware, UTC
    not_after: datetime
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    issuer: str  # RFC 4514
    key_present: bool  # node.key exists
    # SHA-256 of the node's ca.pem as cli/pki/certs.py fingerprint() writes it; None: no
    # ca.pem (or not a certificate: then `problem` says so).
    ca_fingerprint: str | None = None
    ca_not_after: datetime | None = None
    # Why it cannot serve TLS (no key, not yet valid, expired, not signed by its ca.pem,
    # ca.pem unreadable...); None when it can.
    problem: str | None = None

    def usable(self, now: datetime) -> bool:
        """Shards may serve with it: its key is there, nothing is wrong, it is valid now."""
        return self.problem is None and self.key_present and self.not_before <= now < self.not_after


class ReplicaLoad(Strict):
    """A replica's load as its engine's /metrics said it when the probe asked (rank 0's
    engine, over loopback). Each figure None when unknown: not served, not readable, or
    a gauge this engine does not have (llama.cpp 0.3.36 has no KV-use gauge)."""

    replica: str = Field(max_length=256)
    running: float | None = Field(default=None, ge=0)  # requests being generated for
    waiting: float | None = Field(default=None, ge=0)  # requests queued behind them
    kv_use: float | None = Field(default=None, ge=0, le=1)  # share of its KV cache in use
    note: str | None = Field(default=None, max_length=512)  # why a figure is unknown


class NodeFacts(Strict):
    """Everything the probe learned about one node at `gathered_at`.

    `gpus`, `gpu_processes`, `nvlink_domains` and `hcas` are None when the probe could not
    tell (no nvidia-smi, no sysfs tree readable), and empty when it could and found none.
    """

    format: Literal["modelfleet.facts/v1"] = FACTS_FORMAT
    gathered_at: datetime
    last_reached: datetime | None = None  # None: never reached
    error: str | None = None  # why the last attempt failed; None when it succeeded
    # The first failed attempt since the node was last reached: how long ctl has SEEN it
    # unreachable, which alone makes it Lost (never the age of last_reached: nobody may
    # have looked for a week). None while reached, and in facts from before it was kept.
    unreachable_since: datetime | None = None
    probe_version: str | None = None
    memory: Memory | None = None
    gpus: tuple[Gpu, ...] | None = None
    gpu_processes: tuple[GpuProcess, ...] | None = None
    # Groups of GPUs every pair of which has NV# links in `nvidia-smi topo -m` (a hybrid
    # cube mesh is two groups, not one); singletons when no NVLink.
    nvlink_domains: tuple[tuple[int, ...], ...] | None = None
    hcas: tuple[HcaPort, ...] | None = None
    shards: tuple[ShardRecord, ...] = ()
    # TCP ports something listens on; None: not reported. Ours are among them.
    listening_ports: tuple[int, ...] | None = None
    # None: not reported (a probe from before the store, or statfs failed).
    model_store: ModelStore | None = None
    # GPUs nvidia-smi could not reach (fallen off the bus: exit 15), not among `gpus`.
    gpus_lost: int = Field(default=0, ge=0, le=1024)
    # None: no node.pem (the node serves plain HTTP), or facts from before ctl read it.
    certificate: NodeCertificate | None = None
    # A router's: the routes it serves, as cli/routes/deploy.py `served_line` wrote them,
    # while its routes file is the one written then and its units run; None otherwise.
    router_served: str | None = Field(default=None, max_length=256)
    # The load of the replicas whose rank 0 runs here; None: not reported (a probe from
    # before it was read, or no python3 on the node to ask the engines with).
    replica_load: tuple[ReplicaLoad, ...] | None = None
    notes: tuple[str, ...] = ()  # what the probe could not read, said plainly
    # The node's inventory variables when the snapshot was saved. Read only for a node the
    # inventory does not have, so a copied file brings its labels and fabrics along.
    host_vars: HostVars | None = None

    @property
    def reached(self) -> bool:
        return self.error is None and self.last_reached is not None
