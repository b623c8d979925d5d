"""ctl cordon / uncordon on an INI inventory: one word of one host line, every other byte kept.

As tests/unit/inventory/test_edit.py does for YAML: each test edits an inventory in a
temporary directory and compares whole files with the exact text expected.
tests/integration/test_inventory_ini.py holds an edited INI inventory to ansible-inventory.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cli.errors import InputError
from cli.inventory.edit import cordon_node, uncordon_node
from cli.inventory.ini import IniError, ini_literal, ini_value, remove_host_var, set_host_var
from tests.unit.inventory.test_load import lines, write

HOSTS = lines(
    "# The fleet, in INI. Every byte here but the edited word must survive.",
    "[gpu]",
    "hgx-[1:3]",
    "hgx-4 ansible_host=10.0.0.4  labels=\"{'role': 'inference'}\"   # a comment, kept",
    "hgx-5",
    "",
    "; the CPU nodes",
    "[cpu]",
    "cpu-1",
    "cpu-2\tansible_host=cpu-2.example",
    "",
    "[cpu:vars]",
    "cordoned='rack 7 rewiring'",
)


def inventory(tmp_path: Path, hosts: str = HOSTS) -> Path:
    return write(tmp_path / "inventory", {"hosts": hosts})


def text(root: Path) -> str:
    return (root / "hosts").read_text()


def test_a_host_line_gets_the_cordon_after_its_last_word_before_its_comment(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = cordon_node(root, "hgx-4", "PSU fan failing")
    assert said == f'hgx-4 cordoned: "PSU fan failing" ({root}/hosts:4)'
    assert text(root) == HOSTS.replace(
        "labels=\"{'role': 'inference'}\"   #",
        "labels=\"{'role': 'inference'}\" cordoned=\"'PSU fan failing'\"   #",
    )
    assert not (root / "host_vars").exists()


def test_recordoning_replaces_the_word_and_uncordoning_gives_back_the_file_byte_for_byte(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    cordon_node(root, "hgx-5", "BMC unreachable")
    said = cordon_node(root, "hgx-5", "BMC replaced, burn-in")
    assert said == (
        f'hgx-5 cordoned: "BMC replaced, burn-in" ({root}/hosts:5), was "BMC unreachable"'
    )
    assert text(root) == HOSTS.replace("hgx-5\n", "hgx-5 cordoned=\"'BMC replaced, burn-in'\"\n")
    said = uncordon_node(root, "hgx-5")
    assert said == f'hgx-5 uncordoned: removed cordoned: "BMC replaced, burn-in" ({root}/hosts:5)'
    assert text(root) == HOSTS


def test_a_host_named_only_through_a_range_gets_a_host_vars_file_saying_why(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = cordon_node(root, "hgx-2", "IB cable loose")
    assert said == f'hgx-2 cordoned: "IB cable loose" ({root}/host_vars/hgx-2.yml:4, new file)'
    assert text(root) == HOSTS  # a range's line cannot carry one host's variables
    assert "only through the host range hgx-[1:3]." in (root / "host_vars/hgx-2.yml").read_text()


def test_uncordoning_a_host_of_a_cordoned_group_writes_false_on_its_line(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    said = uncordon_node(root, "cpu-2")
    assert said == (
        f'cpu-2 uncordoned: cordoned: false ({root}/hosts:10) overrides "rack 7 rewiring"'
        f" set for group cpu ({root}/hosts:13), which stays on its other hosts"
    )
    assert text(root) == HOSTS.replace(
        "cpu-2\tansible_host=cpu-2.example\n", "cpu-2\tansible_host=cpu-2.example cordoned=False\n"
    )


def test_a_host_on_two_lines_is_edited_where_its_own_cordon_is(tmp_path: Path) -> None:
    hosts = HOSTS + lines("[rack-b]", "hgx-4 cordoned=\"'IB cable loose'\"  # the second line")
    root = inventory(tmp_path, hosts)
    cordon_node(root, "hgx-4", "IB cable replaced")
    assert text(root) == hosts.replace("'IB cable loose'", "'IB cable replaced'")
    uncordon_node(root, "hgx-4")
    assert text(root) == hosts.replace(" cordoned=\"'IB cable loose'\"", "")


def test_crlf_line_endings_are_kept(tmp_path: Path) -> None:
    crlf = HOSTS.replace("\n", "\r\n")
    root = tmp_path / "inventory"
    root.mkdir()
    (root / "hosts").write_bytes(crlf.encode())
    cordon_node(root, "hgx-5", "fan")
    assert (root / "hosts").read_bytes() == crlf.replace(
        "hgx-5\r\n", "hgx-5 cordoned=\"'fan'\"\r\n"
    ).encode()


def test_a_cordon_written_twice_on_one_line_is_left_for_the_operator(tmp_path: Path) -> None:
    root = inventory(tmp_path, HOSTS.replace("hgx-5\n", "hgx-5 cordoned=True cordoned=False\n"))
    with pytest.raises(InputError) as caught:
        cordon_node(root, "hgx-5", "fan")
    assert str(caught.value) == (
        f"{root}/hosts:5: cordoned: is written 2 times on this host line: edit it by hand"
    )
    assert text(root) == HOSTS.replace("hgx-5\n", "hgx-5 cordoned=True cordoned=False\n")


def test_onboarding_into_an_ini_inventory_is_refused_naming_the_file(tmp_path: Path) -> None:
    from cli.inventory.edit import read_texts
    from cli.pki.addhost import NewHost, plan_new_host

    root = inventory(tmp_path)
    new = NewHost(name="gpu-9", address="10.0.0.9", group="gpu")
    with pytest.raises(InputError) as caught:
        plan_new_host(read_texts(root, "gpu-9"), new)
    assert str(caught.value) == (
        f"{root}/hosts: an INI inventory: ctl onboard-node adds hosts to YAML inventories"
        " only; add gpu-9 to [gpu] by hand, then run ctl onboard-node again"
    )


# --- one host line ------------------------------------------------------------------------------

LINES = [
    ("h1", "h1 cordoned=X"),
    ("h1   # comment", "h1 cordoned=X   # comment"),
    ("h1 a='x y'#c", "h1 a='x y' cordoned=X#c"),
    ('h1 a="say \\"hi\\"" b=2', 'h1 a="say \\"hi\\"" b=2 cordoned=X'),
    ("h1 a='#not a comment'", "h1 a='#not a comment' cordoned=X"),
    ("h1\tcordoned=old\tb=1", "h1\tcordoned=X\tb=1"),
    ("h1 cordoned='a b' b=1 # c", "h1 cordoned=X b=1 # c"),
    ("h1 a=b\\ c", "h1 a=b\\ c cordoned=X"),
]


@pytest.mark.parametrize(("line", "expected"), LINES, ids=[case[0] for case in LINES])
def test_setting_the_word_changes_only_it(line: str, expected: str) -> None:
    text = f"[g]\n{line}\nnext\n"
    assert set_host_var(text, 2, "cordoned", "X") == f"[g]\n{expected}\nnext\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("h1 cordoned=X", "h1"),
        ("h1  cordoned='a b'  # c", "h1  # c"),
        ("h1 a=1\tcordoned=X b=2", "h1 a=1 b=2"),
    ],
)
def test_removing_the_word_removes_it_and_the_space_before_it(line: str, expected: str) -> None:
    assert remove_host_var(f"{line}\n", 1, "cordoned") == f"{expected}\n"


def test_a_template_is_never_overwritten() -> None:
    with pytest.raises(IniError, match="is a Jinja template"):
        set_host_var("h1 cordoned='{{ why }}'\n", 1, "cordoned", "X")


@pytest.mark.parametrize(
    "reason", ["PSU fan failing", "1", "None", "True", 'it\'s "loose"', "a # b", "tab\there", "\\x"]
)
def test_a_reason_reads_back_as_the_same_text_through_shlex_and_literal_eval(reason: str) -> None:
    (word,) = shlex.split(f"cordoned={ini_literal(reason)}")
    assert ini_value(word.partition("=")[2], 1) == reason
