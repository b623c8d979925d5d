"""ctl cordon / uncordon: where the cordon is written, and that nothing else in the file moves.

Every test writes an inventory in a temporary directory, edits it, and compares whole files
with the exact text expected: a changed comment, quote or indent anywhere fails the test.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from cli.errors import InputError
from cli.inventory.cordon import FileEdit, Plan, reason_problem
from cli.inventory.edit import commit, cordon_node, read_texts, uncordon_node
from cli.inventory.load import load_inventory
from cli.inventory.splice import CTL_HEADER, quote, remove_key, set_key
from tests.unit.inventory.test_load import lines, write

HOSTS = lines(
    "# The fleet. Comments, order and quoting here must survive every edit.",
    "all:",
    "  vars:",
    "    ansible_user: 'ops'          # single quotes, kept",
    "  children:",
    "    gpu:",
    "      hosts:",
    "        hgx-[1:3]:               # a range: no room for one host's variables",
    "        hgx-4:",
    '          ansible_host: "10.0.0.4"',
    "          labels: {role: inference}",
    "        hgx-5:",
    "    cpu:",
    "      vars:",
    '        cordoned: "rack 7 rewiring"',
    "      hosts:",
    "        cpu-1:",
    "        cpu-2:",
    "          ansible_host: cpu-2.example   # trailing comment",
)


def inventory(tmp_path: Path, hosts: str = HOSTS) -> Path:
    """An inventory directory holding hosts.yml."""
    return write(tmp_path / "inventory", {"hosts.yml": hosts})


def text(root: Path, name: str) -> str:
    return (root / name).read_text()


def cordon_of(root: Path, node: str) -> str | None:
    return load_inventory(root).host(node).vars.cordoned


# --- where a cordon is written ----------------------------------------------------------------


def test_a_host_with_inline_variables_gets_the_cordon_after_them_and_nothing_else_moves(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = cordon_node(root, "hgx-4", "PSU fan failing")
    assert said == f'hgx-4 cordoned: "PSU fan failing" ({root}/hosts.yml:12)'
    expected = HOSTS.replace(
        "          labels: {role: inference}\n",
        '          labels: {role: inference}\n          cordoned: "PSU fan failing"\n',
    )
    assert text(root, "hosts.yml") == expected
    assert not (root / "host_vars").exists()


def test_a_host_with_an_empty_entry_gets_a_mapping_indented_as_the_file_indents(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    cordon_node(root, "hgx-5", "BMC unreachable")
    assert text(root, "hosts.yml") == HOSTS.replace(
        "        hgx-5:\n", '        hgx-5:\n          cordoned: "BMC unreachable"\n'
    )
    assert cordon_of(root, "hgx-5") == "BMC unreachable"


def test_a_host_named_only_through_a_range_gets_a_new_host_vars_file_saying_who_wrote_it(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = cordon_node(root, "hgx-2", "ECC errors")
    assert said == f'hgx-2 cordoned: "ECC errors" ({root}/host_vars/hgx-2.yml:4, new file)'
    assert text(root, "hosts.yml") == HOSTS
    assert text(root, "host_vars/hgx-2.yml") == lines(
        "# Written by ctl (ctl cordon, ctl uncordon): host variables of hgx-2.",
        "# The inventory names hgx-2 only through the host range hgx-[1:3].",
        "# ctl uncordon deletes this file when nothing else is left in it.",
        'cordoned: "ECC errors"',
    )
    assert cordon_of(root, "hgx-1") is None and cordon_of(root, "hgx-3") is None


def test_a_host_vars_file_that_exists_takes_the_cordon_at_its_end(tmp_path: Path) -> None:
    host_vars = lines(
        "---",
        "# hgx-4's own settings",
        "ansible_port: 2222",
        "fabrics:",
        "    - name: ib-east   # four-space lists, kept",
        "      hcas: [mlx5_0]",
        "",
        "# the end",
    )
    root = write(inventory(tmp_path), {"host_vars/hgx-4.yml": host_vars})
    said = cordon_node(root, "hgx-4", "PSU fan failing")
    assert said == f'hgx-4 cordoned: "PSU fan failing" ({root}/host_vars/hgx-4.yml:7)'
    assert text(root, "host_vars/hgx-4.yml") == host_vars.replace(
        "      hcas: [mlx5_0]\n", '      hcas: [mlx5_0]\ncordoned: "PSU fan failing"\n'
    )
    assert text(root, "hosts.yml") == HOSTS


def test_a_host_vars_directory_gets_a_cordon_file_of_its_own(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    write(root, {"host_vars/hgx-4/10-net.yml": "ansible_port: 2222\n"})
    said = cordon_node(root, "hgx-4", "reseating HCA")
    assert said == (
        f'hgx-4 cordoned: "reseating HCA" ({root}/host_vars/hgx-4/cordon.yml:4, new file)'
    )
    assert text(root, "host_vars/hgx-4/cordon.yml").startswith(CTL_HEADER)
    assert text(root, "host_vars/hgx-4/10-net.yml") == "ansible_port: 2222\n"
    assert text(root, "hosts.yml") == HOSTS
    assert uncordon_node(root, "hgx-4") == (
        f'hgx-4 uncordoned: removed cordoned: "reseating HCA"'
        f" ({root}/host_vars/hgx-4/cordon.yml:4, file deleted)"
    )
    assert sorted(p.name for p in (root / "host_vars/hgx-4").iterdir()) == ["10-net.yml"]


def test_recordoning_replaces_the_reason_where_it_stands_and_says_the_old_one(
    tmp_path: Path,
) -> None:
    host_vars = lines("ansible_port: 2222", "cordoned: 'old reason'   # set in May", "labels: {}")
    root = inventory(tmp_path)
    write(root, {"host_vars/hgx-4.yml": host_vars})
    said = cordon_node(root, "hgx-4", "new reason")
    assert said == f'hgx-4 cordoned: "new reason" ({root}/host_vars/hgx-4.yml:2), was "old reason"'
    assert text(root, "host_vars/hgx-4.yml") == lines(
        "ansible_port: 2222", 'cordoned: "new reason"   # set in May', "labels: {}"
    )


def test_cordoning_again_with_the_same_reason_writes_nothing(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    write(root, {"host_vars/hgx-4.yml": "cordoned: PSU   # plain\n"})
    said = cordon_node(root, "hgx-4", " PSU ")
    assert said == f'hgx-4 is already cordoned: "PSU" ({root}/host_vars/hgx-4.yml:1)'
    assert text(root, "host_vars/hgx-4.yml") == "cordoned: PSU   # plain\n"


def test_cordoning_a_host_whose_group_is_cordoned_writes_at_host_level_over_it(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = cordon_node(root, "cpu-1", "disk full")
    assert said == (
        f'cpu-1 cordoned: "disk full" ({root}/hosts.yml:18),'
        f' over "rack 7 rewiring" set for group cpu ({root}/hosts.yml:15)'
    )
    assert text(root, "hosts.yml") == HOSTS.replace(
        "        cpu-1:\n", '        cpu-1:\n          cordoned: "disk full"\n'
    )
    assert cordon_of(root, "cpu-2") == "rack 7 rewiring"


def test_a_json_inventory_stays_json(tmp_path: Path) -> None:
    source = lines(
        "{",
        '  "gpu": {"hosts": {"hgx-1": {"ansible_port": 2222}, "hgx-2": null}}',
        "}",
    )
    root = write(tmp_path / "inventory", {"hosts.json": source})
    cordon_node(root, "hgx-1", "one")
    cordon_node(root, "hgx-2", "two")
    assert text(root, "hosts.json") == lines(
        "{",
        '  "gpu": {"hosts": {"hgx-1": {"ansible_port": 2222, "cordoned": "one"},'
        ' "hgx-2": {"cordoned": "two"}}}',
        "}",
    )
    json.loads(text(root, "hosts.json"))
    uncordon_node(root, "hgx-1")
    assert json.loads(text(root, "hosts.json"))["gpu"]["hosts"]["hgx-1"] == {"ansible_port": 2222}


# --- uncordon ------------------------------------------------------------------------------


def test_uncordoning_a_host_level_cordon_removes_only_its_line(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    cordon_node(root, "hgx-4", "PSU fan failing")
    said = uncordon_node(root, "hgx-4")
    assert said == f'hgx-4 uncordoned: removed cordoned: "PSU fan failing" ({root}/hosts.yml:12)'
    assert text(root, "hosts.yml") == HOSTS


def test_uncordoning_deletes_a_file_ctl_created_once_nothing_else_is_in_it(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    cordon_node(root, "hgx-2", "ECC errors")
    said = uncordon_node(root, "hgx-2")
    assert said.endswith("host_vars/hgx-2.yml:4, file deleted)")
    assert not (root / "host_vars/hgx-2.yml").exists()
    assert text(root, "hosts.yml") == HOSTS


def test_uncordoning_keeps_a_file_ctl_created_that_now_holds_more(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    cordon_node(root, "hgx-2", "ECC errors")
    with (root / "host_vars/hgx-2.yml").open("a") as file:
        file.write("ansible_port: 2200\n")
    uncordon_node(root, "hgx-2")
    assert text(root, "host_vars/hgx-2.yml").endswith("left in it.\nansible_port: 2200\n")


def test_uncordoning_keeps_an_operators_host_vars_file_even_when_it_empties(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    write(root, {"host_vars/hgx-4.yml": lines("# mine", 'cordoned: "x"')})
    uncordon_node(root, "hgx-4")
    assert text(root, "host_vars/hgx-4.yml") == "# mine\n"


def test_uncordoning_a_host_whose_group_is_cordoned_overrides_it_with_false_at_host_level(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    said = uncordon_node(root, "cpu-2")
    assert said == (
        f"cpu-2 uncordoned: cordoned: false ({root}/hosts.yml:20) overrides"
        f' "rack 7 rewiring" set for group cpu ({root}/hosts.yml:15),'
        " which stays on its other hosts"
    )
    assert text(root, "hosts.yml") == HOSTS.replace(
        "cpu-2.example   # trailing comment\n",
        "cpu-2.example   # trailing comment\n          cordoned: false\n",
    )
    assert cordon_of(root, "cpu-2") is None
    assert cordon_of(root, "cpu-1") == "rack 7 rewiring"


def test_uncordoning_a_host_cordoned_by_its_own_line_and_its_group_sets_false_in_that_line(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    write(root, {"host_vars/cpu-1.yml": lines("# why", 'cordoned: "disk full"  # ticket 12')})
    said = uncordon_node(root, "cpu-1")
    assert said.startswith(f"cpu-1 uncordoned: cordoned: false ({root}/host_vars/cpu-1.yml:2)")
    assert text(root, "host_vars/cpu-1.yml") == lines("# why", "cordoned: false  # ticket 12")
    assert text(root, "hosts.yml") == HOSTS


def test_a_cordon_on_a_range_entry_is_overridden_in_host_vars_never_edited(
    tmp_path: Path,
) -> None:
    hosts = HOSTS.replace(
        "        hgx-[1:3]:               # a range: no room for one host's variables\n",
        '        hgx-[1:3]:\n          cordoned: "rack 2 power work"\n',
    )
    root = inventory(tmp_path, hosts)
    said = uncordon_node(root, "hgx-2")
    assert said == (
        f"hgx-2 uncordoned: cordoned: false ({root}/host_vars/hgx-2.yml:4, new file) overrides"
        f' "rack 2 power work" set for host range hgx-[1:3] ({root}/hosts.yml:9),'
        " which stays on its other hosts"
    )
    assert text(root, "hosts.yml") == hosts
    assert cordon_of(root, "hgx-1") == "rack 2 power work"
    assert cordon_of(root, "hgx-2") is None


def test_a_later_range_entry_outranks_an_inline_false_so_host_vars_gets_it(
    tmp_path: Path,
) -> None:
    hosts = lines(
        "a:",
        "  hosts:",
        "    hgx-9:",
        "b:",
        "  hosts:",
        "    hgx-[8:9]:",
        '      cordoned: "batch"',
    )
    root = inventory(tmp_path, hosts)
    said = uncordon_node(root, "hgx-9")
    assert said.startswith(f"hgx-9 uncordoned: cordoned: false ({root}/host_vars/hgx-9.yml:4,")
    assert text(root, "hosts.yml") == hosts
    assert "# Here it outranks the cordon set for host range hgx-[8:9].\n" in text(
        root, "host_vars/hgx-9.yml"
    )
    assert (cordon_of(root, "hgx-8"), cordon_of(root, "hgx-9")) == ("batch", None)


def test_a_cordon_without_a_reason_is_shown_as_true(tmp_path: Path) -> None:
    root = inventory(
        tmp_path, HOSTS.replace("        hgx-5:\n", "        hgx-5: {cordoned: true}\n")
    )
    assert uncordon_node(root, "hgx-5") == (
        f"hgx-5 uncordoned: removed cordoned: true ({root}/hosts.yml:12)"
    )
    assert text(root, "hosts.yml") == HOSTS.replace("        hgx-5:\n", "        hgx-5: {}\n")


def test_a_host_cordoned_both_inline_and_in_host_vars_is_uncordoned_in_both(
    tmp_path: Path,
) -> None:
    hosts = HOSTS.replace("        hgx-5:\n", '        hgx-5:\n          cordoned: "older"\n')
    root = inventory(tmp_path, hosts)
    write(root, {"host_vars/hgx-5.yml": 'cordoned: "newer"\nansible_port: 22\n'})
    said = uncordon_node(root, "hgx-5")
    assert said == (
        f'hgx-5 uncordoned: removed cordoned: "newer"'
        f" ({root}/hosts.yml:13, {root}/host_vars/hgx-5.yml:1)"
    )
    assert text(root, "hosts.yml") == HOSTS
    assert text(root, "host_vars/hgx-5.yml") == "ansible_port: 22\n"


def test_uncordoning_a_host_that_is_not_cordoned_says_so_and_writes_nothing(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    assert uncordon_node(root, "hgx-4") == "hgx-4 was not cordoned"
    assert text(root, "hosts.yml") == HOSTS
    assert sorted(p.name for p in root.iterdir()) == ["hosts.yml"]


# --- refusals --------------------------------------------------------------------------------


def test_an_unknown_node_is_refused_with_the_near_miss(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    with pytest.raises(InputError) as raised:
        cordon_node(root, "hgx-44", "x")
    assert (
        str(raised.value) == f"{root}: no host 'hgx-44' in this inventory (did you mean 'hgx-4'?)"
    )


@pytest.mark.parametrize(
    ("reason", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("two\nlines", "must be one line"),
        ("two\x0blines", "control character (U+000B)"),
        ("bell\x07", "control character (U+0007)"),
        ("see {{ ticket }}", "Jinja template"),
    ],
)
def test_a_reason_that_cannot_be_written_as_one_plain_line_is_refused_before_reading(
    reason: str, problem: str, tmp_path: Path
) -> None:
    assert problem in (reason_problem(reason) or "")
    with pytest.raises(InputError, match=re.escape(problem)):
        cordon_node(tmp_path / "no-such-inventory", "hgx-4", reason)


def test_a_vaulted_cordon_is_refused_naming_its_file_and_line(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    write(
        root,
        {
            "host_vars/hgx-4.yml": lines(
                "ansible_port: 22", "cordoned: !vault |", "  $ANSIBLE_VAULT;1.1;AES256", "  3031"
            )
        },
    )
    before = text(root, "host_vars/hgx-4.yml")
    with pytest.raises(InputError, match=rf"{root}/host_vars/hgx-4.yml:2: cordoned: .*Vault"):
        uncordon_node(root, "hgx-4")
    assert text(root, "host_vars/hgx-4.yml") == before


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ('cordoned: "{{ reason }}"', "is a Jinja template"),
        ("cordoned: !vault |\n  $ANSIBLE_VAULT;1.1;AES256", "is an Ansible Vault secret"),
        ('why: &why "fan"\ncordoned: *why', r"is an alias \(\*why\)"),
        ('cordoned: &why "fan"\nalso: *why', "carries the anchor &why"),
    ],
)
def test_a_value_ctl_cannot_safely_replace_is_left_for_the_operator(
    written: str, problem: str
) -> None:
    with pytest.raises(InputError, match=rf"^f.yml:\d: cordoned: {problem}"):
        set_key(written + "\n", "f.yml", (), '"new"', key="cordoned")
    with pytest.raises(InputError, match=problem):
        remove_key(written + "\n", "f.yml", (), key="cordoned")


# --- writing: atomic, mode kept, and undone when the result is not what was asked ---------------


def test_a_rewritten_file_keeps_its_mode(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    (root / "hosts.yml").chmod(0o640)
    cordon_node(root, "hgx-4", "x")
    assert stat.S_IMODE((root / "hosts.yml").stat().st_mode) == 0o640
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def test_a_symlinked_inventory_file_is_written_through_its_link(tmp_path: Path) -> None:
    real = write(tmp_path / "real", {"hosts.yml": HOSTS}) / "hosts.yml"
    link = tmp_path / "hosts.yml"
    link.symlink_to(real)
    cordon_node(link, "hgx-5", "x")
    assert link.is_symlink()
    assert 'cordoned: "x"' in real.read_text()


def test_when_the_reloaded_inventory_is_not_as_planned_every_file_is_restored(
    tmp_path: Path,
) -> None:
    root = inventory(tmp_path)
    (root / "hosts.yml").chmod(0o600)
    before = load_inventory(root)
    new_file = str(root / "host_vars" / "hgx-2.yml")
    plan = Plan(
        node="hgx-2",
        edits=(
            FileEdit(str(root / "hosts.yml"), HOSTS, HOSTS.replace("'ops'", "'root'")),
            FileEdit(new_file, None, 'cordoned: "planned"\n'),
        ),
        expected="something else",
        origin=(new_file, 1),
        message="not printed",
    )
    with pytest.raises(InputError, match="not as planned; the original files are restored"):
        commit(plan, root, before)
    assert text(root, "hosts.yml") == HOSTS
    assert stat.S_IMODE((root / "hosts.yml").stat().st_mode) == 0o600
    assert not (root / "host_vars").exists()


def test_an_edit_that_changes_another_hosts_cordon_is_undone(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    before = load_inventory(root)
    changed = HOSTS.replace('"rack 7 rewiring"', '"rack 8"')
    origin = (str(root / "hosts.yml"), 15)
    plan = Plan("cpu-1", (FileEdit(origin[0], HOSTS, changed),), "rack 8", origin, "")
    with pytest.raises(InputError, match="changed the cordon of cpu-2"):
        commit(plan, root, before)
    assert text(root, "hosts.yml") == HOSTS


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    root = inventory(tmp_path)
    texts = read_texts(root, "hgx-4")
    (root / "hosts.yml").write_text(HOSTS + "# edited meanwhile\n")
    plan = Plan("hgx-4", (FileEdit(texts.sources[0].file, HOSTS, "x: 1\n"),), None, None, "")
    with pytest.raises(InputError, match="changed while ctl was editing it"):
        commit(plan, root, load_inventory(root))
    assert text(root, "hosts.yml") == HOSTS + "# edited meanwhile\n"


# --- the text edits themselves ----------------------------------------------------------------

SET_CASES = [
    ("an empty file", "", (), 'cordoned: "R"\n'),
    ("a file of comments", "# c\n", (), '# c\ncordoned: "R"\n'),
    ("an explicit empty document", "---\n# c\n", (), '---\n# c\ncordoned: "R"\n'),
    ("no newline at the end", "a: 1", (), 'a: 1\ncordoned: "R"\n'),
    ("Windows line ends", "a: 1\r\nb: 2\r\n", (), 'a: 1\r\nb: 2\r\ncordoned: "R"\r\n'),
    ("a key with no value", "cordoned:   # why\nb: 2\n", (), 'cordoned: "R"   # why\nb: 2\n'),
    (
        "a block scalar",
        "cordoned: >-\n  old\n  reason\n\nb: 2\n",
        (),
        'cordoned: "R"\n\nb: 2\n',
    ),
    (
        "after a nested list, before a trailing comment",
        "fabrics:\n  - name: a\n    hcas:\n      - m0\n\n# end\n",
        (),
        'fabrics:\n  - name: a\n    hcas:\n      - m0\ncordoned: "R"\n\n# end\n',
    ),
    (
        "a null host with a comment",
        "g:\n  hosts:\n    h1: ~  # c\n    h2:\n",
        ("g", "hosts", "h1"),
        'g:\n  hosts:\n    h1:  # c\n      cordoned: "R"\n    h2:\n',
    ),
    (
        "four-space indentation",
        "g:\n    hosts:\n        h1:\n",
        ("g", "hosts", "h1"),
        'g:\n    hosts:\n        h1:\n            cordoned: "R"\n',
    ),
    (
        "a host in a flow mapping",
        "g:\n  hosts: {h1: , h2: }\n",
        ("g", "hosts", "h1"),
        'g:\n  hosts: {h1: {cordoned: "R"} , h2: }\n',
    ),
    ("an empty flow mapping", "{}\n", (), '{cordoned: "R"}\n'),
]


@pytest.mark.parametrize(
    ("before", "path", "after"),
    [case[1:] for case in SET_CASES],
    ids=[case[0] for case in SET_CASES],
)
def test_setting_the_key_changes_only_its_own_line(
    before: str, path: tuple[str, ...], after: str
) -> None:
    assert set_key(before, "f.yml", path, '"R"', key="cordoned") == after


REMOVE_CASES = [
    ("the only key", "cordoned: x  # note\n", (), ""),
    ("a block scalar", "a: 1\ncordoned: |\n  two\n  lines\nb: 2\n", (), "a: 1\nb: 2\n"),
    ("the last key of a host", "h:\n  a: 1\n  cordoned: x\n# c\n", ("h",), "h:\n  a: 1\n# c\n"),
    ("the first of a flow mapping", "{cordoned: x, a: 1}\n", (), "{a: 1}\n"),
    ("the last of a flow mapping", "{a: 1, cordoned: x}\n", (), "{a: 1}\n"),
    ("a key that is not there", "a: 1\n", (), "a: 1\n"),
]


@pytest.mark.parametrize(
    ("before", "path", "after"),
    [case[1:] for case in REMOVE_CASES],
    ids=[case[0] for case in REMOVE_CASES],
)
def test_removing_the_key_removes_only_its_own_lines(
    before: str, path: tuple[str, ...], after: str
) -> None:
    assert remove_key(before, "f.yml", path, key="cordoned") == after


def test_an_edit_that_would_change_another_value_is_refused() -> None:
    # A kept block scalar's trailing blank lines are its value: a line inserted before them
    # would take them away, and the check after every splice notices.
    with pytest.raises(InputError, match="without changing more of the file"):
        set_key("a: |+\n  x\n\n", "f.yml", (), '"R"', key="cordoned")


def test_a_reason_is_written_as_one_double_quoted_line_yaml_and_json_both_read() -> None:
    reason = 'fan "B" \\ dead\u2028 \x7f ünïcode'
    written = quote(reason)
    assert "\n" not in written and "\u2028" not in written and "\x7f" not in written
    assert json.loads(written) == reason
    assert set_key("", "f.yml", (), written, key="cordoned") == f"cordoned: {written}\n"
