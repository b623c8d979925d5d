"""The teams' keys to the routers (docs/routing.md, "Keys"): what ctl keeps and what a
router is given.

A key is `sk-mf-ID-SECRET`: ID names it (8 hex digits, shown by `ctl keys list`), SECRET
is 32 random bytes. Only its SHA-256 is kept, in ctl's state (`modelfleet.keys/v1`, one
file per inventory) and on the routers (`modelfleet.router-keys/v1`, rendered at each
route update from the same table as the routes, so that what a key may ask for follows
what answers each name now). Pure: the randomness and the clock are passed in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from cli.catalog.load import Catalog
from cli.errors import InputError, near_miss
from cli.routes.table import RouteTable

KEYS_FORMAT = "modelfleet.keys/v1"
ROUTER_KEYS_FORMAT = "modelfleet.router-keys/v1"
KEY_PREFIX = "sk-mf-"
_KEY_ID = re.compile(r"[0-9a-f]{8}")
_TEAM = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_LIMITS = ("rpm", "tpm", "max_parallel")


@dataclass(frozen=True)
class TeamKey:
    key_id: str
    team: str
    sha256: str  # of the whole key, `sk-mf-ID-SECRET`
    models: tuple[str, ...] | None  # catalog models, aliases resolved; None: every model
    rpm: int | None
    tpm: int | None
    max_parallel: int | None
    created: datetime
    expires: datetime | None
    revoked: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and self.expires <= now

    def valid(self, now: datetime) -> bool:
        return self.revoked is None and not self.expired(now)


def key_text(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}{key_id}-{secret}"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def team_problem(team: str) -> str | None:
    if _TEAM.fullmatch(team):
        return None
    return (
        f"team '{team[:64]}': 1 to 63 of a-z, 0-9, '.', '_' and '-',"
        " starting with a letter or digit"
    )


def resolve_models(catalog: Catalog, names: Sequence[str]) -> tuple[str, ...]:
    """The catalog models `names` stand for (an alias: its model), each once, in order;
    InputError naming the catalog and the first name it does not have."""
    models: list[str] = []
    for name in names:
        model = catalog.resolve(name)
        if model is None:
            hint = near_miss(name, catalog.names())
            raise InputError.single(
                catalog.file, None, (), f"--models: no model or alias '{name[:64]}'{hint}"
            )
        if model not in models:
            models.append(model)
    return tuple(models)


def new_key(
    key_id: str,
    secret: str,
    team: str,
    models: tuple[str, ...] | None,
    limits: dict[str, int | None],
    now: datetime,
    lifetime: timedelta | None,
) -> tuple[str, TeamKey]:
    """The key itself (shown once) and what is kept of it."""
    text = key_text(key_id, secret)
    record = TeamKey(
        key_id=key_id, team=team, sha256=key_digest(text), models=models,
        rpm=limits.get("rpm"), tpm=limits.get("tpm"), max_parallel=limits.get("max_parallel"),
        created=now, expires=None if lifetime is None else now + lifetime,
    )  # fmt: skip
    return text, record


def revoke(keys: Sequence[TeamKey], key_id: str, now: datetime) -> tuple[TeamKey, ...]:
    """`keys` with `key_id` revoked; KeyError when there is no such key."""
    if not any(key.key_id == key_id for key in keys):
        raise KeyError(key_id)
    return tuple(
        replace(key, revoked=now) if key.key_id == key_id and key.revoked is None else key
        for key in keys
    )


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def key_json(key: TeamKey) -> dict[str, Any]:
    """A key as `ctl keys list --json` and the state file have it: never the key."""
    return {
        "id": key.key_id,
        "team": key.team,
        "sha256": key.sha256,
        "models": None if key.models is None else list(key.models),
        "rpm": key.rpm,
        "tpm": key.tpm,
        "max_parallel": key.max_parallel,
        "created": _time(key.created),
        "expires": _time(key.expires),
        "revoked": _time(key.revoked),
    }


def keys_document(keys: Sequence[TeamKey]) -> str:
    return json.dumps({"format": KEYS_FORMAT, "keys": [key_json(k) for k in keys]}, indent=2)


def parse_keys(text: str, file: str) -> tuple[TeamKey, ...]:
    """ctl's state file; InputError naming the file and the key that is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError.single(file, error.lineno, (), f"not JSON: {error.msg}") from None
    if not isinstance(document, dict) or document.get("format") != KEYS_FORMAT:
        raise InputError.single(file, None, ("format",), f"not a {KEYS_FORMAT} file")
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise InputError.single(file, None, ("keys",), "must be a list")
    keys = [_parse_key(entry, file, index) for index, entry in enumerate(entries)]
    seen: set[str] = set()
    for index, key in enumerate(keys):
        if key.key_id in seen:
            raise InputError.single(file, None, ("keys", index, "id"), "repeats another key's")
        seen.add(key.key_id)
    return tuple(keys)


def _parse_key(entry: object, file: str, index: int) -> TeamKey:
    def wrong(field: str, why: str) -> InputError:
        return InputError.single(file, None, ("keys", index, field), why)

    if not isinstance(entry, dict):
        raise wrong("id", "the entry is not an object")
    fields: dict[str, Any] = entry

    def text(field: str, pattern: re.Pattern[str]) -> str:
        value = fields.get(field)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise wrong(field, f"'{str(value)[:64]}' is not a valid {field}")
        return value

    def when(field: str, required: bool = False) -> datetime | None:
        value = fields.get(field)
        if value is None and not required:
            return None
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            raise wrong(field, f"'{str(value)[:64]}' is not an ISO 8601 time") from None
        if moment.tzinfo is None:
            raise wrong(field, "has no time zone")
        return moment

    def limit(field: str) -> int | None:
        value = fields.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise wrong(field, "must be a whole number of at least 1, or null")
        return value

    models = fields.get("models")
    if models is not None and not (
        isinstance(models, list) and all(isinstance(m, str) and m for m in models)
    ):
        raise wrong("models", "must be a list of model names, or null for every model")
    created = when("created", required=True)
    assert created is not None  # required
    return TeamKey(
        key_id=text("id", _KEY_ID), team=text("team", _TEAM), sha256=text("sha256", _DIGEST),
        models=None if models is None else tuple(models),
        rpm=limit("rpm"), tpm=limit("tpm"), max_parallel=limit("max_parallel"),
        created=created, expires=when("expires"), revoked=when("revoked"),
    )  # fmt: skip


def allowed_names(models: tuple[str, ...], table: RouteTable) -> list[str]:
    """The names a key for `models` may ask the router for: each model and its aliases,
    while what answers for it now is one of `models` (a model answered by a fallback the
    key does not have is refused, not served by that fallback)."""
    names: list[str] = []
    for route in table.models:
        if route.model in models and (route.served_by is None or route.served_by in models):
            names += [route.model, *route.aliases]
    return names


def falls_outside(models: tuple[str, ...], table: RouteTable) -> bool:
    """Whether the router's fallbacks could take a request of the key's to a model it
    does not have: then its requests are not fallen back at all."""
    return any(
        any(other not in models for other in route.chain)
        for route in table.models
        if route.model in models
    )


def router_keys(keys: Sequence[TeamKey], table: RouteTable, now: datetime) -> str:
    """The file a router's auth hook reads (playbooks/files/modelfleet_router_keys.py):
    the keys that are valid now, each with the names it may ask for under `table`."""
    entries = []
    for key in keys:
        if not key.valid(now):
            continue
        entry: dict[str, Any] = {
            "id": key.key_id,
            "team": key.team,
            "sha256": key.sha256,
            "models": None if key.models is None else allowed_names(key.models, table),
            "fallbacks": key.models is None or not falls_outside(key.models, table),
            "expires": _time(key.expires),
        }
        entry |= {field: getattr(key, field) for field in _LIMITS}
        entries.append(entry)
    return json.dumps({"format": ROUTER_KEYS_FORMAT, "keys": entries}, sort_keys=True)
