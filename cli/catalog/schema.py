"""Catalog schema (docs/catalog.md). Unknown keys are errors: a typo must not be ignored.

The schema checks shapes; `cli.catalog.load` checks what spans several keys (aliases,
fallbacks, parallelism arithmetic) and resolves names, so errors can point at lines.
"""

from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cli.engines.specs import ENGINE_NAMES, ENGINE_SPECS
from cli.inventory.schema import Label

# The router's first-token timeout when a profile sets none (docs/routing.md): long enough
# for a prompt of a full context to be read on a loaded GPU, short of any client's patience.
DEFAULT_FIRST_TOKEN_SECONDS: Final = 60

# The engines are the specs' (cli/engines/specs.py): one Literal of their names.
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
# Model, alias and profile names. A replica is its model's name and a number, and each of
# its shards on a node is a systemd unit and two files named from it
# (modelfleet-MODEL-N-rankR.service): with a 100-character name, 38 characters to spare
# for N and R within a file name's 255 bytes, less the temporary copy's 20
# (cli/names.py). Hugging Face's own repository names stop at 96.
MAX_NAME = 100
SOURCE_PATTERN = r"^(hf://[^/\s]+/[^\s]+|file:///\S+|s3://\S+|https?://\S+)$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

# What a Hugging Face token looks like: a user access token is `hf_` and 34 letters, an
# organization's `api_org_` and 34 (the patterns of gitleaks' huggingface-access-token
# rule and of detect-secrets' Hugging Face plugin). Letters and digits, 30 or more, so a
# token of a format to come is caught too; anywhere in a value ("Bearer hf_…", a URL).
TOKEN_LIKE = re.compile(r"(?<![A-Za-z0-9])(hf_|api_org_)[A-Za-z0-9]{30,}")
# Names huggingface_hub reads a token from (its constants.py): a value under one is a
# secret by its name, whatever it looks like.
SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
# Sources a token authenticates: the hub, and a URL (as a Bearer token). Not http://,
# where it would cross the network in clear text.
TOKEN_SCHEMES = ("hf://", "https://")
# Jinja's keywords, which ansible-core 2.19 refuses as variable names besides non-ASCII and
# non-identifiers (ansible/utils/vars.py validate_variable_name); older releases refused
# Python's keywords instead (isidentifier there), so both are refused.
_JINJA_KEYWORDS = frozenset({"true", "false", "none", "True", "False", "None", "not"})
TOKEN_FORMS = "token: {env: HF_TOKEN}, {file: PATH} or {var: NAME}"
# The names a token may be read from, so that a catalog cannot have ctl send another secret
# of the operator's as a model's token (docs/catalog.md, "Tokens by reference"): an
# environment variable ending in _TOKEN, an inventory variable ending in _token, and
# neither one of Ansible's (its connection, become and vault settings) nor ctl's own
# (the Proxmox token, ctl's settings, the router's master key).
TOKEN_ENV_SUFFIX = "_TOKEN"
TOKEN_VAR_SUFFIX = "_token"
NOT_TOKEN_ENV_PREFIXES: tuple[str, ...] = ("ANSIBLE_", "MODELFLEET_", "PROXMOX_", "LITELLM_")
NOT_TOKEN_VAR_PREFIXES: tuple[str, ...] = ("ansible_", "modelfleet_")


def ansible_variable_name(name: str) -> bool:
    """Whether Ansible takes `name` as a variable's: an ASCII identifier, no keyword."""
    return (
        name.isascii()
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and name not in _JINJA_KEYWORDS
    )


def token_name_problem(form: str, name: str) -> str | None:
    """Why the variable `name` (`form`: env or var) may not hold a model's token: None when
    it is one meant for a token (TOKEN_ENV_SUFFIX, TOKEN_VAR_SUFFIX, and none of Ansible's
    or ctl's own names)."""
    if form == "env":
        suffix, prefixes, what = TOKEN_ENV_SUFFIX, NOT_TOKEN_ENV_PREFIXES, "environment variable"
    else:
        suffix, prefixes, what = TOKEN_VAR_SUFFIX, NOT_TOKEN_VAR_PREFIXES, "inventory variable"
    owner = next((prefix for prefix in prefixes if name.startswith(prefix)), None)
    if name.endswith(suffix) and len(name) > len(suffix) and owner is None:
        return None
    why = (
        f"{owner}* is reserved for Ansible's and ctl's own settings and secrets"
        if owner is not None
        else f"its name does not end in {suffix}"
    )
    return (
        f"'{name}' is not an {what} meant for a token: {why}; a token is read only from an"
        f" {what} whose name ends in {suffix} and does not start with"
        f" {', '.join(prefixes)} (docs/catalog.md)"
    )


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenRef(Strict):
    """Where a model's token comes from, never the token: an environment variable or a file
    on the operator's machine (read by ctl when it needs the token), or an Ansible inventory
    variable (a vaulted one, say) that only the playbook reads. Resolved by
    cli/ops/tokens.py; here only the reference, which is safe to print."""

    env: str | None = None
    file: str | None = None
    var: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_reference(cls, data: Any) -> Any:
        # `token: hf_…` is the mistake this form exists to prevent; say the form, and never
        # echo the value (pydantic's own message would go no further than "not a mapping").
        if isinstance(data, str):
            raise ValueError(
                "a token is named by where it comes from, never written here: " + TOKEN_FORMS
            )
        return data

    @field_validator("env", "file", "var")
    @classmethod
    def _a_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        # A token pasted here instead of its name is refused before the schema runs
        # (cli/catalog/load.py looks for tokens in the whole file), unquoted.
        if value is None:
            return None
        if info.field_name == "env" and not re.fullmatch(ENV_NAME, value):
            raise ValueError(
                f"'{value}' is not an environment variable name: letters, digits and '_',"
                " not starting with a digit"
            )
        if info.field_name == "var" and not ansible_variable_name(value):
            raise ValueError(
                f"'{value}' is not an Ansible variable name: letters, digits and '_', not"
                " starting with a digit, and no keyword"
            )
        if info.field_name in ("env", "var"):
            problem = token_name_problem(info.field_name, value)
            if problem is not None:
                raise ValueError(problem)
        if info.field_name == "file" and not value.strip():
            raise ValueError("an empty path: name the file that holds the token")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> TokenRef:
        given = [key for key in ("env", "file", "var") if getattr(self, key) is not None]
        if not given:
            raise ValueError("name where the token comes from: one of env, file or var")
        if len(given) > 1:
            raise ValueError(f"name one of env, file or var, not {' and '.join(given)}")
        return self

    @property
    def reference(self) -> str:
        """The reference as `ctl` prints it: `$HF_TOKEN`, `file ~/.hf-token`, `inventory
        variable hf_token`. Never the token: it holds none."""
        if self.env is not None:
            return f"${self.env}"
        if self.file is not None:
            return f"file {self.file}"
        return f"inventory variable {self.var}"


class Replicas(Strict):
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=0)  # None: same as min

    @property
    def upper(self) -> int:
        return self.min if self.max is None else self.max


# The autoscaler's defaults (docs/catalog.md): a queue of 4 waiting per replica, or 80 % of
# the KV cache in use; up after 30 s above (Ray Serve's default upscale delay), down after
# 300 s with room to spare.
AUTOSCALE_TARGETS: dict[str, float] = {"queue": 4.0, "kv": 0.8}
AUTOSCALE_UP_SECONDS = 30
AUTOSCALE_DOWN_SECONDS = 300


class Autoscale(Strict):
    """How load moves a model's replica count between replicas.min and replicas.max."""

    signal: Literal["queue", "kv"] = "queue"  # waiting requests per replica, or KV use
    target: float | None = Field(default=None, gt=0, le=100_000)  # None: the signal's default
    up_seconds: int = Field(default=AUTOSCALE_UP_SECONDS, ge=0, le=3600)
    down_seconds: int = Field(default=AUTOSCALE_DOWN_SECONDS, ge=0, le=86_400)

    @property
    def goal(self) -> float:
        return AUTOSCALE_TARGETS[self.signal] if self.target is None else self.target


class Profile(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME)
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
    # How long the router waits for a streamed answer's first token (and each next one)
    # before giving the request up (docs/routing.md); a healthy replica is never cut.
    first_token_seconds: int = Field(default=DEFAULT_FIRST_TOKEN_SECONDS, ge=1, le=3600)
    embedding: bool = False  # an embedding server: the engine's embedding mode (its spec's)
    # The engine release the options are checked against; None: the spec's pinned one.
    engine_version: str | None = Field(default=None, pattern=VERSION_PATTERN)
    # Compared as text, the way inventory labels are read (`gpus: 8` is "8").
    node_selector: dict[Label, Label] = Field(default_factory=dict)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    token: TokenRef | None = None  # None: the model's

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
    autoscale: Autoscale | None = None  # None: replicas.min, plus what operators place
    token: TokenRef | None = None  # for its profiles with an hf:// or https:// source
    profiles: tuple[Profile, ...] = Field(min_length=1)


class CatalogFile(Strict):
    models: dict[str, Model] = Field(default_factory=dict)
