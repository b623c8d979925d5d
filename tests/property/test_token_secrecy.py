"""Properties: a token is never shown.

1. Written anywhere in a generated valid catalog (a value, part of a value, a key), a text
   that looks like a Hugging Face token is refused, at that place, and no problem printed
   holds it — not even one the schema would have made by quoting the value.
2. Resolved from ctl's environment or a file, whatever the token and whatever goes wrong
   (unset, empty, a control character, a file open to others, missing, empty first line),
   the error, and the resolved token's repr, str and description never hold it; only
   `secret.get_secret_value()` gives it.
"""

from __future__ import annotations

import copy
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli.catalog.load import CatalogToken, load_catalog, parse_catalog
from cli.errors import InputError, KeyPath
from cli.ops.tokens import resolve_token
from tests.property.test_catalog_properties import FILE, Generated, line_of, valid_catalogs

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
TOKENS = st.one_of(
    st.text(ALNUM[:52], min_size=34, max_size=34).map(lambda s: "hf_" + s),  # today's format
    st.text(ALNUM, min_size=30, max_size=48).map(lambda s: "hf_" + s),
    st.text(ALNUM[:52], min_size=34, max_size=34).map(lambda s: "api_org_" + s),
)
# Around the token in a value: nothing, or text that ends in no letter or digit.
AROUND = st.sampled_from(
    (("", ""), ("Bearer ", ""), ("--api-key=", ""), ("https://h/m?token=", "&x=1"), (" ", "\n"))
)


def places(data: Any, path: KeyPath = ()) -> list[tuple[str, KeyPath]]:
    """Every text value ("value", its path) and mapping key ("key", the key's path)."""
    found: list[tuple[str, KeyPath]] = []
    if isinstance(data, str):
        found.append(("value", path))
    elif isinstance(data, dict):
        for key, value in data.items():
            found.append(("key", (*path, key)))
            found += places(value, (*path, key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            found += places(item, (*path, index))
    return found


def put(data: Any, kind: str, path: KeyPath, text: str) -> None:
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    if kind == "value":
        parent[path[-1]] = text
    else:  # the key renamed, in place: the mapping's order kept
        items = list(parent.items())
        parent.clear()
        parent.update({text if k == path[-1] else k: v for k, v in items})


@settings(max_examples=150)
@given(valid_catalogs(), TOKENS, AROUND, st.data())
def test_a_token_written_anywhere_in_a_catalog_is_refused_there_and_never_shown(
    generated: Generated, token: str, around: tuple[str, str], data: st.DataObject
) -> None:
    written = copy.deepcopy(generated.data)  # a value the generator shares is changed once
    kind, path = data.draw(st.sampled_from(places(written)))
    event(f"{kind} at depth {len(path)}")
    put(written, kind, path, around[0] + token + around[1] if kind == "value" else token)
    text = Generated(written).text
    with pytest.raises(InputError) as raised:
        parse_catalog(text, FILE)
    assert token not in str(raised.value)
    at = path if kind == "value" else path[:-1]
    flagged = [p for p in raised.value.problems if "looks like a Hugging Face token" in p.message]
    assert [(p.path, p.line) for p in flagged] == [(at, line_of(text, at))], text


def catalog_token(directory: Path, reference: str) -> CatalogToken:
    path = directory / "catalog.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        models:
          m:
            source: hf://org/name
            token: {reference}
            profiles:
              - {{name: cpu, priority: 1, engine: llama.cpp}}
        """)
    )
    token = load_catalog(path).models["m"].profiles[0].token
    assert token is not None
    return token


SECRETS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.sampled_from("éß€"),
    min_size=6,
    max_size=60,
).map(lambda s: "s3cr3t" + s)
ENV_CASES = ("set", "padded", "control", "empty", "unset")
FILE_CASES = ("0600", "0400", "0640", "0604", "first line empty", "control", "missing")


@settings(max_examples=150, deadline=None)
@given(SECRETS, st.sampled_from(("env", "file")), st.data())
def test_a_resolved_or_refused_token_never_shows_its_value(
    secret: str, form: str, data: st.DataObject
) -> None:
    case = data.draw(st.sampled_from(ENV_CASES if form == "env" else FILE_CASES))
    event(f"{form}: {case}")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        environ: dict[str, str] = {}
        if form == "env":
            token = catalog_token(root, "{env: HF_TOKEN}")
            value = {
                "set": secret,
                "padded": f"  {secret}\n",
                "control": f"{secret}\x1b[0m",
                "empty": "",
            }.get(case)
            if value is not None:
                environ["HF_TOKEN"] = value
        else:
            token = catalog_token(root, "{file: hf-token}")
            content = {"first line empty": f"\n{secret}\n", "control": f"{secret}\x07\n"}.get(
                case, f"{secret}\n"
            )
            if case != "missing":
                file = root / "hf-token"
                file.write_text(content, encoding="utf-8")
                file.chmod(int(case, 8) if case[0] == "0" else 0o600)
        try:
            resolved = resolve_token(token, environ)
        except InputError as error:
            assert case not in ("set", "padded", "0600", "0400"), str(error)
            for shown in (str(error), repr(error), *(repr(p) for p in error.problems)):
                assert secret not in shown
            return
        assert case in ("set", "padded", "0600", "0400")
        assert resolved.secret is not None
        assert resolved.secret.get_secret_value() == secret
        for shown in (repr(resolved), str(resolved), resolved.description, repr(resolved.secret)):
            assert secret not in shown
