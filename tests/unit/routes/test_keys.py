"""The teams' keys: what ctl keeps, and what a router is given under a routing table. Pure."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from cli.errors import InputError
from cli.ops.keys import keys_file, load_keys, save_keys
from cli.routes.deploy import router_variables, served_line
from cli.routes.keys import (
    KEY_PREFIX,
    TeamKey,
    key_digest,
    keys_document,
    new_key,
    parse_keys,
    resolve_models,
    revoke,
    router_keys,
)
from cli.routes.table import route_table
from tests.builders import NOW, snapshot
from tests.unit.routes.test_routes import ADDRESSES, MODELS, fleet

SECRET = "S3cr3t-secret-secret-secret-secret-secret-x"
NO_LIMITS: dict[str, int | None] = {}


def make(key_id: str, models: tuple[str, ...] | None, **limits: int) -> tuple[str, TeamKey]:
    return new_key(key_id, SECRET, "search", models, dict(limits), NOW, None)


def installed(keys: list[TeamKey], *, hgx2_unreachable: bool = False) -> dict[str, dict]:  # type: ignore[type-arg]
    table = route_table(MODELS, snapshot(*fleet(hgx2_unreachable=hgx2_unreachable)), ADDRESSES)
    document = json.loads(router_keys(keys, table, NOW))
    assert document["format"] == "modelfleet.router-keys/v1"
    return {entry["id"]: entry for entry in document["keys"]}


def test_a_key_is_its_prefix_id_and_secret_and_only_its_hash_is_kept() -> None:
    text, record = make("0a1b2c3d", ("big",), rpm=5)
    assert text == f"{KEY_PREFIX}0a1b2c3d-{SECRET}"
    assert record.sha256 == key_digest(text)
    kept = keys_document([record])
    assert SECRET not in kept
    assert parse_keys(kept, "keys.json") == (record,)


def test_models_are_named_by_model_or_alias_and_an_unknown_one_is_refused() -> None:
    assert resolve_models(MODELS, ["chat", "big", "chat-small"]) == ("big", "small")
    with pytest.raises(InputError) as raised:
        resolve_models(MODELS, ["chat", "chatt-small"])
    assert str(raised.value) == (
        f"{MODELS.file}: --models: no model or alias 'chatt-small' (did you mean 'chat-small'?)"
    )


def test_a_key_for_a_model_may_ask_by_its_aliases() -> None:
    _, big = make("0000000a", ("big",))
    _, every = make("0000000b", None)
    entries = installed([big, every])
    assert entries["0000000a"]["models"] == ["big", "chat", "assistant"]
    assert entries["0000000b"]["models"] is None  # every model


def test_a_fallback_to_a_model_the_key_lacks_is_not_taken() -> None:
    """hgx-2 away: big (its rank 1 there) has no ready replica and `small` answers for it.
    A key for big alone may not ask by big's names then, rather than get small; a key that
    has small too may. And a key whose models fall back outside them has no fallbacks."""
    _, big = make("0000000a", ("big",))
    _, big_and_small = make("0000000b", ("big", "small"))
    _, tiny = make("0000000c", ("tiny",))
    entries = installed([big, big_and_small, tiny], hgx2_unreachable=True)
    assert entries["0000000a"]["models"] == []
    assert entries["0000000b"]["models"] == ["big", "chat", "assistant", "small", "chat-small"]
    assert entries["0000000a"]["fallbacks"] is False  # big falls back to mid: not the key's
    assert entries["0000000b"]["fallbacks"] is False  # ... and to mid, tiny
    assert entries["0000000c"]["fallbacks"] is True  # tiny falls back to nothing
    _, every = make("0000000d", None)
    assert installed([every])["0000000d"]["fallbacks"] is True


def test_revoked_and_expired_keys_are_not_given_to_the_routers() -> None:
    _, kept = make("0000000a", None, rpm=3, tpm=1000, max_parallel=2)
    _, gone = make("0000000b", None)
    expired = replace(make("0000000c", None)[1], expires=NOW - timedelta(seconds=1))
    keys = list(revoke([kept, gone, expired], "0000000b", NOW))
    entries = installed(keys)
    assert list(entries) == ["0000000a"]
    assert entries["0000000a"] | {"sha256": "-"} == {
        "id": "0000000a", "team": "search", "sha256": "-", "models": None, "fallbacks": True,
        "rpm": 3, "tpm": 1000, "max_parallel": 2, "expires": None,
    }  # fmt: skip
    with pytest.raises(KeyError):
        revoke(keys, "ffffffff", NOW)


def test_a_revoke_changes_what_the_routers_must_serve_so_the_next_update_pushes_it() -> None:
    table = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    _, key = make("0000000a", None)
    before = served_line(router_variables(table, keys=[key], now=NOW))
    after = served_line(router_variables(table, keys=revoke([key], "0000000a", NOW), now=NOW))
    assert before != after
    same = served_line(router_variables(table, keys=[key], now=NOW))
    assert same == before


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"rpm": 0}, "keys.json: keys[0].rpm: must be a whole number of at least 1, or null"),
        ({"rpm": True}, "keys.json: keys[0].rpm: must be a whole number of at least 1, or null"),
        ({"id": "XYZ"}, "keys.json: keys[0].id: 'XYZ' is not a valid id"),
        ({"team": "A B"}, "keys.json: keys[0].team: 'A B' is not a valid team"),
        ({"expires": "2026-01-01T00:00:00"}, "keys.json: keys[0].expires: has no time zone"),
        ({"created": "soon"}, "keys.json: keys[0].created: 'soon' is not an ISO 8601 time"),
        ({"models": "big"}, "keys.json: keys[0].models: must be a list of model names,"
                            " or null for every model"),
    ],
)  # fmt: skip
def test_a_keys_file_that_is_wrong_is_refused_naming_the_key(
    entry: dict[str, object], problem: str
) -> None:
    _, key = make("0000000a", ("big",))
    document = json.loads(keys_document([key]))
    document["keys"][0] |= entry
    with pytest.raises(InputError) as raised:
        parse_keys(json.dumps(document), "keys.json")
    assert str(raised.value) == problem


def test_a_keys_file_of_another_format_or_with_a_repeated_id_is_refused() -> None:
    _, key = make("0000000a", ("big",))
    with pytest.raises(InputError, match=r"keys.json: format: not a modelfleet.keys/v1 file"):
        parse_keys('{"format": "other"}', "keys.json")
    with pytest.raises(InputError, match=r"keys.json:1: not JSON"):
        parse_keys("{", "keys.json")
    with pytest.raises(InputError, match=r"keys\[1\].id: repeats another key's"):
        parse_keys(keys_document([key, key]), "keys.json")


def test_a_keys_file_that_is_a_fifo_or_a_symlink_is_refused_not_taken_for_no_keys(
    tmp_path: Path,
) -> None:
    path = keys_file(tmp_path, tmp_path / "inventory")
    assert load_keys(path) == ()  # none made yet
    _, key = make("0000000a", ("big",))
    save_keys(path, (key,))
    assert load_keys(path) == (key,)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    real = tmp_path / "elsewhere.json"
    path.rename(real)
    path.symlink_to(real)
    with pytest.raises(InputError, match="cannot read: a symbolic link, not followed"):
        load_keys(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match="cannot read: not a regular file but a FIFO"):
        load_keys(path)
