"""Node specs: what each node of the test fleet pretends to have, and the spec file format.

The specs are pydantic dataclasses: a spec file (docs/testfleet.md) and the fleet's own
fleet.json are validated by them, and `dataclasses.replace` on a spec validates again. An
error names the file, the line where the YAML has one, and the key path
(`specs.yml:7: nodes.node-1.gpus.count: must be at least 1, got 0`). A key left out or
written as null takes its default.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import yaml
from pydantic import (
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs, ErrorDetails

MAX_NODES: Final = 64
NODE_NAME: Final = re.compile(r"^node-([1-9][0-9]*)$")
HCA_STATES: Final = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
# The data-centre GPUs with MIG (NVIDIA's MIG user guide, "Supported GPUs"), by the names
# nvidia-smi prints; any other model reports mig.mode.current as [N/A].
MIG_MODELS: Final = re.compile(r"\b(A100|A30|A800|H100|H200|H800|H20|B200|GB200)\b")
# GPUs from before Ampere retire pages; Ampere and newer remap rows instead (NVIDIA's "GPU
# Memory Error Management", Supported GPUs): each prints [N/A] for the other's fields.
PAGE_RETIREMENT_MODELS: Final = re.compile(r"\b(K80|M60|P4|P40|P100|V100|T4|TITAN V)\b")


class FleetError(Exception):
    """Something the operator can act on: the message says what and what to do."""


class SpecError(FleetError):
    """A spec file that is not what docs/testfleet.md describes."""


def node_name(index: int) -> str:
    return f"node-{index}"


def node_index(name: str) -> int:
    match = NODE_NAME.match(name)
    if match is None or not 1 <= int(match.group(1)) <= MAX_NODES:
        raise FleetError(f"{name!r} is not a node name (node-1 .. node-{MAX_NODES})")
    return int(match.group(1))


def node_address(index: int) -> str:
    return f"127.0.1.{index}"


# =========================================================================== the specs

Whole = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
Text = Annotated[str, Strict(), StringConstraints(pattern=r"\S")]
Gib = Annotated[float, Strict(), Field(gt=0)]
_CONFIG: Final = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_CONFIG)
class _Spec:
    """A mapping of a spec file: known keys only, and null is the default."""

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        if isinstance(data, ArgsKwargs):  # built in Python, not read from a file
            return data
        if not isinstance(data, dict):
            raise ValueError(f"expected a mapping, got {type(data).__name__}")
        known = [spec_field.name for spec_field in dataclasses.fields(cls)]
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(known)})")
        return {key: value for key, value in data.items() if value is not None}


@dataclass(frozen=True, config=_CONFIG)
class HcaSpec(_Spec):
    """One RDMA device with one port: /sys/class/infiniband/NAME/ports/1/."""

    name: Text
    state: Literal["DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"] = "ACTIVE"
    rate_gbps: Positive = 400
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"  # Ethernet: RoCE
    rate: Text | None = None  # the rate file verbatim; default from rate_gbps and state


@dataclass(frozen=True, config=_CONFIG)
class FabricSpec(_Spec):
    """The `fabrics` host variable written into the inventory (what the operator says)."""

    name: Text
    hcas: Annotated[tuple[Annotated[str, Strict()], ...], Field(min_length=1)]
    rate_gbps: Positive | None = None


@dataclass(frozen=True, config=_CONFIG)
class GpuProcessSpec(_Spec):
    """A compute process on a GPU, as nvidia-smi --query-compute-apps reports it."""

    gpu: Whole
    pid: Positive
    name: Text
    used_mib: Whole


@dataclass(frozen=True, config=_CONFIG)
class GpuSpec(_Spec):
    # The fields in the order a spec file lists them (node_spec_to_dict).
    model: Text  # the name nvidia-smi prints: "NVIDIA H100 80GB HBM3"
    count: Annotated[int, Strict(), Field(ge=1, le=16)]
    memory_mib: Positive  # memory.total of each GPU
    ecc: Annotated[bool, Strict()] = True  # False: the ECC column prints [N/A]
    # "all": one NVLink domain (NVSwitch); "none": PCIe only; or lists of GPU indices.
    nvlink: Literal["all", "none"] | tuple[tuple[int, ...], ...] = "none"
    nvlink_width: Positive = 18  # the N of NV# in topo -m
    used_mib: Whole = 0  # memory.used of an idle GPU (processes add theirs)
    # ok: nvidia-smi works; broken: it fails as with no driver loaded; missing: the GPUs are
    # on the PCI bus but there is no nvidia-smi.
    driver: Literal["ok", "broken", "missing"] = "ok"
    underline_topo_header: Annotated[bool, Strict()] = False  # as newer drivers print topo -m
    uncorrected_ecc: Mapping[Whole, Whole] = Field(default_factory=dict)  # GPU index → errors
    processes: tuple[GpuProcessSpec, ...] = ()
    mig_enabled: tuple[Whole, ...] = ()  # GPU indices in MIG mode (a GPU model that has it)
    # GPU indices waiting for a memory repair: rows pending remapping, or on a GPU from
    # before Ampere pages pending retirement (nvidia-smi prints Yes for the pending field).
    repair_pending: tuple[Whole, ...] = ()
    # GPU indices that need a reset: nvidia-smi prints [GPU requires reset] in their
    # memory.used and ECC fields.
    requires_reset: tuple[Whole, ...] = ()

    @field_validator("nvlink", mode="before")
    @classmethod
    def _nvlink(cls, value: Any) -> Any:
        if value in ("all", "none"):
            return value
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected all, none or lists of GPU indices, got {value!r}")
        for number, group in enumerate(value):
            if not isinstance(group, list | tuple) or len(group) < 2:
                raise ValueError(f"[{number}]: expected a list of at least two GPU indices")
            if not all(isinstance(gpu, int) and not isinstance(gpu, bool) for gpu in group):
                raise ValueError(f"[{number}]: expected GPU indices, got {group!r}")
        return tuple(tuple(group) for group in value)

    @field_validator("uncorrected_ecc", mode="before")
    @classmethod
    def _ecc_keys(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        # JSON (the fleet's own state file) has text keys only.
        return {int(k) if isinstance(k, str) and k.isdigit() else k: v for k, v in value.items()}

    @model_validator(mode="after")
    def _gpus_exist(self) -> Self:
        indices = [
            *((f"nvlink[{n}]", gpu) for n, group in enumerate(self.groups()) for gpu in group),
            *((f"uncorrected_ecc.{gpu}", gpu) for gpu in self.uncorrected_ecc),
            *((f"processes[{n}].gpu", process.gpu) for n, process in enumerate(self.processes)),
            *((f"mig_enabled[{n}]", gpu) for n, gpu in enumerate(self.mig_enabled)),
            *((f"repair_pending[{n}]", gpu) for n, gpu in enumerate(self.repair_pending)),
            *((f"requires_reset[{n}]", gpu) for n, gpu in enumerate(self.requires_reset)),
        ]
        for where, gpu in indices:
            if gpu >= self.count:
                raise ValueError(f"{where}: GPU {gpu} does not exist (count is {self.count})")
        grouped = [gpu for group in self.groups() for gpu in group]
        if len(set(grouped)) != len(grouped):
            raise ValueError("nvlink: a GPU is in one NVLink group at most")
        if self.uncorrected_ecc and not self.ecc:
            raise ValueError("uncorrected_ecc needs ecc: true")
        if self.mig_enabled and not self.has_mig():
            raise ValueError(f"mig_enabled: {self.model} has no MIG mode")
        return self

    def has_mig(self) -> bool:
        """Whether nvidia-smi gives this model a MIG mode (mig.mode.current not [N/A])."""
        return MIG_MODELS.search(self.model) is not None

    def retires_pages(self) -> bool:
        """Whether this model retires pages (before Ampere) rather than remapping rows."""
        return PAGE_RETIREMENT_MODELS.search(self.model) is not None

    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The NVLink groups the spec lists (none for "all" and "none")."""
        return () if isinstance(self.nvlink, str) else self.nvlink

    def nvlink_domains(self) -> tuple[tuple[int, ...], ...]:
        """The NVLink domains `nvidia-smi topo -m` shows (what parse_topology must find)."""
        if self.nvlink == "all":
            return (tuple(range(self.count)),)
        grouped = {gpu for group in self.groups() for gpu in group}
        singles = tuple((gpu,) for gpu in range(self.count) if gpu not in grouped)
        return tuple(sorted(tuple(sorted(group)) for group in (*self.groups(), *singles)))


@dataclass(frozen=True, config=_CONFIG)
class NodeSpec(_Spec):
    memory_gib: Gib  # MemTotal
    memory_available_gib: Gib | None = None  # MemAvailable; default 96% of MemTotal
    labels: Mapping[str, str] = Field(default_factory=dict)
    gpus: GpuSpec | None = None  # None: a CPU-only node (no nvidia-smi, no NVIDIA device)
    hcas: tuple[HcaSpec, ...] = ()
    fabrics: tuple[FabricSpec, ...] = ()

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping, got {value!r}")
        return {_label(key): _label(item) for key, item in value.items()}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        available = self.memory_available_gib
        if available is not None and available > self.memory_gib:
            raise ValueError("memory_available_gib: above memory_gib")
        if len({hca.name for hca in self.hcas}) != len(self.hcas):
            raise ValueError("hcas: an HCA name appears twice")
        return self

    def summary(self) -> str:
        parts = []
        if self.gpus is not None:
            parts.append(f"{self.gpus.model.removeprefix('NVIDIA ')} x{self.gpus.count}")
        else:
            parts.append("CPU only")
        parts.append(f"{self.memory_gib:g} GiB")
        parts += [fabric.name for fabric in self.fabrics]
        return ", ".join(parts)


def _label(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise ValueError(f"a label is text, got {value!r}")


@dataclass(frozen=True, config=_CONFIG)
class SpecFile(_Spec):
    """A spec file: `nodes:` mapping node-K to its spec."""

    nodes: Mapping[str, NodeSpec] = Field(default_factory=dict)

    @field_validator("nodes", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            for name in value:
                try:
                    node_index(str(name))
                except FleetError as error:
                    raise ValueError(f"{name}: {error}") from None
            return {str(name): spec for name, spec in value.items()}
        return value


# =========================================================================== reading, writing

_NODE: Final = TypeAdapter(NodeSpec)
_FILE: Final = TypeAdapter(SpecFile)
# pydantic's error type → what the message says (the value found follows it).
_MESSAGES: Final = {
    "missing": "required",
    "int_type": "expected a whole number",
    "float_type": "expected a number",
    "string_type": "expected text",
    "string_pattern_mismatch": "expected text",
    "bool_type": "expected true or false",
    "dict_type": "expected a mapping",
    "tuple_type": "expected a list",
    "literal_error": "expected one of {expected}",
    "greater_than": "must be above {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "too_short": "expected at least {min_length} item",
}


def _message(error: ErrorDetails) -> str:
    ctx = error.get("ctx") or {}
    if error["type"] == "value_error":
        return str(ctx["error"])
    template = _MESSAGES.get(error["type"])
    if template is None:
        return f"{error['msg']}, got {error['input']!r}"
    text = template.format(**ctx)
    return text if error["type"] == "missing" else f"{text}, got {error['input']!r}"


def _key_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if part == "[key]":
            continue
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def _line(tree: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The line (from 1) of the deepest key of `loc` that the YAML tree has."""
    node, line = tree, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = [(key, value) for key, value in node.value if key.value == str(part)]
            if not found:
                break
            line, node = found[0][0].start_mark.line + 1, found[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _spec_error(
    error: ValidationError, where: str, tree: yaml.Node | None = None, separator: str = "."
) -> SpecError:
    lines = []
    for detail in error.errors():
        line = _line(tree, detail["loc"])
        place = where if line is None else f"{where}:{line}"
        path = _key_path(detail["loc"])
        lines.append(f"{place}{separator if path else ''}{path}: {_message(detail)}")
    return SpecError("\n".join(lines))


def node_spec_from_dict(data: object, where: str) -> NodeSpec:
    """A node's spec as written in a spec file (docs/testfleet.md) → NodeSpec."""
    try:
        return _NODE.validate_python(data)
    except ValidationError as error:
        raise _spec_error(error, where) from None


def _plain(value: Any) -> Any:
    """Tuples as lists, whole floats as ints: the spec file's form of a dumped spec."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def node_spec_to_dict(spec: NodeSpec) -> dict[str, Any]:
    """NodeSpec → the spec file form; keys at their default values are left out."""
    return dict(_plain(_NODE.dump_python(spec, exclude_defaults=True)))


def specs_from_file(path: Path) -> dict[str, NodeSpec]:
    """A spec file: `nodes:` mapping node-K to its spec (docs/testfleet.md)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        tree = yaml.compose(text, Loader=yaml.SafeLoader)
    except OSError as error:
        raise SpecError(f"{path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not YAML: {error}") from None
    try:
        return dict(_FILE.validate_python(data).nodes)
    except ValidationError as error:
        raise _spec_error(error, str(path), tree, ": ") from None


def specs_yaml(specs: Mapping[str, NodeSpec]) -> str:
    body = {"nodes": {name: node_spec_to_dict(spec) for name, spec in specs.items()}}
    return yaml.dump(body, Dumper=Dumper, sort_keys=False, width=100)


class Dumper(yaml.SafeDumper):
    """Block style, with short lists of scalars inline, and null written as nothing."""

    def represent_list(self, data: Any) -> yaml.SequenceNode:
        flow = all(isinstance(item, str | int | float) for item in data) and len(data) <= 8
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


Dumper.add_representer(list, Dumper.represent_list)
Dumper.add_representer(
    type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "")
)
