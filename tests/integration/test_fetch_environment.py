"""The start playbook's task that writes the environment file of a shard whose engine
fetches its own weights, run by ansible-playbook on this machine (connection local): the
node's hub endpoint and the model's token land in the 0600 file under the names the engine
reads, and the token is in no output. The task is start_shards.yml's own, read from it;
only its handler (systemd's reload) is left out and the files' owner is whoever runs."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.ctl import ROOT

PLAYBOOKS = ROOT / "playbooks"
TASK = "Write the environment of each shard whose engine fetches its own weights"
TOKEN = "hf_" + "neverShown0123" * 3


def fetch_task() -> dict[str, Any]:
    [play] = yaml.safe_load((PLAYBOOKS / "start_shards.yml").read_text(encoding="utf-8"))
    [task] = [t for t in play["tasks"] if t.get("name") == TASK]
    task = {key: value for key, value in task.items() if key != "notify"}
    task["modelfleet_files"] = {
        **task["modelfleet_files"],
        "owner": pwd.getpwuid(os.getuid()).pw_name,
        "group": grp.getgrgid(os.getgid()).gr_name,
    }
    return task


def run(tmp_path: Path, shard: dict[str, Any], endpoint: str | None, env: dict[str, str]) -> str:
    variables: dict[str, Any] = {"modelfleet_starting": [shard], "vault_token": TOKEN}
    if endpoint is not None:
        variables["modelfleet_hf_endpoint"] = endpoint
    play = [{"hosts": "all", "gather_facts": False, "tasks": [fetch_task()]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", f"@{tmp_path / 'vars.json'}",
            str(tmp_path / "play.yml"),
        ],
        capture_output=True, text=True, timeout=300, check=False,
        env={
            **os.environ, **env,
            "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
            "ANSIBLE_HOME": str(tmp_path / "ansible"),
            "ANSIBLE_NOCOLOR": "1",
        },
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def shard(path: Path, token_env: str | None, token_var: str | None) -> dict[str, Any]:
    return {
        "unit": "modelfleet-gated-1-r0.service",
        "start": True,
        "fetch": {
            "path": str(path), "content": 'CUDA_VISIBLE_DEVICES="0"\n', "mode": 0o600,
            "endpoint_names": ["HF_ENDPOINT"], "token_names": ["HF_TOKEN"],
            "token_env": token_env, "token_var": token_var,
        },
    }  # fmt: skip


def test_the_endpoint_and_the_token_from_ctls_environment_reach_the_0600_file(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "shards" / "gated-1-r0.env"
    output = run(
        tmp_path, shard(env_file, "MODELFLEET_TOKEN_0", None), "https://hub.internal:8443",
        {"MODELFLEET_TOKEN_0": TOKEN},
    )  # fmt: skip
    assert env_file.read_text() == (
        f'CUDA_VISIBLE_DEVICES="0"\nHF_ENDPOINT="https://hub.internal:8443"\nHF_TOKEN="{TOKEN}"\n'
    )
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert TOKEN not in output


def test_a_token_from_an_inventory_variable_and_no_endpoint_without_a_mirror(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "shards" / "gated-1-r0.env"
    output = run(tmp_path, shard(env_file, None, "vault_token"), None, {})
    assert env_file.read_text() == f'CUDA_VISIBLE_DEVICES="0"\nHF_TOKEN="{TOKEN}"\n'
    assert TOKEN not in output
