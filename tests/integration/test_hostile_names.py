"""Names and files turned against ctl (issue 25): a host name that is a path, a state file
that is not what ctl wrote, a facts directory holding a FIFO or a symlink. Each is bad
input said in one line, or a warning, never a traceback, a hang or a file written outside
ctl's state directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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
