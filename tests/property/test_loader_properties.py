"""Any file, as each loader reads it: a result or one InputError naming the file, never
another exception (issue 16: a node, a file or a careless save must not crash `ctl`).

The texts are YAML that has the loaders' own shapes with random values put in, YAML of
any shape, and bytes of any kind; each is written where the loader reads it (a catalog,
an inventory's hosts.yml, a facts snapshot's node file) and read as `ctl` reads it.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.catalog.load import load_catalog
from cli.errors import InputError
from cli.facts.store import load_facts_dir
from cli.inventory.ini import IniError, split_host_line
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


# INI-ish text: sections, host lines, words, quotes and comments in any order.
INI_PIECES = [
    "[g]", "[g:vars]", "[g:children]", "[all:vars]", "[g:other]", "[a b]", "h1", "h[1:3]",
    "h[3:1]", "h1:2222", "h1:", "---", "k=v", "x='a b'", 'y="c d"', "'", '"', "\\", "#", ";",
    "=", "labels={'a': 1}", "cordoned=True", "fabrics=[{'name': 'f'}]", "ansible_port=0",
    "g", "{[1]: 2}", " ", "\t",
]  # fmt: skip
INI_LINES = [
    "[g]", "[all:vars]", "[ungrouped]", "h1", "h[1:3] k=v", "h1:2222 labels=\"{'a': 'b'}\"",
    "h2 cordoned=True ansible_host=10.0.0.2", "# c", "; c", "", "cordoned='fan'", "x=1 # c",
]  # fmt: skip
ini_files = st.one_of(
    st.lists(st.lists(st.sampled_from(INI_PIECES), max_size=5).map(" ".join), max_size=8),
    st.lists(st.sampled_from(INI_LINES), max_size=10),  # mostly lines Ansible reads
).map(lambda rows: "\n".join(rows).encode())

files = st.one_of(
    ini_files,
    shaped.map(as_text).map(str.encode),
    values.map(as_text).map(str.encode),
    shaped.map(lambda v: json.dumps(v, default=str).encode()),
    st.binary(max_size=200),
)

Loader = Callable[[Path], object]
LOADERS: dict[str, tuple[str, Loader]] = {
    "catalog": ("catalog.yaml", load_catalog),
    "inventory": ("hosts.yml", load_inventory),
    "inventory (INI)": ("hosts.ini", load_inventory),
    "inventory (no extension: YAML or INI)": ("hosts", load_inventory),
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


@PROPERTY_SETTINGS
@given(st.text(alphabet=" \t\r#=;'\"\\ab\x0b\xa0", max_size=30))
def test_a_host_line_splits_into_the_words_shlex_gives(line: str) -> None:
    """The INI reader's fast path for lines without quotes agrees with shlex, which
    Ansible's ini plugin uses (whitespace is shlex's: not \\x0b or a no-break space)."""
    try:
        expected: list[str] | None = shlex.split(line, comments=True)
    except ValueError:
        expected = None
    try:
        got: list[str] | None = split_host_line(line, 1)
    except IniError:
        got = None
    assert got == expected
