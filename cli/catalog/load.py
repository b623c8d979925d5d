"""Load a catalog: YAML → schema → cross-key checks → a resolved Catalog.

Everything that would fail at run time is refused here instead, with file, line and key:
a fallback that names nothing fails during the outage it was written for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from cli.catalog.schema import MULTI_NODE_ENGINES, NAME_PATTERN, CatalogFile, Model, Profile
from cli.errors import InputError, InputProblem, near_miss
from cli.schemaerrors import problems_from_validation
from cli.shards.flags import accepted_options, check_options, versions_with_data
from cli.shards.specs import Rank, engine_spec, version_tuple
from cli.yamlsource import MAX_SOURCE_BYTES, YamlDocument, decode_source, parse_yaml

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EMPTY_CATALOG = (
    "the catalog is empty: name its models under 'models' (to run no model at all, and"
    " drain every replica, write `models: {}`)"
)
# Set per shard from where it was placed; a catalog value would send it to other GPUs.
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_IB_HCA"})


@dataclass(frozen=True)
class CatalogProfile:
    """A profile with its model's defaults applied."""

    model: str
    spec: Profile
    source: str

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
        with path.open("rb") as file:  # no more than the parser would take
            data = file.read(MAX_SOURCE_BYTES + 1)
    except OSError as error:
        raise InputError.single(str(path), None, (), f"cannot read: {error.strerror}") from None
    return parse_catalog(decode_source(data, str(path)), str(path))


def parse_catalog(text: str, file: str) -> Catalog:
    """The catalog in `text`. An empty one is refused: a file truncated mid-save, read as
    "no models", would have reconcile drain every replica of the fleet; running nothing
    is said as `models: {}`."""
    document = parse_yaml(text, file)
    data = document.data
    if data is None:
        raise InputError([document.problem((), EMPTY_CATALOG)])
    if not isinstance(data, dict):
        raise InputError([document.problem((), "a catalog is a mapping with the key 'models'")])
    if "models" not in data:
        raise InputError([document.problem((), f"no key 'models': {EMPTY_CATALOG}")])
    try:
        parsed = CatalogFile.model_validate(data)
    except ValidationError as error:
        raise InputError(problems_from_validation(error, CatalogFile, document)) from None
    problems: list[InputProblem] = []
    for name, model in parsed.models.items():
        problems += _check_model(document, name, model)
    aliases, alias_problems = _collect_aliases(document, parsed)
    problems += alias_problems
    fallbacks, fallback_problems = _resolve_fallbacks(document, parsed, aliases)
    problems += fallback_problems
    if problems:
        raise InputError(problems)
    models = {
        name: CatalogModel(
            name=name,
            aliases=model.aliases,
            fallbacks=fallbacks[name],
            replicas_min=model.replicas.min,
            replicas_max=model.replicas.upper,
            profiles=tuple(
                CatalogProfile(name, profile, profile.source or model.source or "")
                for profile in sorted(model.profiles, key=lambda p: -p.priority)
            ),
        )
        for name, model in parsed.models.items()
    }
    return Catalog(file=file, models=models, aliases=aliases)


def _check_model(document: YamlDocument, name: str, model: Model) -> list[InputProblem]:
    here = ("models", name)
    problems: list[InputProblem] = []
    if not re.fullmatch(NAME_PATTERN, name):
        problems.append(
            document.problem(here, "a model name uses letters, digits, '.', '_' and '-' only")
        )
    if model.replicas.max is not None and model.replicas.min > model.replicas.max:
        problems.append(
            document.problem(
                (*here, "replicas", "min"),
                f"min {model.replicas.min} is more than max {model.replicas.max}",
            )
        )
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
    return problems


def _check_engine(
    document: YamlDocument,
    at: tuple[str | int, ...],
    model: str,
    profile: Profile,
    source: str | None,
) -> list[InputProblem]:
    """What the profile's engine (its spec, cli/shards/specs.py) cannot do, and every option
    of its command line — ctl's and the profile's `args` — that the engine release's own
    parser does not have (the data of scripts/engine_flags.py)."""
    spec = engine_spec(profile.engine)
    problems: list[InputProblem] = []
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
    for key in profile.env:
        if not re.match(ENV_NAME, key):
            problems.append(document.problem((*at, "env", key), "not an environment name"))
        elif key in RESERVED_ENV:
            problems.append(
                document.problem(
                    (*at, "env", key), f"{key} is set by ctl from the placement; remove it"
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
            elif not re.fullmatch(NAME_PATTERN, alias):
                problems.append(
                    document.problem(at, "an alias uses letters, digits, '.', '_' and '-' only")
                )
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
