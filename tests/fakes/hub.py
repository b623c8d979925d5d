"""A Hugging Face hub, as strict as the real one where the staging step talks to it, on
loopback: the model-info and resolve endpoints huggingface_hub 1.33 calls, and plain files
for `https://` sources.

From huggingface_hub's source (hf_api.py `model_info`, file_download.py `hf_hub_url`,
`http_get`, constants.py):
- `GET /api/models/{org}/{name}/revision/{revision}[?blobs=true]` → `{"id", "sha",
  "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}]}`; `size` and
  `lfs` only with `blobs=true`. 401 for a repo that does not exist or for a gated one without
  the right `Authorization: Bearer` token (the hub answers a gated repo with 401 "Access to
  model … is restricted", and an unknown one with 401 too, so as not to reveal it).
- `GET|HEAD /{org}/{name}/resolve/{revision}/{file}` → the file, with `X-Repo-Commit`,
  `ETag`, and for LFS files `X-Linked-Size` / `X-Linked-Etag`; `Range: bytes=N-` answered
  206 with `Content-Range`, a range past the end 416.
- `GET /files/{name}` → a plain file (an `https://` source), Range as above.

Every request is counted per path (`requests`) and every body byte sent (`bytes_sent`), so
a test can say "downloaded nothing". `run_hub(root, tokens)` serves the directory `root`:
`root/models/ORG/NAME/...` are repos, `root/files/...` plain files.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_THRESHOLD = 10 * 1024 * 1024  # git-lfs files in a hub repo: the big ones
_CHUNK = 1024 * 1024


@dataclass
class Hub:
    root: Path
    tokens: Mapping[str, str] = field(default_factory=dict)  # gated repo → its token
    requests: Counter[str] = field(default_factory=Counter)
    bytes_sent: int = 0
    tokens_seen: list[str] = field(default_factory=list)  # Authorization values received
    port: int = 0
    bytes_per_second: float | None = None  # a slow link, so that progress can be seen
    lock: threading.Lock = field(default_factory=threading.Lock)
    _digests: dict[Path, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def digest(self, path: Path) -> str:
        with self.lock:
            if path not in self._digests:
                sha = hashlib.sha256()
                with path.open("rb") as data:
                    while chunk := data.read(_CHUNK):
                        sha.update(chunk)
                self._digests[path] = sha.hexdigest()
            return self._digests[path]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the counts say what happened."""

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        hub = self.server.hub
        path = urllib.parse.urlsplit(self.path).path
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        with hub.lock:
            hub.requests[path] += 1
            if "Authorization" in self.headers:
                hub.tokens_seen.append(self.headers["Authorization"])
        info = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if info:
            repo = info.group(1)
            if not self._allowed(repo):
                return
            self._json(self._model_info(repo, blobs="blobs" in query))
        elif resolve:
            repo, _, name = resolve.groups()
            if not self._allowed(repo):
                return
            file = self._inside(hub.root / "models" / repo, urllib.parse.unquote(name))
            self._file(file, body, lfs=file is not None and file.stat().st_size >= LFS_THRESHOLD)
        elif path.startswith("/files/"):
            file = self._inside(hub.root / "files", urllib.parse.unquote(path[len("/files/") :]))
            self._file(file, body, lfs=False)
        else:
            self._error(404, "Not Found")

    def _inside(self, base: Path, name: str) -> Path | None:
        candidate = (base / name).resolve()
        if base.resolve() not in candidate.parents or not candidate.is_file():
            return None
        return candidate

    def _allowed(self, repo: str) -> bool:
        hub = self.server.hub
        if not (hub.root / "models" / repo).is_dir():
            self._error(401, "Repository not found")
            return False
        wanted = hub.tokens.get(repo)
        if wanted is not None and self.headers.get("Authorization") != f"Bearer {wanted}":
            self._error(401, f"Access to model {repo} is restricted. You must have access to it.")
            return False
        return True

    def _model_info(self, repo: str, blobs: bool) -> dict[str, object]:
        base = self.server.hub.root / "models" / repo
        siblings: list[dict[str, object]] = []
        for file in sorted(p for p in base.rglob("*") if p.is_file()):
            entry: dict[str, object] = {"rfilename": file.relative_to(base).as_posix()}
            if blobs:
                size = file.stat().st_size
                entry["size"] = size
                entry["blobId"] = hashlib.sha1(file.name.encode()).hexdigest()
                if size >= LFS_THRESHOLD:
                    entry["lfs"] = {"sha256": self.server.hub.digest(file), "size": size}
            siblings.append(entry)
        return {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": siblings}

    def _file(self, file: Path | None, body: bool, lfs: bool) -> None:
        if file is None:
            self._error(404, "Entry not found")
            return
        size = file.stat().st_size
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged.group(1))
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        if lfs:
            digest = self.server.hub.digest(file)
            self.send_header("X-Linked-Size", str(size))
            self.send_header("X-Linked-Etag", f'"{digest}"')
            self.send_header("ETag", f'"{digest}"')
        self.end_headers()
        if not body:
            return
        with file.open("rb") as data:
            data.seek(start)
            try:
                rate = self.server.hub.bytes_per_second
                while chunk := data.read(_CHUNK if rate is None else 65536):
                    self.wfile.write(chunk)
                    with self.server.hub.lock:
                        self.server.hub.bytes_sent += len(chunk)
                    if rate is not None:
                        time.sleep(len(chunk) / rate)
            except (BrokenPipeError, ConnectionResetError):
                pass

    def _json(self, data: object) -> None:
        payload = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str) -> None:
        payload = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: Hub) -> None:
        super().__init__(("127.0.0.1", hub.port), _Handler)
        self.hub = hub
        hub.port = self.server_address[1]


@contextmanager
def run_hub(
    root: Path, tokens: Mapping[str, str] | None = None, bytes_per_second: float | None = None
) -> Iterator[Hub]:
    """The hub serving `root` on 127.0.0.1 (a free port), until the block ends."""
    hub = Hub(root, dict(tokens or {}), bytes_per_second=bytes_per_second)
    server = _Server(hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
