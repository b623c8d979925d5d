#!/usr/bin/python
"""Ansible module: put a model's weights in the node's model store before a shard starts.

An engine that fetches its own weights does it inside its readiness wait: a 140 GB model
is declared failed while it downloads, and downloads again on the next attempt. This
module downloads first, into `<store>/<directory>/` (docs/facts.md, "The store's layout"),
resuming what an earlier attempt left, verifies every file's size (and SHA-256 where the
hub gives one), and only then writes the marker `.modelfleet-complete` the probe reports.

Sources:
- `hf://ORG/NAME`: the Hugging Face hub's own download protocol, as huggingface_hub 1.33
  speaks it (hf_api.py `model_info`, file_download.py `hf_hub_url` / `http_get`): the file
  list from `GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true` (`sha` and
  `siblings[].rfilename`, `.size`, `.lfs.sha256`), then each file from
  `GET {endpoint}/{repo}/resolve/{sha}/{file}`, resumed with `Range: bytes=N-`; a 200 to
  a ranged request starts the file over, as http_get does. `endpoint` is the inventory's
  HF_ENDPOINT (a mirror) or https://huggingface.co. The token, when the catalog names one,
  comes in this task's environment as HF_TOKEN (no_log) and goes only to the endpoint's
  host, never across a redirect to another.
- `http(s)://…/FILE`: that one file, resumed the same way; its size from Content-Length.
  A token goes with it only when its host is the endpoint's or one of `token_hosts` (the
  inventory's modelfleet_token_hosts); otherwise the staging fails before any request, so
  a catalog cannot send the token to a host of its choosing (ctl refuses such a plan
  first: this is the node's own guard).
- `file:///PATH`: nothing to download: the file must be there (a shared filesystem).

Progress: `<store>/<directory>/.modelfleet-progress`, a JSON line rewritten at most once a
second ({"bytes", "total", "state", "message"}), which ctl reads over SSH while the
playbook runs. The token comes as a no_log option: Ansible masks it in every result and
log, and sends it inside the module's payload on ssh's standard input.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule  # type: ignore[import-untyped]

DOCUMENTATION = r"""
module: modelfleet_stage
short_description: Download a model's weights into the node's model store, resumably
options:
  source:
    description: The catalog's source (hf://, https://, http://, file://).
    type: str
    required: true
  store:
    description: The model store directory.
    type: path
    required: true
  directory:
    description: The source's directory under the store (cli/facts/model.py store_directory).
    type: str
    required: true
  endpoint:
    description: The hub's address for hf:// sources (HF_ENDPOINT).
    type: str
    default: https://huggingface.co
  revision:
    description: The hub revision for hf:// sources.
    type: str
    default: main
  timeout:
    description: Seconds without a byte before a download is abandoned.
    type: int
    default: 60
  deadline:
    description: Seconds the whole download may take before it is a staging failure.
    type: int
    default: 129600
  evictable:
    description: Directories under the store whose weights no shard on this node loads;
      removed, least recently used first, when the download needs their room.
    type: list
    elements: str
    default: []
  token:
    description: The token for the hub (Bearer); never logged.
    type: str
    default: ""
  token_hosts:
    description: Hosts besides the endpoint's that an http(s) source's token may go to
      (the inventory's modelfleet_token_hosts); to any other, the download is refused.
    type: list
    elements: str
    default: []
"""

MARKER = ".modelfleet-complete"
PROGRESS = ".modelfleet-progress"
USED = ".modelfleet-used"  # touched whenever a start needs these weights: least recently used
CHUNK = 1024 * 1024
MAX_LISTING = 16 * 1024 * 1024  # bytes of the hub's file list read: a repo of files, not a dump
MAX_FILES = 100_000


class StageError(Exception):
    """Why the weights could not be staged: said as the staging failure."""


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the token to another host (a CDN gets none)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        elsewhere = (
            urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        )
        if new is not None and elsewhere:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_SameHostRedirects)


class Progress:
    """The progress file: bytes done of the total, rewritten at most once a second."""

    def __init__(self, directory: Path, total: int | None, deadline: float) -> None:
        self.path = directory / PROGRESS
        self.total = total
        self.deadline = deadline
        self.done = 0
        self.written = 0.0

    def add(self, count: int, force: bool = False) -> None:
        self.done += count
        now = time.monotonic()
        if now > self.deadline:
            raise StageError(f"not done in time: {self.done} of {self.total or '?'} bytes")
        if force or now - self.written >= 1.0:
            self.write("running")
            self.written = now

    def write(self, state: str, message: str = "") -> None:
        record = {"bytes": self.done, "total": self.total, "state": state, "message": message}
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")
        temporary.replace(self.path)


def _request(url: str, token: str | None, start: int = 0) -> urllib.request.Request:
    request = urllib.request.Request(url, headers={"User-Agent": "modelfleet-stage"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if start:
        request.add_header("Range", f"bytes={start}-")
    return request


def _why(error: BaseException, what: str) -> str:
    if isinstance(error, urllib.error.HTTPError):
        if error.code in (401, 403):
            return f"{what}: HTTP {error.code}: the hub refused the token (or none was given)"
        return f"{what}: HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"{what}: {error.reason}"
    return f"{what}: {error}"


def hub_files(
    endpoint: str, repo: str, revision: str, token: str | None, timeout: int
) -> tuple[str, list[dict[str, Any]]]:
    """The revision's commit and its files: [{"name", "size", "sha256" or None}]."""
    url = (
        f"{endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}?blobs=true"
    )
    try:
        with _OPENER.open(_request(url, token), timeout=timeout) as response:
            body = response.read(MAX_LISTING + 1)
    except (OSError, urllib.error.URLError) as error:
        raise StageError(_why(error, f"listing {repo}")) from None
    if len(body) > MAX_LISTING:
        raise StageError(f"listing {repo}: the hub's answer is over {MAX_LISTING} bytes")
    try:
        info = json.loads(body)
        commit = str(info.get("sha") or revision)
        files = []
        for sibling in info["siblings"][:MAX_FILES]:
            name = str(sibling["rfilename"])
            parts = Path(name).parts
            if not name or name.startswith("/") or ".." in parts:
                raise StageError(f"listing {repo}: a file name that leaves the store: {name!r}")
            lfs = sibling.get("lfs") or {}
            size = sibling.get("size", lfs.get("size"))
            files.append(
                {"name": name, "size": int(size) if size is not None else None,
                 "sha256": lfs.get("sha256")}
            )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise StageError(f"listing {repo}: not the hub's answer ({error})") from None
    return commit, files


def download(
    url: str, target: Path, size: int | None, sha256: str | None, token: str | None,
    timeout: int, progress: Progress,
) -> int:  # fmt: skip
    """One file, resumed from `target.incomplete`, verified, renamed into place; its size."""
    if target.exists() and (size is None or target.stat().st_size == size):
        # renamed into place only once verified, by an attempt that stopped after it
        got = target.stat().st_size
        progress.add(got)
        return got
    partial = target.with_name(target.name + ".incomplete")
    target.parent.mkdir(parents=True, exist_ok=True)
    start = partial.stat().st_size if partial.exists() else 0
    if size is not None and start > size:
        partial.unlink()
        start = 0
    try:
        response = _OPENER.open(_request(url, token, start), timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and size is not None and start == size:
            response = None  # all there already
        else:
            raise StageError(_why(error, f"downloading {target.name}")) from None
    except (OSError, urllib.error.URLError) as error:
        raise StageError(_why(error, f"downloading {target.name}")) from None
    if response is not None:
        with response, partial.open("r+b" if start else "wb") as out:
            if start and response.status == 200:  # the server ignored the range: start over
                out.truncate(0)
                start = 0
            out.seek(start)
            progress.add(start)
            if size is None:
                length = response.headers.get("Content-Length")
                size = start + int(length) if length and length.isdigit() else None
                if progress.total is None:  # one file by URL: its length is the total
                    progress.total = size
            try:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    progress.add(len(chunk))
            except OSError as error:
                raise StageError(_why(error, f"downloading {target.name}")) from None
            out.flush()
            os.fsync(out.fileno())
    got = partial.stat().st_size
    if size is not None and got != size:
        raise StageError(f"{target.name}: {got} bytes downloaded, the source says {size}")
    if sha256:
        digest = hashlib.sha256()
        with partial.open("rb") as data:
            while chunk := data.read(CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            partial.unlink()
            raise StageError(f"{target.name}: its SHA-256 is not the one the hub lists")
    partial.replace(target)
    return got


def write_marker(directory: Path, source: str, size: int) -> None:
    """Last, and atomically: the probe reports a source only once this is there. With the
    architectures of its config.json, where it has one, which ctl checks against what
    the engine serves them as (cli/catalog/architectures.py)."""
    record: dict[str, object] = {
        "source": source,
        "bytes": size,
        "completed": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    architectures = config_architectures(directory)
    if architectures:
        record["architectures"] = architectures
    temporary = directory / (MARKER + ".tmp")
    temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")
    temporary.replace(directory / MARKER)


MAX_ARCHITECTURES = 16  # cli/facts/model.py StoredWeights reads no more
MAX_ARCHITECTURE_CHARS = 100
MAX_CONFIG_BYTES = 4 << 20


def config_architectures(directory: Path) -> list[str]:
    """config.json's `architectures`; none when it is missing, too big or not that shape."""
    config = directory / "config.json"
    try:
        if not config.is_file() or config.stat().st_size > MAX_CONFIG_BYTES:
            return []
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return []
    names = [a for a in found if isinstance(a, str) and 0 < len(a) <= MAX_ARCHITECTURE_CHARS]
    return names[:MAX_ARCHITECTURES]


def stored(directory: Path, source: str) -> int | None:
    """The size the marker gives, when the source is stored complete already."""
    try:
        record = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("source") == source:
        size = record.get("bytes")
        return size if isinstance(size, int) else None
    return None


def stage(
    source: str, store: Path, name: str, endpoint: str = "https://huggingface.co",
    revision: str = "main", token: str | None = None, timeout: int = 60,
    deadline: int = 36 * 3600, evictable: list[str] | None = None,
    token_hosts: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Stage `source` under `store/name`; what the task returns."""
    if source.startswith("file://"):
        path = Path(source.removeprefix("file://"))
        if not path.exists():
            raise StageError(f"{path} is not on this node (a file:// source is not downloaded)")
        return {"changed": False, "path": str(path), "bytes": _size(path), "downloaded": 0}
    directory = store / name
    already = stored(directory, source)
    if already is not None:
        (directory / USED).touch()
        return {"changed": False, "path": str(directory), "bytes": already, "downloaded": 0,
                "evicted": []}  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).unlink(missing_ok=True)
    evicted: list[str] = []
    if source.startswith("hf://"):
        repo = source.removeprefix("hf://")
        commit, files = hub_files(endpoint.rstrip("/"), repo, revision, token, timeout)
        sizes = [f["size"] for f in files]
        total = sum(sizes) if None not in sizes else None
        if total is not None:
            needed = total - sum(_size(directory / f["name"]) for f in files)
            evicted = _check_room(store, directory, needed, evictable or [])
        jobs = [
            (f"{endpoint.rstrip('/')}/{repo}/resolve/{commit}/{urllib.parse.quote(f['name'])}",
             directory / f["name"], f["size"], f["sha256"])
            for f in files
        ]  # fmt: skip
    elif source.startswith(("https://", "http://")):
        if token:
            _check_token_host(source, endpoint, token_hosts or [])
        target = directory / (Path(urllib.parse.urlsplit(source).path).name or "model")
        total = None
        jobs = [(source, target, None, None)]
    else:
        raise StageError(f"{source}: ctl stages hf://, https://, http:// and file:// sources")
    progress = Progress(directory, total, time.monotonic() + deadline)
    progress.write("running")
    try:
        size = 0
        for url, target, file_size, sha256 in jobs:
            size += download(url, target, file_size, sha256, token, timeout, progress)
    except StageError as error:
        progress.write("failed", str(error))
        raise
    write_marker(directory, source, size)
    (directory / USED).touch()
    progress.write("done")
    return {"changed": True, "path": str(directory), "bytes": size, "downloaded": progress.done,
            "evicted": evicted}  # fmt: skip


def _check_token_host(url: str, endpoint: str, token_hosts: list[str]) -> None:
    """Refuse to send the token to `url` unless its host is the endpoint's or allowed."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    allowed = {(urllib.parse.urlsplit(endpoint).hostname or "").lower()}
    allowed |= {name.lower() for name in token_hosts}
    if host not in allowed:
        raise StageError(
            f"{url}: the token is not sent to {host or 'no host'}: it goes only to the hub"
            " endpoint's host or one listed in modelfleet_token_hosts"
        )


def _check_room(store: Path, directory: Path, needed: int, evictable: list[str]) -> list[str]:
    """Room for `needed` more bytes, made by removing unused weights (least recently used
    first) when there is not; the directories removed."""
    evicted: list[str] = []
    free = shutil.disk_usage(directory).free
    if needed <= free:
        return evicted
    candidates = [
        store / name
        for name in evictable
        if "/" not in name
        and name not in ("", ".", "..", directory.name)
        and (store / name / MARKER).is_file()
    ]

    def last_used(path: Path) -> float:
        used = path / USED
        return (used if used.exists() else path / MARKER).stat().st_mtime

    if free + sum(_size(c) for c in candidates) < needed:  # not even all of them: keep them
        raise StageError(f"needs {needed / 1e9:.1f} GB more in {store}, {free / 1e9:.1f} GB free")
    for candidate in sorted(candidates, key=last_used):
        (candidate / MARKER).unlink()  # first: a half-removed directory is never "complete"
        shutil.rmtree(candidate)
        evicted.append(candidate.name)
        free = shutil.disk_usage(directory).free
        if needed <= free:
            return evicted
    raise StageError(f"needs {needed / 1e9:.1f} GB more in {store}, {free / 1e9:.1f} GB free")


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        partial = path.with_name(path.name + ".incomplete")
        if partial.exists():
            return partial.stat().st_size
        return path.stat().st_size
    return 0


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "str", "required": True},
            "store": {"type": "path", "required": True},
            "directory": {"type": "str", "required": True},
            "endpoint": {"type": "str", "default": "https://huggingface.co"},
            "revision": {"type": "str", "default": "main"},
            "timeout": {"type": "int", "default": 60},
            "deadline": {"type": "int", "default": 36 * 3600},
            "token": {"type": "str", "default": "", "no_log": True},
            "evictable": {"type": "list", "elements": "str", "default": []},
            "token_hosts": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=False,
    )
    params = module.params
    store, name = Path(params["store"]), params["directory"]
    if "/" in name or name in ("", ".", ".."):
        module.fail_json(msg=f"not a directory name: {name!r}")
    try:
        result = stage(
            params["source"], store, name, params["endpoint"], params["revision"],
            params["token"] or None, params["timeout"], params["deadline"],
            params["evictable"], params["token_hosts"],
        )  # fmt: skip
    except StageError as error:
        module.fail_json(msg=str(error))
    except OSError as error:
        module.fail_json(msg=f"{error.filename or store}: {error.strerror}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
