"""Catalog loading: what is refused at load, with file, line and key, and what is resolved."""

from __future__ import annotations

import textwrap

import pytest

from cli.catalog.load import Catalog, parse_catalog
from cli.errors import InputError

BASE = """\
models:
  qwen:
    source: hf://Qwen/Qwen2.5-Coder-14B-Instruct
    aliases: [coder]
    fallbacks: [small]
    replicas: {min: 1, max: 2}
    profiles:
      - name: h100x2
        priority: 100
        engine: vllm
        gpu_class: H100
        gpus_per_node: 2
      - name: cpu
        priority: 10
        engine: llama.cpp
        min_memory_gb: 24
  small:
    source: hf://Qwen/Qwen2.5-Coder-7B-Instruct
    aliases: [coder-small]
    profiles:
      - name: cpu
        priority: 10
        engine: llama.cpp
"""


def load(text: str) -> Catalog:
    return parse_catalog(textwrap.dedent(text), "catalog.yaml")


def errors_of(text: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        load(text)
    return [str(problem) for problem in caught.value.problems]


def test_a_valid_catalog_resolves_aliases_and_fallbacks() -> None:
    catalog = load(BASE)
    assert catalog.resolve("coder") == "qwen"
    assert catalog.resolve("coder-small") == "small"
    assert catalog.resolve("nothing") is None
    assert catalog.models["qwen"].fallbacks == ("small",)


def test_profiles_are_ordered_by_priority_highest_first() -> None:
    text = BASE.replace("priority: 100", "priority: 5")
    names = [p.name for p in load(text).models["qwen"].profiles]
    assert names == ["cpu", "h100x2"]


def test_a_profile_inherits_its_models_source() -> None:
    profile = load(BASE).models["qwen"].profiles[0]
    assert profile.source == "hf://Qwen/Qwen2.5-Coder-14B-Instruct"


def test_a_fallback_given_as_an_alias_resolves_to_its_model() -> None:
    text = BASE.replace("fallbacks: [small]", "fallbacks: [coder-small]")
    assert load(text).models["qwen"].fallbacks == ("small",)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "        gpus_per_node: 2\n",
            "        gpus_per_nod: 2\n",
            "catalog.yaml:12: models.qwen.profiles[0]: unknown key 'gpus_per_nod'"
            " (did you mean 'gpus_per_node'?)",
        ),
        (
            "        engine: vllm\n",
            "        engine: vlm\n",
            "catalog.yaml:10: models.qwen.profiles[0].engine: 'vlm' is not one of vllm, sglang,"
            " llama.cpp (did you mean 'vllm'?)",
        ),
        (
            "fallbacks: [small]",
            "fallbacks: [smal]",
            "catalog.yaml:5: models.qwen.fallbacks[0]: 'smal' is not a model or alias"
            " (did you mean 'small'?)",
        ),
        (
            "fallbacks: [small]",
            "fallbacks: [coder]",
            "catalog.yaml:5: models.qwen.fallbacks[0]: 'coder' is this model itself",
        ),
        (
            "replicas: {min: 1, max: 2}",
            "replicas: {min: 3, max: 2}",
            "catalog.yaml:6: models.qwen.replicas.min: min 3 is more than max 2",
        ),
        (
            "aliases: [coder-small]",
            "aliases: [coder]",
            "catalog.yaml:19: models.small.aliases[0]: alias 'coder' is already an alias of 'qwen'",
        ),
        (
            "aliases: [coder-small]",
            "aliases: [qwen]",
            "catalog.yaml:19: models.small.aliases[0]: alias 'qwen' is the name of a model",
        ),
        (
            "        gpus_per_node: 2\n",
            "        gpus_per_node: 2\n        tensor_parallel: 4\n",
            "catalog.yaml:13: models.qwen.profiles[0].tensor_parallel: tensor_parallel ×"
            " pipeline_parallel = 4 × 1 = 4, but gpus_per_node × nodes = 2 × 1 = 2",
        ),
        (
            "        gpu_class: H100\n",
            "",
            "catalog.yaml:8: models.qwen.profiles[0]: a GPU profile (gpus_per_node 2) needs a"
            " gpu_class",
        ),
        (
            "        min_memory_gb: 24\n",
            "        min_memory_gb: 24\n        gpu_class: L4\n",
            "catalog.yaml:17: models.qwen.profiles[1].gpu_class: gpu_class is set but"
            " gpus_per_node is 0: set gpus_per_node, or remove gpu_class for a CPU profile",
        ),
        (
            "        min_memory_gb: 24\n",
            "        min_memory_gb: 24\n        nodes: 2\n",
            "catalog.yaml:17: models.qwen.profiles[1].nodes: a CPU profile runs on one node;"
            " multi-node needs GPUs",
        ),
        (
            "        priority: 10\n        engine: llama.cpp\n        min_memory_gb: 24\n",
            "        priority: 100\n        engine: llama.cpp\n        min_memory_gb: 24\n",
            "catalog.yaml:14: models.qwen.profiles[1].priority: priority 100 is also profile"
            " 'h100x2's; the highest priority that fits wins, so priorities must differ",
        ),
        (
            "    source: hf://Qwen/Qwen2.5-Coder-7B-Instruct\n",
            "",
            "catalog.yaml:20: models.small.profiles[0]: no source: set 'source' on the model or"
            " on this profile",
        ),
        (
            "    source: hf://Qwen/Qwen2.5-Coder-7B-Instruct\n",
            "    source: Qwen/Qwen2.5-Coder-7B-Instruct\n",
            "catalog.yaml:18: models.small.source: 'Qwen/Qwen2.5-Coder-7B-Instruct' is not valid:"
            " expected hf://ORG/NAME, file:///ABSOLUTE/PATH, s3://BUCKET/KEY or https://URL",
        ),
        (
            "    replicas: {min: 1, max: 2}\n",
            "    replicas: {min: 1, max: 2}\n    replicas: {min: 2}\n",
            "catalog.yaml:7: models.qwen.replicas: duplicate key (first written on line 6)",
        ),
        (
            "        priority: 100\n",
            "        priority: high\n",
            "catalog.yaml:9: models.qwen.profiles[0].priority: must be a whole number, not 'high'",
        ),
    ],
)
def test_a_mistake_is_refused_with_file_line_and_key(old: str, new: str, expected: str) -> None:
    assert old in BASE
    assert expected in errors_of(BASE.replace(old, new, 1))


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [("{min: 2, max: 2}", (2, 2)), ("{min: 2}", (2, 2)), ("{min: 0, max: 0}", (0, 0))],
    ids=["min-equals-max", "max-defaults-to-min", "both-zero"],
)
def test_replicas_min_equal_to_max_loads(replicas: str, expected: tuple[int, int]) -> None:
    model = load(BASE.replace("replicas: {min: 1, max: 2}", f"replicas: {replicas}")).models
    assert (model["qwen"].replicas_min, model["qwen"].replicas_max) == expected


def test_replicas_min_one_above_max_is_refused() -> None:
    assert errors_of(BASE.replace("replicas: {min: 1, max: 2}", "replicas: {min: 3, max: 2}")) == [
        "catalog.yaml:6: models.qwen.replicas.min: min 3 is more than max 2"
    ]


@pytest.mark.parametrize(
    "alias",
    ["coder small", "-coder", ".coder", "coder/v2", "cöder"],
    ids=["space", "leading-dash", "leading-dot", "slash", "non-ascii-letter"],
)
def test_an_alias_breaking_the_name_pattern_is_refused(alias: str) -> None:
    assert errors_of(BASE.replace("aliases: [coder]", f"aliases: ['{alias}']")) == [
        "catalog.yaml:4: models.qwen.aliases[0]: an alias uses letters, digits, '.', '_' and '-'"
        " only"
    ]


def test_an_alias_of_letters_digits_dots_underscores_and_dashes_loads() -> None:
    catalog = load(BASE.replace("aliases: [coder]", "aliases: [Coder2.5_x-1]"))
    assert catalog.aliases == {"Coder2.5_x-1": "qwen", "coder-small": "small"}


def test_a_model_name_breaking_the_name_pattern_is_refused() -> None:
    assert errors_of(
        BASE.replace("  small:\n", "  'small model':\n").replace(
            "fallbacks: [small]", "fallbacks: [small model]"
        )
    ) == [
        "catalog.yaml:17: models.small model: a model name uses letters, digits, '.', '_' and '-'"
        " only"
    ]


def test_a_fallback_cycle_is_refused_naming_the_whole_cycle() -> None:
    text = BASE.replace(
        "    aliases: [coder-small]\n", "    aliases: [coder-small]\n    fallbacks: [coder]\n"
    )
    assert errors_of(text) == [
        "catalog.yaml:5: models.qwen.fallbacks[0]: fallbacks form a cycle: qwen → small → qwen"
    ]


def test_a_multi_node_profile_needs_an_engine_that_can_span_nodes() -> None:
    text = BASE.replace(
        "        gpus_per_node: 2\n",
        "        gpus_per_node: 2\n        nodes: 2\n        tensor_parallel: 4\n",
    ).replace("engine: vllm", "engine: llama.cpp")
    assert errors_of(text) == [
        "catalog.yaml:13: models.qwen.profiles[0].nodes: llama.cpp runs on one node; a 2-node"
        " profile needs sglang or vllm"
    ]


def test_tensor_parallel_must_split_evenly_over_a_nodes_gpus() -> None:
    text = BASE.replace(
        "        gpus_per_node: 2\n",
        "        gpus_per_node: 4\n        nodes: 3\n        tensor_parallel: 6\n"
        "        pipeline_parallel: 2\n",
    )
    assert errors_of(text) == [
        "catalog.yaml:14: models.qwen.profiles[0].tensor_parallel: tensor_parallel 6 does not"
        " split evenly over 4 GPUs per node"
    ]


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = BASE.replace("fallbacks: [small]", "fallbacks: [x]").replace(
        "aliases: [coder-small]", "aliases: [coder]"
    )
    assert errors_of(text) == [
        "catalog.yaml:5: models.qwen.fallbacks[0]: 'x' is not a model or alias",
        "catalog.yaml:19: models.small.aliases[0]: alias 'coder' is already an alias of 'qwen'",
    ]


def test_a_schema_error_stops_before_the_cross_key_checks() -> None:
    text = BASE.replace("engine: vllm", "engine: vlm").replace(
        "fallbacks: [small]", "fallbacks: [x]"
    )
    assert errors_of(text) == [
        "catalog.yaml:10: models.qwen.profiles[0].engine: 'vlm' is not one of vllm, sglang,"
        " llama.cpp (did you mean 'vllm'?)"
    ]


def test_invalid_yaml_names_the_line() -> None:
    (error,) = errors_of("models:\n  a: [1,\n")
    assert error.startswith("catalog.yaml:3: invalid YAML: ")
    assert "node content" in error  # libyaml and pure-Python PyYAML word it differently


def test_a_catalog_that_is_not_a_mapping_is_refused() -> None:
    assert errors_of("- a\n- b\n") == [
        "catalog.yaml:1: a catalog is a mapping with the key 'models'"
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "catalog.yaml: the catalog is empty"),
        ("# models:\n#   chat: {}\n", "catalog.yaml: the catalog is empty"),
        ("aliases: {}\n", "catalog.yaml:1: no key 'models': the catalog is empty"),
    ],
    ids=["empty", "comments only", "no models key"],
)
def test_an_empty_catalog_is_refused_lest_reconcile_drain_everything(text: str, said: str) -> None:
    # A file truncated mid-save read as "no models" would stop every replica of the fleet.
    with pytest.raises(InputError) as raised:
        parse_catalog(text, "catalog.yaml")

    (problem,) = raised.value.problems
    assert str(problem).startswith(said)
    assert str(problem).endswith(
        "name its models under 'models' (to run no model at all, and drain every replica,"
        " write `models: {}`)"
    )


def test_no_models_is_said_as_an_empty_models_mapping() -> None:
    assert load("models: {}\n").models == {}


def test_a_node_selector_compares_numbers_and_booleans_as_label_text() -> None:
    text = BASE.replace("node_selector", "x").replace(
        "        min_memory_gb: 24\n",
        "        min_memory_gb: 24\n        node_selector: {gpus: 8, fast: true}\n",
    )
    selector = load(text).models["qwen"].profiles[1].spec.node_selector
    assert selector == {"gpus": "8", "fast": "true"}


def test_an_env_that_would_repin_gpus_is_refused() -> None:
    text = BASE.replace(
        "        min_memory_gb: 24\n",
        "        min_memory_gb: 24\n        env: {CUDA_VISIBLE_DEVICES: '0'}\n",
    )
    assert errors_of(text) == [
        "catalog.yaml:17: models.qwen.profiles[1].env.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES"
        " is set by ctl from the placement; remove it"
    ]
