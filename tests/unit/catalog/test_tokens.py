"""Tokens by reference in the catalog (docs/catalog.md): the three forms, where a token
applies, and a token written in the catalog refused with file, line and key, never shown."""

from __future__ import annotations

import io
import textwrap

import pytest
from rich.console import Console

from cli.catalog.load import Catalog, parse_catalog
from cli.catalog.schema import TOKEN_LIKE, TokenRef, ansible_variable_name
from cli.errors import InputError
from cli.ui.tables import catalog_table

# The shape of a real user access token (`hf_` and 34 letters), made up.
TOKEN = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNmQwErTyUi"
POINTER = (
    "a secret is never written in the catalog, from where it would reach the nodes' unit"
    " files; name where it comes from: token: {env: HF_TOKEN}, {file: PATH} or {var: NAME}"
    " (docs/catalog.md)"
)

# Line 5 is the model's token, line 8 the GPU profile's extra line (a token, env, args).
BASE = """\
models:
  llama:
    source: hf://meta-llama/Llama-3.1-8B-Instruct
    aliases: [chat]
    MODEL_TOKEN
    profiles:
      - {name: h100, priority: 100, engine: vllm, gpu_class: H100, gpus_per_node: 1}
      - {name: l40s, priority: 90, engine: vllm, gpu_class: L40S, gpus_per_node: 1, EXTRA}
      - {name: cpu, priority: 10, engine: llama.cpp, source: "file:///srv/llama.gguf"}
"""


def catalog(model_token: str = "replicas: {min: 1}", extra: str = "embedding: false") -> str:
    return BASE.replace("MODEL_TOKEN", model_token).replace("EXTRA", extra)


def load(text: str) -> Catalog:
    return parse_catalog(textwrap.dedent(text), "catalog.yaml")


def errors_of(text: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        load(text)
    messages = [str(problem) for problem in caught.value.problems]
    assert TOKEN not in str(caught.value)
    return messages


@pytest.mark.parametrize(
    ("written", "reference"),
    [
        ("{env: HF_TOKEN}", "$HF_TOKEN"),
        ("{file: ~/.hf-token}", "file ~/.hf-token"),
        ("{file: secrets/hf}", "file secrets/hf"),
        ("{var: vault_hf_token}", "inventory variable vault_hf_token"),
    ],
)
def test_a_models_token_reaches_its_hf_profiles_and_not_its_file_one(
    written: str, reference: str
) -> None:
    loaded = load(catalog(f"token: {written}")).models["llama"]
    tokens = {p.name: p.token for p in loaded.profiles}
    assert tokens["cpu"] is None  # file:// is read on the node: nothing to authenticate
    for name in ("h100", "l40s"):
        token = tokens[name]
        assert token is not None
        assert token.reference == reference
        assert (token.model, token.file, token.line) == ("llama", "catalog.yaml", 5)
        assert token.path == ("models", "llama", "token")


def test_a_profiles_token_wins_over_its_models() -> None:
    loaded = load(catalog("token: {env: HF_TOKEN}", "token: {var: hf_token}"))
    tokens = {p.name: p.token for p in loaded.models["llama"].profiles}
    assert tokens["h100"] is not None and tokens["h100"].reference == "$HF_TOKEN"
    l40s = tokens["l40s"]
    assert l40s is not None and l40s.reference == "inventory variable hf_token"
    assert (l40s.line, l40s.path) == (8, ("models", "llama", "profiles", 1, "token"))


def test_no_token_anywhere_is_no_token() -> None:
    assert all(p.token is None for p in load(catalog()).models["llama"].profiles)


def test_an_https_source_takes_a_token_as_a_bearer() -> None:
    text = """\
    models:
      m:
        source: https://models.example.com/m.gguf
        token: {file: /etc/modelfleet/mirror-token}
        profiles:
          - {name: cpu, priority: 1, engine: llama.cpp}
    """
    token = load(text).models["m"].profiles[0].token
    assert token is not None and token.reference == "file /etc/modelfleet/mirror-token"


@pytest.mark.parametrize(
    ("model_token", "extra", "expected"),
    [
        (
            "token: {env: HF_TOKEN, file: ~/.hf-token}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: name one of env, file or var, not env and file",
        ),
        (
            "token: {}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: name where the token comes from: one of env,"
            " file or var",
        ),
        (
            "token: {evn: HF_TOKEN}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: unknown key 'evn' (did you mean 'env'?)",
        ),
        (
            "token: {env: HF_TOKEN, vault: x}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: unknown key 'vault'",
        ),
        (
            "token: HF_TOKEN",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: a token is named by where it comes from, never"
            " written here: token: {env: HF_TOKEN}, {file: PATH} or {var: NAME}",
        ),
        (
            "token: [HF_TOKEN]",
            "embedding: false",
            "catalog.yaml:5: models.llama.token: must be a mapping, not a list",
        ),
        (
            "token: {env: HF-TOKEN}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token.env: 'HF-TOKEN' is not an environment variable"
            " name: letters, digits and '_', not starting with a digit",
        ),
        (
            "replicas: {min: 1}",
            "token: {var: 2fa}",
            "catalog.yaml:8: models.llama.profiles[1].token.var: '2fa' is not an Ansible"
            " variable name: letters, digits and '_', not starting with a digit, and no keyword",
        ),
        (
            "token: {var: not}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token.var: 'not' is not an Ansible variable name:"
            " letters, digits and '_', not starting with a digit, and no keyword",
        ),
        (
            "token: {file: ''}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token.file: an empty path: name the file that holds"
            " the token",
        ),
        (
            "token: {env: 7}",
            "embedding: false",
            "catalog.yaml:5: models.llama.token.env: must be text, not a number",
        ),
    ],
    ids=[
        "two-forms", "no-form", "misspelt", "unknown-key", "a-bare-name", "a-list",
        "env-name", "var-digit", "var-keyword", "empty-file", "env-number",
    ],
)  # fmt: skip
def test_a_malformed_token_reference_is_refused_word_for_word(
    model_token: str, extra: str, expected: str
) -> None:
    assert errors_of(catalog(model_token, extra)) == [expected]


ENV_RULE = (
    "a token is read only from an environment variable whose name ends in _TOKEN and does not"
    " start with ANSIBLE_, MODELFLEET_, PROXMOX_, LITELLM_ (docs/catalog.md)"
)
VAR_RULE = (
    "a token is read only from an inventory variable whose name ends in _token and does not"
    " start with ansible_, modelfleet_ (docs/catalog.md)"
)


@pytest.mark.parametrize(
    ("model_token", "expected"),
    [
        (
            "token: {var: ansible_become_password}",
            "catalog.yaml:5: models.llama.token.var: 'ansible_become_password' is not an"
            " inventory variable meant for a token: ansible_* is reserved for Ansible's and"
            f" ctl's own settings and secrets; {VAR_RULE}",
        ),
        (
            "token: {var: ansible_galaxy_token}",
            "catalog.yaml:5: models.llama.token.var: 'ansible_galaxy_token' is not an inventory"
            " variable meant for a token: ansible_* is reserved for Ansible's and ctl's own"
            f" settings and secrets; {VAR_RULE}",
        ),
        (
            "token: {var: modelfleet_router_master_key}",
            "catalog.yaml:5: models.llama.token.var: 'modelfleet_router_master_key' is not an"
            " inventory variable meant for a token: modelfleet_* is reserved for Ansible's and"
            f" ctl's own settings and secrets; {VAR_RULE}",
        ),
        (
            "token: {var: vault_db_password}",
            "catalog.yaml:5: models.llama.token.var: 'vault_db_password' is not an inventory"
            f" variable meant for a token: its name does not end in _token; {VAR_RULE}",
        ),
        (
            "token: {env: PROXMOX_TOKEN_SECRET}",
            "catalog.yaml:5: models.llama.token.env: 'PROXMOX_TOKEN_SECRET' is not an"
            " environment variable meant for a token: PROXMOX_* is reserved for Ansible's and"
            f" ctl's own settings and secrets; {ENV_RULE}",
        ),
        (
            "token: {env: PROXMOX_API_TOKEN}",
            "catalog.yaml:5: models.llama.token.env: 'PROXMOX_API_TOKEN' is not an environment"
            " variable meant for a token: PROXMOX_* is reserved for Ansible's and ctl's own"
            f" settings and secrets; {ENV_RULE}",
        ),
        (
            "token: {env: ANSIBLE_GALAXY_TOKEN}",
            "catalog.yaml:5: models.llama.token.env: 'ANSIBLE_GALAXY_TOKEN' is not an"
            " environment variable meant for a token: ANSIBLE_* is reserved for Ansible's and"
            f" ctl's own settings and secrets; {ENV_RULE}",
        ),
        (
            "token: {env: LITELLM_MASTER_KEY}",
            "catalog.yaml:5: models.llama.token.env: 'LITELLM_MASTER_KEY' is not an environment"
            " variable meant for a token: LITELLM_* is reserved for Ansible's and ctl's own"
            f" settings and secrets; {ENV_RULE}",
        ),
        (
            "token: {env: _TOKEN}",
            "catalog.yaml:5: models.llama.token.env: '_TOKEN' is not an environment variable"
            f" meant for a token: its name does not end in _TOKEN; {ENV_RULE}",
        ),
    ],
    ids=[
        "become-password", "ansible-var", "router-master-key", "not-a-token-var",
        "proxmox-secret", "proxmox-token", "ansible-env", "litellm-key", "bare-suffix",
    ],
)  # fmt: skip
def test_a_token_is_read_only_from_a_name_meant_for_one(model_token: str, expected: str) -> None:
    """Issue 25 item 4: a catalog cannot name Ansible's or ctl's own secrets as a token."""
    assert errors_of(catalog(model_token)) == [expected]


@pytest.mark.parametrize(
    "written",
    ["{env: HF_TOKEN}", "{env: HUGGING_FACE_HUB_TOKEN}", "{env: MIRROR_TOKEN}",
     "{var: vault_hf_token}", "{var: hf_token}"],
)  # fmt: skip
def test_names_meant_for_a_token_are_taken(written: str) -> None:
    token = load(catalog(f"token: {written}")).models["llama"].profiles[0].token
    assert token is not None


def test_a_token_on_a_file_source_is_refused_as_meaningless() -> None:
    text = catalog().replace(
        'source: "file:///srv/llama.gguf"}',
        'source: "file:///srv/llama.gguf", token: {env: T_TOKEN}}',
    )
    assert errors_of(text) == [
        "catalog.yaml:9: models.llama.profiles[2].token: a token is for hf:// and https://"
        " sources: file:// is a path on the node, read with nothing to authenticate"
    ]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("file:///srv/m.gguf", "file:// is a path on the node, read with nothing to authenticate"),
        ("s3://bucket/m", "s3:// is read with the node's own credentials, not a token"),
        ("http://mirror/m", "over http:// it would cross the network in clear text: use https://"),
    ],
)
def test_a_models_token_that_none_of_its_profiles_would_use_is_refused(
    source: str, why: str
) -> None:
    engine = "vllm, gpu_class: H100, gpus_per_node: 1" if source[:2] == "s3" else "llama.cpp"
    text = f"""\
    models:
      m:
        source: {source}
        token: {{env: HF_TOKEN}}
        profiles:
          - {{name: p, priority: 1, engine: {engine}}}
    """
    assert errors_of(text) == [
        "catalog.yaml:4: models.m.token: no profile is fetched with it: a token is for hf://"
        f" and https:// sources: {why}"
    ]


def test_a_models_token_every_profile_overrides_is_refused() -> None:
    text = """\
    models:
      m:
        source: hf://o/n
        token: {env: HF_TOKEN}
        profiles:
          - {name: p, priority: 1, engine: llama.cpp, token: {env: OTHER_TOKEN}}
    """
    assert errors_of(text) == [
        "catalog.yaml:4: models.m.token: no profile is fetched with it: every profile names its"
        " own token"
    ]


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"])
@pytest.mark.parametrize("value", ["abc", "''", TOKEN])
def test_a_token_by_its_name_in_env_is_refused_whatever_its_value(name: str, value: str) -> None:
    said = (
        f"{name} is a secret by its name: " + POINTER.replace("{env: HF_TOKEN}", f"{{env: {name}}}")
        if value != TOKEN
        else f"this looks like a Hugging Face token: {POINTER}"
    )
    assert errors_of(catalog(extra=f"env: {{{name}: {value}}}")) == [
        f"catalog.yaml:8: models.llama.profiles[1].env.{name}: {said}"
    ]


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        (f"env: {{MY_SECRET: {TOKEN}}}", "env.MY_SECRET"),
        (f'env: {{AUTH: "Bearer {TOKEN}"}}', "env.AUTH"),
        (f'args: ["--api-key", "{TOKEN}"]', "args[1]"),
        (f'args: ["--api-key={TOKEN}"]', "args[0]"),
        (f"node_selector: {{team: {TOKEN}}}", "node_selector.team"),
        ("env: {ORG: 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}", "env.ORG"),
    ],
)
def test_a_value_that_looks_like_a_token_is_refused_at_its_key(extra: str, key: str) -> None:
    assert errors_of(catalog(extra=extra)) == [
        f"catalog.yaml:8: models.llama.profiles[1].{key}: this looks like a Hugging Face token:"
        f" {POINTER}"
    ]


def test_a_token_where_the_schema_would_quote_it_is_refused_without_it() -> None:
    # `'hf_…' is not one of vllm, sglang, llama.cpp` would print the token: not said.
    text = catalog().replace("engine: llama.cpp", f"engine: {TOKEN}")
    assert errors_of(text) == [
        f"catalog.yaml:9: models.llama.profiles[2].engine: this looks like a Hugging Face token:"
        f" {POINTER}"
    ]


def test_a_token_pasted_where_its_name_goes_is_refused_without_it() -> None:
    for form in ("env", "file", "var"):
        assert errors_of(catalog(f"token: {{{form}: {TOKEN}}}")) == [
            f"catalog.yaml:5: models.llama.token.{form}: this looks like a Hugging Face token:"
            f" {POINTER}"
        ]


def test_a_token_as_a_key_is_refused_at_its_mapping_which_prints_no_key() -> None:
    assert errors_of(catalog(extra=f"env: {{{TOKEN}: x}}")) == [
        f"catalog.yaml:8: models.llama.profiles[1].env: a key here looks like a Hugging Face"
        f" token: {POINTER}"
    ]


def test_a_token_is_refused_along_with_the_other_problems_but_never_quoted() -> None:
    text = catalog(extra=f'args: ["{TOKEN}"], engine_version: "x"')
    assert errors_of(text) == [
        "catalog.yaml:8: models.llama.profiles[1].args[0]: this looks like a Hugging Face"
        f" token: {POINTER}",
        "catalog.yaml:8: models.llama.profiles[1].engine_version: 'x' is not valid: must match"
        r" ^\d+(\.\d+){0,3}$",
    ]


@pytest.mark.parametrize("arg", ["--hf-token", "--hf_token", "--hf-token=abc"])
def test_the_engines_own_hf_token_option_is_refused(arg: str) -> None:
    assert errors_of(catalog(extra=f'args: ["{arg}"]')) == [
        "catalog.yaml:8: models.llama.profiles[1].args[0]: --hf-token puts a token on the"
        f" command line: {POINTER}"
    ]


@pytest.mark.parametrize(
    ("text", "looks"),
    [
        (TOKEN, True),
        ("hf_" + "a1" * 15, True),  # 30: letters and digits
        ("hf_" + "a" * 29, False),  # one short
        ("hf_hub_download", False),
        ("x" + TOKEN, False),  # inside a word: some other name
        ("Bearer " + TOKEN, True),
        ("https://h/m?token=" + TOKEN, True),
        ("api_org_" + "b" * 34, True),
        ("HF_TOKEN", False),
    ],
)
def test_what_looks_like_a_token(text: str, looks: bool) -> None:
    assert (TOKEN_LIKE.search(text) is not None) is looks


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("hf_token", True),
        ("_private", True),
        ("vault_hf_token2", True),
        ("2fa", False),
        ("hf-token", False),
        ("for", False),  # Python keyword: ansible-core before 2.19
        ("none", False),  # Jinja keyword: ansible-core 2.19
        ("tökén", False),
        ("", False),
    ],
)
def test_ansible_variable_names(name: str, valid: bool) -> None:
    assert ansible_variable_name(name) is valid


def test_a_reference_is_what_is_printed_and_holds_no_value() -> None:
    ref = TokenRef(env="HF_TOKEN")
    assert ref.reference == "$HF_TOKEN"
    assert ref.model_dump(exclude_none=True) == {"env": "HF_TOKEN"}


def test_the_catalog_table_shows_each_models_references_and_no_column_without_one() -> None:
    def rendered(text: str) -> list[str]:
        console = Console(file=io.StringIO(), width=240, color_system=None, highlight=False)
        console.print(catalog_table(load(text), width=240))
        return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]

    assert "TOKEN" not in rendered(catalog())[0]
    shared = rendered(catalog("token: {env: HF_TOKEN}"))
    assert shared[0].split()[-1] == "TOKEN" and shared[1].split()[-1] == "$HF_TOKEN"
    mixed = rendered(catalog("token: {env: HF_TOKEN}", "token: {file: ~/.hf-token}"))
    assert mixed[1].endswith("h100: $HF_TOKEN, l40s: file ~/.hf-token")
