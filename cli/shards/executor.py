"""The real Executor: the shard playbooks through ansible-playbook, one run per phase."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cli.reconcile.planner import Stop
from cli.shards.ansible import PlaybookRun, run_playbook
from cli.shards.units import ENV_DIR, RECORD_DIR, UNIT_DIR, ShardFiles, shard_name, unit_name


class AnsibleExecutor:
    def __init__(
        self,
        inventory: Path,
        known_hosts: Path,
        log_dir: Path,
        on_run: Callable[[PlaybookRun], None] = lambda _: None,
    ) -> None:
        self.inventory = inventory
        self.known_hosts = known_hosts
        self.log_dir = log_dir
        self.on_run = on_run
        self.runs: list[PlaybookRun] = []

    def start(self, shards: Sequence[ShardFiles]) -> dict[tuple[str, str], str]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        for files in shards:
            shard = asdict(files)
            shard["files"] = [
                {"path": files.env_path, "content": files.env_text, "mode": 0o600},
                {"path": files.unit_path, "content": files.unit_text, "mode": 0o644},
                {"path": files.record_path, "content": files.record_text, "mode": 0o644},
            ]
            by_host.setdefault(files.node, []).append(shard)
        run = self._run("start_shards.yml", {"modelfleet_shards": by_host}, list(by_host))
        return _failures(run, {(f.node, f.unit) for f in shards})

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        units = set()
        for stop in stops:
            for shard in stop.shards:
                name = shard_name(stop.replica, shard.record.rank)
                unit = unit_name(stop.replica, shard.record.rank)
                units.add((shard.node, unit))
                by_host.setdefault(shard.node, []).append(
                    {
                        "unit": unit,
                        "unit_path": f"{UNIT_DIR}/{unit}",
                        "paths": [
                            f"{UNIT_DIR}/{unit}",
                            f"{ENV_DIR}/{name}.env",
                            f"{RECORD_DIR}/{name}.json",
                        ],
                        "drain": stop.drain,
                    }
                )
        if not by_host:
            return {}
        run = self._run("stop_shards.yml", {"modelfleet_stops": by_host}, list(by_host))
        return _failures(run, units)

    def _run(self, playbook: str, variables: dict[str, Any], hosts: list[str]) -> PlaybookRun:
        run = run_playbook(
            playbook, self.inventory, variables, sorted(hosts), self.log_dir, self.known_hosts
        )
        self.runs.append(run)
        self.on_run(run)
        return run


def _failures(run: PlaybookRun, units: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Per (node, unit): why it failed. A host-wide failure fails all of that host's units;
    a run that failed without saying where fails them all."""
    found: dict[tuple[str, str], str] = {}
    for (host, item), why in run.failures().items():
        for node, unit in units:
            if node == host and (item is None or item == unit):
                found.setdefault((node, unit), why)
    if run.returncode != 0 and not found:
        why = f"ansible-playbook exited {run.returncode} (log: {run.log})"
        found = dict.fromkeys(units, why)
    return found
