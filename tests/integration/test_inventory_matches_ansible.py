"""Our inventory loader reads every inventory the way `ansible-inventory --list` does.

Runs on the inventories under tests/integration/inventories/, on every inventory published
with the project (examples/*/inventory, examples/inventory, inventory/), so a new example is
checked the day it is added, and on each inventory of the unit tests' precedence table, so
every rule claimed there is Ansible's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cli.edges.tools import ansible_command
from cli.inventory.load import load_inventory
from cli.inventory.schema import DEFAULT_SSH_PORT, Inventory, validate_host_vars
from tests.ctl import ctl
from tests.unit.inventory.test_load import CASES as UNIT_CASES
from tests.unit.inventory.test_load import write

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OURS = [
    HERE / "inventories" / "tricky",
    HERE / "inventories" / "single-file" / "hosts.yml",
]


def published_inventories() -> list[Path]:
    """Every inventory the project publishes, whenever it is added."""
    found = sorted((ROOT / "examples").glob("*/inventory"))
    found += [
        path for path in (ROOT / "examples" / "inventory", ROOT / "inventory") if path.exists()
    ]
    return found


INVENTORIES = OURS + published_inventories()


def ansible_environment(tmp_path: Path) -> dict[str, str]:
    """This environment less every ANSIBLE_* setting, and Ansible's defaults in `tmp_path`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\n")
    return env | {
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_INVENTORY_ENABLED": "yaml,ini",  # the forms ctl reads, in Ansible's order
        "ANSIBLE_NOCOLOR": "1",
    }


def ansible_list(
    inventory: Path, tmp_path: Path, vault_password_file: Path | None = None
) -> dict[str, Any]:
    """`ansible-inventory -i INVENTORY --list`, with Ansible's defaults and nothing of ours."""
    env = ansible_environment(tmp_path) | {
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
    }
    vault = ["--vault-password-file", str(vault_password_file)] if vault_password_file else []
    done = subprocess.run(
        [ansible_command("ansible-inventory"), "-i", str(inventory), "--list", *vault],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listed: dict[str, Any] = json.loads(done.stdout)
    return listed


def members(listed: Mapping[str, Any]) -> dict[str, set[str]]:
    """group → every host in it or in its descendants (the JSON lists direct hosts only)."""
    groups = {name: entry for name, entry in listed.items() if name != "_meta"}

    def hosts_of(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        entry = groups.get(name, {})
        found = set(entry.get("hosts", ()))
        for child in entry.get("children", ()):
            if child not in seen:
                found |= hosts_of(child, seen | {name})
        return found

    return {name: hosts_of(name) for name in groups}


def last_set(hostvars: Mapping[str, Any], *keys: str) -> Any:
    """The last of `keys` with a value, as Ansible's connection plugins pick them."""
    found = None
    for key in keys:
        if hostvars.get(key) is not None:
            found = hostvars[key]
    return found


def compare(ours: Inventory, listed: Mapping[str, Any]) -> None:
    hostvars: Mapping[str, Mapping[str, Any]] = listed["_meta"]["hostvars"]
    theirs = members(listed)
    assert set(ours.names()) == theirs["all"]
    for group, names in ours.groups.items():
        assert set(names) == theirs.get(group, set()), f"members of group {group}"
    for group, found in theirs.items():
        assert group in ours.groups or not found, f"group {group} is missing"

    for host in ours.hosts:
        seen = hostvars.get(host.name, {})
        in_groups = {group for group, names in theirs.items() if host.name in names}
        assert set(host.groups) == in_groups, f"groups of {host.name}"
        assert host.vars == validate_host_vars(seen), f"variables of {host.name}"
        address = last_set(seen, "ansible_host", "ansible_ssh_host") or host.name
        port = last_set(seen, "ansible_port", "ansible_ssh_port") or DEFAULT_SSH_PORT
        assert (host.address, host.port) == (address, int(port)), f"address of {host.name}"
        assert host.user == last_set(seen, "ansible_user", "ansible_ssh_user")
        assert host.private_key_file == last_set(
            seen, "ansible_private_key_file", "ansible_ssh_private_key_file"
        )


@pytest.mark.parametrize(
    "inventory", INVENTORIES, ids=[str(path.relative_to(ROOT)) for path in INVENTORIES]
)
def test_our_loader_reads_the_inventory_as_ansible_inventory_does(
    inventory: Path, tmp_path: Path
) -> None:
    compare(load_inventory(inventory), ansible_list(inventory, tmp_path))


def test_the_tricky_inventory_exercises_what_it_claims_to() -> None:
    """Guard the fixture itself: if it stopped being tricky, the comparison above proves less."""
    ours = load_inventory(OURS[0])
    assert "sb-1" in ours.names() and "nas-b-2" in ours.names()
    assert ours.host("hgx-01").groups == (
        "all",
        "dc1",
        "special",
        "gpu",
        "rack-a",
        "rack-a-top",
    )
    assert ours.host("hgx-03").user == "gpu-ops"  # group_vars/gpu/nested/30-deeper
    assert ours.host("hgx-05").port == 2201  # the host key's :2201 beats dc1's ansible_port
    assert ours.host("hgx-01").vars.labels == {"rack": "a"}  # group_vars/rack-a, not rack-a.yml
    assert ours.host("hgx-03").user == "gpu-ops"  # group_vars/gpu/nested/30-deeper
    # ansible_group_priority 20 puts alpha after override, although 'alpha' sorts first
    assert ours.host("cpu10").user == "alpha-user"
    assert ours.host("node-b").vars.labels == {"role": "second"}  # host_vars/node-b/, sorted
    assert ours.host("sb-1").vars.labels == {"site": "base"}  # site-b/group_vars/ is not read
    assert ours.host("cpu0").private_key_file == "/keys/cpu0-ssh"
    assert ours.groups["ungrouped"] == ("bastion",)


@pytest.mark.parametrize(
    ("files", "claims"), [case[1:] for case in UNIT_CASES], ids=[case[0] for case in UNIT_CASES]
)
def test_each_rule_the_unit_tests_claim_is_ansibles_rule(
    files: dict[str, str], claims: dict[str, Any], tmp_path: Path
) -> None:
    root = write(tmp_path / "inventory", files)
    compare(load_inventory(root), ansible_list(root, tmp_path))


def test_a_vault_encrypted_variables_file_without_a_password_is_skipped_said_and_never_read(
    tmp_path: Path,
) -> None:
    # ansible-vault itself encrypts the file; Ansible, given the password, reads it. ctl
    # reads no secret: it leaves the file out with a warning naming it, and every variable
    # of its own still comes out as Ansible's (ctl's keys belong in plain files).
    inventory = write(
        tmp_path / "inventory",
        {
            "hosts.yml": "gpu:\n  hosts:\n    h1:\n",
            "group_vars/gpu/10-plain.yml": "labels: {role: inference}\n",
            "group_vars/gpu/20-secrets.yml": "api_token: s3cret-value\n",
        },
    )
    password = tmp_path / "vault-password"
    password.write_text("correct horse\n")
    secrets = inventory / "group_vars" / "gpu" / "20-secrets.yml"
    encrypt = [ansible_command("ansible-vault"), "encrypt", "--vault-password-file", str(password)]
    done = subprocess.run(
        [*encrypt, str(secrets)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert secrets.read_text().startswith("$ANSIBLE_VAULT;")

    ours = load_inventory(inventory)
    listed = ansible_list(inventory, tmp_path, password)
    assert listed["_meta"]["hostvars"]["h1"]["api_token"] == "s3cret-value"  # Ansible's view
    compare(ours, listed)
    assert ours.host("h1").vars.labels == {"role": "inference"}
    assert ours.warnings == (
        f"{secrets}: encrypted with ansible-vault; ctl reads no variable from it (give ctl the"
        " password with --vault-password-file, or write labels, fabrics, cordoned and the rest"
        " of ctl's keys in a plain file)",
    )
    assert "s3cret" not in ours.model_dump_json()
    snapshot = tmp_path / "facts"
    snapshot.mkdir()
    (snapshot / "h1.json").write_text((ROOT / "examples" / "facts" / "cpu-big.json").read_text())
    shown = ctl("nodes", "--inventory", str(inventory), "--facts", str(snapshot))
    assert shown.returncode == 0, shown.stderr
    assert f"warning: {secrets}: encrypted with ansible-vault" in shown.stderr
    assert "s3cret" not in shown.stdout + shown.stderr


def vaulted_inventory(tmp_path: Path, *, vault_id: str | None = None) -> tuple[Path, Path]:
    """An inventory whose hosts file and one group_vars file ansible-vault encrypted, with
    ctl's own keys in them, and the password file that opens them."""
    inventory = write(
        tmp_path / "inventory",
        {
            "hosts.yml": "gpu:\n  hosts:\n    h1:\n      ansible_host: 10.9.0.1\n",
            "group_vars/gpu/10-plain.yml": "labels: {role: inference}\n",
            "group_vars/gpu/20-secrets.yml": (
                "api_token: s3cret-value\nlabels: {role: vaulted}\ncordoned: from the vault\n"
            ),
        },
    )
    password = tmp_path / "vault-password"
    password.write_text("correct horse\n")
    named = ["--vault-id", f"{vault_id}@{password}"] if vault_id else []
    secret = named or ["--vault-password-file", str(password)]
    for name in ("hosts.yml", "group_vars/gpu/20-secrets.yml"):
        done = subprocess.run(
            [ansible_command("ansible-vault"), "encrypt", *secret, str(inventory / name)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    return inventory, password


@pytest.mark.parametrize("vault_id", [None, "prod"])
def test_given_the_password_ctl_reads_vaulted_files_as_ansible_inventory_does(
    vault_id: str | None, tmp_path: Path
) -> None:
    from cli.ops.context import AppContext

    inventory, password = vaulted_inventory(tmp_path, vault_id=vault_id)
    ours = load_inventory(inventory, AppContext(vault_password_file=password).decrypt())
    listed = ansible_list(inventory, tmp_path, password)
    compare(ours, listed)  # labels and cordoned from the vaulted file, as Ansible reads them
    assert ours.host("h1").vars.labels == {"role": "vaulted"}
    assert ours.host("h1").vars.cordoned == "from the vault"
    assert ours.host("h1").address == "10.9.0.1"  # from the vaulted hosts file
    assert ours.warnings == ()
    assert "s3cret" not in ours.model_dump_json()  # the secret is not one of ctl's keys


def test_ctl_takes_the_password_file_by_option_or_environment_and_never_shows_it(
    tmp_path: Path,
) -> None:
    inventory, password = vaulted_inventory(tmp_path)
    snapshot = tmp_path / "facts"
    snapshot.mkdir()
    (snapshot / "h1.json").write_text((ROOT / "examples" / "facts" / "cpu-big.json").read_text())
    command = ["nodes", "--inventory", str(inventory), "--facts", str(snapshot), "--json"]
    by_option = ctl("--vault-password-file", str(password), *command)
    by_env = ctl(*command, env={"ANSIBLE_VAULT_PASSWORD_FILE": str(password)})
    for done in (by_option, by_env):
        assert (done.returncode, done.stderr) == (0, "")
        assert "from the vault" in done.stdout  # the cordon the vaulted file sets
        assert "correct horse" not in done.stdout + done.stderr
        assert "s3cret" not in done.stdout + done.stderr

    without = ctl(*command)
    assert without.returncode == 2  # the hosts file itself is vaulted: nothing to read
    assert without.stderr == (
        f"error: {inventory}/hosts.yml:1: encrypted with ansible-vault: ctl reads it given the"
        " password (--vault-password-file, ANSIBLE_VAULT_PASSWORD_FILE), and never edits it\n"
    )


def test_a_wrong_vault_password_exits_2_naming_the_file(tmp_path: Path) -> None:
    inventory, password = vaulted_inventory(tmp_path)
    password.write_text("wrong horse\n")
    done = ctl("--vault-password-file", str(password), "nodes", "--inventory", str(inventory))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {inventory}/hosts.yml: encrypted with ansible-vault, and the password in"
        f" {password} does not open it\n"
    )
    assert "horse" not in done.stderr.replace(str(password), "")


def test_cordon_sees_vaulted_files_as_the_fleet_commands_do_and_edits_none(
    tmp_path: Path,
) -> None:
    inventory, password = vaulted_inventory(tmp_path)
    hosts, secrets = inventory / "hosts.yml", inventory / "group_vars" / "gpu" / "20-secrets.yml"
    before = {path: path.read_bytes() for path in (hosts, secrets)}
    for command in (["uncordon", "h1"], ["cordon", "h1", "--reason", "fan"]):
        done = ctl("--vault-password-file", str(password), *command, "-i", str(inventory))
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (  # the cordon ctl nodes shows, and ctl cannot splice
            f"error: {secrets}: cordoned: the cordon of h1 is in this file, encrypted with"
            " ansible-vault: change it with ansible-vault edit\n"
        )
    done = ctl("uncordon", "h1", "-i", str(inventory))  # no password: the hosts file is shut
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"error: {hosts}:1: encrypted with ansible-vault:")
    assert {path: path.read_bytes() for path in (hosts, secrets)} == before
