"""Properties of the catalog loader (cli/catalog/load.py) on generated catalogs.

1. Round trip: a generated valid catalog (models, aliases, fallbacks, replicas with
   min == max, max left out and min < max, profiles with every engine, GPU and CPU, one
   and several nodes, tokens by reference on models and profiles) dumped to YAML loads;
   the loaded catalog dumped again gives the same YAML, which loads to an equal catalog.
2. Refusal: the same catalogs with one defect — replicas.min above replicas.max, an alias
   that breaks the name pattern, a fallback cycle, tensor_parallel × pipeline_parallel
   ≠ gpus_per_node × nodes — are refused with exactly that one problem: the file, the
   line of the key (found here by walking PyYAML's own node tree) and the key path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.catalog.load import RESERVED_ENV, Catalog, parse_catalog
from cli.catalog.schema import SECRET_ENV, TOKEN_SCHEMES
from cli.errors import InputError, KeyPath

PROPERTY_SETTINGS = settings(max_examples=150)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def to_yaml(data: dict[str, Any]) -> str:
    text: str = yaml.dump(data, Dumper=DUMPER, sort_keys=False, allow_unicode=True)
    return text


FILE = "catalogs/fleet.yaml"
NAME = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,10}\Z")
ENGINES = ("vllm", "sglang", "llama.cpp")
SOURCES = ("hf://org/name", "file:///models/m.gguf")  # a model's: every engine reads these
# A profile's own source: one its engine reads (vLLM and SGLang no URL, llama.cpp no s3://).
READABLE = {
    "vllm": (*SOURCES, "s3://bucket/key"),
    "sglang": (*SOURCES, "s3://bucket/key"),
    "llama.cpp": (*SOURCES, "https://host/m"),
}
# Extra arguments each engine's parser has (cli/engines/engine_flags), and two non-options.
ARGS = {
    "vllm": ("--enforce-eager", "--seed=1", "a b", "$HOME"),
    "sglang": ("--trust-remote-code", "--random-seed=1", "a b", "$HOME"),
    "llama.cpp": ("--jinja", "--metrics", "a b", "$HOME"),  # no --seed=1: it takes no `=`
}


def parallelisms(gpus_per_node: int, nodes: int) -> list[tuple[int, int]]:
    """Every (tp, pp) with tp × pp = the GPUs and tp splitting evenly over a node's."""
    total = gpus_per_node * nodes
    found = []
    for tp in range(1, total + 1):
        group = min(tp, gpus_per_node)
        if total % tp == 0 and gpus_per_node % group == 0 and tp % group == 0:
            found.append((tp, total // tp))
    return found


@st.composite
def profile_dicts(draw: st.DrawFn, name: str, priority: int) -> dict[str, Any]:
    gpu = draw(st.integers(0, 3)) > 0  # a GPU profile, mostly; vLLM and SGLang need GPUs
    engine = draw(st.sampled_from(ENGINES if gpu else ("llama.cpp",)))
    profile: dict[str, Any] = {"name": name, "priority": priority, "engine": engine}
    if draw(st.booleans()):
        profile["source"] = draw(st.sampled_from(READABLE[engine]))
    if gpu:
        gpus = draw(st.sampled_from((1, 2, 4, 8)))
        nodes = 1 if engine == "llama.cpp" else draw(st.sampled_from((1, 1, 2, 3)))
        profile["gpu_class"] = draw(st.sampled_from(("H100", "A100", "L40S")))
        profile["gpus_per_node"] = gpus
        if nodes > 1:
            profile["nodes"] = nodes
        tp, pp = draw(st.sampled_from(parallelisms(gpus, nodes)))
        if tp != gpus or draw(st.booleans()):
            profile["tensor_parallel"] = tp
        if pp != 1 or draw(st.booleans()):
            profile["pipeline_parallel"] = pp
    elif engine == "llama.cpp" and draw(st.booleans()):
        profile["threads"] = draw(st.integers(1, 64))
    optional: dict[str, st.SearchStrategy[Any]] = {
        "min_memory_gb": st.sampled_from((0.5, 16, 24.5, 512)),
        "context_length": st.integers(1, 131072),
        "drain_seconds": st.integers(0, 600),
        "node_selector": st.just({"role": "coding"}) | st.just({"zone": "a", "gpus": "8"}),
        "args": st.lists(st.sampled_from(ARGS[engine])),
        "env": st.dictionaries(
            st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"),
            # No control character: a catalog holding one is refused (cli/names.py).
            st.text(st.characters(exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp")), max_size=8),
        ),
    }
    for key, values in optional.items():
        if draw(st.integers(0, 3)) == 0:
            value = draw(values)
            if key == "env":
                value = {k: v for k, v in value.items() if k not in RESERVED_ENV | SECRET_ENV}
            profile[key] = value
    return profile


TOKEN_REFS = st.sampled_from(
    (
        {"env": "HF_TOKEN"},
        {"env": "_T2_TOKEN"},
        {"file": "~/.hf-token"},
        {"file": "secrets/hf token"},
        {"var": "vault_hf_token"},
    )
).map(dict)  # a mapping of its own each time: YAML would write a shared one as an alias


@dataclass(frozen=True)
class Generated:
    data: dict[str, Any]  # the catalog as YAML data

    @property
    def text(self) -> str:
        return to_yaml(self.data)


@st.composite
def valid_catalogs(draw: st.DrawFn) -> Generated:
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique_by=str.lower))
    taken = set(names)
    aliases: dict[str, list[str]] = {}
    for name in names:
        mine = [a for a in draw(st.lists(NAME, max_size=2)) if a not in taken]
        taken |= set(mine)
        aliases[name] = list(dict.fromkeys(mine))
    models: dict[str, Any] = {}
    for index, name in enumerate(names):
        model: dict[str, Any] = {}
        profiles = []
        priorities = draw(st.lists(st.integers(-5, 200), min_size=1, max_size=3, unique=True))
        profile_names = draw(
            st.lists(NAME, min_size=len(priorities), max_size=len(priorities), unique=True)
        )
        for profile_name, priority in zip(profile_names, priorities, strict=True):
            profiles.append(draw(profile_dicts(profile_name, priority)))
        if any("source" not in p for p in profiles) or draw(st.booleans()):
            model["source"] = draw(st.sampled_from(SOURCES))
        # Tokens where a source takes one: a profile's own, and its model's for the rest.
        for profile in profiles:
            source = profile.get("source", model.get("source", ""))
            if source.startswith(TOKEN_SCHEMES) and draw(st.integers(0, 3)) == 0:
                profile["token"] = draw(TOKEN_REFS)
        inheriting = [
            p for p in profiles if "token" not in p and p.get("source", model.get("source", ""))
        ]
        if any(
            p.get("source", model.get("source", "")).startswith(TOKEN_SCHEMES) for p in inheriting
        ) and draw(st.booleans()):
            model["token"] = draw(TOKEN_REFS)
        if aliases[name]:
            model["aliases"] = aliases[name]
        # Fallbacks only to later models: no cycle. By name or by alias.
        later = names[index + 1 :]
        targets = draw(st.lists(st.sampled_from(later), unique=True)) if later else []
        if targets:
            model["fallbacks"] = [draw(st.sampled_from([t, *aliases[t]])) for t in targets]
        shape = draw(st.sampled_from(("default", "min", "min==max", "min<max")))
        low = draw(st.integers(0, 4))
        if shape == "min":
            model["replicas"] = {"min": low}  # max left out: max = min
        elif shape == "min==max":
            model["replicas"] = {"min": low, "max": low}
        elif shape == "min<max":
            model["replicas"] = {"min": low, "max": low + draw(st.integers(1, 3))}
        model["profiles"] = profiles
        models[name] = model
    return Generated({"models": models})


def dumped(catalog: Catalog) -> dict[str, Any]:
    """A loaded catalog as YAML data again."""
    models: dict[str, Any] = {}
    for name, model in catalog.models.items():
        shared = [p.source for p in model.profiles if p.spec.source is None]
        data: dict[str, Any] = {}
        if shared:
            data["source"] = shared[0]
        # The model's own token is the one its profiles got from their model.
        inherited = [
            p.token.ref
            for p in model.profiles
            if p.token is not None and p.token.path == ("models", name, "token")
        ]
        if inherited:
            data["token"] = inherited[0].model_dump(exclude_none=True)
        if model.aliases:
            data["aliases"] = list(model.aliases)
        if model.fallbacks:
            data["fallbacks"] = list(model.fallbacks)
        data["replicas"] = {"min": model.replicas_min, "max": model.replicas_max}
        data["profiles"] = [
            p.spec.model_dump(mode="json", exclude_defaults=True) for p in model.profiles
        ]
        models[name] = data
    return {"models": models}


def features(data: dict[str, Any]) -> set[str]:
    found = set()
    for model in data["models"].values():
        replicas = model.get("replicas", {})
        if "max" in replicas and replicas["max"] == replicas["min"]:
            found.add("min == max")
        if "max" in replicas and replicas["max"] > replicas["min"]:
            found.add("min < max")
        if "aliases" in model:
            found.add("aliases")
        if "fallbacks" in model:
            found.add("fallbacks")
        for profile in model["profiles"]:
            found.add(f"engine {profile['engine']}")
            if profile.get("nodes", 1) > 1:
                found.add("multi-node profile")
            if "gpus_per_node" not in profile:
                found.add("CPU profile")
            if "token" in profile:
                found.add("profile token")
        if "token" in model:
            found.add("model token")
    return found


@PROPERTY_SETTINGS
@given(valid_catalogs())
def test_a_valid_catalog_dumped_and_loaded_again_is_the_same_catalog(
    generated: Generated,
) -> None:
    for feature in sorted(features(generated.data)):
        event(feature)
    first = parse_catalog(generated.text, FILE)
    assert list(first.models) == list(generated.data["models"])
    again = to_yaml(dumped(first))
    second = parse_catalog(again, FILE)
    assert second == first
    assert to_yaml(dumped(second)) == again
    for name, model in generated.data["models"].items():
        loaded = first.models[name]
        replicas = model.get("replicas", {"min": 1})
        assert loaded.replicas_min == replicas["min"]
        assert loaded.replicas_max == replicas.get("max", replicas["min"])
        for alias in model.get("aliases", []):
            assert first.resolve(alias) == name
        # Each profile's token is its own, else its model's, where its source takes one.
        for written in model["profiles"]:
            profile = next(p for p in loaded.profiles if p.name == written["name"])
            expected = written.get("token", model.get("token"))
            if not profile.source.startswith(TOKEN_SCHEMES):
                expected = None
            got = profile.token
            assert (got.ref.model_dump(exclude_none=True) if got else None) == expected


def line_of(text: str, path: KeyPath) -> int:
    """The 1-based line of the key at `path` (of the item, for a list index), read from
    PyYAML's pure-Python node tree."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert node is not None
    line = node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            key, node = next((k, v) for k, v in node.value if k.value == part)
            line = key.start_mark.line + 1
        else:
            assert isinstance(node, yaml.SequenceNode) and isinstance(part, int)
            node = node.value[part]
            line = node.start_mark.line + 1
    return line


Defect = tuple[str, KeyPath, str]  # the kind, the key it is at, how the message starts
# A control character is not among them: it is a refusal of its own (cli/names.py).
BAD_ALIASES = ("-leading-dash", ".dot", "has space", "slash/ed", "ünïcode", "a@b", "colon:ed")


@st.composite
def invalid_catalogs(draw: st.DrawFn) -> tuple[Generated, Defect]:
    generated = draw(valid_catalogs())
    models = generated.data["models"]
    names = list(models)
    kind = draw(st.sampled_from(("bounds", "alias", "cycle", "parallelism")))
    if kind == "cycle" and len(names) < 2:
        kind = "bounds"
    if kind == "bounds":
        name = draw(st.sampled_from(names))
        high = draw(st.integers(0, 3))
        low = high + draw(st.integers(1, 3))
        models[name]["replicas"] = {"min": low, "max": high}
        return generated, (
            kind,
            ("models", name, "replicas", "min"),
            f"min {low} is more than max {high}",
        )
    if kind == "alias":
        name = draw(st.sampled_from(names))
        aliases = models[name].setdefault("aliases", [])
        index = draw(st.integers(0, len(aliases)))
        aliases.insert(index, draw(st.sampled_from(BAD_ALIASES)))
        return generated, (
            kind,
            ("models", name, "aliases", index),
            "an alias uses letters, digits, '.', '_' and '-' only",
        )
    if kind == "cycle":
        # The valid catalog's fallbacks point forward only; one pointing back closes a loop.
        members = draw(st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True))
        for model in models.values():
            model.pop("fallbacks", None)
        for source, target in zip(members, [*members[1:], members[0]], strict=True):
            models[source]["fallbacks"] = [target]
        order = {name: i for i, name in enumerate(names)}
        first = min(members, key=order.__getitem__)  # where the search starts, in file order
        at = members.index(first)
        cycle = [*members[at:], *members[:at], first]
        return generated, (
            kind,
            ("models", first, "fallbacks", 0),
            "fallbacks form a cycle: " + " → ".join(cycle),
        )
    name = draw(st.sampled_from(names))
    profiles = models[name]["profiles"]
    index = draw(st.integers(0, len(profiles) - 1))
    profile = profiles[index]
    gpus = draw(st.sampled_from((1, 2, 4, 8)))
    nodes = 1 if profile["engine"] == "llama.cpp" else draw(st.sampled_from((1, 2)))
    tp = draw(st.integers(1, 16))
    pp = draw(st.integers(1, 4).filter(lambda pp: tp * pp != gpus * nodes))
    profile.update(gpu_class="H100", gpus_per_node=gpus, tensor_parallel=tp)
    profile.pop("threads", None)
    profile["pipeline_parallel"] = pp
    if nodes > 1:
        profile["nodes"] = nodes
    else:
        profile.pop("nodes", None)
    return generated, (
        kind,
        ("models", name, "profiles", index, "tensor_parallel"),
        f"tensor_parallel × pipeline_parallel = {tp} × {pp} = {tp * pp}, "
        f"but gpus_per_node × nodes = {gpus} × {nodes} = {gpus * nodes}",
    )


@PROPERTY_SETTINGS
@given(invalid_catalogs())
def test_a_catalog_with_one_defect_is_refused_with_its_file_line_and_key(
    broken: tuple[Generated, Defect],
) -> None:
    generated, (kind, path, message) = broken
    event(f"defect: {kind}")
    text = generated.text
    with pytest.raises(InputError) as raised:
        parse_catalog(text, FILE)
    problems = [(p.file, p.line, p.path, p.message) for p in raised.value.problems]
    assert problems == [(FILE, line_of(text, path), path, message)], text


CPU = {"name": "cpu", "priority": 1, "engine": "llama.cpp"}


@pytest.mark.parametrize(
    "data",
    [
        {"models": {"qwen": {"source": "hf://o/n", "aliases": ["q\n"], "profiles": [CPU]}}},
        {"models": {"qwen\n": {"source": "hf://o/n", "profiles": [CPU]}}},
    ],
    ids=["alias", "model-name"],
)
def test_a_name_or_alias_ending_in_a_newline_is_refused(data: dict[str, Any]) -> None:
    # The pattern's `$` also matches just before a trailing newline: cli/catalog/load.py
    # checks names with re.fullmatch, so "qwen\n" (a quoted YAML string) is refused.
    with pytest.raises(InputError):
        parse_catalog(yaml.safe_dump(data), FILE)


def test_the_generators_reach_every_case_often_enough() -> None:
    seen: dict[str, int] = {}
    total = 0

    @settings(max_examples=100)
    @given(valid_catalogs())
    def collect(generated: Generated) -> None:
        nonlocal total
        total += 1
        for feature in features(generated.data):
            seen[feature] = seen.get(feature, 0) + 1

    collect()
    wanted = (
        "min == max", "min < max", "aliases", "fallbacks", "engine vllm", "engine sglang",
        "engine llama.cpp", "multi-node profile", "CPU profile", "profile token",
        "model token",
    )  # fmt: skip
    low = {f: seen.get(f, 0) / total for f in wanted if seen.get(f, 0) < 0.10 * total}
    assert not low, f"reached too rarely: {low}"
