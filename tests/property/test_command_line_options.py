"""Every command line ctl can write holds only options its engine release's parser has.

For generated catalogs — the loader's round-trip catalogs (test_catalog_properties) and
the placement properties' catalogs (strategies.py) — and generated placements (any rank of
the replica, any port of ctl's range, IPv4 or IPv6 rank-0 and listen addresses, GPUs and
HCAs), every rank's argv is checked against the pinned release's options
(cli/engines/flags.py); the example catalogs are checked in tests/unit/engines/test_specs.py.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.catalog.load import Catalog, parse_catalog
from cli.engines.flags import accepted_options, check_options
from cli.engines.specs import Rank, engine_spec
from cli.shards.engines import command_line
from tests.property.strategies import catalog_dict
from tests.property.test_catalog_properties import Generated, valid_catalogs

ADDRESSES = st.sampled_from(("10.0.0.1", "192.168.7.20", "fd00::7", "node-1.example"))
LISTEN = st.sampled_from(("0.0.0.0", "10.0.0.9", "::"))


@st.composite
def placements(draw: st.DrawFn, nodes: int) -> Rank:
    return Rank(
        rank=draw(st.integers(0, nodes - 1)),
        nodes=nodes,
        port=draw(st.integers(8000, 8999)),
        master_address=draw(ADDRESSES),
        gpus=tuple(draw(st.lists(st.integers(0, 7), max_size=8, unique=True))),
        hcas=tuple(draw(st.lists(st.sampled_from(("mlx5_0", "mlx5_1")), unique=True))),
        listen=draw(LISTEN),
    )


def check_every_rank(catalog: Catalog, data: st.DataObject) -> int:
    checked = 0
    for model in catalog.models.values():
        for profile in model.profiles:
            spec = engine_spec(profile.spec.engine)
            version = profile.spec.engine_version or spec.pinned_version
            options = accepted_options(spec.name, version)
            assert options is not None
            place = data.draw(placements(profile.spec.nodes))
            argv = command_line(profile, place)
            assert argv[: len(spec.command)] == list(spec.command)
            problems = check_options(spec, version, argv[len(spec.command) :], options)
            assert problems == [], (profile.key, argv, problems)
            checked += 1
    return checked


@settings(max_examples=100)
@given(generated=valid_catalogs(), data=st.data())
def test_every_rank_of_every_loaded_catalog_writes_only_options_its_engine_has(
    generated: Generated, data: st.DataObject
) -> None:
    catalog = parse_catalog(generated.text, "catalog.yaml")
    assert check_every_rank(catalog, data) >= 1


@st.composite
def placement_catalogs(draw: st.DrawFn) -> dict[str, Any]:
    fleet_class = draw(st.sampled_from(("H100", "A100", "L40S")))
    return catalog_dict(draw, fleet_class, draw(st.booleans()))


@settings(max_examples=100)
@given(catalog_data=placement_catalogs(), embedding=st.booleans(), data=st.data())
def test_the_placement_properties_catalogs_write_only_options_their_engines_have(
    catalog_data: dict[str, Any], embedding: bool, data: st.DataObject
) -> None:
    if embedding:  # the engines' embedding modes, too
        for model in catalog_data["models"].values():
            for profile in model["profiles"]:
                profile["embedding"] = True
    catalog = parse_catalog(yaml.safe_dump(catalog_data), "catalog.yaml")
    assert check_every_rank(catalog, data) >= 1
