"""Any file, as each loader reads it: a result or one InputError naming the file, never
another exception (issue 16: a node, a file or a careless save must not crash `ctl`).

The texts are YAML that has the loaders' own shapes with random values put in, YAML of
any shape, and bytes of any kind; each is written where the loader reads it (a catalog,
an inventory's hosts.yml, a facts snapshot's node file) and read as `ctl` reads it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.catalog.load import load_catalog
from cli.errors import InputError
from cli.facts.store import load_facts_dir
from cli.inventory.load import load_inventory

PROPERTY_SETTINGS = settings(max_examples=150)
FACTS_FORMAT = "modelfleet.facts/v1"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["vllm", "H100", "hf://org/m", "*", "[1:3]", "<<", "~", "!vault |"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=8), scalars), inner, max_size=4)
    ),
    max_leaves=20,
)
# The loaders' own shapes, with any value where one belongs.
shaped = st.one_of(
    st.builds(lambda models: {"models": models}, st.dictionaries(st.text(max_size=8), values)),
    st.builds(
        lambda name, profile: {"models": {name: {"source": "hf://o/m", "profiles": [profile]}}},
        st.text(max_size=8),
        st.dictionaries(
            st.sampled_from(
                ["name", "priority", "engine", "gpu_class", "gpus_per_node", "nodes",
                 "gpu_memory_gb", "min_memory_gb", "args", "env", "node_selector"]
            ),
            values,
        ),
    ),
    st.dictionaries(st.text(max_size=8), values).map(lambda hosts: {"all": {"hosts": hosts}}),
    st.dictionaries(st.sampled_from(["gpus", "memory", "shards", "hcas", "notes"]), values).map(
        lambda body: {"format": FACTS_FORMAT, "gathered_at": "2026-01-01T00:00:00Z", **body}
    ),
)  # fmt: skip


def as_text(value: object) -> str:
    try:
        return yaml.safe_dump(value, allow_unicode=True)
    except yaml.YAMLError:  # e.g. a float key PyYAML cannot write: any text will do
        return repr(value)


files = st.one_of(
    shaped.map(as_text).map(str.encode),
    values.map(as_text).map(str.encode),
    shaped.map(lambda v: json.dumps(v, default=str).encode()),
    st.binary(max_size=200),
)

Loader = Callable[[Path], object]
LOADERS: dict[str, tuple[str, Loader]] = {
    "catalog": ("catalog.yaml", load_catalog),
    "inventory": ("hosts.yml", load_inventory),
    "facts": ("node-1.json", lambda path: load_facts_dir(path.parent)),
}


@PROPERTY_SETTINGS
@given(files, st.sampled_from(sorted(LOADERS)))
def test_any_file_is_read_or_refused_with_an_input_error_naming_it(
    content: bytes, loader: str
) -> None:
    name, load = LOADERS[loader]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_bytes(content)
        try:
            load(path)
        except InputError as error:
            event(f"{loader}: refused")
            assert error.problems
            assert all(str(problem).startswith(str(path)) for problem in error.problems)
        else:
            event(f"{loader}: read")
