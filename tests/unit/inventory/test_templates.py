"""Inventory values that are Jinja templates, rendered by ansible-core's own templating with
the host's variables, as Ansible renders them; lookups refused with file and line, and never
run on the control host."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.edges.templating import render_template
from cli.errors import InputError
from cli.inventory.load import load_inventory
from tests.unit.inventory.test_load import write


def errors_of(root: Path) -> list[str]:
    with pytest.raises(InputError) as caught:
        load_inventory(root, render=render_template)
    return [str(problem) for problem in caught.value.problems]


def test_a_user_named_by_another_variable_is_that_variables_value(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "hosts.yml": (
                "all:\n"
                "  vars:\n"
                '    ansible_user: "{{ prepare_username }}"\n'
                "  hosts:\n"
                "    metal0: {ansible_host: 192.168.1.110}\n"
                '    metal1: {ansible_host: "{{ subnet }}.111", prepare_username: admin}\n'
            ),
            "group_vars/all.yml": 'prepare_username: root\nsubnet: "192.168.1"\n',
        },
    )

    inventory = load_inventory(root, render=render_template)

    assert inventory.host("metal0").user == "root"
    assert inventory.host("metal1").user == "admin"  # the host's own variable wins
    assert inventory.host("metal1").address == "192.168.1.111"


def test_filters_and_magic_variables_mean_what_they_mean_to_ansible(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "hosts.yml": (
                "gpu:\n"
                "  hosts:\n"
                "    hgx-1:\n"
                '      ansible_port: "{{ ssh_port | default(2222) }}"\n'
                "      ansible_host: \"{{ inventory_hostname }}.{{ domain | default('lab') }}\"\n"
                '      labels: {rack: "{{ group_names | first }}"}\n'
            ),
        },
    )

    host = load_inventory(root, render=render_template).host("hgx-1")

    assert (host.address, host.port) == ("hgx-1.lab", 2222)
    assert host.vars.labels == {"rack": "gpu"}


@pytest.mark.parametrize(
    "template",
    [
        "{{ lookup('pipe', 'touch MARKER') }}",
        "{{ query('pipe', 'touch MARKER') | first }}",
        "{{ q('pipe', 'touch MARKER') | first }}",
    ],
)
def test_a_lookup_is_refused_at_its_line_and_never_runs(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "ran"
    root = write(
        tmp_path / "inv",
        {
            "hosts.yml": (
                "all:\n"
                "  hosts:\n"
                "    n1:\n"
                f'      ansible_user: "{template.replace("MARKER", str(marker))}"\n'
            )
        },
    )

    assert errors_of(root) == [
        f"{root}/hosts.yml:4: all.hosts.n1.ansible_user: uses lookup()/query(), which ctl does"
        " not run on the control host: write the value itself"
    ]
    assert not marker.exists()


def test_a_lookup_reached_through_another_variable_never_runs_either(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = write(
        tmp_path / "inv",
        {
            "hosts.yml": (
                "all:\n"
                "  vars:\n"
                f"    who: \"{{{{ lookup('pipe', 'touch {marker}; echo root') }}}}\"\n"
                "  hosts:\n"
                '    n1: {ansible_user: "{{ who }}"}\n'
            )
        },
    )

    errors = errors_of(root)

    assert errors == [
        f"{root}/hosts.yml:5: all.hosts.n1.ansible_user: uses lookup()/query(), which ctl does"
        " not run on the control host: write the value itself"
    ]
    assert not marker.exists()


def test_an_undefined_variable_is_refused_at_the_line_that_uses_it(tmp_path: Path) -> None:
    root = write(
        tmp_path, {"hosts.yml": 'all:\n  hosts:\n    n1: {ansible_user: "{{ nobody }}"}\n'}
    )

    assert errors_of(root) == [
        f"{root}/hosts.yml:3: all.hosts.n1.ansible_user: cannot be rendered: 'nobody' is undefined"
    ]


def test_a_rendered_value_is_checked_as_a_written_one(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {"hosts.yml": 'all:\n  hosts:\n    n1: {ansible_port: "{{ 70000 }}", base: 1}\n'},
    )

    assert errors_of(root) == [
        f"{root}/hosts.yml:3: all.hosts.n1.ansible_port: port 70000 is not between 1 and 65535"
    ]


def test_an_unused_lookup_in_a_variable_ctl_does_not_read_is_left_alone(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "hosts.yml": (
                "all:\n"
                "  vars:\n"
                "    ansible_become_password: \"{{ lookup('env', 'BECOME') }}\"\n"
                "  hosts:\n"
                "    n1: {ansible_user: ops}\n"
            )
        },
    )

    assert load_inventory(root, render=render_template).host("n1").user == "ops"


def test_a_groups_template_that_fails_is_said_once_for_all_its_hosts(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {"hosts.yml": ('all:\n  vars:\n    ansible_user: "{{ nobody }}"\n  hosts:\n    n[1:3]:\n')},
    )

    assert errors_of(root) == [
        f"{root}/hosts.yml:3: all.vars.ansible_user: cannot be rendered: 'nobody' is undefined"
    ]


def test_no_template_file_is_read_on_the_control_host(tmp_path: Path) -> None:
    (tmp_path / "user.j2").write_text("root\n")
    root = write(
        tmp_path / "inv",
        {"hosts.yml": "all:\n  hosts:\n    n1: {ansible_user: \"{% include 'user.j2' %}\"}\n"},
    )

    errors = errors_of(root)

    assert len(errors) == 1
    assert errors[0].startswith(
        f"{root}/hosts.yml:3: all.hosts.n1.ansible_user: cannot be rendered"
    )
