"""Why a (profile, node) pair was rejected: a stable code, numbers, and how long it lasts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Constraint(StrEnum):
    """The placement constraints' codes, stable; the order they are checked in is
    cli/placement/constraints.py's list."""

    NODE_STATUS = "node-status"
    NODE_SELECTOR = "node-selector"
    MEMORY = "memory"
    GPU_CLASS = "gpu-class"
    GPU_MEMORY = "gpu-memory"
    GPUS = "gpus"
    DISK = "disk"
    FABRIC = "fabric"


class Blocking(StrEnum):
    """What would have to change for the pair to fit.

    capacity: our own shards hold what it needs ("not now"); condition: the node's state
    (cordon, unreachable, faulty or foreign-held GPU) stands in the way until someone fixes
    it; hardware: the node is not that kind of node ("never", short of changing the
    catalog or the inventory).
    """

    CAPACITY = "capacity"
    CONDITION = "condition"
    HARDWARE = "hardware"


@dataclass(frozen=True, slots=True)
class Rejection:
    profile: str
    node: str
    constraint: Constraint
    message: str  # a sentence with numbers, for people
    summary: str  # a countable phrase: "5 nodes have L40S GPUs" counts this phrase
    blocking: Blocking
    detail: str = ""  # the particulars a summary names per node: "GPU 4: 2 uncorrected ECC errors"
    free: int | None = None  # free GPUs of the class, for "best: hgx-2, 6 of 8 free"
    total: int | None = None
