"""Resolving a model's token on the operator's machine (cli/ops/tokens.py): from ctl's
environment, from a file (0600, as ssh asks of a key), or as an inventory variable ctl never
reads; each failure one line at the reference's file, line and key; the value never shown."""

from __future__ import annotations

import os
import pwd
import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr

from cli.catalog.load import CatalogToken, load_catalog, parse_catalog
from cli.errors import InputError
from cli.ops.tokens import ResolvedToken, resolve_token, resolve_tokens

SECRET = "hf_" + "ZxCvBnMaSdFgHjKlQwErTyUiOpZxCvBnMa"

CATALOG = """\
models:
  llama:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    token: TOKEN
    profiles:
      - {name: h100, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      - {name: l40s, priority: 90, engine: vllm, gpu_class: L40S, gpus_per_node: 1}
      - {name: cpu, priority: 10, engine: llama.cpp, source: "file:///srv/llama.gguf"}
"""


def token_of(directory: Path, reference: str) -> CatalogToken:
    """The token of llama's h100 profile, from a catalog written in `directory`."""
    path = directory / "catalog.yaml"
    path.write_text(textwrap.dedent(CATALOG).replace("TOKEN", reference))
    token = load_catalog(path).models["llama"].profiles[0].token
    assert token is not None
    return token


def secret_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def refusal(token: CatalogToken, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(InputError) as caught:
        resolve_token(token, environ or {})
    assert len(caught.value.problems) == 1
    return str(caught.value)


def test_an_environment_variable_gives_its_value_stripped(tmp_path: Path) -> None:
    resolved = resolve_token(token_of(tmp_path, "{env: HF_TOKEN}"), {"HF_TOKEN": SECRET + "\n"})
    assert resolved.secret is not None
    assert resolved.secret.get_secret_value() == SECRET
    assert (resolved.description, resolved.inventory_variable) == ("$HF_TOKEN", None)


def test_a_file_gives_its_first_line_stripped(tmp_path: Path) -> None:
    secret_file(tmp_path / "hf-token", f"  {SECRET}\r\nsecond line\n")
    resolved = resolve_token(
        token_of(tmp_path, "{file: /ABS}".replace("/ABS", str(tmp_path / "hf-token"))), {}
    )
    assert resolved.secret is not None and resolved.secret.get_secret_value() == SECRET
    assert resolved.description == f"file {tmp_path / 'hf-token'}"


def test_a_relative_file_is_read_beside_the_catalog_not_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalogs = tmp_path / "fleet"
    secret_file(catalogs / "secrets" / "hf", SECRET)
    elsewhere = tmp_path / "elsewhere"
    secret_file(elsewhere / "secrets" / "hf", "hf_the_wrong_one")
    monkeypatch.chdir(elsewhere)
    catalogs.mkdir(exist_ok=True)
    resolved = resolve_token(token_of(catalogs, "{file: secrets/hf}"), {})
    assert resolved.secret is not None and resolved.secret.get_secret_value() == SECRET
    assert resolved.description == "file secrets/hf"


def test_a_file_under_home_is_found_through_the_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    secret_file(tmp_path / "home" / ".hf-token", SECRET + "\n")
    resolved = resolve_token(token_of(tmp_path, "{file: ~/.hf-token}"), {})
    assert resolved.secret is not None and resolved.secret.get_secret_value() == SECRET
    assert resolved.description == "file ~/.hf-token"


def test_an_inventory_variable_is_named_never_read(tmp_path: Path) -> None:
    resolved = resolve_token(token_of(tmp_path, "{var: vault_hf_token}"), {})
    assert resolved == ResolvedToken(
        "inventory variable vault_hf_token", inventory_variable="vault_hf_token"
    )
    assert resolved.secret is None


def test_an_unset_variable_is_one_line_at_the_reference(tmp_path: Path) -> None:
    token = token_of(tmp_path, "{env: HF_TOKEN}")
    assert refusal(token, {"HF_TOKEN_OTHER": SECRET}) == (
        f"{tmp_path / 'catalog.yaml'}:4: models.llama.token: llama's token: $HF_TOKEN is not"
        " set in ctl's environment: export it"
    )


@pytest.mark.parametrize("value", ["", "  \n"])
def test_an_empty_variable_is_refused(tmp_path: Path, value: str) -> None:
    token = token_of(tmp_path, "{env: HF_TOKEN}")
    assert refusal(token, {"HF_TOKEN": value}).endswith(
        "models.llama.token: llama's token: $HF_TOKEN is empty"
    )


def test_a_value_with_a_control_character_is_refused_without_it(tmp_path: Path) -> None:
    token = token_of(tmp_path, "{env: HF_TOKEN}")
    said = refusal(token, {"HF_TOKEN": SECRET + "\r\nX-Injected: 1"})
    assert said.endswith(
        "llama's token: $HF_TOKEN holds a control character: a token is one line of text"
    )
    assert SECRET not in said


def test_a_missing_file_names_the_path_it_looked_at(tmp_path: Path) -> None:
    token = token_of(tmp_path, "{file: secrets/hf}")
    assert refusal(token) == (
        f"{tmp_path / 'catalog.yaml'}:4: models.llama.token: llama's token: file secrets/hf"
        f" ({tmp_path / 'secrets' / 'hf'}): no such file"
    )


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o601, 0o644])
def test_a_file_open_to_group_or_others_is_refused_as_ssh_refuses_a_key(
    tmp_path: Path, mode: int
) -> None:
    path = secret_file(tmp_path / "hf", SECRET, mode)
    token = token_of(tmp_path, f"{{file: {path}}}")
    assert refusal(token).endswith(
        f"llama's token: file {path}: open to group or others (mode {mode:04o}): chmod 600 it,"
        " as ssh asks of a private key"
    )


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_file_only_its_owner_may_read_is_read(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path / "hf", SECRET, mode)
    resolved = resolve_token(token_of(tmp_path, f"{{file: {path}}}"), {})
    assert resolved.secret is not None and resolved.secret.get_secret_value() == SECRET


def test_an_unreadable_file_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A mode-000 file is read by root, who runs the suite: the kernel's refusal, faked at
    # the one call that meets it.
    path = secret_file(tmp_path / "hf", SECRET, 0o000)
    token = token_of(tmp_path, f"{{file: {path}}}")

    def refused(*_args: object, **_kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", refused)
    assert refusal(token).endswith(f"llama's token: file {path}: cannot read: Permission denied")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "its first line is empty"),
        ("\n" + SECRET + "\n", "its first line is empty"),
        ("   \t\n", "its first line is empty"),
    ],
)
def test_a_file_without_a_token_on_its_first_line_is_refused(
    tmp_path: Path, text: str, said: str
) -> None:
    path = secret_file(tmp_path / "hf", text)
    assert refusal(token_of(tmp_path, f"{{file: {path}}}")).endswith(
        f"llama's token: file {path}: {said}"
    )


def test_a_directory_or_a_fifo_is_not_a_token_file(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    assert refusal(token_of(tmp_path, f"{{file: {directory}}}")).endswith(
        f"file {directory}: not a regular file"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # no writer: a blocking open would hang ctl
    assert refusal(token_of(tmp_path, f"{{file: {fifo}}}")).endswith(
        f"file {fifo}: not a regular file"
    )


def test_a_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hf"
    path.write_bytes(b"\xff\xfe" + SECRET.encode())
    path.chmod(0o600)
    assert refusal(token_of(tmp_path, f"{{file: {path}}}")).endswith(f"file {path}: not UTF-8 text")


def test_every_profile_gets_its_models_token_read_once_and_a_file_profile_none(
    tmp_path: Path,
) -> None:
    token_of(tmp_path, "{env: HF_TOKEN}")
    catalog = load_catalog(tmp_path / "catalog.yaml")

    class Counting(dict[str, str]):
        reads = 0

        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            Counting.reads += 1
            return super().get(key, default)

    tokens = resolve_tokens(catalog.models["llama"].profiles, Counting(HF_TOKEN=SECRET))
    assert sorted(tokens) == ["llama/h100", "llama/l40s"]
    assert tokens["llama/h100"] is tokens["llama/l40s"]
    assert Counting.reads == 1


def test_every_unusable_reference_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        textwrap.dedent("""\
        models:
          a:
            source: hf://o/a
            token: {env: A_TOKEN}
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp}
          b:
            source: hf://o/b
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp, token: {file: missing}}
          c:
            source: hf://o/c
            token: {var: c_token}
            profiles:
              - {name: cpu, priority: 1, engine: llama.cpp}
        """)
    )
    catalog = load_catalog(path)
    profiles = [p for m in catalog.models.values() for p in m.profiles]
    with pytest.raises(InputError) as caught:
        resolve_tokens(profiles, {})
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:4: models.a.token: a's token: $A_TOKEN is not set in ctl's environment: export it",
        f"{path}:10: models.b.profiles[0].token: b's token: file missing"
        f" ({tmp_path / 'missing'}): no such file",
    ]


def test_a_resolved_token_shows_its_reference_never_its_value(tmp_path: Path) -> None:
    resolved = resolve_token(token_of(tmp_path, "{env: HF_TOKEN}"), {"HF_TOKEN": SECRET})
    for shown in (
        repr(resolved),
        str(resolved),
        f"{resolved}",
        f"{resolved!r}",
        str(vars(resolved)),
    ):
        assert SECRET not in shown, shown
    assert repr(resolved) == "ResolvedToken($HF_TOKEN)"
    assert str(resolved) == "$HF_TOKEN"
    assert isinstance(resolved.secret, SecretStr)
    assert SECRET not in repr(resolved.secret) and SECRET not in str(resolved.secret)
    assert SECRET not in repr({"tokens": [resolved.secret]})


def test_docs_catalog_md_shows_the_messages_ctl_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = (Path(__file__).parents[3] / "docs" / "catalog.md").read_text(encoding="utf-8")
    section = docs.split("## Tokens by reference", 1)[1].split("\n## ", 1)[0]
    shown = [
        line.split(": ", 1)[1]  # the key and the message; the line is the catalog's own
        for block in section.split("```text\n")[1:]
        for line in block.split("```", 1)[0].splitlines()
        # a plan's refusal, which only reconcile makes: tests/integration/
        # test_token_destinations.py holds that line to what ctl prints
        if "staging on" not in line
    ]
    home = tmp_path / "home" / "op"
    monkeypatch.setenv("HOME", str(home))
    secret_file(home / ".hf-token", SECRET, 0o644)
    said = []
    foreign = textwrap.dedent("""\
    models:
      llama:
        source: hf://o/n
        replicas: {min: 1}
        token: {var: ansible_become_password}
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp}
    """)
    with pytest.raises(InputError) as caught:
        parse_catalog(foreign, "catalog.yaml")
    said.append(str(caught.value).split(": ", 1)[1])
    for reference in ("{env: HF_TOKEN}", "{file: ~/.hf-token}"):
        path = tmp_path / "catalog.yaml"
        path.write_text(
            "models:\n  llama-3.1-70b:\n    source: hf://meta-llama/Llama-3.1-70B-Instruct\n"
            f"    token: {reference}\n    profiles:\n"
            "      - {name: cpu, priority: 1, engine: llama.cpp}\n"
        )
        with pytest.raises(InputError) as caught:
            resolve_tokens(load_catalog(path).models["llama-3.1-70b"].profiles, {})
        said.append(str(caught.value).split(": ", 1)[1].replace(str(home), "/home/op"))
    written = textwrap.dedent("""\
    models:
      llama:
        source: hf://o/n
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp, env: {HF_TOKEN: x}}
    """)
    with pytest.raises(InputError) as caught:
        parse_catalog(written, "catalog.yaml")
    said.append(str(caught.value).split(": ", 1)[1])
    assert said == shown


def test_a_tilde_with_no_home_to_expand_it_in_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = token_of(tmp_path, "{file: ~/.hf-token}")
    monkeypatch.delenv("HOME", raising=False)

    def no_entry(_uid: int) -> pwd.struct_passwd:
        raise KeyError("no passwd entry")  # a container's uid without one

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert refusal(token).endswith(
        "llama's token: file ~/.hf-token: no home directory to expand ~ in"
    )
