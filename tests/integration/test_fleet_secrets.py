"""A catalog's secret (an `env` value: an API key the engine reads; a Hugging Face token is
refused there, docs/catalog.md) on a start that fails, on the real test fleet: it reaches
the node's shard environment file (0600) and nothing else — not ctl's logs, state or
temporary files, not the vars file (gone after the run), not the node's other files."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.ctl import ctl as run_ctl
from tests.integration.conftest import LiveFleet
from tests.integration.test_fleet_reconcile import CLEAN, ctl_on_standins

pytestmark = pytest.mark.fleet

SECRET = "hf_secretvalue123"

CATALOG = """\
models:
  good:
    source: hf://org/good
    profiles:
      - {name: l40s, priority: 1, engine: vllm, gpu_class: L40S, gpus_per_node: 1,
         env: {SERVICE_API_KEY: hf_secretvalue123}}
  noexec:
    source: file:///srv/models/noexec.gguf
    profiles:
      - {name: l40s, priority: 1, engine: llama.cpp, gpu_class: L40S, gpus_per_node: 1,
         env: {SERVICE_API_KEY: hf_secretvalue123}}
"""


def holding(root: Path, text: str) -> list[str]:
    """Every file under `root` whose bytes hold `text`."""
    return sorted(
        str(path)
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes()
    )


def test_a_secret_env_value_on_a_failed_start_stays_on_the_node(
    fleet_exclusive: LiveFleet, tmp_path: Path
) -> None:
    fleet = fleet_exclusive
    ctl = ctl_on_standins(fleet, tmp_path, CATALOG)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    node = "node-3"
    fleet.ssh(node, "rm -f /usr/local/bin/llama-server")
    try:
        result = run_ctl(
            "--timeout", "3", "reconcile", "--catalog", str(ctl.catalog),
            "--inventory", str(ctl.inventory), timeout=600,
            env={
                "XDG_STATE_HOME": str(ctl.state), "COLUMNS": "120", "TMPDIR": str(temporary),
                # ansible.log as an operator debugging would have it: every result shown.
                "ANSIBLE_VERBOSITY": "1",
            },
        )  # fmt: skip
    finally:
        fleet.ssh(node, "cp /usr/local/bin/vllm /usr/local/bin/llama-server")
    try:
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert re.findall(r"^started (\S+)$", result.stdout, re.MULTILINE) == ["good-1"], out
        # The cause still reaches the operator, journal lines and all.
        assert "FAILED noexec-1: rank 0 on node-3: unit failed: its command could not be run" in out
        assert "Failed to locate executable llama-server" in out, out
        assert SECRET not in out
        # ctl's own files: state, logs (ansible.log, events), Ansible's home, and the
        # temporary directory the vars file went in.
        assert (tmp_path / "state").is_dir()
        assert list((tmp_path / "state").rglob("ansible.log")), "no ansible.log written"
        assert holding(tmp_path / "state", SECRET) == []
        assert holding(temporary, SECRET) == []
        assert [p.name for p in temporary.rglob("*") if p.is_file()] == []
        assert list((tmp_path / "state").rglob("vars.yml")) == []
        # On the node: the running shard's environment file only, 0600.
        found = fleet.ssh(
            node,
            f"grep -rlF {shlex.quote(SECRET)} /etc /var/lib/modelfleet /tmp /var/tmp /root"
            " 2>/dev/null; stat -c '%a %U' /etc/modelfleet/shards/good-1-rank0.env",
        )
        lines = found.stdout.split()
        assert lines == ["/etc/modelfleet/shards/good-1-rank0.env", "600", "root"], lines
    finally:
        for name in fleet.names[:3]:
            fleet.ssh(name, CLEAN)
