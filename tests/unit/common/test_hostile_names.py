"""Names that would become paths, and text that would split a line (issue 25): refused where
they are written, with the file, the line and the key; and every path ctl makes from a name
proven to stay in its directory (cli/names.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import pytest

from cli.catalog.load import parse_catalog
from cli.errors import InputError
from cli.facts.cache import FactsCache
from cli.inventory.forms import SourceText
from cli.inventory.load import inventory_from_texts, load_inventory
from cli.inventory.patterns import MAX_HOST_NAME, host_name_problem
from cli.names import UnsafeNameError, file_in
from cli.provision.plan.options import name_problem
from cli.reconcile.backoff import Backoff
from cli.reconcile.ledger import load_ledger, save_ledger
from cli.regularfile import NotARegularFileError, read_regular_file
from cli.shards.staging import staged_path
from cli.shards.units import shard_paths, unit_name

# --- one function for every path made from a name ----------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../../../ca/revoked", "has a '/', which would put it in another directory"),
        ("..", "is '..', a directory, not a file"),
        (".", "is '.', a directory, not a file"),
        ("", "is empty"),
        ("a\x00b", "has a control character (U+0000)"),
        ("a\rb", "has a control character (U+000D)"),
        ("a\u2028b", "has a control character (U+2028)"),
        ("a\x85b", "has a control character (U+0085)"),
    ],
)
def test_a_name_that_would_leave_its_directory_or_break_a_line_is_refused(
    name: str, why: str
) -> None:
    with pytest.raises(UnsafeNameError) as raised:
        file_in(Path("/state/facts"), name, "")
    assert str(raised.value).endswith(why)


def test_a_name_too_long_for_a_file_and_its_temporary_copy_is_refused() -> None:
    assert file_in(PurePosixPath("/d"), "a" * 230, ".json") == PurePosixPath(f"/d/{'a' * 230}.json")
    with pytest.raises(UnsafeNameError, match="is 236 bytes long"):
        file_in(PurePosixPath("/d"), "a" * 231, ".json")


def test_a_good_name_is_a_file_directly_in_its_directory() -> None:
    assert file_in(Path("/state/facts/0123"), "hgx-01", ".json") == Path(
        "/state/facts/0123/hgx-01.json"
    )
    assert file_in(PurePosixPath("/etc"), "a..b") == PurePosixPath("/etc/a..b")


def test_a_shard_of_the_longest_model_name_fits_its_unit_and_file_names() -> None:
    # 100 characters (the catalog's bound), replica 99999, rank 1023 of a 1024-node replica.
    replica = "m" * 100 + "-99999"
    unit, env, record = shard_paths(replica, 1023)
    assert unit == f"/etc/systemd/system/{unit_name(replica, 1023)}"
    assert len(unit_name(replica, 1023).encode()) <= 255
    assert env.startswith("/etc/modelfleet/shards/") and record.endswith("-rank1023.json")


def test_a_replica_name_a_node_could_report_never_leaves_the_shards_directories() -> None:
    with pytest.raises(UnsafeNameError):
        shard_paths("../../../etc/cron.d/x", 0)


# --- host names (item 1) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["hgx-01", "node_a", "gpu01.example.com", "192.0.2.10", "::1", "fe80::1", "a" * MAX_HOST_NAME],
)
def test_host_names_and_addresses_ansible_and_dns_take_are_kept(name: str) -> None:
    assert host_name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["../x", "a/b", "..", ".hidden", "-oProxyCommand=x", "a b", "a\tb", "a\x00b", "héllo",
     "a" * (MAX_HOST_NAME + 1)],
)  # fmt: skip
def test_host_names_that_are_no_host_name_are_refused(name: str) -> None:
    assert host_name_problem(name) is not None


def inventory_errors(text: str, file: str = "hosts.yml") -> list[str]:
    with pytest.raises(InputError) as raised:
        inventory_from_texts("inv", [SourceText(file, text)])
    return [str(problem) for problem in raised.value.problems]


def test_a_yaml_host_named_as_a_path_is_refused_at_its_line() -> None:
    assert inventory_errors("gpu:\n  hosts:\n    hgx-1:\n    ../../etc/passwd:\n") == [
        "hosts.yml:4: gpu.hosts.../../etc/passwd: host name '../../etc/passwd' is not a host"
        " name or address: letters, digits, '-', '_', '.' and ':' only"
    ]


def test_a_range_that_makes_a_bad_name_is_said_once() -> None:
    assert inventory_errors("[gpu]\nhgx-[1:3]@x\n", "hosts") == [
        "hosts:2: hgx-[1:3]@x: host name 'hgx-1@x' is not a host name or address:"
        " letters, digits, '-', '_', '.' and ':' only"
    ]


@pytest.mark.parametrize(
    ("text", "file"),
    [("../gpu:\n  hosts:\n    h1:\n", "hosts.yml"), ("[..]\nh1\n", "hosts")],
)
def test_a_group_named_as_a_path_is_refused_it_names_its_group_vars(text: str, file: str) -> None:
    (error,) = inventory_errors(text, file)
    assert error.startswith(f"{file}:1: ")
    assert "group name" in error


@pytest.mark.parametrize("address", ["10.0.0.1\r", "10.0.0.1\nExecStartPre=/bin/x", "h\x1b[2J"])
def test_an_address_with_a_control_character_is_refused(address: str) -> None:
    text = f"all:\n  hosts:\n    h1:\n      ansible_host: {address!r}\n".replace("'", '"')
    (error,) = inventory_errors(text)
    assert error.startswith("hosts.yml:4: all.hosts.h1.ansible_host: has a control character")


# --- the catalog (items 6, 7, 10) -------------------------------------------------------

CATALOG = """\
models:
  qwen:
    source: hf://Qwen/Qwen2.5-Coder-7B-Instruct
    profiles:
      - name: cpu
        priority: 10
        engine: llama.cpp
        args: ["--ctx-size", "4096"]
"""


def catalog_errors(text: str) -> list[str]:
    with pytest.raises(InputError) as raised:
        parse_catalog(text, "catalog.yaml")
    return [str(problem) for problem in raised.value.problems]


@pytest.mark.parametrize(
    ("char", "code"),
    [("\\r", "U+000D"), ("\\0", "U+0000"), ("\\v", "U+000B"), ("\\f", "U+000C"),
     ("\\u2028", "U+2028"), ("\\u2029", "U+2029"), ("\\x85", "U+0085"), ("\\t", "U+0009"),
     ("\\x9b", "U+009B"), ("\\u202e", "U+202E")],
)  # fmt: skip
def test_a_control_character_in_a_catalog_argument_is_refused_at_its_line(
    char: str, code: str
) -> None:
    # In a unit file it would end the ExecStart line: the rest a directive of its own.
    text = CATALOG.replace('"4096"', f'"4096{char}ExecStartPre=/bin/sh"')
    assert catalog_errors(text) == [
        f"catalog.yaml:8: models.qwen.profiles[0].args[1]: has a control character ({code}):"
        " no text in a catalog may hold one (it reaches the nodes' unit files)"
    ]


def test_a_control_character_in_a_catalog_key_is_refused_at_its_mapping() -> None:
    text = CATALOG + '        env: {"A\\rB": "1"}\n'
    assert catalog_errors(text) == [
        "catalog.yaml:9: models.qwen.profiles[0].env: a key here has a control character"
        " (U+000D): no text in a catalog may hold one (it reaches the nodes' unit files)"
    ]


def test_an_env_name_with_a_trailing_newline_is_not_an_env_name() -> None:
    # re.match with `$` took "HF_TOKEN\n" as a name, past the secret-name check.
    text = CATALOG + '        env: {"HF_TOKEN\\n": "x"}\n'
    errors = catalog_errors(text)
    assert any("control character (U+000A)" in error for error in errors), errors


def test_an_env_name_is_checked_whole() -> None:
    from cli.catalog.load import _check_profile  # the rule alone, past the control check
    from cli.catalog.schema import Profile
    from cli.yamlsource import parse_yaml

    document = parse_yaml(CATALOG, "catalog.yaml")
    profile = Profile(name="cpu", priority=1, engine="llama.cpp", env={"HF_TOKEN\n": "x"})
    (problem,) = _check_profile(document, ("models", "qwen", "profiles", 0), profile)
    assert problem.message == "not an environment name"


def test_a_300_character_model_name_is_refused_at_its_line() -> None:
    text = CATALOG.replace("  qwen:", "  " + "q" * 300 + ":")
    assert catalog_errors(text) == [
        f"catalog.yaml:2: models.{'q' * 300}: a model name has at most 100 characters, not 300:"
        " it names the systemd units and files of its replicas on the nodes"
    ]


def test_a_long_alias_and_a_long_profile_name_are_refused() -> None:
    alias = CATALOG.replace("    profiles:", f"    aliases: [{'a' * 101}]\n    profiles:")
    assert catalog_errors(alias) == [
        "catalog.yaml:4: models.qwen.aliases[0]: an alias has at most 100 characters, not 101"
    ]
    profile = CATALOG.replace("name: cpu", f"name: {'p' * 101}")
    assert catalog_errors(profile) == [
        "catalog.yaml:5: models.qwen.profiles[0].name: string should have at most 100 characters"
    ]


def test_a_100_character_model_name_is_taken() -> None:
    catalog = parse_catalog(CATALOG.replace("  qwen:", "  " + "q" * 100 + ":"), "catalog.yaml")
    assert list(catalog.models) == ["q" * 100]


# --- state files and facts files that are not what ctl wrote (items 8, 9) ----------------


NAIVE = "until is not a time with its UTC offset"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"m": {"failures": 1, "until": "2026-11-30T09:00:00"}}', NAIVE),
        ('{"m": {"failures": 1, "until": 5}}', NAIVE),
        ('{"m": {"failures": "x"}}', "failures is not a count"),
        ('{"m": {"failures": 1, "counted": "abc"}}', "counted is not a list of texts"),
        ('{"m": {"until": null}}', "not a backoff ledger"),
        ('{"m": 3}', "an entry is not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ("{", "not a backoff ledger"),
        ("\xff", "not a backoff ledger"),
    ],
)  # fmt: skip
def test_an_unreadable_ledger_is_a_warning_and_an_empty_ledger(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(text, encoding="latin-1")
    assert load_ledger(path) == (
        {},
        f"ignoring unreadable backoff ledger {path} ({why}): it is written afresh",
    )


def test_a_ledger_ctl_wrote_reads_back_and_a_missing_one_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "backoff" / "ledger.json"
    assert load_ledger(path) == ({}, None)
    until = datetime(2026, 11, 30, 9, 0, 30, tzinfo=UTC)
    save_ledger(path, {"m": Backoff(2, until, ("m-1@?",))})
    assert load_ledger(path) == ({"m": Backoff(2, until, ("m-1@?",))}, None)


def test_a_ledger_that_is_a_fifo_or_a_symlink_is_not_read(tmp_path: Path) -> None:
    fifo, link = tmp_path / "fifo.json", tmp_path / "link.json"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    assert load_ledger(fifo)[1] == (
        f"ignoring unreadable backoff ledger {fifo} (not a regular file but a FIFO):"
        " it is written afresh"
    )
    assert load_ledger(link)[1] == (
        f"ignoring unreadable backoff ledger {link} (a symbolic link, not followed):"
        " it is written afresh"
    )


def test_a_fifo_or_a_symlink_in_the_facts_cache_is_a_warning_not_a_hang(tmp_path: Path) -> None:
    cache = FactsCache(tmp_path / "inventory", tmp_path / "state")
    cache.directory.mkdir(parents=True)
    os.mkfifo(cache.directory / "a.json")
    (cache.directory / "b.json").symlink_to("/etc/passwd")
    facts, warnings = cache.load()
    assert facts == {}
    assert warnings == [
        f"ignoring unreadable cache file {cache.directory / 'a.json'}:"
        " not a regular file but a FIFO",
        f"ignoring unreadable cache file {cache.directory / 'b.json'}:"
        " a symbolic link, not followed",
    ]


def test_a_regular_file_is_read_to_one_byte_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, 10) == b"x" * 11
    with pytest.raises(NotARegularFileError, match="a directory"):
        read_regular_file(tmp_path, 10)


def test_a_fifo_in_an_inventory_directory_is_bad_input_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n")
    os.mkfifo(tmp_path / "more")
    with pytest.raises(InputError) as raised:
        load_inventory(tmp_path)
    assert str(raised.value) == (f"{tmp_path / 'more'}: cannot read: not a regular file but a FIFO")


# --- a connection ctl does not follow (item 11) ------------------------------------------


def test_a_host_ansible_reaches_locally_is_warned_of_with_its_file_and_line() -> None:
    inventory = inventory_from_texts(
        "inv",
        [
            SourceText(
                "hosts.yml",
                "all:\n  hosts:\n    here:\n      ansible_connection: local\n"
                "    there:\n      ansible_connection: ssh\n    plain:\n"
                "    fast:\n      ansible_connection: ansible.builtin.paramiko_ssh\n",
            )
        ],
        group_vars={"all": [SourceText("group_vars/all.yml", "ansible_connection: smart\n")]},
    )
    assert inventory.warnings == ()  # local is followed too: gathered on this machine
    assert [host.connection for host in inventory.hosts] == ["local", "ssh", "ssh", "ssh"]


def test_a_group_that_runs_its_hosts_in_containers_is_warned_of_per_host() -> None:
    inventory = inventory_from_texts(
        "inv",
        [SourceText("hosts", "[pods]\na\nb\n[pods:vars]\nansible_connection=docker\n")],
    )
    assert inventory.warnings == tuple(
        f"{host}: ansible_connection 'docker' (hosts:5) is not followed: ctl reaches {host}"
        " over SSH all the same"
        for host in ("a", "b")
    )


def test_an_address_that_would_be_an_ssh_option_is_refused() -> None:
    text = 'all:\n  hosts:\n    h1:\n      ansible_host: "-oProxyCommand=sh -c x"\n'
    assert inventory_errors(text) == [
        "hosts.yml:4: all.hosts.h1.ansible_host: an address does not start with '-'"
    ]


def test_a_url_source_whose_file_name_is_a_directory_is_refused_at_load() -> None:
    # Staged as STORE/DIR/.., which is the store itself.
    text = CATALOG.replace(
        "source: hf://Qwen/Qwen2.5-Coder-7B-Instruct", "source: https://example.com/a/.."
    )
    assert catalog_errors(text) == [
        "catalog.yaml:3: models.qwen.source: the file this URL names is '..', a directory,"
        " not a file: name the file (https://HOST/PATH/FILE.gguf), which is staged under that"
        " name"
    ]
    staged = staged_path("https://example.com/m/q4.gguf", "llama.cpp", "/srv/models")
    assert staged is not None and staged.endswith("/q4.gguf")
    assert staged.startswith("/srv/models/")


# --- every name checked whole (item 7) ---------------------------------------------------


def test_a_vm_name_with_a_trailing_newline_is_no_dns_name() -> None:
    # `re.match` with `$` took "gpu-9\n" (and cloud-init would have made it the hostname).
    assert name_problem("gpu-9") is None
    assert name_problem("gpu-9\n") is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [("fabric_interface", "ib0\n"), ("modelfleet_model_store", "/srv/models\n")],
)
def test_a_pattern_checked_inventory_value_with_a_trailing_newline_is_refused(
    key: str, value: str
) -> None:
    text = f"all:\n  hosts:\n    h1:\n      {key}: {value!r}\n".replace("'", '"')
    (error,) = inventory_errors(text)
    assert error.startswith(f"hosts.yml:4: all.hosts.h1.{key}: ")


def test_a_profile_name_with_a_trailing_newline_is_refused() -> None:
    errors = catalog_errors(CATALOG.replace("name: cpu", 'name: "cpu\\n"'))
    assert errors == [
        "catalog.yaml:5: models.qwen.profiles[0].name: has a control character (U+000A):"
        " no text in a catalog may hold one (it reaches the nodes' unit files)"
    ]
