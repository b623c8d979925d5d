"""The catalog's cross-key refusals, each with the file, line and key an operator needs to
fix it: duplicate profile names, environment names, parallelism on a CPU profile or that
does not add up on a GPU one, fallbacks listed twice, and fallback cycles.

Written against survivors of the mutation run (scripts/mutation) in cli/catalog/load.py:
the checks ran, but no test held the message, the key it points at, or every cycle.
"""

from __future__ import annotations

import textwrap

import pytest

from cli.catalog.load import Catalog, parse_catalog
from cli.errors import InputError


def load(text: str) -> Catalog:
    return parse_catalog(textwrap.dedent(text), "catalog.yaml")


def errors_of(text: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        load(text)
    return [str(problem) for problem in caught.value.problems]


def test_a_loaded_catalog_remembers_the_file_it_came_from() -> None:
    catalog = load(
        """\
        models:
          m:
            source: hf://org/m
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp}
        """
    )
    assert catalog.file == "catalog.yaml"


def test_a_profile_name_given_twice_in_a_model_points_at_the_first_one() -> None:
    text = """\
        models:
          m:
            source: hf://org/m
            profiles:
              - {name: x1, priority: 3, engine: vllm, gpu_class: H100, gpus_per_node: 1}
              - {name: x1, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 1}
              - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
        """
    # The third names the first, not the second: the first of a name is the one it repeats.
    assert errors_of(text) == [
        "catalog.yaml:6: models.m.profiles[1].name: profile 'x1' is already profiles[0]",
        "catalog.yaml:7: models.m.profiles[2].name: profile 'x1' is already profiles[0]",
    ]


def test_the_same_profile_name_in_two_models_is_fine() -> None:
    catalog = load(
        """\
        models:
          a:
            source: hf://org/a
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp}
          b:
            source: hf://org/b
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp}
        """
    )
    assert [p.key for model in catalog.models.values() for p in model.profiles] == [
        "a/cpu",
        "b/cpu",
    ]


def test_an_env_key_that_is_no_environment_name_is_refused_at_its_own_line() -> None:
    text = """\
        models:
          m:
            source: hf://org/m
            profiles:
              - name: cpu
                priority: 1
                engine: llama.cpp
                env:
                  1BAD: x
                  GOOD_1: y
                  BAD-NAME: z
        """
    assert errors_of(text) == [
        "catalog.yaml:9: models.m.profiles[0].env.1BAD: not an environment name",
        "catalog.yaml:11: models.m.profiles[0].env.BAD-NAME: not an environment name",
    ]


def test_env_names_of_letters_digits_and_underscores_load() -> None:
    catalog = load(
        """\
        models:
          m:
            source: hf://org/m
            profiles:
              - name: cpu
                priority: 1
                engine: llama.cpp
                env: {_PRIVATE: '1', HF_HOME: /models, lower_case9: 'yes'}
        """
    )
    (profile,) = catalog.models["m"].profiles
    assert profile.spec.env == {"_PRIVATE": "1", "HF_HOME": "/models", "lower_case9": "yes"}


CPU = """\
    models:
      m:
        source: hf://org/m
        profiles:
          - name: cpu
            priority: 1
            engine: llama.cpp
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "        pipeline_parallel: 2\n",
            "catalog.yaml:8: models.m.profiles[0].pipeline_parallel: a CPU profile"
            " (gpus_per_node 0) has no parallelism",
        ),
        (
            "        tensor_parallel: 2\n",
            "catalog.yaml:8: models.m.profiles[0].tensor_parallel: a CPU profile"
            " (gpus_per_node 0) has no parallelism",
        ),
        (
            "        tensor_parallel: 2\n        pipeline_parallel: 2\n",
            "catalog.yaml:8: models.m.profiles[0].tensor_parallel: a CPU profile"
            " (gpus_per_node 0) has no parallelism",
        ),
    ],
    ids=["pipeline-only", "tensor-only", "both-names-tensor"],
)
def test_parallelism_on_a_cpu_profile_is_refused_at_the_key_that_sets_it(
    extra: str, expected: str
) -> None:
    assert errors_of(CPU + textwrap.indent(extra, "    ")) == [expected]


def test_gpu_memory_on_a_cpu_profile_is_refused_at_its_key() -> None:
    assert errors_of(CPU + "            gpu_memory_gb: 80\n") == [
        "catalog.yaml:8: models.m.profiles[0].gpu_memory_gb: gpu_memory_gb is set but"
        " gpus_per_node is 0: a CPU profile has no GPU memory; use min_memory_gb for the node's"
    ]


def test_a_gpu_profile_asks_gpu_memory_in_gb_and_no_less_than_a_byte() -> None:
    gpu = CPU.replace("engine: llama.cpp", "engine: vllm\n            gpu_class: A100\n"
                      "            gpus_per_node: 1")  # fmt: skip
    (profile,) = load(gpu + "            gpu_memory_gb: 80\n").models["m"].profiles
    assert profile.spec.gpu_memory_gb == 80
    (problem,) = errors_of(gpu + "            gpu_memory_gb: 0\n")
    assert problem.startswith("catalog.yaml:10: models.m.profiles[0].gpu_memory_gb: ")


def test_a_cpu_profile_with_the_default_pipeline_of_one_loads() -> None:
    (profile,) = load(CPU + "            pipeline_parallel: 1\n").models["m"].profiles
    assert (profile.spec.gpus_per_node, profile.spec.pipeline_parallel) == (0, 1)


def test_a_pipeline_that_does_not_cover_the_gpus_is_refused_at_pipeline_parallel() -> None:
    # No tensor_parallel written: the product is wrong because of pipeline_parallel.
    text = """\
        models:
          m:
            source: hf://org/m
            profiles:
              - name: gpu
                priority: 1
                engine: vllm
                gpu_class: H100
                gpus_per_node: 2
                pipeline_parallel: 3
        """
    assert errors_of(text) == [
        "catalog.yaml:10: models.m.profiles[0].pipeline_parallel: tensor_parallel ×"
        " pipeline_parallel = 2 × 3 = 6, but gpus_per_node × nodes = 2 × 1 = 2"
    ]


MODELS_ABC = """\
    models:
      a:
        source: hf://org/a
        fallbacks: {a}
        profiles:
          - {{name: cpu, priority: 1, engine: llama.cpp}}
      b:
        source: hf://org/b
        aliases: [bee]
        fallbacks: {b}
        profiles:
          - {{name: cpu, priority: 1, engine: llama.cpp}}
      c:
        source: hf://org/c
        fallbacks: {c}
        profiles:
          - {{name: cpu, priority: 1, engine: llama.cpp}}
"""


def abc(a: str = "[]", b: str = "[]", c: str = "[]") -> str:
    return MODELS_ABC.format(a=a, b=b, c=c)


def test_a_fallback_listed_twice_is_refused_even_through_an_alias() -> None:
    assert errors_of(abc(a="[b, c, bee]")) == [
        "catalog.yaml:4: models.a.fallbacks[2]: 'bee' (b) is listed twice"
    ]


def test_two_cycles_through_one_model_are_both_reported() -> None:
    # a → b → c → a, and b → c → b inside it: two loops a request can go round.
    assert errors_of(abc(a="[b]", b="[c]", c="[a, b]")) == [
        "catalog.yaml:4: models.a.fallbacks[0]: fallbacks form a cycle: a → b → c → a",
        "catalog.yaml:10: models.b.fallbacks[0]: fallbacks form a cycle: b → c → b",
    ]


def test_fallbacks_without_a_cycle_load_in_the_catalogs_order() -> None:
    catalog = load(abc(a="[c, bee]", b="[c]"))
    assert {name: model.fallbacks for name, model in catalog.models.items()} == {
        "a": ("c", "b"),
        "b": ("c",),
        "c": (),
    }


def test_a_merge_key_with_an_override_loads_and_a_real_duplicate_is_still_refused() -> None:
    catalog = load(
        """\
        models:
          m:
            source: hf://org/m
            profiles:
              - &base {name: big, priority: 2, engine: vllm, gpu_class: H100, gpus_per_node: 2}
              - <<: *base
                name: small
                priority: 1
                gpus_per_node: 1
        """
    )
    assert [
        (p.name, p.spec.priority, p.spec.gpus_per_node) for p in catalog.models["m"].profiles
    ] == [
        ("big", 2, 2),
        ("small", 1, 1),
    ]
    assert errors_of(
        """\
        models:
          m:
            source: hf://org/m
            source: hf://org/n
            profiles: [{name: cpu, priority: 1, engine: llama.cpp}]
        """
    ) == ["catalog.yaml:4: models.m.source: duplicate key (first written on line 3)"]
