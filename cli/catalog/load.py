"""Load a catalog: YAML → schema → cross-key checks → a resolved Catalog.

Everything that would fail at run time is refused here instead, with file, line and key:
a fallback that names nothing fails during the outage it was written for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cli.catalog.schema import (
    ENV_NAME,
    MAX_NAME,
    MULTI_NODE_ENGINES,
    NAME_PATTERN,
    SECRET_ENV,
    TOKEN_FORMS,
    TOKEN_LIKE,
    TOKEN_SCHEMES,
    Autoscale,
    CatalogFile,
    Model,
    Profile,
    TokenRef,
)
from cli.engines.flags import (
    accepted_options,
    check_options,
    versions_with_data,
    whole_options,
)
from cli.engines.specs import Rank, engine_spec, version_tuple
from cli.errors import InputError, InputProblem, KeyPath, near_miss
from cli.names import control_character, file_name_problem, staged_file_name
from cli.regularfile import read_regular_file
from cli.schemaerrors import problems_from_validation
from cli.yamlsource import MAX_SOURCE_BYTES, YamlDocument, decode_source, parse_yaml

EMPTY_CATALOG = (
    "the catalog is empty: name its models under 'models' (to run no model at all, and"
    " drain every replica, write `models: {}`)"
)
# Set per shard from where it was placed; a catalog value would send it to other GPUs.
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_IB_HCA"})
# Where a token goes instead of the catalog, said by every refusal of one written there.
CONTROL_REFUSED = "no text in a catalog may hold one (it reaches the nodes' unit files)"
NOT_IN_THE_CATALOG = (
    "a secret is never written in the catalog, from where it would reach the nodes' unit"
    f" files; name where it comes from: {TOKEN_FORMS} (docs/catalog.md)"
)


@dataclass(frozen=True)
class CatalogToken:
    """A profile's token reference (its own or its model's) and where the catalog says it,
    so that a token missing when it is resolved (cli/ops/tokens.py) is reported at its
    file, line and key. The place is not part of what the token is: two catalogs that say
    the same on other lines are equal."""

    ref: TokenRef
    model: str
    file: str = field(compare=False)
    line: int | None = field(compare=False)
    path: KeyPath = field(compare=False)

    @property
    def reference(self) -> str:
        return self.ref.reference


@dataclass(frozen=True)
class CatalogProfile:
    """A profile with its model's defaults applied."""

    model: str
    spec: Profile
    source: str
    # The token its source is fetched with; None when it needs none, or has an hf:// or
    # https:// source no token applies to.
    token: CatalogToken | None = None
    # Where the catalog says it, for what is found wrong with it later (a refusal at
    # apply): file, line and key. Not part of what the profile is.
    file: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)
    path: KeyPath = field(default=(), compare=False)

    def problem(self, key: str, message: str) -> InputProblem:
        return InputProblem(self.file, self.line, (*self.path, key), message)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def key(self) -> str:
        return f"{self.model}/{self.spec.name}"


@dataclass(frozen=True)
class CatalogModel:
    name: str
    aliases: tuple[str, ...]
    fallbacks: tuple[str, ...]  # model names, aliases resolved, in the catalog's order
    replicas_min: int
    replicas_max: int
    profiles: tuple[CatalogProfile, ...]  # highest priority first
    autoscale: Autoscale | None = None  # load moves the count between min and max


@dataclass(frozen=True)
class Catalog:
    file: str
    models: dict[str, CatalogModel]  # in file order
    aliases: dict[str, str]  # alias → model name

    def resolve(self, name: str) -> str | None:
        """The model a name or alias stands for, or None."""
        if name in self.models:
            return name
        return self.aliases.get(name)

    def names(self) -> list[str]:
        return [*self.models, *self.aliases]


def load_catalog(path: Path) -> Catalog:
    try:
        data = read_regular_file(path, MAX_SOURCE_BYTES)  # no more than the parser would take
    except OSError as error:
        raise InputError.single(str(path), None, (), f"cannot read: {error.strerror}") from None
    return parse_catalog(decode_source(data, str(path)), str(path))


def parse_catalog(text: str, file: str) -> Catalog:
    """The catalog in `text`. An empty one is refused: a file truncated mid-save, read as
    "no models", would have reconcile drain every replica of the fleet; running nothing
    is said as `models: {}`."""
    document = parse_yaml(text, file)
    data = document.data
    secrets, problems = _written_tokens(document, data, ())
    controls = _redacted(_control_characters(document, data, ()), secrets, problems)
    if controls:  # what the schema would say of such a text is only noise
        raise InputError(problems + controls)
    if problems and (not isinstance(data, dict) or "models" not in data):
        # Said whatever else is wrong: the operator has a token to move (and, if the
        # catalog was shared, to revoke).
        raise InputError(problems)
    if data is None:
        raise InputError([document.problem((), EMPTY_CATALOG)])
    if not isinstance(data, dict):
        raise InputError([document.problem((), "a catalog is a mapping with the key 'models'")])
    if "models" not in data:
        raise InputError([document.problem((), f"no key 'models': {EMPTY_CATALOG}")])
    try:
        parsed = CatalogFile.model_validate(_without_anchor_homes(data))
    except ValidationError as error:
        found = problems_from_validation(error, CatalogFile, document)
        raise InputError(problems + _redacted(found, secrets, problems)) from None
    parsed = _abbreviations_whole(parsed)
    checked: list[InputProblem] = []
    for name, model in parsed.models.items():
        checked += _check_model(document, name, model)
    aliases, alias_problems = _collect_aliases(document, parsed)
    checked += alias_problems
    fallbacks, fallback_problems = _resolve_fallbacks(document, parsed, aliases)
    checked += fallback_problems
    problems += _redacted(checked, secrets, problems)
    if problems:
        raise InputError(problems)
    models = {
        name: CatalogModel(
            name=name,
            aliases=model.aliases,
            fallbacks=fallbacks[name],
            replicas_min=model.replicas.min,
            replicas_max=model.replicas.upper,
            autoscale=model.autoscale,
            profiles=tuple(
                CatalogProfile(
                    name,
                    profile,
                    profile.source or model.source or "",
                    _token_of(document, name, model, index),
                    document.file,
                    document.line_of(("models", name, "profiles", index)),
                    ("models", name, "profiles", index),
                )
                for index, profile in sorted(
                    enumerate(model.profiles), key=lambda item: -item[1].priority
                )
            ),
        )
        for name, model in parsed.models.items()
    }
    return Catalog(file=file, models=models, aliases=aliases)


ANCHOR_HOME_PREFIX = "x-"


def _without_anchor_homes(data: dict[Any, Any]) -> dict[Any, Any]:
    """The catalog less its top-level `x-` keys: compose-style homes for YAML anchors
    (`x-vllm: &vllm {...}`), whose content counts only where a profile merges it."""
    return {
        key: value
        for key, value in data.items()
        if not (isinstance(key, str) and key.startswith(ANCHOR_HOME_PREFIX))
    }


def _written_tokens(
    document: YamlDocument, data: Any, path: KeyPath
) -> tuple[set[str], list[InputProblem]]:
    """Every text in the document, key or value, that looks like a Hugging Face token:
    the tokens, and a problem at each place. Looked for before the schema, whose messages
    may quote a value (`'hf_…' is not one of vllm, …`) and must not quote these."""
    secrets: set[str] = set()
    problems: list[InputProblem] = []
    said = "looks like a Hugging Face token: " + NOT_IN_THE_CATALOG
    if isinstance(data, str):
        found = {match.group(0) for match in TOKEN_LIKE.finditer(data)}
        if found:
            secrets |= found
            problems.append(document.problem(path, f"this {said}"))
    elif isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and TOKEN_LIKE.search(key):
                # reported at its mapping: a key path would print the key
                secrets |= {match.group(0) for match in TOKEN_LIKE.finditer(key)}
                problems.append(document.problem(path, f"a key here {said}"))
                continue
            more, found_problems = _written_tokens(document, value, (*path, key))
            secrets |= more
            problems += found_problems
    elif isinstance(data, list):
        for index, item in enumerate(data):
            more, found_problems = _written_tokens(document, item, (*path, index))
            secrets |= more
            problems += found_problems
    return secrets, problems


def _control_characters(document: YamlDocument, data: Any, path: KeyPath) -> list[InputProblem]:
    """Every text in the document, key or value, that holds a control character
    (cli/names.py): a CR, VT, FF or U+2028 in an argument splits the unit file's ExecStart
    line where systemd reads it, and none belongs in a catalog."""
    if isinstance(data, str):
        found = control_character(data)
        if found is None:
            return []
        return [document.problem(path, f"has a control character ({found}): {CONTROL_REFUSED}")]
    problems: list[InputProblem] = []
    if isinstance(data, dict):
        for key, value in data.items():
            found = control_character(key) if isinstance(key, str) else None
            if found is not None:
                message = f"a key here has a control character ({found}): {CONTROL_REFUSED}"
                problems.append(document.problem(path, message))
                continue
            problems += _control_characters(document, value, (*path, key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            problems += _control_characters(document, item, (*path, index))
    return problems


def _redacted(
    problems: list[InputProblem], secrets: set[str], said: list[InputProblem]
) -> list[InputProblem]:
    """`problems` but any that would print one of `secrets`, or that is at a place a
    problem in `said` has already refused for holding one."""
    places = {problem.path for problem in said}
    return [
        problem
        for problem in problems
        if problem.path not in places and not any(secret in str(problem) for secret in secrets)
    ]


def _token_of(
    document: YamlDocument, model_name: str, model: Model, index: int
) -> CatalogToken | None:
    """The token profile `index` of `model` is fetched with: its own, else its model's;
    none for a source no token applies to (a model's token is for its hf:// profiles)."""
    profile = model.profiles[index]
    source = profile.source or model.source or ""
    if not source.startswith(TOKEN_SCHEMES):
        return None
    here: KeyPath = ("models", model_name)
    if profile.token is not None:
        path: KeyPath = (*here, "profiles", index, "token")
        ref = profile.token
    elif model.token is not None:
        path, ref = (*here, "token"), model.token
    else:
        return None
    return CatalogToken(ref, model_name, document.file, document.line_of(path), path)


def _no_token_for(source: str) -> str:
    """Why a token means nothing to `source`."""
    scheme = source.split("://", 1)[0] + "://"
    if scheme == "file://":
        return "file:// is a path on the node, read with nothing to authenticate"
    if scheme == "http://":
        return "over http:// it would cross the network in clear text: use https://"
    return f"{scheme} is read with the node's own credentials, not a token"


def _check_tokens(document: YamlDocument, name: str, model: Model) -> list[InputProblem]:
    """A token no source would be fetched with is a mistake: refused where it is written."""
    here: KeyPath = ("models", name)
    problems: list[InputProblem] = []
    takes = "a token is for hf:// and https:// sources"
    for index, profile in enumerate(model.profiles):
        source = profile.source or model.source
        if profile.token is not None and source and not source.startswith(TOKEN_SCHEMES):
            problems.append(
                document.problem(
                    (*here, "profiles", index, "token"), f"{takes}: {_no_token_for(source)}"
                )
            )
    if model.token is not None:
        # A profile without a source at all is refused already, for that.
        inheriting = [p.source or model.source for p in model.profiles if p.token is None]
        sources = [source for source in inheriting if source is not None]
        if not inheriting:
            why: str | None = "every profile names its own token"
        elif sources and not any(source.startswith(TOKEN_SCHEMES) for source in sources):
            why = f"{takes}: {_no_token_for(sources[0])}"
        else:
            why = None
        if why is not None:
            problems.append(
                document.problem((*here, "token"), f"no profile is fetched with it: {why}")
            )
    return problems


def _name_problem(what: str, name: str, why: str = "") -> str | None:
    """Why `name` cannot be a model's or an alias's (a model's names units and files on
    the nodes: schema.MAX_NAME)."""
    if not re.fullmatch(NAME_PATTERN, name):
        return f"{what} uses letters, digits, '.', '_' and '-' only"
    if len(name) > MAX_NAME:
        return f"{what} has at most {MAX_NAME} characters, not {len(name)}{why}"
    return None


def _autoscale_problems(
    document: YamlDocument, here: tuple[str, ...], model: Model
) -> list[InputProblem]:
    policy = model.autoscale
    if policy is None:
        return []
    problems: list[InputProblem] = []
    if model.replicas.upper <= model.replicas.min:
        problems.append(
            document.problem(
                (*here, "autoscale"),
                f"nothing to scale: replicas.max ({model.replicas.upper}) must be above"
                f" replicas.min ({model.replicas.min})",
            )
        )
    if policy.signal == "kv" and policy.target is not None and policy.target > 1:
        problems.append(
            document.problem(
                (*here, "autoscale", "target"),
                f"the kv signal is the share of the KV cache in use, 0 to 1, not {policy.target:g}",
            )
        )
    if policy.down_seconds < policy.up_seconds:
        problems.append(
            document.problem(
                (*here, "autoscale", "down_seconds"),
                f"down_seconds {policy.down_seconds} is shorter than up_seconds"
                f" {policy.up_seconds}: the count would flap",
            )
        )
    return problems


def _abbreviations_whole(parsed: CatalogFile) -> CatalogFile:
    """Each profile's args with the abbreviations its engine's parser expands written
    whole, before anything reads them by option name (`--hf-tok` is `--hf-token`)."""
    models: dict[str, Model] = {}
    for name, model in parsed.models.items():
        profiles: list[Profile] = []
        for profile in model.profiles:
            spec = engine_spec(profile.engine)
            options = accepted_options(spec.name, profile.engine_version or spec.pinned_version)
            if options is not None and spec.abbreviations:
                args = whole_options(spec, profile.args, options)
                profile = profile.model_copy(update={"args": args})  # noqa: PLW2901
            profiles.append(profile)
        models[name] = model.model_copy(update={"profiles": tuple(profiles)})
    return parsed.model_copy(update={"models": models})


def _check_model(document: YamlDocument, name: str, model: Model) -> list[InputProblem]:
    here = ("models", name)
    problems: list[InputProblem] = []
    problem = _name_problem(
        "a model name", name, ": it names the systemd units and files of its replicas on the nodes"
    )
    if problem is not None:
        problems.append(document.problem(here, problem))
    if model.replicas.max is not None and model.replicas.min > model.replicas.max:
        problems.append(
            document.problem(
                (*here, "replicas", "min"),
                f"min {model.replicas.min} is more than max {model.replicas.max}",
            )
        )
    problems += _autoscale_problems(document, here, model)
    names: dict[str, int] = {}
    priorities: dict[int, str] = {}
    for index, profile in enumerate(model.profiles):
        at = (*here, "profiles", index)
        if profile.name in names:
            problems.append(
                document.problem(
                    (*at, "name"),
                    f"profile '{profile.name}' is already profiles[{names[profile.name]}]",
                )
            )
        names.setdefault(profile.name, index)
        if profile.priority in priorities:
            problems.append(
                document.problem(
                    (*at, "priority"),
                    f"priority {profile.priority} is also profile "
                    f"'{priorities[profile.priority]}'s; the highest priority that fits wins, "
                    "so priorities must differ",
                )
            )
        priorities.setdefault(profile.priority, profile.name)
        if profile.source is None and model.source is None:
            problems.append(
                document.problem(at, "no source: set 'source' on the model or on this profile")
            )
        problems += _check_profile(document, at, profile)
        problems += _check_engine(document, at, name, profile, profile.source or model.source)
    problems += _check_tokens(document, name, model)
    return problems


def _check_engine(
    document: YamlDocument,
    at: tuple[str | int, ...],
    model: str,
    profile: Profile,
    source: str | None,
) -> list[InputProblem]:
    """What the profile's engine (its spec, cli/engines/specs.py) cannot do, and every option
    of its command line — ctl's and the profile's `args` — that the engine release's own
    parser does not have (the data of scripts/engine_flags.py)."""
    spec = engine_spec(profile.engine)
    problems: list[InputProblem] = []
    if source is not None and source.startswith(("http://", "https://")):
        unfit = file_name_problem(staged_file_name(source))
        if unfit is not None:
            where = (*at, "source") if profile.source is not None else ("models", model, "source")
            problems.append(
                document.problem(
                    where,
                    f"the file this URL names {unfit}: name the file"
                    " (https://HOST/PATH/FILE.gguf), which is staged under that name",
                )
            )
    if spec.needs_gpus and not profile.uses_gpus:
        problems.append(
            document.problem(
                (*at, "engine"),
                f"{profile.engine} runs on GPUs: set gpus_per_node and gpu_class, "
                "or use llama.cpp for a CPU profile",
            )
        )
    if source is not None and not spec.reads(source):
        where = (*at, "source") if profile.source is not None else ("models", model, "source")
        scheme = source.split("://", 1)[0] + "://"
        problems.append(
            document.problem(
                where,
                f"{profile.engine} cannot read {scheme} sources: it reads "
                + ", ".join(spec.sources),
            )
        )
    version = profile.engine_version or spec.pinned_version
    if version_tuple(version) < version_tuple(spec.min_version):
        problems.append(
            document.problem(
                (*at, "engine_version"),
                f"{spec.label} {version} is older than {spec.min_version}, {spec.min_version_why}",
            )
        )
        return problems
    options = accepted_options(spec.name, version)
    if options is None:
        known = ", ".join(versions_with_data(spec.name)) or "none"
        problems.append(
            document.problem(
                (*at, "engine_version"),
                f"no option data for {spec.label} {version} (scripts/engine_flags.py has "
                f"made it for {known}): pin one of those, or add that release's data",
            )
        )
        return problems
    for problem in check_options(spec, version, profile.args, options):
        problems.append(document.problem((*at, "args", problem.index), problem.message))
    if source is not None:
        ranks = (0, 1) if profile.nodes > 1 else (0,)
        seen: set[str] = set()
        for rank in ranks:
            place = Rank(rank, profile.nodes, 8000, "192.0.2.1", host_ip="192.0.2.2")
            argv = spec.build(profile, model, source, place)
            for problem in check_options(spec, version, argv, options):
                if problem.option not in seen:
                    seen.add(problem.option)
                    problems.append(
                        document.problem(
                            (*at, "engine"),
                            f"the command line ctl writes has {problem.option}: {problem.message}",
                        )
                    )
    return problems


def _check_profile(
    document: YamlDocument, at: tuple[str | int, ...], profile: Profile
) -> list[InputProblem]:
    def problem(key: str, message: str) -> InputProblem:
        return document.problem((*at, key), message)

    problems: list[InputProblem] = []
    for index, arg in enumerate(profile.args):
        # vLLM's and llama-server's own option: the token in every unit file and `ps`.
        if arg.split("=", 1)[0].replace("_", "-") == "--hf-token":
            problems.append(
                document.problem(
                    (*at, "args", index),
                    f"--hf-token puts a token on the command line: {NOT_IN_THE_CATALOG}",
                )
            )
    for key in profile.env:
        if not re.fullmatch(ENV_NAME, key):
            problems.append(document.problem((*at, "env", key), "not an environment name"))
        elif key in RESERVED_ENV:
            problems.append(
                document.problem(
                    (*at, "env", key), f"{key} is set by ctl from the placement; remove it"
                )
            )
        elif key in SECRET_ENV:
            # A token by its name, whatever its value looks like: `hf_` is only how the
            # hub's tokens start today.
            problems.append(
                document.problem(
                    (*at, "env", key),
                    f"{key} is a secret by its name: "
                    + NOT_IN_THE_CATALOG.replace("{env: HF_TOKEN}", f"{{env: {key}}}"),
                )
            )
    if not profile.uses_gpus:
        if profile.gpu_class is not None:
            problems.append(
                problem(
                    "gpu_class",
                    "gpu_class is set but gpus_per_node is 0: "
                    "set gpus_per_node, or remove gpu_class for a CPU profile",
                )
            )
        if profile.tensor_parallel is not None or profile.pipeline_parallel != 1:
            key = "tensor_parallel" if profile.tensor_parallel is not None else "pipeline_parallel"
            problems.append(problem(key, "a CPU profile (gpus_per_node 0) has no parallelism"))
        if profile.nodes > 1:
            problems.append(
                problem("nodes", "a CPU profile runs on one node; multi-node needs GPUs")
            )
        if profile.gpu_memory_gb is not None:
            problems.append(
                problem(
                    "gpu_memory_gb",
                    "gpu_memory_gb is set but gpus_per_node is 0: a CPU profile has no GPU"
                    " memory; use min_memory_gb for the node's",
                )
            )
        return problems
    if profile.gpu_class is None:
        problems.append(
            document.problem(
                at, f"a GPU profile (gpus_per_node {profile.gpus_per_node}) needs a gpu_class"
            )
        )
    tp, pp = profile.tp, profile.pipeline_parallel
    if tp * pp != profile.total_gpus:
        key = "tensor_parallel" if profile.tensor_parallel is not None else "pipeline_parallel"
        problems.append(
            problem(
                key,
                f"tensor_parallel × pipeline_parallel = {tp} × {pp} = {tp * pp}, "
                f"but gpus_per_node × nodes = {profile.gpus_per_node} × {profile.nodes} "
                f"= {profile.total_gpus}",
            )
        )
    elif profile.gpus_per_node % profile.nvlink_group or tp % profile.nvlink_group:
        problems.append(
            problem(
                "tensor_parallel",
                f"tensor_parallel {tp} does not split evenly over "
                f"{profile.gpus_per_node} GPUs per node",
            )
        )
    if profile.nodes > 1 and profile.engine not in MULTI_NODE_ENGINES:
        engines = " or ".join(sorted(MULTI_NODE_ENGINES))
        problems.append(
            problem(
                "nodes",
                f"{profile.engine} runs on one node; "
                f"a {profile.nodes}-node profile needs {engines}",
            )
        )
    return problems


def _collect_aliases(
    document: YamlDocument, parsed: CatalogFile
) -> tuple[dict[str, str], list[InputProblem]]:
    aliases: dict[str, str] = {}
    problems: list[InputProblem] = []
    for name, model in parsed.models.items():
        for index, alias in enumerate(model.aliases):
            at = ("models", name, "aliases", index)
            if alias in parsed.models:
                problems.append(document.problem(at, f"alias '{alias}' is the name of a model"))
            elif alias in aliases:
                problems.append(
                    document.problem(
                        at, f"alias '{alias}' is already an alias of '{aliases[alias]}'"
                    )
                )
            elif (problem := _name_problem("an alias", alias)) is not None:
                problems.append(document.problem(at, problem))
            else:
                aliases[alias] = name
    return aliases, problems


def _resolve_fallbacks(
    document: YamlDocument, parsed: CatalogFile, aliases: dict[str, str]
) -> tuple[dict[str, tuple[str, ...]], list[InputProblem]]:
    resolved: dict[str, tuple[str, ...]] = {}
    problems: list[InputProblem] = []
    known = [*parsed.models, *aliases]
    for name, model in parsed.models.items():
        targets: list[str] = []
        for index, fallback in enumerate(model.fallbacks):
            at = ("models", name, "fallbacks", index)
            target = fallback if fallback in parsed.models else aliases.get(fallback)
            if target is None:
                problems.append(
                    document.problem(
                        at, f"'{fallback}' is not a model or alias{near_miss(fallback, known)}"
                    )
                )
            elif target == name:
                problems.append(document.problem(at, f"'{fallback}' is this model itself"))
            elif target in targets:
                problems.append(document.problem(at, f"'{fallback}' ({target}) is listed twice"))
            else:
                targets.append(target)
        resolved[name] = tuple(targets)
    if not problems:
        problems += _cycles(document, resolved)
    return resolved, problems


def _cycles(document: YamlDocument, graph: dict[str, tuple[str, ...]]) -> list[InputProblem]:
    """A fallback cycle sends a request around forever when every model in it is down."""
    problems: list[InputProblem] = []
    reported: set[frozenset[str]] = set()
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycle = [*trail[trail.index(name) :], name]
            members = frozenset(cycle)
            if members not in reported:
                reported.add(members)
                first = cycle[0]
                index = graph[first].index(cycle[1])
                problems.append(
                    document.problem(
                        ("models", first, "fallbacks", index),
                        "fallbacks form a cycle: " + " → ".join(cycle),
                    )
                )
            return
        if name in done:
            return
        for target in graph[name]:
            visit(target, [*trail, name])
        done.add(name)

    for name in graph:
        visit(name, [])
    return problems
