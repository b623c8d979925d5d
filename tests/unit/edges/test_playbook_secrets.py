"""What ansible-playbook is given: an environment without ctl's secrets, and a vars file
that only it can read and that is gone once the run ends, however it ends.

A fake ansible-playbook (a script beside a fake interpreter, where ctl looks first)
records its environment, the vars file's mode and its directory's, and then exits as told.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from cli.edges import ansible

FAKE = """\
#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
vars_file = Path(args[args.index("-e") + 1].removeprefix("@"))
seen = {{
    "env": dict(os.environ),
    "vars": vars_file.read_text(),
    "vars_file": str(vars_file),
    "vars_mode": vars_file.stat().st_mode & 0o777,
    "dir_mode": vars_file.parent.stat().st_mode & 0o777,
}}
Path({record!r}).write_text(json.dumps(seen))
sys.exit({exit_code})
"""


def fake_playbook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int = 0) -> Path:
    """ansible-playbook beside a fake sys.executable; returns where it records."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "seen.json"
    script = bin_dir / "ansible-playbook"
    script.write_text(FAKE.format(python=sys.executable, record=str(record), exit_code=exit_code))
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return record


def run(tmp_path: Path, variables: dict[str, object]) -> ansible.PlaybookRun:
    return ansible.run_playbook(
        "start_shards.yml",
        tmp_path / "hosts.yml",
        variables,
        ["node-1"],
        tmp_path / "state" / "logs",
        tmp_path / "known_hosts",
    )


SECRET_VARS: dict[str, object] = {
    "modelfleet_shards": {
        "node-1": [{"unit": "u", "files": [{"content": "HF_TOKEN=hf_secretvalue123\n"}]}]
    }
}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """ctl's environment with secrets and settings in it; a private TMPDIR."""
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "pve-secret-0123")
    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!ctl")
    monkeypatch.setenv("MODELFLEET_CATALOG", "/srv/catalog.yaml")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-0123")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "operator")
    monkeypatch.setenv("ANSIBLE_NOCOLOR", "0")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr("tempfile.tempdir", None)
    return temporary


def test_ansible_playbook_gets_no_proxmox_token_nor_other_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: Path
) -> None:
    record = fake_playbook(tmp_path, monkeypatch)
    done = run(tmp_path, SECRET_VARS)
    assert done.returncode == 0
    env = json.loads(record.read_text())["env"]
    assert [key for key in env if key.startswith("PROXMOX_")] == []
    assert "pve-secret-0123" not in json.dumps(env)
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "MODELFLEET_CATALOG" not in env
    # What it needs is there: ctl's own settings over the operator's, and the allow-list.
    assert env["MODELFLEET_EVENTS"] == str(done.log.parent / "events.jsonl")
    assert env["ANSIBLE_NOCOLOR"] == "1"
    assert env["ANSIBLE_REMOTE_USER"] == "operator"
    assert env["SSH_AUTH_SOCK"] == "/run/agent.sock"
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"] == os.environ["PATH"]
    assert env["HOME"] == os.environ["HOME"]


def test_the_vars_file_is_private_and_gone_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: Path
) -> None:
    record = fake_playbook(tmp_path, monkeypatch)
    done = run(tmp_path, SECRET_VARS)
    seen = json.loads(record.read_text())
    assert "hf_secretvalue123" in seen["vars"]  # the playbook did get it
    assert seen["vars_mode"] == 0o600
    assert seen["dir_mode"] == 0o700
    vars_file = Path(seen["vars_file"])
    assert vars_file.parent.parent == environment  # a temporary directory, not the logs
    assert not vars_file.exists()
    assert not vars_file.parent.exists()
    assert list(environment.iterdir()) == []
    logs = sorted(p.name for p in done.log.parent.iterdir())
    assert logs == ["ansible.log"]
    assert "hf_secretvalue123" not in done.log.read_text()


def test_the_vars_file_is_removed_when_the_run_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: Path
) -> None:
    record = fake_playbook(tmp_path, monkeypatch, exit_code=2)
    done = run(tmp_path, SECRET_VARS)
    assert done.returncode == 2
    assert not Path(json.loads(record.read_text())["vars_file"]).exists()
    assert list(environment.iterdir()) == []


def test_the_vars_file_is_removed_when_the_run_is_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: Path
) -> None:
    fake_playbook(tmp_path, monkeypatch)
    seen: list[Path] = []

    def interrupted(command: list[str], **_: object) -> object:
        vars_file = Path(command[command.index("-e") + 1].removeprefix("@"))
        assert stat.S_IMODE(vars_file.stat().st_mode) == 0o600
        seen.append(vars_file)
        raise KeyboardInterrupt

    monkeypatch.setattr("subprocess.run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, SECRET_VARS)
    assert len(seen) == 1
    assert not seen[0].exists()
    assert list(environment.iterdir()) == []
    for path in (tmp_path / "state").rglob("*"):
        assert not path.is_file() or b"hf_secretvalue123" not in path.read_bytes(), path
