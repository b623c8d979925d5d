"""Our host variables, and the inventory as `ctl` sees it once Ansible's rules have merged them.

Pure: models and the few rules that turn what an operator wrote into comparable values.

Label keys and values are compared as text, the way a node selector compares them. YAML
reads some unquoted words as other types, so whole numbers and booleans are turned back
into text: `gpus: 8` is the label `"8"`, `gpu: true` (or `yes`, `on`) is `"true"`. The
catalog's selectors should use `label_text` too, so both sides agree whatever the quoting.
A number with a decimal point is refused: YAML has already read `1.10` as `1.1`, and the
label the operator meant is lost. Null is refused: a label without a value is a mistake;
write `''` for an empty value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    IPvAnyAddress,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cli.errors import InputError, near_miss
from cli.yamlsource import yaml_kind

NO_CORDON_REASON = "cordoned (no reason given)"
DEFAULT_SSH_PORT = 22


def label_text(value: object) -> str:
    """A label key or value as the text a selector compares (see the module docstring)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        raise ValueError(
            f"{value!r} is a number with a decimal point, which YAML may already have changed"
            " (1.10 reads as 1.1): write it in quotes"
        )
    if value is None:
        raise ValueError("a label needs a value: write '' for an empty one")
    raise ValueError(f"must be text, not {yaml_kind(value)}")


def cordon_reason(value: object) -> str | None:
    """`cordoned:` as written → the reason, or None when the node is schedulable."""
    if value is None or value is False:
        return None
    if value is True:
        return NO_CORDON_REASON
    if isinstance(value, str):
        reason = value.strip()
        if not reason:
            raise ValueError(
                'empty cordon reason: say why (cordoned: "PSU fan failing"),'
                " write true, or remove the key"
            )
        return reason
    raise ValueError(f"must be a reason (text) or true/false, not {yaml_kind(value)}")


Label = Annotated[str, BeforeValidator(label_text)]
Name = Annotated[str, StringConstraints(min_length=1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fabric(Strict):
    """One RDMA fabric a host is cabled to, and the HCAs that reach it."""

    name: Name
    hcas: tuple[Name, ...] = Field(min_length=1)
    rate_gbps: float | None = Field(default=None, gt=0, strict=True)

    @field_validator("hcas")
    @classmethod
    def _hcas_once(cls, hcas: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[str] = set()
        for index, hca in enumerate(hcas):
            if hca in seen:
                raise PydanticCustomError(
                    "duplicate_hca", "HCA '{hca}' is listed twice", {"hca": hca, "at": (index,)}
                )
            seen.add(hca)
        return hcas


_HOST_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


def token_host(value: object) -> str:
    """A `modelfleet_token_hosts` entry: a host name or an IPv4 address, nothing more."""
    if not isinstance(value, str):
        raise ValueError(f"must be a host name, not {yaml_kind(value)}")
    if len(value) > 253 or not _HOST_NAME.fullmatch(value):
        raise ValueError(
            f"'{value}' is not a host name: letters, digits and '-' in dot-separated labels,"
            " without a scheme, a port or a path"
        )
    return value


def _none_is_no_entries(value: object) -> object:
    """`labels:` with every entry commented out is null in YAML: no labels, as Ansible and
    `cordoned:` read it, not an error."""
    return {} if value is None else value


def _none_is_no_items(value: object) -> object:
    return () if value is None else value


class HostVars(Strict):
    """The host variables `ctl` reads; an inventory's other variables are not ours to judge."""

    labels: Annotated[dict[Label, Label], BeforeValidator(_none_is_no_entries)] = Field(
        default_factory=dict
    )
    fabrics: Annotated[tuple[Fabric, ...], BeforeValidator(_none_is_no_items)] = ()
    cordoned: Annotated[str | None, BeforeValidator(cordon_reason)] = None
    gpu_classes: Annotated[  # GPU name or glob → class
        dict[Name, Name], BeforeValidator(_none_is_no_entries)
    ] = Field(default_factory=dict)
    # Where shards listen; None: every address (0.0.0.0). Set it when the node has several
    # networks and models should be served on one, or nodes share a network namespace.
    listen_address: IPvAnyAddress | None = None
    # The network the ranks of a replica that spans nodes meet and talk on: its interface
    # (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) and this node's address there (VLLM_HOST_IP,
    # and rank 0's rendezvous address). None: the engines pick by the default route.
    fabric_interface: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,14}$")] | None
    ) = None
    fabric_address: IPvAnyAddress | None = None
    # The directory model weights are staged in (docs/facts.md, the model store); None:
    # /var/lib/modelfleet/models. Prefixed as the playbooks' variables are, which read it
    # too. An absolute path of plain characters: it reaches the node's shell.
    modelfleet_model_store: (
        Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._+@:/-]{0,1023}$")] | None
    ) = None
    # false: weights are not staged on this node before its shards start; each engine
    # fetches its own, inside its readiness wait (docs/reconcile.md, weights before shards).
    modelfleet_stage_weights: bool = True
    # The store is a share (an NFS export) that every host naming the same share mounts:
    # weights are downloaded once per share, not once per host. None: the host's own.
    modelfleet_model_store_shared: Name | None = None
    # A hub mirror the staging step downloads hf:// sources from (HF_ENDPOINT); None: the
    # hub itself. Read by playbooks/stage_weights.yml.
    modelfleet_hf_endpoint: (
        Annotated[str, StringConstraints(pattern=r"^https?://[^\s/]+(/[^\s]*)?$")] | None
    ) = None
    # Hosts besides the hub endpoint's that a catalog's https:// source may send its token
    # to (a mirror of plain files, say); compared by host name, any port. None but these.
    # The port this node's Prometheus node exporter listens on (Debian's
    # prometheus-node-exporter: 9100); `ctl targets` names it when the node's facts show
    # something listening there. None: 9100.
    modelfleet_node_exporter_port: int | None = Field(default=None, ge=1, le=65535)
    modelfleet_token_hosts: Annotated[
        tuple[Annotated[str, BeforeValidator(token_host)], ...],
        BeforeValidator(_none_is_no_items),
    ] = ()

    @field_validator("fabrics")
    @classmethod
    def _fabrics_distinct(cls, fabrics: tuple[Fabric, ...]) -> tuple[Fabric, ...]:
        names: dict[str, int] = {}
        hcas: dict[str, str] = {}
        for index, fabric in enumerate(fabrics):
            if fabric.name in names:
                raise PydanticCustomError(
                    "duplicate_fabric",
                    "fabric '{name}' is listed twice (first as fabrics[{first}])",
                    {"name": fabric.name, "first": names[fabric.name], "at": (index, "name")},
                )
            names[fabric.name] = index
            for hca_index, hca in enumerate(fabric.hcas):
                if hca in hcas:
                    raise PydanticCustomError(
                        "duplicate_hca",
                        "HCA '{hca}' is already on fabric '{other}': an HCA reaches one fabric",
                        {"hca": hca, "other": hcas[hca], "at": (index, "hcas", hca_index)},
                    )
                hcas[hca] = fabric.name
        return fabrics


OUR_KEYS: tuple[str, ...] = tuple(HostVars.model_fields)


class Host(Strict):
    """One inventory host, with the SSH settings Ansible would use and our variables."""

    name: Name
    groups: tuple[str, ...]  # every group it is in, "all" first, then in variable precedence order
    address: Name  # ansible_host, or the inventory name
    port: int = Field(default=DEFAULT_SSH_PORT, ge=1, le=65535)
    user: str | None = None
    private_key_file: str | None = None
    vars: HostVars = Field(default_factory=HostVars)
    # Where each variable we read came from: our keys and the ansible_* ones we use.
    origins: dict[str, tuple[str, int | None]] = Field(default_factory=dict)
    # How Ansible reaches it (ansible_connection): over SSH, as ctl's own session does, or
    # `local`: it is the control host, and its commands run there as local processes.
    connection: Literal["ssh", "local"] = "ssh"
    # Why ctl's own SSH does not try it (an SSH password, which it never uses), in one line
    # naming the variable's file and line; None when it does.
    ssh_refusal: str | None = None
    # The way there when not straight, as OpenSSH reads ansible_ssh_common_args and
    # ansible_ssh_extra_args: a ProxyJump (`[user@]bastion[:port]`, hops joined by commas)
    # or a ProxyCommand (its tokens, %h %p %r, unexpanded); at most one is set.
    proxy_jump: str | None = None
    proxy_command: str | None = None

    def origin(self, key: str) -> tuple[str, int | None] | None:
        return self.origins.get(key)


class Inventory(Strict):
    """Hosts in the order the inventory first names them (Ansible's own host table order)."""

    source: str
    hosts: tuple[Host, ...] = ()
    # group → every host in it or in its child groups, in host order; empty groups included
    groups: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # What to warn of: variables files left unread (Vault-encrypted), each with why, and
    # connection settings ctl does not follow (ansible_connection: docker).
    warnings: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _names_unique(self) -> Inventory:
        names = [host.name for host in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError("host names must be unique")
        return self

    def host(self, name: str) -> Host:
        """The host `name`, which the caller knows is there (KeyError if not)."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def find(self, name: str) -> Host:
        """The host an operator named: an InputError naming this inventory if there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        hint = near_miss(name, self.names())
        raise InputError.single(self.source, None, (), f"no host '{name}' in this inventory{hint}")

    def names(self) -> tuple[str, ...]:
        return tuple(host.name for host in self.hosts)


def changed_hosts(before: Inventory, after: Inventory, name: str) -> list[str]:
    """The hosts, other than `name`, that `after` has otherwise than `before` (or not): an
    edit of one host's lines (onboarding adds them, offboarding removes them) changes none."""
    old = {h.name: h.model_dump(exclude={"origins"}) for h in before.hosts if h.name != name}
    new = {h.name: h.model_dump(exclude={"origins"}) for h in after.hosts if h.name != name}
    return sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))


def validate_host_vars(values: Mapping[str, Any]) -> HostVars:
    """Our keys of a host's merged variables → HostVars (other keys are ignored)."""
    return HostVars.model_validate({key: values[key] for key in OUR_KEYS if key in values})
