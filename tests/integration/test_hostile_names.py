"""Names and files turned against ctl (issue 25): a host name that is a path, a state file
that is not what ctl wrote, a facts directory holding a FIFO or a symlink. Each is bad
input said in one line, or a warning, never a traceback, a hang or a file written outside
ctl's state directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cli.catalog.load import load_catalog
from cli.reconcile.ledger import ledger_path
from tests.ctl import ROOT, ctl


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def test_a_host_named_as_a_path_is_refused_at_load_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    # The reproduction: the facts cache of this host, four directories up from
    # state/modelfleet/facts/KEY/, is the CA's revocation list.
    ca = tmp_path / "ca"
    ca.mkdir()
    (ca / "revoked.json").write_text("[]\n")
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    ../../../../ca/revoked:\n      ansible_host: 127.0.0.1\n"
        "      ansible_port: 1\n"
    )
    before = files_under(tmp_path)
    result = ctl("nodes", "-i", str(inventory), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {inventory / 'hosts.yml'}:3: all.hosts.../../../../ca/revoked: host name"
        " '../../../../ca/revoked' is not a host name or address: letters, digits, '-', '_',"
        " '.' and ':' only\n"
    )
    assert files_under(tmp_path) == before


def test_an_ini_host_named_as_a_path_is_refused_at_its_line(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts"
    inventory.write_text("[gpu]\nhgx-1\n..\n")
    result = ctl("nodes", "-i", str(inventory), env={"XDG_STATE_HOME": str(tmp_path / "s")})
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: {inventory}:3: ..: host name '..' starts with '-' or '.', or has '..':"
        " not a host name\n"
    )
    assert not (tmp_path / "s").exists()


HOLD = """
import sys, time
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from cli.edges.lock import exclusive, fleet_lock_path
with exclusive(fleet_lock_path(Path(sys.argv[1]), Path(sys.argv[2])), timeout=5, command="x"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_lock_held_for_an_inventory_directory_stops_a_cordon_through_its_file(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "examples" / "inventory", inventory)
    hosts = inventory / "hosts.yml"
    before = files_under(inventory)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(inventory), str(tmp_path / "s" / "modelfleet")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = ctl(
            "--lock-timeout", "0.5", "cordon", "hgx-1", "-i", str(hosts), "--reason", "fan",
            env={"XDG_STATE_HOME": str(tmp_path / "s")},
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert result.returncode == 1, result.stderr
    assert "for more than 0.5 s; nothing was changed" in result.stderr
    assert files_under(inventory) == before


EXAMPLES = ROOT / "examples"


def test_a_ledger_entry_with_a_naive_time_is_a_warning_and_the_pass_goes_on(
    tmp_path: Path,
) -> None:
    # It crashed `reconcile --dry-run` with a traceback: a naive time against the clock's.
    inventory = EXAMPLES / "inventory"
    ledger = ledger_path(inventory, tmp_path / "s" / "modelfleet")
    ledger.parent.mkdir(parents=True)
    naive = {"failures": 2, "until": "2026-11-30T09:00:00"}
    models = load_catalog(EXAMPLES / "catalog.yaml").models
    ledger.write_text(json.dumps(dict.fromkeys(models, naive)))
    result = ctl(
        "reconcile", "--dry-run", "--catalog", str(EXAMPLES / "catalog.yaml"),
        "-i", str(inventory), "--facts", str(EXAMPLES / "facts"),
        env={"XDG_STATE_HOME": str(tmp_path / "s")},
    )  # fmt: skip
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 1), result.stderr
    assert (
        f"warning: ignoring unreadable backoff ledger {ledger} (until is not a time with its"
        " UTC offset): it is written afresh\n"
    ) in result.stderr


def test_a_fifo_in_a_facts_directory_is_bad_input_not_a_hang(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)
    os.mkfifo(facts / "zz-fifo.json")
    result = ctl("nodes", "-i", str(EXAMPLES / "inventory"), "--facts", str(facts), timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: {facts / 'zz-fifo.json'}: cannot read: not a regular file but a FIFO\n"
    )


def test_a_symlink_in_a_facts_directory_is_not_followed_nor_its_target_quoted(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$saltsalt$SECRETHASH:19000:0:99999:7:::\n")
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)
    (facts / "zz-link.json").symlink_to(secret)
    (facts / "zz-plain.json").write_text("root: $6$saltsalt$SECRETHASH\n")
    result = ctl("nodes", "-i", str(EXAMPLES / "inventory"), "--facts", str(facts))
    assert result.returncode == 2, result.stderr
    assert "SECRETHASH" not in result.stderr
    assert result.stderr == (
        f"error: {facts / 'zz-link.json'}: cannot read: a symbolic link, not followed\n"
        f"error: {facts / 'zz-plain.json'}:1: an unknown key\n"
        f"error: {facts / 'zz-plain.json'}:1: missing required key 'gathered_at'\n"
    )


def test_an_unfollowed_connection_is_one_warning_line_naming_the_host_and_its_file(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    host_vars = inventory / "host_vars" / "hgx-5.yml"
    host_vars.write_text(host_vars.read_text() + "ansible_connection: docker\n")
    result = ctl("nodes", "-i", str(inventory), "--facts", str(EXAMPLES / "facts"))
    assert result.returncode == 1, result.stderr  # l40s-2 is unreachable in the snapshot
    assert (
        f"warning: hgx-5: ansible_connection 'docker' ({host_vars}:3) is not followed:"
        " ctl reaches hgx-5 over SSH all the same\n"
    ) in result.stderr
