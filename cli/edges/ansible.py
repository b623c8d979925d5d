"""Run the shard playbooks with ansible-playbook: one run per phase for every shard in it.

Catalog values travel in the vars file marked `!unsafe`, so Ansible never templates
them. The whole screen output goes to a log file in the state directory; ctl reads the
results per shard from a small callback's JSON lines.

Secrets: the vars file holds catalog `env` values (and the router's settings), so it is
written 0600 in a private temporary directory of its own, never in the logs, and removed
when the run ends, however it ends. ansible-playbook gets an environment of its own, an
allow-list (`playbook_environment`): no PROXMOX_* token, no MODELFLEET_* setting, nothing
else of ctl's that it does not need.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cli.edges.files import atomic_write
from cli.edges.tools import ansible_command

# Forks: one a host of the run, up to 64. A host's tasks wait on its network and its own
# CPU, so more forks finish sooner until the control host's CPU is the bound: Ansible
# spends about 0.5 s of it a node for a start or a stop of shards (64 nodes: 30-40 s of
# CPU, under a minute on two cores). Measured on 64 test-fleet nodes sharing the control
# host's two cores (docs/scale.md): 64, 32 and 16 forks, a wash, each CPU-bound.
MAX_FORKS = 64

# What ansible-playbook may inherit from ctl's environment: where programs are, whose home
# (ssh's config and keys), the locale, the terminal, the ssh agent, where temporary files
# go, and how Python finds Ansible. Every ANSIBLE_* setting of the operator's too (Ansible's
# own configuration), under those ctl sets itself. Nothing else: no PROXMOX_* token.
INHERITED = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
    "SSH_AUTH_SOCK", "PYTHONPATH", "XDG_RUNTIME_DIR",
)  # fmt: skip
INHERITED_PREFIXES = ("LC_", "ANSIBLE_")


@dataclass(frozen=True)
class Event:
    host: str
    task: str
    status: str  # ok, failed, unreachable, ignored
    item: str | None
    changed: bool
    msg: str


@dataclass(frozen=True)
class PlaybookRun:
    playbook: str
    returncode: int
    events: tuple[Event, ...]
    log: Path
    seconds: float

    def failures(self) -> dict[tuple[str, str | None], str]:
        """(host, item) → the first failure's task and message; item None: the whole host."""
        found: dict[tuple[str, str | None], str] = {}
        for event in self.events:
            if event.status == "unreachable":
                found.setdefault((event.host, None), f"unreachable: {event.msg}")
            elif event.status == "failed":
                found.setdefault((event.host, event.item), f"{event.task}: {event.msg}")
        return found

    @property
    def changed(self) -> int:
        return sum(1 for event in self.events if event.changed)


class _Unsafe(str):
    """A string Ansible must never template."""


def _unsafe(dumper: yaml.SafeDumper, value: _Unsafe) -> yaml.ScalarNode:
    return dumper.represent_scalar("!unsafe", str(value))


# libyaml's emitter where PyYAML has it: a router's variables list every ready replica with
# its model's others as backups, and Python's emitter took most of a pass that moved 42
# replicas on 2,000 nodes (scripts/bench/bench_scale.py).
_Emitter: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_Emitter):  # type: ignore[valid-type,misc]
    pass


_Dumper.add_representer(_Unsafe, _unsafe)


def mark_unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, Mapping):
        return {key: mark_unsafe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mark_unsafe(item) for item in value]
    return value


def playbook_environment(environ: Mapping[str, str], settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of ansible-playbook: the allow-listed part of `environ`, then
    ctl's own `settings` over it."""
    kept = {
        key: value
        for key, value in environ.items()
        if key in INHERITED or key.startswith(INHERITED_PREFIXES)
    }
    return {**kept, **settings}


def playbooks_dir() -> Path:
    """The directory of the playbooks, with their library/ and callback_plugins/.

    Installed from a wheel, they are package data: pyproject.toml's force-include puts the
    project's top-level playbooks/ at cli/_data/playbooks. A clone (and an editable install,
    which imports cli/ from the clone) has no cli/_data: there they are playbooks/ beside cli/.
    """
    package = Path(str(resources.files("cli")))
    installed = package / "_data" / "playbooks"
    return installed if installed.is_dir() else package.parent / "playbooks"


def playbook_path(name: str) -> Path:
    return playbooks_dir() / name


def run_playbook(
    name: str,
    inventory: Path,
    variables: Mapping[str, Any],
    hosts: Sequence[str],
    log_dir: Path,
    known_hosts: Path,
    secrets: Mapping[str, str] | None = None,
) -> PlaybookRun:
    """Run playbook `name` on `hosts` (limited), and return what happened, per event.
    `secrets`: environment variables the playbook looks up (tokens), for this run only."""
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    run_dir = log_dir / f"{stamp}-{name.removesuffix('.yml')}"
    run_dir.mkdir(parents=True, mode=0o700)
    events_file = run_dir / "events.jsonl"
    log = run_dir / "ansible.log"
    playbook = playbook_path(name)
    env = playbook_environment(
        os.environ,
        {
            "ANSIBLE_CALLBACKS_ENABLED": "modelfleet_events",
            "ANSIBLE_CALLBACK_PLUGINS": str(playbook.parent / "callback_plugins"),
            "MODELFLEET_EVENTS": str(events_file),
            "ANSIBLE_FORKS": str(max(1, min(MAX_FORKS, len(hosts)))),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            # The fleet's known_hosts, strictly; an inventory's ansible_ssh_common_args wins.
            "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={known_hosts}"
            " -o StrictHostKeyChecking=yes",
            # A task's module goes to the node's python on ssh's stdin, not copied there first:
            # one ssh operation a task instead of several.
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOME": str(log_dir.parent / "ansible"),
            **(secrets or {}),
        },
    )
    # mkdtemp: 0700, ours alone; the file in it 0600 before its first byte.
    with tempfile.TemporaryDirectory(prefix="modelfleet-vars-") as private:
        vars_file = atomic_write(
            Path(private) / "vars.yml",
            yaml.dump(mark_unsafe(dict(variables)), Dumper=_Dumper),
            0o600,
        )
        returncode = _run(inventory, vars_file, hosts, playbook, env, log)
    events = tuple(
        Event(**json.loads(line))
        for line in events_file.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ) if events_file.exists() else ()  # fmt: skip
    return PlaybookRun(name, returncode, events, log, time.monotonic() - started)


def _run(
    inventory: Path,
    vars_file: Path,
    hosts: Sequence[str],
    playbook: Path,
    env: Mapping[str, str],
    log: Path,
) -> int:
    """ansible-playbook, its output in `log`; its exit code."""
    command = [
        ansible_command("ansible-playbook"),
        "-i", str(inventory),
        str(playbook),
        "-e", f"@{vars_file}",
        "--limit", ",".join(hosts),
    ]  # fmt: skip
    with log.open("w", encoding="utf-8") as output:
        output.write("$ " + " ".join(command) + "\n")
        output.flush()
        # Its own session: a Ctrl-C on the terminal is ctl's to handle (the controller lets
        # the step under way finish); if ctl gives up, subprocess.run kills the run.
        completed = subprocess.run(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, check=False,
            start_new_session=True,
        )  # fmt: skip
    return completed.returncode
