"""What one hostile node costs ctl: time and peak memory, printed as JSON.

Three cases (issue 16, bounded work per node and per file):

- `probe`: a node (a real sshd on loopback) whose probe prints 100 MB; `ctl nodes` gathers
  from it. ctl stops reading at 8 MiB and the node gets a note.
- `gpus`: a facts snapshot of a node that claims 300,000 GPUs, given to `ctl nodes --facts`.
- `bomb`: a 1 MB catalog that is an alias bomb (two lists of about 100,000 items, the second
  all aliases of the first: 10^10 values once expanded), given to `ctl catalog check`.

Each ctl runs in a wrapper process that reports its own children's peak RSS
(resource.getrusage(RUSAGE_CHILDREN) after ctl exits), so nothing else is counted.

    .venv/bin/python scripts/bench/bench_hostile_node.py [probe|gpus|bomb ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.ctl import ctl_environment  # noqa: E402
from tests.sshd import running_sshd  # noqa: E402

PROBE_BYTES = 100_000_000
GPU_ROWS = 300_000
# Runs ctl, then prints its exit code, peak RSS (KiB on Linux) and stdout+stderr as JSON.
_WRAPPER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": done.returncode, "peak_kib": peak, "out": done.stdout + done.stderr}))
"""


def measured_ctl(*args: str, state: Path) -> dict[str, Any]:
    """`ctl ARGS` in a new process: exit code, seconds, peak RSS in MiB, and its output."""
    environment = ctl_environment({"XDG_STATE_HOME": str(state)})
    started = time.monotonic()
    wrapper = subprocess.run(
        [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "cli", *args],
        capture_output=True, text=True, env=environment, cwd=ROOT, timeout=300, check=True,
    )  # fmt: skip
    seconds = time.monotonic() - started
    result: dict[str, Any] = json.loads(wrapper.stdout)
    return {
        "exit_code": result["code"],
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(result["peak_kib"] / 1024, 1),
        "output": result["out"],
    }


def inventory(directory: Path, host: str, port: int, key: Path | None, known_hosts: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    key_line = f"\n      ansible_ssh_private_key_file: {key}" if key else ""
    (directory / "hosts.yml").write_text(
        f"all:\n  hosts:\n    hostile:\n      ansible_host: {host}\n"
        f"      ansible_port: {port}\n      ansible_user: root{key_line}\n"
    )
    (directory / ".known_hosts").write_text(known_hosts)
    return directory


def hostile_probe(work: Path, size: int = PROBE_BYTES) -> dict[str, Any]:
    """`ctl nodes` against a node whose probe prints `size` bytes."""
    command = f"head -c {size} /dev/zero | tr '\\0' x"
    with running_sshd(work / "sshd", force_command=command) as server:
        hosts = inventory(
            work / "inventory",
            server.address,
            server.port,
            server.client_key,
            server.known_hosts_line(),
        )
        return {"probe_bytes": size} | measured_ctl(
            "--timeout", "60", "nodes", "--inventory", str(hosts), state=work / "state"
        )


def gpu_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "index": index,
            "uuid": f"GPU-{index:08d}",
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": None,
            "memory_total_mib": 81559,
            "memory_used_mib": 0,
            "ecc_uncorrected": 0,
        }
        for index in range(count)
    ]


def hostile_snapshot(work: Path, rows: int = GPU_ROWS) -> dict[str, Any]:
    """`ctl nodes --facts` with a snapshot whose one node claims `rows` GPUs."""
    snapshot = work / "snapshot"
    snapshot.mkdir(parents=True, exist_ok=True)
    facts = {
        "format": "modelfleet.facts/v1",
        "gathered_at": "2026-01-01T00:00:00Z",
        "last_reached": "2026-01-01T00:00:00Z",
        "gpus": gpu_rows(rows),
    }
    path = snapshot / "hostile.json"
    path.write_text(json.dumps(facts))
    hosts = inventory(work / "inventory", "192.0.2.1", 22, None, "")
    return {"gpu_rows": rows, "file_bytes": path.stat().st_size} | measured_ctl(
        "nodes", "--inventory", str(hosts), "--facts", str(snapshot), state=work / "state"
    )


def alias_bomb(size: int = 1_000_000) -> str:
    """YAML of about `size` bytes whose aliases expand to (size / 8)**2 values."""
    count = size // 8
    items = ", ".join(["x"] * count)
    aliases = ", ".join(["*a"] * count)
    return f"models:\n  m: &a [{items}]\n  n: [{aliases}]\n"


def hostile_catalog(work: Path, size: int = 1_000_000) -> dict[str, Any]:
    """`ctl catalog check` on a catalog that is a `size`-byte alias bomb."""
    work.mkdir(parents=True, exist_ok=True)
    catalog = work / "catalog.yaml"
    catalog.write_text(alias_bomb(size))
    return {"file_bytes": catalog.stat().st_size} | measured_ctl(
        "catalog", "check", "--catalog", str(catalog), state=work / "state"
    )


def main(cases: list[str]) -> None:
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as temporary:
        work = Path(temporary)
        if "probe" in cases:
            report["probe"] = hostile_probe(work / "probe")
        if "gpus" in cases:
            report["gpus"] = hostile_snapshot(work / "gpus")
        if "bomb" in cases:
            report["bomb"] = hostile_catalog(work / "bomb")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:] or ["probe", "gpus", "bomb"])
