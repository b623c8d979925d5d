"""The real Executor: the shard playbooks through ansible-playbook, one run per phase."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from cli.edges.ansible import PlaybookRun, run_playbook
from cli.pki.paths import CA_PATH
from cli.reconcile.apply import ShardFailure
from cli.reconcile.planner import Stop
from cli.shards.staging import StageJob, one_per_share
from cli.shards.units import ShardFiles, shard_paths, unit_name


class AnsibleExecutor:
    def __init__(
        self,
        inventory: Path,
        known_hosts: Path,
        log_dir: Path,
        on_run: Callable[[PlaybookRun], None] = lambda _: None,
        token_values: Mapping[str, str] | None = None,
        token_variables: Mapping[str, str] | None = None,
        watch: Callable[[Sequence[StageJob]], AbstractContextManager[None]] | None = None,
        shares: Mapping[str, str] | None = None,
        evictable: Mapping[str, list[str]] | None = None,
    ) -> None:
        """`token_values`: profile key → the token its weights are fetched with;
        `token_variables`: profile key → the inventory variable that holds it; `watch`:
        what shows the downloads' progress while the staging playbook runs; `shares`: node →
        the name of the shared store it mounts, where it does; `evictable`: node → the
        store directories its staging may remove for room (unused weights)."""
        self.evictable = dict(evictable or {})
        self.watch = watch
        self.shares = dict(shares or {})
        self.token_values = dict(token_values or {})
        self.token_variables = dict(token_variables or {})
        self.inventory = inventory
        self.known_hosts = known_hosts
        self.log_dir = log_dir
        self.on_run = on_run
        self.runs: list[PlaybookRun] = []

    def start(
        self, shards: Sequence[ShardFiles], verify: Sequence[ShardFiles] = ()
    ) -> dict[tuple[str, str], ShardFailure]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        secrets: dict[str, str] = {}
        for files, start in [*((f, True) for f in shards), *((f, False) for f in verify)]:
            # What the checks see apart from the files, whose environment may hold secrets.
            check: dict[str, Any] = {
                "unit": files.unit,
                "health_url": files.health_url,
                "model": files.model,
            }
            if files.tls:
                check |= {"ca": CA_PATH, "certificate": files.certificate}
            shard: dict[str, Any] = {"unit": files.unit, "start": start, "check": check}
            if start:
                env = {"path": files.env_path, "content": files.env_text, "mode": 0o600}
                shard["files"] = [
                    *([env] if files.fetch is None else []),
                    {"path": files.unit_path, "content": files.unit_text, "mode": 0o644},
                    {"path": files.record_path, "content": files.record_text, "mode": 0o644},
                ]
                if files.fetch is not None:
                    # The playbook writes this one, with the node's hub endpoint and the
                    # token added (start_shards.yml); the token as staging passes it.
                    token_env, token_var = self._token_source(files.fetch.token_key, secrets)
                    shard["fetch"] = {
                        **env,
                        "endpoint_names": list(files.fetch.endpoint_names),
                        "token_names": list(files.fetch.token_names),
                        "token_env": token_env,
                        "token_var": token_var,
                    }
            by_host.setdefault(files.node, []).append(shard)
        run = self._run("start_shards.yml", {"modelfleet_shards": by_host}, list(by_host), secrets)
        return start_failures(run, {(f.node, f.unit) for f in [*shards, *verify]})

    def _token_source(
        self, key: str | None, secrets: dict[str, str]
    ) -> tuple[str | None, str | None]:
        """(the name of ansible-playbook's environment variable that carries the token of
        the profile `key`, added to `secrets`; or the inventory variable that holds it).
        A name that says nothing of the token; never its value in the variables file."""
        if key in self.token_values:
            value = self.token_values[key]
            known = {v: k for k, v in secrets.items()}
            if value not in known:
                known[value] = f"MODELFLEET_TOKEN_{len(secrets)}"
                secrets[known[value]] = value
            return known[value], None
        if key in self.token_variables:
            return None, self.token_variables[key]
        return None, None

    def stop(self, stops: Sequence[Stop]) -> dict[tuple[str, str], str]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        units = set()
        for stop in stops:
            for shard in stop.shards:
                unit = unit_name(stop.replica, shard.record.rank)
                paths = shard_paths(stop.replica, shard.record.rank)
                units.add((shard.node, unit))
                by_host.setdefault(shard.node, []).append(
                    {
                        "unit": unit,
                        "unit_path": paths[0],
                        "paths": list(paths),
                        "drain": stop.drain,
                    }
                )
        if not by_host:
            return {}
        run = self._run("stop_shards.yml", {"modelfleet_stops": by_host}, list(by_host))
        return _failures(run, units)

    def stage(self, jobs: Sequence[StageJob]) -> dict[tuple[str, str], str]:
        downloads, waits_on = one_per_share(jobs, self.shares)
        failed = self._download(downloads)
        return {job: failed[on] for job, on in waits_on.items() if on in failed}

    def _download(self, jobs: Sequence[StageJob]) -> dict[tuple[str, str], str]:
        by_host: dict[str, list[dict[str, Any]]] = {}
        # A token goes to ansible-playbook in its environment, by a name that says nothing
        # of it; the playbook hands it to the download task's environment, no_log. Never
        # in the variables file, an argument or a log.
        secrets: dict[str, str] = {}
        for job in jobs:
            token_env, token_var = self._token_source(job.token_key, secrets)
            by_host.setdefault(job.node, []).append(
                {
                    "source": job.source,
                    "store": job.store,
                    "directory": job.directory,
                    "timeout": job.timeout_seconds,
                    "token_env": token_env,
                    "token_var": token_var,
                    "evictable": self.evictable.get(job.node, []),
                }
            )
        if not by_host:
            return {}
        variables = {"modelfleet_stage": by_host}
        with self.watch(jobs) if self.watch is not None else nullcontext():
            run = self._run("stage_weights.yml", variables, list(by_host), secrets)
        return _failures(run, {(job.node, job.source) for job in jobs})

    def _run(
        self,
        playbook: str,
        variables: dict[str, Any],
        hosts: list[str],
        secrets: Mapping[str, str] | None = None,
    ) -> PlaybookRun:
        run = run_playbook(
            playbook, self.inventory, variables, sorted(hosts), self.log_dir, self.known_hosts,
            secrets,
        )  # fmt: skip
        self.runs.append(run)
        self.on_run(run)
        return run


REPORT_TASK = "Report each shard that did not start"  # start_shards.yml's last task


def start_failures(
    run: PlaybookRun, units: set[tuple[str, str]]
) -> dict[tuple[str, str], ShardFailure]:
    """Per (node, unit): why it did not start, with its journal's last lines where the
    playbook's checks fetched them; else as `_failures` finds it."""
    found: dict[tuple[str, str], ShardFailure] = {}
    for event in run.events:
        key = (event.host, str(event.item))
        if event.task == REPORT_TASK and event.status == "failed" and key in units:
            found.setdefault(key, _reported(event.msg))
    for key, why in _failures(run, units).items():
        found.setdefault(key, ShardFailure(why))
    return found


def _reported(message: str) -> ShardFailure:
    """The report task's message: JSON with the cause and the journal, or else the text."""
    try:
        data = json.loads(message)
        cause, journal = data["cause"], data["journal"]
    except (ValueError, TypeError, KeyError):
        return ShardFailure(message)
    return ShardFailure(str(cause), tuple(str(line) for line in journal or ()))


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
