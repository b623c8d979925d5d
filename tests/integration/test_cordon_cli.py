"""`ctl cordon` and `ctl uncordon` as an operator runs them, checked against Ansible itself.

Each scenario copies the tricky inventory (ranges, ports, JSON, host_vars directories, group
cordons, a source in a subdirectory), runs ctl, and asks `ansible-inventory --list` what the
host's `cordoned` now is: what Ansible reads is the only thing that counts. Our loader must
agree with Ansible on the whole edited inventory too.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from cli.inventory.load import load_inventory
from tests.ctl import ROOT, ctl
from tests.integration.test_inventory_matches_ansible import ansible_list, compare
from tests.unit.inventory.test_edit import HOSTS

TRICKY = Path(__file__).resolve().parent / "inventories" / "tricky"
INI_MIXED = TRICKY.parent / "ini-mixed"
DOCS = ROOT / "docs" / "inventory.md"
ABSENT = object()


@pytest.fixture
def tricky(tmp_path: Path) -> Path:
    """A copy of the tricky inventory at tmp/inventory, so ctl's output names it relatively."""
    shutil.copytree(TRICKY, tmp_path / "inventory")
    return tmp_path / "inventory"


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# (what, command, host, its `cordoned` in ansible-inventory --list after, ctl's line)
SCENARIOS = [
    (
        "a host in a range under a cordoned group gets a host_vars file",
        ["cordon", "hgx-01", "--reason", "PSU fan failing"],
        "PSU fan failing",
        'hgx-01 cordoned: "PSU fan failing" (inventory/host_vars/hgx-01.yml:4, new file),'
        ' over "rack maintenance" set for group rack-a-top (inventory/10-base.yml:39)',
    ),
    (
        "uncordoning a host its group cordons writes false for it alone",
        ["uncordon", "hgx-01"],
        False,
        "hgx-01 uncordoned: cordoned: false (inventory/host_vars/hgx-01.yml:4, new file)"
        ' overrides "rack maintenance" set for group rack-a-top (inventory/10-base.yml:39),'
        " which stays on its other hosts",
    ),
    (
        "a host with a port in its key is recordoned inline",
        ["cordon", "hgx-05", "--reason", "BMC flaky"],
        "BMC flaky",
        'hgx-05 cordoned: "BMC flaky" (inventory/10-base.yml:23), was "PSU fan failing"',
    ),
    (
        "an inline host-level cordon is removed",
        ["uncordon", "hgx-05"],
        ABSENT,
        'hgx-05 uncordoned: removed cordoned: "PSU fan failing" (inventory/10-base.yml:23)',
    ),
    (
        "a null host in a JSON source becomes a JSON object",
        ["cordon", "edge-2", "--reason", "arm board swap"],
        "arm board swap",
        'edge-2 cordoned: "arm board swap" (inventory/30-json.json:6)',
    ),
    (
        "a host_vars directory gets cordon.yml",
        ["cordon", "node-b", "--reason", "noisy fan"],
        "noisy fan",
        'node-b cordoned: "noisy fan" (inventory/host_vars/node-b/cordon.yml:4, new file)',
    ),
    (
        "a host_vars file without extension is edited in place",
        ["cordon", "cpu0", "--reason", "reimaging"],
        "reimaging",
        'cpu0 cordoned: "reimaging" (inventory/host_vars/cpu0:3)',
    ),
    (
        "a host of a source in a subdirectory gets host_vars where Ansible reads them",
        ["cordon", "sb-1", "--reason", "site b power"],
        "site b power",
        'sb-1 cordoned: "site b power" (inventory/host_vars/sb-1.yml:4, new file)',
    ),
]


@pytest.fixture
def ini_mixed(tmp_path: Path) -> Path:
    """A copy of the mixed INI and YAML inventory at tmp/inventory."""
    shutil.copytree(INI_MIXED, tmp_path / "inventory")
    return tmp_path / "inventory"


# The same, on an INI hosts file beside YAML: ctl edits one word of one host line.
INI_SCENARIOS = [
    (
        "an INI host line takes the cordon as its last word",
        ["cordon", "l40s-1", "--reason", "fan 1"],
        "fan 1",
        'l40s-1 cordoned: "fan 1" (inventory/10-hosts:8)',
    ),
    (
        "an INI host line's cordon is replaced where it is",
        ["cordon", "hgx-05", "--reason", "PSU replaced"],
        "PSU replaced",
        'hgx-05 cordoned: "PSU replaced" (inventory/10-hosts:7), was "PSU fan failing"',
    ),
    (
        "an INI host line's cordon is removed",
        ["uncordon", "hgx-05"],
        ABSENT,
        'hgx-05 uncordoned: removed cordoned: "PSU fan failing" (inventory/10-hosts:7)',
    ),
    (
        "a host of a group cordoned in [cpu:vars] gets False on its own line",
        ["uncordon", "node-b"],
        False,
        "node-b uncordoned: cordoned: false (inventory/10-hosts:26) overrides"
        ' "rack 7 rewiring   # not a literal: all of it is the reason, this comment too"'
        " set for group cpu (inventory/10-hosts:29), which stays on its other hosts",
    ),
    (
        "a host of an INI range gets a host_vars file, the INI file untouched",
        ["cordon", "hgx-03", "--reason", "IB cable loose"],
        "IB cable loose",
        'hgx-03 cordoned: "IB cable loose" (inventory/host_vars/hgx-03.yml:4, new file)',
    ),
]


@pytest.mark.parametrize(
    ("source", "command", "expected", "said"),
    [(TRICKY, *scenario[1:]) for scenario in SCENARIOS]
    + [(INI_MIXED, *scenario[1:]) for scenario in INI_SCENARIOS],
    ids=[scenario[0] for scenario in (*SCENARIOS, *INI_SCENARIOS)],
)
def test_after_ctl_writes_a_cordon_ansible_reads_the_one_asked_for(
    source: Path, command: list[str], expected: object, said: str, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(source, inventory)
    before = files_of(inventory)
    done = ctl(*command, "--inventory", "inventory", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, said + "\n", "")

    listed = ansible_list(inventory, tmp_path)
    hostvars = listed["_meta"]["hostvars"][command[1]]
    assert hostvars.get("cordoned", ABSENT) == expected
    compare(load_inventory(inventory), listed)
    changed = {name for name, data in files_of(inventory).items() if before.get(name) != data}
    assert len(changed) == 1, changed
    if "10-hosts" in changed:  # the INI hosts file: one line changed, every other byte kept
        old = before["10-hosts"].splitlines(keepends=True)
        new = (inventory / "10-hosts").read_bytes().splitlines(keepends=True)
        assert len(old) == len(new)
        assert sum(a != b for a, b in zip(old, new, strict=True)) == 1


def test_cordon_then_uncordon_of_a_range_host_leaves_the_inventory_as_it_was(
    tricky: Path, tmp_path: Path
) -> None:
    before = files_of(tricky)
    assert ctl("cordon", "hgx-06", "-r", "x", "-i", "inventory", cwd=tmp_path).returncode == 0
    assert "host_vars/hgx-06.yml" in files_of(tricky)
    done = ctl("uncordon", "hgx-06", "-i", "inventory", cwd=tmp_path)
    assert done.stdout.endswith("(inventory/host_vars/hgx-06.yml:4, file deleted)\n")
    assert files_of(tricky) == before
    compare(load_inventory(tricky), ansible_list(tricky, tmp_path))


# --- exit codes and what the operator reads ---------------------------------------------------


def test_uncordoning_a_node_that_is_not_cordoned_exits_0_and_says_so(
    tricky: Path, tmp_path: Path
) -> None:
    done = ctl("uncordon", "hgx-03", "-i", "inventory", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hgx-03 was not cordoned\n", "")


def test_an_unknown_node_exits_2_with_the_near_miss_and_changes_nothing(
    tricky: Path, tmp_path: Path
) -> None:
    before = files_of(tricky)
    done = ctl("cordon", "hgx-5", "-r", "x", "-i", "inventory", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: inventory: no host 'hgx-5' in this inventory (did you mean 'hgx-05'?)\n"
    )
    assert done.stdout == ""
    assert files_of(tricky) == before


def test_an_empty_reason_exits_2(tricky: Path, tmp_path: Path) -> None:
    done = ctl("cordon", "hgx-03", "--reason", " ", "-i", "inventory", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --reason: empty: say why")


def test_a_missing_reason_is_a_usage_error(tricky: Path, tmp_path: Path) -> None:
    done = ctl("cordon", "hgx-03", "-i", "inventory", cwd=tmp_path)
    assert done.returncode == 2
    assert "--reason" in done.stderr


def test_a_cordon_an_ini_line_cannot_take_exits_2_naming_file_and_line(
    ini_mixed: Path, tmp_path: Path
) -> None:
    hosts = ini_mixed / "10-hosts"
    hosts.write_text(
        hosts.read_text().replace("node-b cordoned=True", "node-b cordoned=True cordoned='fan'")
    )
    before = files_of(ini_mixed)
    done = ctl("uncordon", "node-b", "-i", "inventory", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: inventory/10-hosts:26: cordoned: is written 2 times on this host line:"
        " edit it by hand\n"
    )
    assert files_of(ini_mixed) == before


def test_a_vaulted_cordon_exits_2_naming_file_and_line(tricky: Path, tmp_path: Path) -> None:
    vaulted = tricky / "host_vars" / "hgx-03.yml"
    vaulted.write_text("cordoned: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3031\n")
    done = ctl("uncordon", "hgx-03", "-i", "inventory", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: inventory/host_vars/hgx-03.yml:1: cordoned:")
    assert "Vault" in done.stderr
    assert vaulted.read_text().startswith("cordoned: !vault |")


def test_a_reason_with_brackets_is_printed_as_written(tricky: Path, tmp_path: Path) -> None:
    done = ctl("cordon", "hgx-03", "-r", "IB cable [port 2]", "-i", "inventory", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('hgx-03 cordoned: "IB cable [port 2]" (inventory/')
    assert load_inventory(tricky).host("hgx-03").vars.cordoned == "IB cable [port 2]"


# --- the docs ------------------------------------------------------------------------------


def docs_sessions() -> list[list[tuple[list[str], str]]]:
    """Each console block of the Cordoning section: (command arguments, its output) in order."""
    section = DOCS.read_text().split("## Cordoning", 1)[1].split("\n## ", 1)[0]
    sessions = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        steps: list[tuple[list[str], str]] = []
        for line in block.splitlines(keepends=True):
            if line.startswith("$ ctl "):
                steps.append((shlex.split(line[len("$ ctl ") :]), ""))
            else:
                steps[-1] = (steps[-1][0], steps[-1][1] + line)
        sessions.append(steps)
    return sessions


def the_example_inventory(root: Path) -> None:
    shutil.copytree(ROOT / "examples" / "inventory", root)


def an_inventory_with_a_cordoned_group(root: Path) -> None:
    root.mkdir()
    (root / "hosts.yml").write_text(HOSTS)


def the_mixed_ini_inventory(root: Path) -> None:
    shutil.copytree(INI_MIXED, root)


def test_the_cordoning_examples_in_the_docs_are_what_ctl_prints(tmp_path: Path) -> None:
    sessions = docs_sessions()
    makers = [the_example_inventory, an_inventory_with_a_cordoned_group, the_mixed_ini_inventory]
    assert len(sessions) == len(makers)
    for index, (session, make) in enumerate(zip(sessions, makers, strict=True)):
        cwd = tmp_path / str(index)
        cwd.mkdir()
        make(cwd / "inventory")
        for args, output in session:
            done = ctl(*args, cwd=cwd)
            assert (done.returncode, done.stderr) == (0, ""), args
            assert done.stdout == output, args
