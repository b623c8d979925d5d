"""GPU model names as nvidia-smi prints them → the class a catalog profile asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.facts.gpuclass import BUILTIN_CLASSES, gpu_class

DOCS = Path(__file__).parents[3] / "docs" / "facts.md"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Hopper: every H100 form factor is one class; GH200 and H200 are not H100 or each other.
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H100 NVL", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA H800", "H800"),
        ("NVIDIA H20", "H20"),
        # Blackwell: GB200 is not B200.
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        # Ampere: A100 is not A10, A10G is not A10.
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA A40", "A40"),
        # Ada: L40S is neither L40 nor L4.
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L4", "L4"),
        # Older data centre parts, some still named "Tesla".
        ("Tesla V100-SXM2-32GB", "V100"),
        ("Tesla V100-PCIE-16GB", "V100"),
        ("Tesla V100S-PCIE-32GB", "V100S"),
        ("Tesla T4", "T4"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("Tesla P40", "P40"),
        # Workstation and GeForce.
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000Ada"),
        ("NVIDIA RTX A6000", "A6000"),
        ("NVIDIA RTX A5000", "A5000"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "RTX4070TiSUPER"),
    ],
)
def test_a_known_model_name_maps_to_its_class(name: str, expected: str) -> None:
    assert gpu_class(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("AMD Instinct MI300X", "AMDInstinctMI300X"),
        ("AMD Instinct MI250X/MI250", "AMDInstinctMI250X/MI250"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "GeForceRTX4090LaptopGPU"),
        ("NVIDIA GeForce RTX 4090 D", "GeForceRTX4090D"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000BlackwellServerEdition"),
        ("Quadro RTX 8000", "QuadroRTX8000"),
        ("Tesla K80", "K80"),
        ("NVIDIA T400", "T400"),
        ("GeForce GTX TITAN X", "GeForceGTXTITANX"),
    ],
)
def test_an_unknown_name_becomes_its_own_class_without_vendor_prefix_or_spaces(
    name: str, expected: str
) -> None:
    assert gpu_class(name) == expected


def test_an_unknown_name_is_never_silently_a_known_class() -> None:
    known = {template for _, template in BUILTIN_CLASSES if "\\" not in template}
    unknown = ["AMD Instinct MI300X", "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA T400"]

    assert {gpu_class(name) for name in unknown}.isdisjoint(known)


def test_surrounding_whitespace_in_a_name_is_ignored() -> None:
    assert gpu_class("  NVIDIA L40S \n") == "L40S"


def test_an_empty_name_has_no_class() -> None:
    with pytest.raises(ValueError, match="empty model name"):
        gpu_class("   ")


# --------------------------------------------------------------------------- overrides


def test_an_override_wins_over_the_builtin_table() -> None:
    overrides = {"NVIDIA H100 80GB HBM3": "H100-80"}

    assert gpu_class("NVIDIA H100 80GB HBM3", overrides) == "H100-80"
    assert gpu_class("NVIDIA H100 NVL", overrides) == "H100"


def test_an_override_glob_matches_many_names() -> None:
    overrides = {"NVIDIA A100*80GB*": "A100-80"}

    assert gpu_class("NVIDIA A100-SXM4-80GB", overrides) == "A100-80"
    assert gpu_class("NVIDIA A100 80GB PCIe", overrides) == "A100-80"
    assert gpu_class("NVIDIA A100-SXM4-40GB", overrides) == "A100"


def test_an_exact_override_wins_over_a_glob_written_before_it() -> None:
    overrides = {"NVIDIA H100*": "H100-any", "NVIDIA H100 NVL": "H100-NVL"}

    assert gpu_class("NVIDIA H100 NVL", overrides) == "H100-NVL"
    assert gpu_class("NVIDIA H100 PCIe", overrides) == "H100-any"


def test_the_first_matching_glob_in_the_order_written_wins() -> None:
    first_wide = {"NVIDIA *": "any", "NVIDIA L4*": "ada"}
    first_narrow = {"NVIDIA L4*": "ada", "NVIDIA *": "any"}

    assert gpu_class("NVIDIA L40S", first_wide) == "any"
    assert gpu_class("NVIDIA L40S", first_narrow) == "ada"


def test_override_globs_are_case_sensitive() -> None:
    assert gpu_class("NVIDIA L40S", {"nvidia l40s": "lower"}) == "L40S"


def test_an_override_that_matches_nothing_leaves_the_builtin_class() -> None:
    assert gpu_class("Tesla T4", {"NVIDIA H100*": "H100-80"}) == "T4"


def test_an_empty_override_class_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"gpu_classes\['NVIDIA L4\*'\] is empty"):
        gpu_class("NVIDIA L40S", {"NVIDIA L4*": " "})


# --------------------------------------------------------------------------- the table


def test_the_table_tries_a_longer_model_before_one_it_contains() -> None:
    order = [template for _, template in BUILTIN_CLASSES]

    for longer, shorter in [
        ("GB200", "B200"),
        ("GH200", "H200"),
        ("L40S", "L40"),
        ("L40", "L4"),
        ("A100", "A10"),
        ("A10G", "A10"),
        ("V100S", "V100"),
    ]:
        assert order.index(longer) < order.index(shorter), (longer, shorter)


def test_every_builtin_class_and_pattern_is_listed_in_the_docs() -> None:
    docs = DOCS.read_text()

    missing = [
        (pattern, template)
        for pattern, template in BUILTIN_CLASSES
        if f"`{pattern}`" not in docs or f"`{template}`" not in docs
    ]

    assert missing == []
