"""The module the shard playbooks write and remove shard files with, run as Ansible runs it
on a node: a Python process given its arguments as ANSIBLE_MODULE_ARGS (Ansible's
documented way to run a module by itself). The playbooks around it are tested on the
fleet (test_fleet_playbooks.py: a second run changes nothing, the files are gone)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.ctl import ROOT

MODULE = ROOT / "playbooks" / "library" / "modelfleet_files.py"
SECRET = "HF_TOKEN=hf_never_shown_0123456789\n"


def run_module(
    tmp_path: Path, files: list[dict[str, Any]], absent: Sequence[str] = (), check: bool = False
) -> Any:
    arguments = {
        "files": files,
        "absent": list(absent),
        # Whoever runs the tests: the module chowns, and only root may give files away.
        "owner": pwd.getpwuid(os.getuid()).pw_name,
        "group": grp.getgrgid(os.getgid()).gr_name,
        "_ansible_check_mode": check,
    }
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": arguments}))
    done = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert SECRET.strip() not in done.stdout + done.stderr
    return json.loads(done.stdout)


def shard(tmp_path: Path, env: str = SECRET, unit: str = "[Unit]\n") -> list[dict[str, Any]]:
    return [
        {"path": str(tmp_path / "etc" / "shards" / "a.env"), "content": env, "mode": 0o600},
        {"path": str(tmp_path / "systemd" / "a.service"), "content": unit, "mode": "0644"},
    ]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_every_file_with_its_mode_making_missing_directories(tmp_path: Path) -> None:
    result = run_module(tmp_path, shard(tmp_path))
    env, unit = tmp_path / "etc" / "shards" / "a.env", tmp_path / "systemd" / "a.service"
    assert result["changed"] is True
    assert result["written"] == [str(env), str(unit)]
    assert env.read_text() == SECRET and mode_of(env) == 0o600
    assert unit.read_text() == "[Unit]\n" and mode_of(unit) == 0o644
    assert [p.name for p in env.parent.iterdir()] == ["a.env"]  # no temporary file left


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    run_module(tmp_path, shard(tmp_path))
    again = run_module(tmp_path, shard(tmp_path))
    assert again["changed"] is False
    assert again["written"] == []


def test_only_what_differs_is_rewritten_and_a_wrong_mode_is_put_right(tmp_path: Path) -> None:
    run_module(tmp_path, shard(tmp_path))
    env, unit = tmp_path / "etc" / "shards" / "a.env", tmp_path / "systemd" / "a.service"
    env.chmod(0o644)
    before = unit.stat().st_ino
    result = run_module(tmp_path, shard(tmp_path, unit="[Unit]\nDescription=new\n"))
    assert result["changed"] is True
    assert result["written"] == [str(unit)]
    assert mode_of(env) == 0o600
    assert unit.read_text() == "[Unit]\nDescription=new\n"
    assert unit.stat().st_ino != before  # replaced by a rename, never written in place


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path: Path) -> None:
    result = run_module(tmp_path, shard(tmp_path), check=True)
    assert result["changed"] is True
    assert len(result["written"]) == 2
    assert not (tmp_path / "etc").exists()


def test_the_content_is_hidden_in_what_the_module_reports(tmp_path: Path) -> None:
    result = run_module(tmp_path, shard(tmp_path))
    reported = result["invocation"]["module_args"]["files"][0]["content"]
    assert reported == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_a_mode_that_is_not_octal_fails_naming_the_file(tmp_path: Path) -> None:
    files = shard(tmp_path)
    files[1]["mode"] = "rw-r--r--"
    result = run_module(tmp_path, files)
    assert result["failed"] is True
    assert result["msg"] == f"{files[1]['path']}: mode 'rw-r--r--' is neither a number nor octal"
    assert not (tmp_path / "etc").exists()  # not even the files before it


def test_removes_the_files_asked_absent_and_a_missing_one_is_no_error(tmp_path: Path) -> None:
    run_module(tmp_path, shard(tmp_path))
    env, unit = tmp_path / "etc" / "shards" / "a.env", tmp_path / "systemd" / "a.service"
    gone = str(tmp_path / "never-there")
    absent = [str(env), str(unit), gone]
    checked = run_module(tmp_path, [], absent=absent, check=True)
    assert checked["changed"] is True and checked["removed"] == [str(env), str(unit)]
    assert env.exists() and unit.exists()
    result = run_module(tmp_path, [], absent=absent)
    assert result["changed"] is True and result["removed"] == [str(env), str(unit)]
    assert not env.exists() and not unit.exists()
    again = run_module(tmp_path, [], absent=absent)
    assert again["changed"] is False and again["removed"] == []


def test_a_path_that_cannot_be_removed_fails_naming_it(tmp_path: Path) -> None:
    result = run_module(tmp_path, [], absent=[str(tmp_path)])
    assert result["failed"] is True
    assert result["msg"].startswith(f"{tmp_path}: cannot remove: ")


def test_keep_existing_makes_a_file_once_and_never_replaces_it(tmp_path: Path) -> None:
    key = tmp_path / "router" / "router.env"
    first = {"path": str(key), "content": "KEY=one\n", "mode": "0600", "keep_existing": True}
    made = run_module(tmp_path, [first])
    assert made["changed"] is True and key.read_text() == "KEY=one\n"
    key.chmod(0o644)
    again = run_module(tmp_path, [{**first, "content": "KEY=two\n"}])
    assert key.read_text() == "KEY=one\n"  # the secret made the first time stays
    assert again["written"] == [] and again["changed"] is True  # only the mode was put right
    assert mode_of(key) == 0o600
    assert run_module(tmp_path, [{**first, "content": "KEY=three\n"}])["changed"] is False
