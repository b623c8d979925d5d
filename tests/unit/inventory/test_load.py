"""Reading Ansible YAML inventories: structure, variable precedence, our host variables, errors."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cli.errors import InputError
from cli.inventory.forms import SourceText
from cli.inventory.load import inventory_from_texts, load_inventory
from cli.inventory.patterns import expand_host_pattern
from cli.inventory.schema import NO_CORDON_REASON, Fabric, HostVars, Inventory, label_text


def write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def lookup(inventory: Inventory, where: str) -> Any:
    """`hgx-1.vars.labels` → that host's labels; `groups.gpu` → the gpu group's hosts."""
    first, *rest = where.split(".")
    value: Any = inventory.groups if first == "groups" else inventory.host(first)
    for part in rest:
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return value


# --- host patterns --------------------------------------------------------------------------

PATTERNS = [
    ("hgx-[01:03]", ["hgx-01", "hgx-02", "hgx-03"], None),
    ("node-[a:c]", ["node-a", "node-b", "node-c"], None),
    ("n[0:10:2]", ["n0", "n2", "n4", "n6", "n8", "n10"], None),
    ("n[:2]", ["n0", "n1", "n2"], None),
    ("r[1:2]-n[1:2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"], None),
    ("hgx-1:2222", ["hgx-1"], 2222),
    ("hgx-[1:2]:2222", ["hgx-1", "hgx-2"], 2222),
    ("10.0.0.[1:3]", ["10.0.0.1", "10.0.0.2", "10.0.0.3"], None),
    ("[2001:db8::1]:2222", ["2001:db8::1"], 2222),
    ("2001:db8::1", ["2001:db8::1"], None),
    ("hgx-1.example.com", ["hgx-1.example.com"], None),
]


@pytest.mark.parametrize(
    ("pattern", "names", "port"),
    PATTERNS,
    ids=[
        "a zero-padded range keeps its width",
        "a letter range runs through the alphabet",
        "a third number is the step",
        "a range with no beginning starts at zero",
        "two ranges in one name multiply",
        "a port after the name sets the port",
        "a port applies to every host of a range",
        "an IPv4 address may hold a range",
        "a bracketed IPv6 address may carry a port",
        "a bare IPv6 address is one host without a port",
        "a dotted name is one host",
    ],
)
def test_a_host_pattern_expands_as_ansible_expands_it(
    pattern: str, names: list[str], port: int | None
) -> None:
    assert expand_host_pattern(pattern) == (names, port)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("n[3:1]", "begins after it ends"),
        ("n[c:a]", "begins after it ends"),
        ("n[01:3]", "same width"),
        ("n[1:3:0]", "step of at least 1"),
        ("n[1]", "[begin:end]"),
        ("n[1:]", "has no end"),
        ("n[a:3]", "two numbers or two letters"),
        ("n[1:3", "no closing"),
    ],
    ids=[
        "a numeric range that runs backwards is refused",
        "a letter range that runs backwards is refused",
        "a zero-padded range needs both ends the same width",
        "a step of zero is refused",
        "a range needs a colon",
        "a range needs an end",
        "a range mixing a letter and a number is refused",
        "a range needs its closing bracket",
    ],
)
def test_a_malformed_host_range_is_refused_with_a_reason(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        expand_host_pattern(pattern)


# --- label text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "text"),
    [("coding", "coding"), (True, "true"), (False, "false"), (8, "8"), ("", "")],
    ids=[
        "text stays as written",
        "true reads as the text true",
        "false reads as the text false",
        "a whole number reads as its digits",
        "an empty text is a value",
    ],
)
def test_a_label_compares_as_the_text_a_selector_would_write(written: object, text: str) -> None:
    assert label_text(written) == text


@pytest.mark.parametrize(
    "written",
    [1.10, None, ["a"], {"a": 1}],
    ids=[
        "a decimal number is refused",
        "null is refused",
        "a list is refused",
        "a mapping is refused",
    ],
)
def test_a_label_that_is_not_plain_text_is_refused(written: object) -> None:
    with pytest.raises(ValueError):
        label_text(written)


# --- structure and precedence ---------------------------------------------------------------


def lines(*rows: str) -> str:
    """A file's text, one argument a line, so a test can count lines by eye."""
    return "\n".join(rows) + "\n"


CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    (
        "a merge key with an override: the later key wins, as Ansible reads it",
        {
            "hosts.yml": lines(
                "gpu:",
                "  hosts:",
                "    h1:",
                "      <<: &rack {labels: {rack: a}, cordoned: fan}",
                "      cordoned: false",
                "    h2:",
                "      <<: *rack",
                "      labels: {rack: b}",
            )
        },
        {
            "h1.vars.labels": {"rack": "a"},
            "h1.vars.cordoned": None,
            "h2.vars.labels": {"rack": "b"},
            "h2.vars.cordoned": "fan",
        },
    ),
    (
        "labels, fabrics and gpu_classes with every entry commented out are empty",
        {
            "hosts.yml": lines(
                "gpu:",
                "  hosts:",
                "    h1:",
                "      labels:",
                "        # role: inference",
                "      fabrics:",
                "        # - {name: ib-a, hcas: [mlx5_0]}",
                "      gpu_classes:",
                "        # 'NVIDIA A100*': A100",
            ),
            "group_vars/gpu.yml": lines("labels:", "  # site: b"),
        },
        {"h1.vars.labels": {}, "h1.vars.fabrics": (), "h1.vars.gpu_classes": {}},
    ),
    (
        "ranges under a group make one host each, in the group",
        {"hosts.yml": lines("gpu:", "  hosts:", "    hgx-[1:3]:", "    node-[a:b]:2222:")},
        {
            "groups.gpu": ("hgx-1", "hgx-2", "hgx-3", "node-a", "node-b"),
            "node-b.port": 2222,
            "hgx-1.port": 22,
            "hgx-1.groups": ("all", "gpu"),
        },
    ),
    (
        "a host in a nested child group belongs to every ancestor",
        {
            "hosts.yml": lines(
                "all:",
                "  children:",
                "    dc1:",
                "      children:",
                "        gpu:",
                "          children:",
                "            hgx:",
                "              hosts:",
                "                h1:",
            )
        },
        {"h1.groups": ("all", "dc1", "gpu", "hgx"), "groups.dc1": ("h1",)},
    ),
    (
        "a group under two parents gives its hosts to both",
        {
            "hosts.yml": lines(
                "east:",
                "  children:",
                "    gpu:",
                "      hosts:",
                "        h1:",
                "west:",
                "  children:",
                "    gpu:",
            )
        },
        {
            "groups.east": ("h1",),
            "groups.west": ("h1",),
            "h1.groups": ("all", "east", "west", "gpu"),
        },
    ),
    (
        "hosts written only under all are ungrouped",
        {
            "hosts.yml": lines(
                "all:",
                "  hosts:",
                "    lone:",
                "  children:",
                "    gpu:",
                "      hosts:",
                "        h1:",
            )
        },
        {"groups.ungrouped": ("lone",), "lone.groups": ("all", "ungrouped")},
    ),
    (
        "hosts are listed in the order the inventory first names them",
        {
            "hosts.yml": lines(
                "b:", "  hosts:", "    zed:", "    alpha:", "a:", "  hosts:", "    mid:"
            )
        },
        {"groups.all": ("zed", "alpha", "mid")},
    ),
    (
        "a child group's variables beat its parent's, which beat all's",
        {
            "hosts.yml": lines(
                "all:",
                "  vars:",
                "    labels: {level: all}",
                "    cordoned: from all",
                "  children:",
                "    dc1:",
                "      vars:",
                "        labels: {level: dc1}",
                "        gpu_classes: {A100*: A100}",
                "      children:",
                "        gpu:",
                "          vars:",
                "            labels: {level: gpu}",
                "          hosts:",
                "            h1:",
            )
        },
        {
            "h1.vars.labels": {"level": "gpu"},
            "h1.vars.gpu_classes": {"A100*": "A100"},
            "h1.vars.cordoned": "from all",
        },
    ),
    (
        "of two sibling groups the later name wins",
        {
            "hosts.yml": lines(
                "zeta:",
                "  vars: {labels: {from: zeta}}",
                "  hosts: {h1: }",
                "alpha:",
                "  vars: {labels: {from: alpha}}",
                "  hosts: {h1: }",
            )
        },
        {"h1.vars.labels": {"from": "zeta"}, "h1.groups": ("all", "alpha", "zeta")},
    ),
    (
        "ansible_group_priority orders sibling groups before their names do",
        {
            "hosts.yml": lines(
                "zeta:",
                "  vars: {ansible_group_priority: 0, labels: {from: zeta}}",
                "  hosts: {h1: }",
                "alpha:",
                "  vars: {labels: {from: alpha}}",
                "  hosts: {h1: }",
            )
        },
        {"h1.vars.labels": {"from": "alpha"}, "h1.groups": ("all", "zeta", "alpha")},
    ),
    (
        "a group_vars file beats every group's variables written in the inventory",
        {
            "hosts.yml": lines(
                "gpu:",
                "  vars: {labels: {from: inventory}}",
                "  hosts:",
                "    h1: {cordoned: host wins}",
            ),
            "group_vars/all.yml": lines("labels: {from: group_vars/all}", "cordoned: from all"),
        },
        {"h1.vars.labels": {"from": "group_vars/all"}, "h1.vars.cordoned": "host wins"},
    ),
    (
        "a child group's group_vars file beats all's",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "group_vars/all.yml": lines("labels: {from: all}"),
            "group_vars/gpu.yaml": lines("labels: {from: gpu}"),
        },
        {"h1.vars.labels": {"from": "gpu"}},
    ),
    (
        "a host_vars file beats the host's own inventory variables",
        {
            "hosts.yml": lines("gpu:", "  hosts:", "    h1: {labels: {from: inventory}}"),
            "host_vars/h1.yml": lines("labels: {from: host_vars}"),
        },
        {"h1.vars.labels": {"from": "host_vars"}},
    ),
    (
        "the files of a host_vars directory are merged in name order",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "host_vars/h1/20-second.yml": lines("labels: {from: second}", "ansible_user: ops"),
            "host_vars/h1/10-first.yml": lines("labels: {from: first}", "ansible_port: 2022"),
        },
        {"h1.vars.labels": {"from": "second"}, "h1.user": "ops", "h1.port": 2022},
    ),
    (
        "a group_vars entry without extension is found before NAME.yml",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "group_vars/gpu/main.yml": lines("labels: {from: directory}"),
            "group_vars/gpu.yml": lines("labels: {from: file}"),
        },
        {"h1.vars.labels": {"from": "directory"}},
    ),
    (
        "a dictionary set twice is replaced whole, not merged",
        {
            "hosts.yml": lines(
                "gpu:",
                "  vars: {labels: {role: gpu, rack: a}}",
                "  hosts:",
                "    h1: {labels: {pinned: 'yes'}}",
            )
        },
        {"h1.vars.labels": {"pinned": "yes"}},
    ),
    (
        "the same host written twice keeps the variables written last",
        {
            "hosts.yml": lines(
                "a:",
                "  hosts:",
                "    h1: {labels: {from: a}, cordoned: kept}",
                "b:",
                "  hosts:",
                "    h1: {labels: {from: b}}",
            )
        },
        {"h1.vars.labels": {"from": "b"}, "h1.vars.cordoned": "kept"},
    ),
    (
        "label values written as numbers or booleans compare as text",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1: {labels: {gpus: 8, nvlink: true, ib: no}}"
            )
        },
        {"h1.vars.labels": {"gpus": "8", "nvlink": "true", "ib": "false"}},
    ),
    (
        "cordoned true is a cordon without a reason, false is none",
        {
            "hosts.yml": lines(
                "gpu:",
                "  hosts:",
                "    h1: {cordoned: true}",
                "    h2: {cordoned: false}",
                "    h3:",
            )
        },
        {"h1.vars.cordoned": NO_CORDON_REASON, "h2.vars.cordoned": None, "h3.vars.cordoned": None},
    ),
    (
        "the SSH settings come from ansible's variables, the last alias winning",
        {
            "hosts.yml": lines(
                "gpu:",
                "  hosts:",
                "    h1:",
                "      ansible_host: 10.0.0.1",
                "      ansible_port: '2200'",
                "      ansible_user: ops",
                "      ansible_ssh_private_key_file: ~/.ssh/fleet",
                "    h2:",
                "      ansible_host: 10.0.0.2",
                "      ansible_ssh_host: 10.9.9.2",
            )
        },
        {
            "h1.address": "10.0.0.1",
            "h1.port": 2200,
            "h1.user": "ops",
            "h1.private_key_file": "~/.ssh/fleet",
            "h2.address": "10.9.9.2",
            "h2.user": None,
        },
    ),
    (
        "an ansible_port variable beats the port written after the host name",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1:2222: {ansible_port: 2300}", "    h2:2222:"
            )
        },
        {"h1.port": 2300, "h2.port": 2222},
    ),
    (
        "other playbooks' variables are left alone",
        {"hosts.yml": lines("gpu:", "  vars: {ntp_servers: [a, b], label: x}", "  hosts: {h1: }")},
        {"h1.vars": HostVars()},
    ),
    (
        "a directory reads every YAML source in it and skips what ansible skips",
        {
            "10-a.yml": lines("gpu:", "  hosts: {h1: }"),
            "20-b.json": '{"cpu": {"hosts": {"c1": null}}}',
            "30-c": lines("edge:", "  hosts: {e1: }"),
            "sub/hosts.yaml": lines("far:", "  hosts: {f1: }"),
            "README.md": lines("# not an inventory"),
            "hosts.orig": lines("[old]", "x"),
            "last.retry": lines("x"),
            "notes.txt": lines("x"),
            ".hidden.yml": lines("hidden:", "  hosts: {ghost: }"),
            "group_vars/gpu.yml": lines("labels: {role: gpu}"),
        },
        {"groups.all": ("h1", "c1", "e1", "f1"), "h1.vars.labels": {"role": "gpu"}},
    ),
    (
        "where each of our variables came from is kept",
        {
            "hosts.yml": lines("gpu:", "  hosts:", "    h1:", "      cordoned: fan"),
            "group_vars/gpu.yml": lines("# gpu nodes", "labels: {role: gpu}"),
        },
        {
            "h1.origins.cordoned": ("hosts.yml", 4),
            "h1.origins.labels": ("group_vars/gpu.yml", 2),
        },
    ),
    (
        "an INI hosts file without extension beside YAML group_vars (Ansible's ini plugin)",
        {
            "hosts": lines("[gpu]", "h1 labels=\"{'role': 'a'}\"", "h2"),
            "group_vars/gpu.yml": lines("cordoned: maintenance"),
        },
        {
            "h1.vars.labels": {"role": "a"},
            "h1.origins.labels": ("hosts", 2),
            "h2.vars.cordoned": "maintenance",
            "groups.gpu": ("h1", "h2"),
        },
    ),
    (
        "INI values are Python literals: true is text, True a boolean, '1' text",
        {"hosts.ini": lines("h1 cordoned=true", "h2 cordoned=True", "h3 cordoned=False")},
        {
            "h1.vars.cordoned": "true",
            "h2.vars.cordoned": NO_CORDON_REASON,
            "h3.vars.cordoned": None,
            "groups.ungrouped": ("h1", "h2", "h3"),
        },
    ),
    (
        "an INI [group:vars] section may come before the group's own section",
        {"hosts.ini": lines("[gpu:vars]", "cordoned='fan'", "[gpu]", "h1")},
        {"h1.vars.cordoned": "fan", "h1.origins.cordoned": ("hosts.ini", 2)},
    ),
    (
        "an INI child group named before it is declared is added when it is",
        {
            "hosts.ini": lines(
                "[dc:children]", "gpu", "[gpu]", "h1", "[dc:vars]", "labels={'s': 'dc'}"
            )
        },
        {"h1.groups": ("all", "dc", "gpu"), "h1.vars.labels": {"s": "dc"}},
    ),
    (
        "an INI host's port is taken where the host is first named",
        {"hosts.ini": lines("[x]", "h1:2201", "[y]", "h1:2202 ansible_user=ops")},
        {"h1.port": 2201, "h1.user": "ops", "h1.groups": ("all", "x", "y")},
    ),
    (
        "an INI file after a YAML one in a directory adds to the YAML's groups",
        {
            "10-hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "20-vars.ini": lines("[gpu:vars]", "labels={'a': 'b'}", "[gpu:children]", "big"),
            "05-big": lines("[big]", "h2"),
        },
        {"h1.vars.labels": {"a": "b"}, "groups.gpu": ("h2", "h1")},
    ),
    (
        "a .yml file that YAML reads as text is read as INI, as Ansible falls back to it",
        {"hosts.yml": lines("h1 ansible_port=2200")},
        {"h1.port": 2200},
    ),
]


def relative(inventory: Inventory, root: Path) -> Inventory:
    """The same inventory with its origins named relative to `root`, for readable tables."""
    hosts = tuple(
        host.model_copy(
            update={
                "origins": {
                    key: (str(Path(file).relative_to(root)), line)
                    for key, (file, line) in host.origins.items()
                }
            }
        )
        for host in inventory.hosts
    )
    return inventory.model_copy(update={"hosts": hosts})


@pytest.mark.parametrize(
    ("files", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_an_inventory_directory_reads_as_ansible_reads_it(
    files: dict[str, str], expected: dict[str, Any], tmp_path: Path
) -> None:
    inventory = relative(load_inventory(write(tmp_path, files)), tmp_path)
    for where, value in expected.items():
        assert lookup(inventory, where) == value, where


def test_an_inventory_file_named_directly_uses_the_group_vars_beside_it(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "inv/hosts.yml": "gpu:\n  hosts:\n    h1:\n",
            "inv/other.yml": "cpu:\n  hosts:\n    c1:\n",
            "inv/group_vars/gpu.yml": "labels: {role: gpu}\n",
        },
    )
    inventory = load_inventory(tmp_path / "inv" / "hosts.yml")
    assert inventory.names() == ("h1",)
    assert inventory.host("h1").vars.labels == {"role": "gpu"}
    assert inventory.source == str(tmp_path / "inv" / "hosts.yml")


def test_the_pure_reader_needs_no_files() -> None:
    inventory = inventory_from_texts(
        "memory",
        [SourceText("hosts.yml", "gpu:\n  hosts:\n    h1:\n")],
        group_vars={"gpu": [SourceText("gpu.yml", "fabrics: [{name: ib, hcas: [mlx5_0]}]\n")]},
        host_vars={"h1": [SourceText("h1.yml", "cordoned: fan\n")]},
    )
    host = inventory.host("h1")
    assert host.vars.fabrics == (Fabric(name="ib", hcas=("mlx5_0",)),)
    assert host.vars.cordoned == "fan"
    assert host.origins["fabrics"] == ("gpu.yml", 1)


def test_an_empty_inventory_file_holds_no_hosts(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, {"hosts.yml": "# nothing yet\n"}) / "hosts.yml")
    assert inventory.hosts == ()
    assert inventory.groups == {"all": (), "ungrouped": ()}


def test_asking_for_a_host_the_inventory_lacks_is_a_key_error() -> None:
    inventory = inventory_from_texts("memory", [SourceText("h.yml", "g:\n  hosts:\n    h1:\n")])
    with pytest.raises(KeyError):
        inventory.host("h2")


# --- errors ---------------------------------------------------------------------------------

ERRORS: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "a misspelt fabric key names the file, line, key path and the near miss",
        {
            "hosts.yml": lines(
                "all:",
                "  children:",
                "    gpu:",
                "      hosts:",
                "        hgx-1:",
                "          fabrics:",
                "            - name: ib-east",
                "              hca: [mlx5_0]",
            )
        },
        [
            "hosts.yml:8: all.children.gpu.hosts.hgx-1.fabrics[0]: "
            "unknown key 'hca' (did you mean 'hcas'?)"
        ],
    ),
    (
        "labels written as a list are refused",
        {"hosts.yml": lines("gpu:", "  hosts:", "    h1:", "      labels: [a, b]")},
        ["hosts.yml:4: gpu.hosts.h1.labels: must be a mapping, not a list"],
    ),
    (
        "a label with a decimal number is refused, because YAML changed it",
        {"hosts.yml": lines("gpu:", "  vars:", "    labels:", "      driver: 535.10")},
        [
            "hosts.yml:4: gpu.vars.labels.driver: 535.1 is a number with a decimal point, which"
            " YAML may already have changed (1.10 reads as 1.1): write it in quotes"
        ],
    ),
    (
        "an empty cordon reason is refused where it is written",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "group_vars/gpu.yml": lines("cordoned: ''"),
        },
        [
            "group_vars/gpu.yml:1: cordoned: empty cordon reason: say why"
            ' (cordoned: "PSU fan failing"), write true, or remove the key'
        ],
    ),
    (
        "two fabrics with one name on a host are refused",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "host_vars/h1.yml": lines(
                "fabrics:",
                "  - name: ib",
                "    hcas: [mlx5_0]",
                "  - name: ib",
                "    hcas: [mlx5_1]",
            ),
        },
        ["host_vars/h1.yml:4: fabrics[1].name: fabric 'ib' is listed twice (first as fabrics[0])"],
    ),
    (
        "an HCA listed twice in one fabric is refused",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1:", "      fabrics: [{name: ib, hcas: [m0, m0]}]"
            )
        },
        ["hosts.yml:4: gpu.hosts.h1.fabrics[0].hcas[1]: HCA 'm0' is listed twice"],
    ),
    (
        "an HCA on two fabrics of one host is refused",
        {
            "hosts.yml": lines(
                "gpu:",
                "  hosts:",
                "    h1:",
                "      fabrics:",
                "        - {name: ib, hcas: [m0]}",
                "        - {name: roce, hcas: [m1, m0]}",
            )
        },
        [
            "hosts.yml:6: gpu.hosts.h1.fabrics[1].hcas[1]: HCA 'm0' is already on fabric 'ib':"
            " an HCA reaches one fabric"
        ],
    ),
    (
        "a fabric without HCAs is refused",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1:", "      fabrics: [{name: ib, hcas: []}]"
            )
        },
        ["hosts.yml:4: gpu.hosts.h1.fabrics[0].hcas: must not be empty"],
    ),
    (
        "a port that is not a number is refused",
        {"hosts.yml": lines("gpu:", "  vars:", "    ansible_port: ssh", "  hosts: {h1: }")},
        ["hosts.yml:3: gpu.vars.ansible_port: must be a port number, not text"],
    ),
    (
        "a misspelt group key is refused with its near miss",
        {"hosts.yml": lines("gpu:", "  host:", "    h1:")},
        [
            "hosts.yml:2: gpu.host: unknown key 'host' (did you mean 'hosts'?);"
            " a group has hosts, vars and children"
        ],
    ),
    (
        "hosts written as a list are refused",
        {"hosts.yml": lines("gpu:", "  hosts: [h1, h2]")},
        ["hosts.yml:2: gpu.hosts: must be a mapping, not a list"],
    ),
    (
        "a malformed host range names its line",
        {"hosts.yml": lines("gpu:", "  hosts:", "    hgx-[08:1]:")},
        [
            "hosts.yml:3: gpu.hosts.hgx-[08:1]: host range [08:1]:"
            " begin and end must have the same width"
        ],
    ),
    (
        "a group that contains its own parent is refused",
        {"hosts.yml": lines("a:", "  children:", "    b:", "      children:", "        a:")},
        ["hosts.yml:3: a.children.b: group 'b' under 'a' makes a loop"],
    ),
    (
        "an INI section of an unknown type names its line",
        {"hosts.ini": lines("[gpu]", "h1", "[gpu:hostz]")},
        ["hosts.ini:3: section [gpu:hostz] has unknown type 'hostz' (hosts, vars or children)"],
    ),
    (
        "an INI line in brackets that is not a section is refused",
        {"hosts.ini": lines("[gpu nodes]")},
        [
            "hosts.ini:1: invalid section '[gpu nodes]': a section is [group], [group:vars]"
            " or [group:children], with no spaces"
        ],
    ),
    (
        "an INI host variable without = is refused",
        {"hosts.ini": lines("[gpu]", "h1 gpu")},
        ["hosts.ini:2: expected key=value after the host name, got: gpu"],
    ),
    (
        "an INI host line with an unclosed quote is refused",
        {"hosts.ini": lines("[gpu]", "h1 labels='oops")},
        ["hosts.ini:2: cannot split the host line: No closing quotation"],
    ),
    (
        "an INI [group:vars] for a group never declared is refused",
        {"hosts.ini": lines("[gpu]", "h1", "[cpu:vars]", "x=1")},
        ["hosts.ini:3: section [cpu:vars] is for group 'cpu', never declared"],
    ),
    (
        "a bad value of ours in INI names its line and key",
        {"hosts.ini": lines("[gpu]", "h1 cordoned=3", "[gpu:vars]", "labels=oops")},
        [
            "hosts.ini:2: h1.cordoned: must be a reason (text) or true/false, not a number",
            "hosts.ini:4: gpu.vars.labels: must be a mapping, not text",
        ],
    ),
    (
        "an INI group that contains its own parent is refused",
        {"hosts.ini": lines("[a:children]", "b", "[b:children]", "a")},
        ["hosts.ini:4: b.children.a: group 'a' under 'b' makes a loop"],
    ),
    (
        "a host range of a hundred million hosts is refused before it is expanded (INI)",
        {"hosts.ini": lines("[gpu]", "n[0:99999999]")},
        [
            "hosts.ini:2: host pattern 'n[0:99999999]' names 100,000,000 hosts, more than"
            " 100,000: refused before expanding it"
        ],
    ),
    (
        "a host range of a hundred million hosts is refused before it is expanded (YAML)",
        {"hosts.yml": lines("gpu:", "  hosts:", "    n[0:9999][0:9999]:")},
        [
            "hosts.yml:3: gpu.hosts.n[0:9999][0:9999]: host pattern 'n[0:9999][0:9999]'"
            " names 100,000,000 hosts, more than 100,000: refused before expanding it"
        ],
    ),
    (
        "an inventory naming hosts more than 200,000 times in all is refused",
        {"hosts.ini": lines("[gpu]", *["n[1:100000]"] * 3)},
        ["hosts.ini:4: n[1:100000]: the inventory names hosts more than 200,000 times"],
    ),
    (
        "an INI value too long for Python's parser to read safely is refused",
        {"hosts.ini": lines("[gpu]", "h1 labels=[" + "1," * 35_000 + "]")},
        [
            "hosts.ini:2: a value of 70,002 characters, more than 65,536: refused before"
            " Python's parser reads it"
        ],
    ),
    (
        "a file without extension read as neither INI nor YAML says both",
        {"hosts": lines("- h1", "- h2")},
        [
            "hosts:1: expected key=value after the host name, got: h1"
            " (read as YAML: an inventory is a mapping of groups (all: ...), not a list)"
        ],
    ),
    (
        "a TOML inventory is refused",
        {"hosts.toml": lines("[gpu.hosts.h1]")},
        [
            "hosts.toml: a TOML inventory is not read: ctl reads Ansible's YAML and INI forms"
            " (save its hosts with: ansible-inventory -i FILE --list -y)"
        ],
    ),
    (
        "a variables file that is not a mapping is refused",
        {"hosts.yml": lines("gpu:", "  hosts: {h1: }"), "group_vars/gpu.yml": lines("- labels")},
        ["group_vars/gpu.yml:1: a variables file must be a mapping, not a list"],
    ),
    (
        "a Jinja template in a value we read is refused",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1:", "      ansible_host: '{{ inventory_hostname }}.mgmt'"
            )
        },
        [
            "hosts.yml:4: gpu.hosts.h1.ansible_host:"
            " ctl does not render Jinja templates: write the value itself"
        ],
    ),
    (
        "an inventory plugin configuration is refused",
        {"aws.yml": lines("plugin: amazon.aws.aws_ec2")},
        [
            "aws.yml:1: plugin: an inventory plugin configuration is not read:"
            " ctl reads static inventories only"
        ],
    ),
    (
        "a value hidden by a higher-precedence one is still checked",
        {
            "hosts.yml": lines("gpu:", "  vars:", "    labels: [oops]", "  hosts: {h1: }"),
            "host_vars/h1.yml": lines("labels: {role: gpu}"),
        },
        ["hosts.yml:3: gpu.vars.labels: must be a mapping, not a list"],
    ),
    (
        "a token host is a host name, not a URL",
        {
            "hosts.yml": lines("gpu:", "  hosts: {h1: }"),
            "group_vars/gpu.yml": lines("modelfleet_token_hosts: ['https://mirror.example']"),
        },
        [
            "group_vars/gpu.yml:1: modelfleet_token_hosts[0]: 'https://mirror.example' is not"
            " a host name: letters, digits and '-' in dot-separated labels, without a scheme,"
            " a port or a path"
        ],
    ),
    (
        "every problem is reported at once, in file and line order",
        {
            "hosts.yml": lines(
                "gpu:", "  hosts:", "    h1:", "      cordoned: 3", "    h2:", "      labels: x"
            ),
            "group_vars/gpu.yml": lines("gpu_classes: {H100: ''}"),
        },
        [
            "group_vars/gpu.yml:1: gpu_classes.H100: must not be empty",
            "hosts.yml:4: gpu.hosts.h1.cordoned:"
            " must be a reason (text) or true/false, not a number",
            "hosts.yml:6: gpu.hosts.h2.labels: must be a mapping, not text",
        ],
    ),
]


@pytest.mark.parametrize(
    ("files", "expected"), [case[1:] for case in ERRORS], ids=[case[0] for case in ERRORS]
)
def test_bad_input_is_refused_naming_file_line_and_key(
    files: dict[str, str], expected: list[str], tmp_path: Path
) -> None:
    with pytest.raises(InputError) as caught:
        load_inventory(write(tmp_path, files))
    assert str(caught.value).replace(f"{tmp_path}/", "").splitlines() == expected


def test_invalid_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    write(tmp_path, {"hosts.yml": "gpu:\n  hosts:\n    h1: [\n"})
    with pytest.raises(InputError) as caught:
        load_inventory(tmp_path)
    (problem,) = caught.value.problems
    assert problem.file == str(tmp_path / "hosts.yml")
    assert problem.line is not None
    assert problem.message.startswith("invalid YAML")


def test_a_yaml_file_with_a_syntax_error_is_refused_as_yaml(tmp_path: Path) -> None:
    # Ansible's ini plugin would try it too, and fail sooner; the YAML error is the useful one
    write(tmp_path, {"hosts.yml": lines("gpu:", "  hosts:", "    h1: {labels: [}")})
    with pytest.raises(InputError) as caught:
        load_inventory(tmp_path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.message.startswith("invalid YAML")) == (3, True)


def test_an_inventory_path_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such inventory file or directory"):
        load_inventory(tmp_path / "nowhere")
