"""The teams' keys on a modelfleet router: LiteLLM's custom auth hook (docs/routing.md, "Keys").

Installed by deploy_router.yml into the router's LiteLLM virtualenv and named in its
configuration (`general_settings: custom_auth: modelfleet_router_keys.authenticate`). It
reads the keys `ctl keys` made, hashed (SHA-256), from the file the playbook installs
(MODELFLEET_ROUTER_KEYS, readable by the router's service user alone), and answers LiteLLM
with what a key may do: its models, rates and expiry. LiteLLM itself then refuses a model
the key lacks (`custom_auth_run_common_checks`), an expired key
(`enable_post_custom_auth_checks`) and a key over its rate (its parallel request limiter,
429 with Retry-After). The master key stays the operator's: it is an administrator.

LiteLLM's limiter counts in each gunicorn worker's own memory (there is no Redis on a
router): each of the MODELFLEET_ROUTER_WORKERS workers is given its share of a limit,
rounded down but never below 1, so that the workers together let through no more than
the limit (and, with a limit below the number of workers, up to one a worker).

Runs in LiteLLM's virtualenv, not ctl's: it imports LiteLLM and nothing of ctl.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from litellm.proxy import proxy_server
from litellm.proxy._types import LitellmUserRoles, ProxyErrorTypes, ProxyException, UserAPIKeyAuth

KEYS_FILE = "/run/modelfleet-router/keys.json"
KEY_PREFIX = "sk-mf-"
FORMAT = "modelfleet.router-keys/v1"
# What a key none of whose models may be asked for now is given: LiteLLM reads an empty
# list as every model, and no catalog name has a space.
NO_MODEL = "no model now"

# The file as last read: its (mtime, size, inode), and its keys by id.
_loaded: dict[tuple[int, int, int], dict[str, dict[str, Any]]] = {}


def _keys() -> dict[str, dict[str, Any]]:
    """The installed keys by id, read again whenever the file changes (a new worker reads
    it at its first request anyway: a reload starts new workers)."""
    path = Path(os.environ.get("MODELFLEET_ROUTER_KEYS", KEYS_FILE))
    try:
        status = path.stat()
    except FileNotFoundError:
        return {}
    stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
    if stamp not in _loaded:
        document = json.loads(path.read_text("utf-8"))
        if document.get("format") != FORMAT:
            raise RuntimeError(f"{path}: not a {FORMAT} file")
        _loaded.clear()
        _loaded[stamp] = {key["id"]: key for key in document["keys"]}
    return _loaded[stamp]


def _workers() -> int:
    try:
        return max(1, int(os.environ.get("MODELFLEET_ROUTER_WORKERS", "1")))
    except ValueError:
        return 1


def _share(limit: int | None) -> int | None:
    return None if limit is None else max(1, limit // _workers())


def _refused(message: str) -> ProxyException:
    return ProxyException(
        message=f"Authentication Error - {message}",
        type=ProxyErrorTypes.auth_error,
        param="api_key",
        code=401,
    )


def _master_key() -> str | None:
    master = proxy_server.master_key
    return master if isinstance(master, str) and master else None


# LiteLLM calls it by keyword with the request, which a key's answer does not depend on.
async def authenticate(request: Request, api_key: str) -> UserAPIKeyAuth:  # noqa: ARG001
    """LiteLLM's custom auth: the caller's key → what it may do; 401 for any other key."""
    master = _master_key()
    if master is not None and hmac.compare_digest(api_key.encode(), master.encode()):
        # A name, never the master key, in LiteLLM's logs and rate counters.
        admin = LitellmUserRoles.PROXY_ADMIN
        return UserAPIKeyAuth(api_key="modelfleet-master-key", user_role=admin)
    if not api_key.startswith(KEY_PREFIX):
        raise _refused("not a key of this router")
    key_id = api_key[len(KEY_PREFIX) :].split("-", 1)[0]
    record = _keys().get(key_id)
    digest = hashlib.sha256(api_key.encode()).hexdigest()
    if record is None or not hmac.compare_digest(digest, record["sha256"]):
        raise _refused("unknown or revoked key")
    expires = datetime.fromisoformat(record["expires"]) if record.get("expires") else None
    if expires is not None and expires <= datetime.now(UTC):
        raise _refused(f"key {key_id} expired at {record['expires']}")
    return UserAPIKeyAuth(
        # LiteLLM counts a key's rates by this: the hash, never the key.
        api_key=digest,
        token=digest,
        key_alias=f"{record['team']}/{key_id}",
        user_role=LitellmUserRoles.INTERNAL_USER,
        # A key whose models the router's fallbacks would leave: its requests are not
        # fallen back (LiteLLM reads a key's `disable_fallbacks` from its metadata).
        metadata={
            "team": record["team"],
            "key_id": key_id,
            "disable_fallbacks": not record.get("fallbacks", True),
        },
        # None: every model; else the names the key may ask for (ctl resolved aliases).
        models=[] if record.get("models") is None else list(record["models"]) or [NO_MODEL],
        rpm_limit=_share(record.get("rpm")),
        tpm_limit=_share(record.get("tpm")),
        max_parallel_requests=_share(record.get("max_parallel")),
        expires=expires,
    )
