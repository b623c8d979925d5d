"""Compose-style anchors: a top-level key starting with `x-` is a home for YAML anchors
(`x-vllm: &vllm {...}`, merged with `<<: *vllm`), read for its merges and otherwise ignored;
any other unknown top-level key is still a typo, refused at its file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cli.catalog.load import parse_catalog
from tests.unit.catalog.test_load import errors_of, load
from tests.unit.common.test_yamlsource import alias_bomb

ANCHORED = """\
    x-vllm: &vllm
      engine: vllm
      gpu_class: H100
      drain_seconds: 60
    x-notes: anything an operator keeps here
    models:
      coder:
        source: hf://org/coder
        profiles:
          - <<: *vllm
            name: h100x2
            priority: 100
            gpus_per_node: 2
          - <<: *vllm
            name: h100
            priority: 50
            gpus_per_node: 1
            drain_seconds: 5
    """


def test_x_keys_hold_anchors_that_profiles_merge_and_are_otherwise_ignored() -> None:
    catalog = load(ANCHORED)

    assert list(catalog.models) == ["coder"]
    profiles = {profile.name: profile.spec for profile in catalog.models["coder"].profiles}
    assert profiles["h100x2"].engine == "vllm"
    assert profiles["h100x2"].gpu_class == "H100"
    assert profiles["h100x2"].drain_seconds == 60
    assert profiles["h100"].drain_seconds == 5  # the profile's own key wins over the merge


def test_a_typo_of_a_top_level_key_is_still_refused_at_its_line() -> None:
    text = textwrap.dedent(ANCHORED) + "modles: {}\n"

    assert errors_of(text) == ["catalog.yaml:19: unknown key 'modles' (did you mean 'models'?)"]


def test_what_an_x_anchor_brings_into_a_profile_is_checked_where_it_is_merged() -> None:
    text = ANCHORED.replace("drain_seconds: 60", "gpus_per_nod: 2")

    assert any("unknown key 'gpus_per_nod'" in error for error in errors_of(text))


def test_an_alias_bomb_under_an_x_key_is_still_refused() -> None:
    bomb = textwrap.indent(alias_bomb(), "  ")
    text = "x-bomb:\n" + bomb + "models: {}\n"

    assert errors_of(text) == [
        "catalog.yaml:7: its aliases expand to more than 1,000,000 values: refused as an alias bomb"
    ]


def test_a_merge_key_bomb_is_refused_like_any_alias_bomb() -> None:
    # Merge keys expand too: ten levels of mappings each merging the one before ten times.
    lines = ["x-0: &l0 {" + ", ".join(f"k{i}: v" for i in range(10)) + "}"]
    for level in range(1, 8):
        merges = ", ".join(f"p{i}: {{<<: *l{level - 1}}}" for i in range(10))
        lines.append(f"x-{level}: &l{level} {{{merges}}}")
    text = "\n".join(lines) + "\nmodels: {}\n"

    errors = errors_of(text)

    assert len(errors) == 1
    assert errors[0].endswith("refused as an alias bomb")


def test_the_example_in_docs_catalog_md_loads() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "catalog.md").read_text()
    section = docs.split("## Shared settings", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]

    catalog = parse_catalog(example, "docs/catalog.md")

    coder = {profile.name: profile.spec for profile in catalog.models["coder"].profiles}
    assert (coder["h100x2"].engine, coder["h100x2"].drain_seconds) == ("vllm", 60)
    assert coder["h100"].drain_seconds == 5
