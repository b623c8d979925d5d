"""Read an Ansible inventory the way `ansible-inventory -i PATH --list` does.

Two halves. The pure half (`parse_sources`, `resolve`, `inventory_from_texts`) takes texts
already read and returns an `Inventory`; it never touches a file. The I/O half
(`load_inventory`) finds and reads the files, as Ansible would, and hands them over.

What is Ansible's, followed as written in ansible-core 2.19 with its default settings:

- Sources: a file, or a directory whose entries (sorted, recursively) are each a source,
  skipping hidden names, group_vars/, host_vars/, vars_plugins/ and the extensions Ansible
  ignores by default (INVENTORY_IGNORE_EXTS). Each is read in the form Ansible's plugins
  would read it (`read_form`): YAML (.yml, .yaml, .json or no extension, when it is a
  mapping) or INI (cli/inventory/ini.py: any other name, and what YAML does not read);
  scripts, TOML and plugin configurations are refused, where Ansible would run them.
- Structure: top-level keys are groups; a group has `hosts`, `vars` and `children`; a child
  group may sit under several parents; host keys may carry ranges (`hgx-[01:08]`,
  `node-[a:c]`, `n[0:10:2]`) and a port (`host:2222`, which sets ansible_port).
- Variables (hash_behaviour=replace: a later value replaces the whole key, dicts included),
  lowest precedence first: `all`'s inventory vars; every other group's inventory vars, the
  groups ordered by depth, then `ansible_group_priority`, then name; group_vars/all;
  group_vars/GROUP in that same order; the host's inventory vars (in the order written,
  across files in sorted order); host_vars/HOST. group_vars/ and host_vars/ sit next to the
  inventory file, or inside the inventory directory. For a NAME the first of NAME (a file
  or a directory of files, merged in sorted order), NAME.yml, NAME.yaml, NAME.json is used.
- SSH settings: the last set of ansible_host/ansible_ssh_host, ansible_port/ansible_ssh_port,
  ansible_user/ansible_ssh_user, ansible_private_key_file/ansible_ssh_private_key_file,
  as Ansible's ssh connection plugin reads them.

Where we are stricter than Ansible, which would only warn: an unknown key in a group (a
misspelt `host:`), a group that is not a mapping, an empty host range. And values of our
keys (labels, fabrics, cordoned, gpu_classes) and of the SSH settings are checked wherever
they are written, even where a higher-precedence value hides them, so an error points at
the line that has it. Values are not templated by ansible-inventory --list; Ansible
renders them as it uses them, with the host's variables. Given a `render` (ansible-core's
own templating, cli/edges/templating.py, which refuses lookups), a Jinja expression in one
of those keys is rendered so, and the value it renders to checked at the template's line;
without one it is refused rather than used as a literal.

About 800 lines: Ansible's reading rules are one thing (where a variable comes from
decides what wins), and the test that holds them to `ansible-inventory --list`
(tests/integration/test_inventory_matches_ansible.py) reads them in one place.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Literal

from pydantic import ValidationError

from cli.errors import InputError, InputProblem, KeyPath, near_miss
from cli.inventory.ini import IniChild, IniError, IniGroup, IniGroupVar, IniOp, parse_ini
from cli.inventory.patterns import MAX_HOST_ENTRIES, expand_host_pattern, host_name_problem
from cli.inventory.schema import (
    DEFAULT_SSH_PORT,
    OUR_KEYS,
    Host,
    HostVars,
    Inventory,
    validate_host_vars,
)
from cli.names import control_character, file_in, file_name_problem, shown_name
from cli.regularfile import read_regular_file
from cli.schemaerrors import problems_from_validation
from cli.yamlsource import (
    MAX_SOURCE_BYTES,
    VaultedValue,
    YamlDocument,
    decode_source,
    parse_yaml,
    yaml_kind,
)

YAML_EXTENSIONS = (".yml", ".yaml", ".json")
IGNORED_NAMES = frozenset({"group_vars", "host_vars", "vars_plugins"})
# ansible-core's REJECT_EXTS + ['.orig', '.cfg', '.retry'] (INVENTORY_IGNORE_EXTS default)
_REJECT_EXTS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst")
IGNORED_SUFFIXES = (*_REJECT_EXTS, ".orig", ".cfg", ".retry")
GROUP_SECTIONS = ("hosts", "vars", "children")
PRIORITY_KEY = "ansible_group_priority"

# Our SSH settings and the variables Ansible's ssh connection plugin reads them from;
# when several are set, the last one listed wins (ansible's _loop_entries).
ADDRESS_KEYS = ("ansible_host", "ansible_ssh_host")
PORT_KEYS = ("ansible_port", "ansible_ssh_port")
USER_KEYS = ("ansible_user", "ansible_ssh_user")
KEY_FILE_KEYS = ("ansible_private_key_file", "ansible_ssh_private_key_file")
# Ansible's connection plugins that reach a host over SSH as ctl does (ssh, paramiko_ssh,
# their aliases and full names, and the old `smart`, which picks ssh).
CONNECTION_PLUGIN_KEY = "ansible_connection"
SSH_CONNECTIONS = frozenset(
    {
        "ssh",
        "smart",
        "paramiko",
        "paramiko_ssh",
        "ansible.builtin.ssh",
        "ansible.builtin.paramiko_ssh",
    }
)
# Ansible's local connection plugin: the host is the control host itself.
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
# The SSH password, as Ansible's ssh and paramiko_ssh plugins read it (their `password`
# option's variables). Its value is never read here, only whether one is set.
PASSWORD_KEYS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
# The ssh command line's extra arguments, in the order Ansible's ssh plugin puts them on it
# (ssh_args, then ssh_common_args, then ssh_extra_args): a ProxyJump or ProxyCommand in
# them is honoured as OpenSSH would, the first one given winning.
PROXY_ARG_KEYS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
CONNECTION_KEYS = ADDRESS_KEYS + PORT_KEYS + USER_KEYS + KEY_FILE_KEYS
EXPOSED_KEYS = OUR_KEYS + CONNECTION_KEYS


@dataclass(frozen=True)
class SourceText:
    """One file's text, and the name errors call it by."""

    file: str
    text: str


@dataclass(frozen=True)
class _Var:
    """One variable as written: its value, and where."""

    value: Any
    doc: YamlDocument
    path: KeyPath

    @property
    def origin(self) -> tuple[str, int | None]:
        return (self.doc.file, self.doc.line_of(self.path))


@dataclass
class _Group:
    name: str
    vars: dict[str, _Var] = field(default_factory=dict)
    priority: int = 1
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass
class _Host:
    name: str
    vars: dict[str, _Var] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)  # the groups that list it


@dataclass
class InventoryTree:
    """The inventory files parsed: groups, hosts and their inventory-file variables."""

    groups: dict[str, _Group] = field(default_factory=dict)
    hosts: dict[str, _Host] = field(default_factory=dict)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self.groups)

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(self.hosts)


# --- the pure half ------------------------------------------------------------------------


def inventory_from_texts(
    source: str,
    files: Sequence[SourceText],
    group_vars: Mapping[str, Sequence[SourceText]] | None = None,
    host_vars: Mapping[str, Sequence[SourceText]] | None = None,
    render: Render | None = None,
) -> Inventory:
    """Inventory files, and the group_vars/host_vars files found for each name → Inventory."""
    return resolve(parse_sources(files), source, group_vars or {}, host_vars or {}, render)


def parse_sources(files: Sequence[SourceText]) -> InventoryTree:
    """Inventory files, in Ansible's order → groups and hosts; raises InputError."""
    builder = _Builder()
    for source in files:
        builder.read(source)
    builder.reconcile()
    if builder.problems:
        raise InputError(builder.problems)
    return builder.tree


Form = Literal["yaml", "ini", "none"]


@dataclass(frozen=True)
class Reading:
    """One inventory source as the Ansible plugin that would read it reads it."""

    form: Form  # none: nothing to read, or refused (problems say why)
    doc: YamlDocument | None = None  # the YAML form's document
    ops: tuple[IniOp, ...] = ()  # the INI form's declarations
    problems: tuple[InputProblem, ...] = ()


def read_form(source: SourceText, known: Container[str]) -> Reading:
    """Which of Ansible's inventory plugins reads `source`, and what it reads there.

    ansible-core tries its enabled plugins in order (INVENTORY_ENABLED: host_list, script,
    auto, yaml, ini, toml) and keeps the first that parses the source, discarding what a
    failed one added (InventoryManager.parse_source). On a file, by each plugin's
    verify_file and parse:

    - script: a file that starts with `#!` or is executable; refused here.
    - auto, then yaml: a .yml, .yaml or .json file or one without extension; yaml declines
      an empty document, one that is not a mapping, and a `plugin:` file (auto's: refused
      here). A YAML mapping stays YAML: our stricter checks of it are errors, not a reason
      to read it as INI.
    - ini: any other file but .toml, and every file yaml declined (a `hosts` file in INI
      is such a file: YAML reads `[gpu]` as a list).
    - toml: a .toml file; refused here.

    When neither yaml nor ini reads a file, the error is the one of the form that read
    further into it; when both stop on the same line, both are said in one message.
    `known`: the groups earlier sources declared.
    """
    file, suffix = source.file, PurePath(source.file).suffix
    if suffix == ".toml":
        return _refused(file, None, "a TOML inventory is not read")
    if source.text.startswith("#!"):
        return _refused(file, 1, "an inventory script is not read")
    if is_vaulted(source):
        message = (
            "encrypted with ansible-vault: ctl reads it given the password"
            " (--vault-password-file, ANSIBLE_VAULT_PASSWORD_FILE), and never edits it"
        )
        return Reading("none", problems=(InputProblem(file, 1, (), message),))
    if suffix and suffix not in YAML_EXTENSIONS:
        return _read_ini(source, known)
    problems: list[InputProblem] = []
    doc = _parse(source, problems)
    if doc is not None and isinstance(doc.data, dict):
        if doc.data.get("plugin"):
            message = (
                "an inventory plugin configuration is not read: ctl reads static inventories only"
            )
            return Reading("none", problems=(doc.problem(("plugin",), message),))
        return Reading("yaml", doc)
    if any(not problem.message.startswith("invalid YAML") for problem in problems):
        return Reading("none", problems=tuple(problems))  # YAML, but beyond our bounds
    ini = _read_ini(source, known)
    if doc is not None and doc.data is None and not (ini.ops and not ini.problems):
        # Nothing but comments (or `---`): no hosts in either form, and no form to edit it
        # in (Ansible warns it read nothing).
        return Reading("none")
    if not ini.problems:
        return ini
    if doc is not None:
        kind = yaml_kind(doc.data)
        problems = [doc.problem((), f"an inventory is a mapping of groups (all: ...), not {kind}")]
    as_yaml, (as_ini,) = problems[0], ini.problems
    if (as_yaml.line or 0) > (as_ini.line or 0):
        return Reading("none", problems=tuple(problems))
    if (as_ini.line or 0) > (as_yaml.line or 0):
        return ini
    # The same line: the form the file's name suggests first (a name without extension is
    # most often an INI `hosts` file), the other's reading after it.
    if suffix:
        message = f"{as_yaml.message} (read as INI: {as_ini.message})"
    else:
        message = f"{as_ini.message} (read as YAML: {as_yaml.message})"
    return Reading("none", problems=(InputProblem(file, as_ini.line, (), message),))


class _EveryGroup:
    """Every group name: a source's form judged alone, without the sources before it."""

    def __contains__(self, name: object) -> bool:
        return True


def read_alone(source: SourceText) -> Reading:
    """`source` read as Ansible would, without the sources before it (for an inventory
    already read whole: editors splice YAML and INI differently)."""
    return read_form(source, _EveryGroup())


def source_form(source: SourceText) -> Form:
    """The form Ansible reads `source` in."""
    return read_alone(source).form


def _read_ini(source: SourceText, known: Container[str]) -> Reading:
    try:
        return Reading("ini", ops=parse_ini(source.text, known))
    except IniError as error:
        return Reading("none", problems=(InputProblem(source.file, error.line, (), error.message),))


def _refused(file: str, line: int | None, what: str) -> Reading:
    message = (
        f"{what}: ctl reads Ansible's YAML and INI forms"
        " (save its hosts with: ansible-inventory -i FILE --list -y)"
    )
    return Reading("none", problems=(InputProblem(file, line, (), message),))


def resolve(
    tree: InventoryTree,
    source: str,
    group_vars: Mapping[str, Sequence[SourceText]],
    host_vars: Mapping[str, Sequence[SourceText]],
    render: Render | None = None,
) -> Inventory:
    """Merge every host's variables by Ansible's precedence and check ours; raises InputError.

    `group_vars` and `host_vars` map a group or host name to its files, in merge order.
    `render`: how a template in one of our keys is rendered; None refuses it.
    """
    problems: list[InputProblem] = []
    warnings: list[str] = []
    group_files = {
        name: _read_vars_files(group_vars.get(name, ()), problems, warnings) for name in tree.groups
    }
    host_files = {
        name: _read_vars_files(host_vars.get(name, ()), problems, warnings) for name in tree.hosts
    }

    checked: set[tuple[tuple[str, int | None], KeyPath]] = set()
    layers: list[Mapping[str, _Var]] = [group.vars for group in tree.groups.values()]
    layers += [host.vars for host in tree.hosts.values()]
    layers += list(group_files.values()) + list(host_files.values())
    for layer in layers:
        for key, var in layer.items():
            if key in EXPOSED_KEYS and (var.origin, var.path) not in checked:
                checked.add((var.origin, var.path))
                if render is None or _template_in(var.value) is None:
                    problems.extend(_check(key, var))
    if problems:
        raise InputError(problems)

    depths = _depths(tree)
    ancestors = {name: _ancestors(tree, name) for name in tree.groups}
    hosts: list[Host] = []
    members: dict[str, list[str]] = {name: [] for name in tree.groups}
    for host in tree.hosts.values():
        names = _host_groups(host, ancestors)
        for name in names:
            members[name].append(host.name)
        ordered = sorted(
            (name for name in names if name != "all"),
            key=lambda name: (depths[name], tree.groups[name].priority, name),
        )
        merged: dict[str, _Var] = {}
        merged |= tree.groups["all"].vars
        for name in ordered:
            merged |= tree.groups[name].vars
        merged |= group_files["all"]
        for name in ordered:
            merged |= group_files[name]
        merged |= host.vars
        merged |= host_files[host.name]
        if render is not None:
            rendered = _rendered(host.name, ("all", *ordered), merged, render)
            if isinstance(rendered, list):
                problems += rendered
                continue
            merged = rendered
        hosts.append(_host(host.name, ("all", *ordered), merged))
        unfollowed = _unfollowed_connection(host.name, merged.get(CONNECTION_PLUGIN_KEY))
        if unfollowed is not None:
            warnings.append(unfollowed)

    if problems:  # a group's template that fails fails for each of its hosts: said once
        raise InputError(list(dict.fromkeys(problems)))
    groups = {group: tuple(names) for group, names in members.items()}
    return Inventory(source=source, hosts=tuple(hosts), groups=groups, warnings=tuple(warnings))


def _rendered(
    host: str,
    groups: tuple[str, ...],
    merged: Mapping[str, _Var],
    render: Render,
) -> dict[str, _Var] | list[InputProblem]:
    """The host's variables with a template in any of our keys rendered as Ansible would
    render it for this host; or the problems, each rendered value checked where its
    template is written."""
    templated = [
        key
        for key in (*EXPOSED_KEYS, *PROXY_ARG_KEYS)
        if key in merged and _template_in(merged[key].value) is not None
    ]
    if not templated:
        return dict(merged)
    variables: dict[str, Any] = {
        key: var.value for key, var in merged.items() if not isinstance(var.value, VaultedValue)
    }
    # The magic variables an inventory's templates use (Ansible's, of the same names).
    variables |= {
        "inventory_hostname": host,
        "inventory_hostname_short": host.split(".", 1)[0],
        "group_names": sorted(group for group in groups if group != "all"),
    }
    rendered = dict(merged)
    problems: list[InputProblem] = []
    for key in templated:
        var = merged[key]
        where = _template_in(var.value) or ()
        try:
            value = render(var.value, variables)
        except ValueError as error:
            problems.append(var.doc.problem(var.path + where, str(error)))
            continue
        rendered[key] = _Var(value, var.doc, var.path)
        if key not in PROXY_ARG_KEYS:
            problems.extend(_check(key, rendered[key]))
    return problems or rendered


def _unfollowed_connection(host: str, var: _Var | None) -> str | None:
    """A warning when the host's ansible_connection is one ctl does not follow (neither SSH
    nor `local`: docker, winrm...): it gathers facts over its own SSH session all the same."""
    if var is None or var.value is None or var.value in SSH_CONNECTIONS | LOCAL_CONNECTIONS:
        return None
    file, line = var.origin
    where = file if line is None else f"{file}:{line}"
    value = shown_name(str(var.value))
    return (
        f"{host}: ansible_connection {value} ({where}) is not followed:"
        f" ctl reaches {host} over SSH all the same"
    )


def _host(name: str, groups: tuple[str, ...], merged: Mapping[str, _Var]) -> Host:
    def last(keys: Iterable[str]) -> _Var | None:
        found = None
        for key in keys:
            var = merged.get(key)
            if var is not None and var.value is not None:
                found = var
        return found

    address, port, user, key_file = (
        last(ADDRESS_KEYS),
        last(PORT_KEYS),
        last(USER_KEYS),
        last(KEY_FILE_KEYS),
    )
    connection = merged.get(CONNECTION_PLUGIN_KEY)
    local = connection is not None and connection.value in LOCAL_CONNECTIONS
    proxy, refusal = (None, None) if local else _proxy(merged)
    return Host(
        proxy_jump=proxy[1] if proxy is not None and proxy[0] == "proxyjump" else None,
        proxy_command=proxy[1] if proxy is not None and proxy[0] == "proxycommand" else None,
        name=name,
        groups=groups,
        connection="local" if local else "ssh",
        ssh_refusal=None if local else (_password_refusal(merged) or refusal),
        address=str(address.value) if address else name,
        port=int(port.value) if port else DEFAULT_SSH_PORT,
        user=str(user.value) if user else None,
        private_key_file=str(key_file.value) if key_file else None,
        vars=validate_host_vars({key: var.value for key, var in merged.items()}),
        origins={key: merged[key].origin for key in EXPOSED_KEYS if key in merged},
    )


def _proxy(merged: Mapping[str, _Var]) -> tuple[tuple[str, str] | None, str | None]:
    """The ProxyJump or ProxyCommand OpenSSH would take from the host's ssh arguments (the
    first given; `none` is none), as (option, value); or why they cannot be read."""
    for key in PROXY_ARG_KEYS:
        var = merged.get(key)
        if var is None or var.value is None:
            continue
        try:
            args = shlex.split(str(var.value))
        except ValueError as error:
            file, line = var.origin
            where = file if line is None else f"{file}:{line}"
            return None, f"{key} ({where}) cannot be split as a command line: {error}"
        for option, value in _ssh_options(args):
            if option in ("proxyjump", "proxycommand"):
                return (None if value.lower() == "none" else (option, value)), None
    return None, None


def _ssh_options(args: Sequence[str]) -> Iterator[tuple[str, str]]:
    """The `-o Name=value` options (and `-J`, which is ProxyJump) of an ssh command line,
    names in lower case, as ssh(1) reads them: `-o Name value`, `-oName=value`."""
    index = 0
    while index < len(args):
        argument = args[index]
        index += 1
        if argument in ("-J", "-o") and index < len(args):
            text, index = args[index], index + 1
        elif argument.startswith(("-J", "-o")) and len(argument) > 2:
            text = argument[2:]
        else:
            continue
        if argument.startswith("-J"):
            yield "proxyjump", text
            continue
        # The name ends at the first `=` or blank (a value may hold either).
        found = re.match(r"\s*([^=\s]+)\s*=?\s*(.*)", text, re.S)
        if found is not None:
            yield found.group(1).lower(), found.group(2).strip()


def _password_refusal(merged: Mapping[str, _Var]) -> str | None:
    """Why ctl's own SSH does not try a host Ansible logs in to with a password: ctl
    never sends one (paramiko could, but a password kept in ctl's memory for every node it
    reaches is a secret more to keep; a key does the same), nor prints it."""
    found = [(key, merged[key]) for key in PASSWORD_KEYS if key in merged]
    given = [(key, var) for key, var in found if var.value is not None]
    if not given:
        return None
    key, var = given[-1]  # the one Ansible uses
    file, line = var.origin
    where = file if line is None else f"{file}:{line}"
    return (
        f"{key} ({where}) is an SSH password, which ctl's own SSH never uses (keys only):"
        " not reached; give it a key (ansible_ssh_private_key_file, or one in ssh-agent)"
    )


VAULT_HEADER = "$ANSIBLE_VAULT;"  # a file ansible-vault encrypted whole
Decrypt = Callable[[str, str], str]  # (file, its vaulted text) → its plain text
# (a value holding templates, the host's variables) → the value rendered; ValueError (its
# message the reason) for a template it refuses or cannot render.
Render = Callable[[Any, Mapping[str, Any]], Any]


def is_vaulted(source: SourceText) -> bool:
    """Encrypted whole by ansible-vault (its header on the first line)."""
    return source.text.lstrip().startswith(VAULT_HEADER)


def _read_vars_files(
    files: Sequence[SourceText], problems: list[InputProblem], warnings: list[str]
) -> dict[str, _Var]:
    """group_vars or host_vars files for one name, merged in order (later replaces earlier).

    A Vault-encrypted file still encrypted (load_inventory was given no password) is left
    out and said in `warnings`: Ansible, given the password, would read it, and ctl's own
    keys never need one."""
    merged: dict[str, _Var] = {}
    for source in files:
        if is_vaulted(source):
            warnings.append(
                f"{source.file}: encrypted with ansible-vault; ctl reads no variable from it"
                " (give ctl the password with --vault-password-file, or write labels,"
                " fabrics, cordoned and the rest of ctl's keys in a plain file)"
            )
            continue
        doc = _parse(source, problems)
        if doc is None or doc.data is None:
            continue
        if not isinstance(doc.data, dict):
            problems.append(
                doc.problem((), f"a variables file must be a mapping, not {yaml_kind(doc.data)}")
            )
            continue
        for key, value in doc.data.items():
            if not isinstance(key, str):
                problems.append(doc.problem((str(key),), "a variable name must be text"))
                continue
            merged[key] = _Var(value, doc, (key,))
    return merged


def _parse(source: SourceText, problems: list[InputProblem]) -> YamlDocument | None:
    try:
        return parse_yaml(source.text, source.file)
    except InputError as error:
        if source.file.endswith(".json"):
            try:
                return YamlDocument(source.file, json.loads(source.text), {})
            except ValueError:
                pass
        problems.extend(error.problems)
        return None


def _check(key: str, var: _Var) -> list[InputProblem]:
    """Problems with one value of one of the variables we read, where it is written."""
    template = _template_in(var.value)
    if template is not None:
        return [
            var.doc.problem(
                var.path + template,
                "ctl does not render Jinja templates: write the value itself",
            )
        ]
    if key in PORT_KEYS:
        value = var.value
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            if value is None or 1 <= value <= 65535:
                return []
            return [var.doc.problem(var.path, f"port {value} is not between 1 and 65535")]
        return [var.doc.problem(var.path, f"must be a port number, not {yaml_kind(var.value)}")]
    if key in CONNECTION_KEYS:
        if isinstance(var.value, str) and (control := control_character(var.value)):
            # The address reaches the shards' unit and environment files (VLLM_HOST_IP,
            # --host), and every one of these ssh's command line.
            return [var.doc.problem(var.path, f"has a control character ({control})")]
        if key in ADDRESS_KEYS and isinstance(var.value, str) and var.value.startswith("-"):
            # ssh, which Ansible runs with the address as an argument, would read an option.
            return [var.doc.problem(var.path, "an address does not start with '-'")]
        if var.value is None or (isinstance(var.value, str) and var.value.strip()):
            return []
        if isinstance(var.value, str):
            return [var.doc.problem(var.path, "must not be empty")]
        return [var.doc.problem(var.path, f"must be text, not {yaml_kind(var.value)}")]
    try:
        HostVars.model_validate({key: var.value})
    except ValidationError as error:
        return problems_from_validation(error, HostVars, var.doc, var.path[:-1])
    return []


def _template_in(value: Any, at: KeyPath = ()) -> KeyPath | None:
    """Where in `value` a Jinja expression is written, if anywhere."""
    if isinstance(value, str):
        return at if "{{" in value or "{%" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _template_in(item, (*at, str(key)))
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _template_in(item, (*at, index))
            if found is not None:
                return found
    return None


def _depths(tree: InventoryTree) -> dict[str, int]:
    """A group's depth: its longest path from `all` (Ansible's Group.depth)."""
    depths: dict[str, int] = {}

    def depth(name: str) -> int:
        if name not in depths:
            depths[name] = 0  # guards against loops, which parse_sources refuses anyway
            parents = tree.groups[name].parents
            depths[name] = max((depth(parent) + 1 for parent in parents), default=0)
        return depths[name]

    for name in tree.groups:
        depth(name)
    return depths


def _ancestors(tree: InventoryTree, name: str) -> list[str]:
    seen: list[str] = []
    pending = list(tree.groups[name].parents)
    while pending:
        parent = pending.pop(0)
        if parent not in seen:
            seen.append(parent)
            pending.extend(tree.groups[parent].parents)
    return seen


def _host_groups(host: _Host, ancestors: Mapping[str, Sequence[str]]) -> set[str]:
    """Every group the host is in: those that list it, and their ancestors."""
    groups: set[str] = set()
    for group in host.groups:
        groups.add(group)
        groups.update(ancestors[group])
    return groups


class _Builder:
    """Ansible's InventoryData and YAML inventory plugin, for the parts we read."""

    def __init__(self) -> None:
        self.tree = InventoryTree()
        self.problems: list[InputProblem] = []
        self.tree.groups["all"] = _Group("all")
        self.tree.groups["ungrouped"] = _Group("ungrouped")
        self.tree.groups["all"].children.append("ungrouped")
        self.tree.groups["ungrouped"].parents.append("all")
        self.entries = 0  # host names read, a range counting each of its hosts
        self.too_many = False

    def read(self, source: SourceText) -> None:
        reading = read_form(source, self.tree.groups)
        self.problems.extend(reading.problems)
        if reading.form == "ini":
            self.read_ini(source.file, reading.ops)
        elif reading.form == "yaml":
            assert reading.doc is not None and isinstance(reading.doc.data, dict)
            for name, group_data in reading.doc.data.items():
                self.group(reading.doc, (_key(name),), name, group_data)

    def read_ini(self, file: str, ops: Sequence[IniOp]) -> None:
        """An INI source's declarations, each with its line for errors and origins."""
        for op in ops:
            doc = YamlDocument(file, None, {(): op.line})  # every path of it is on that line
            if isinstance(op, IniGroup):
                if (problem := group_name_problem(op.name)) is not None:
                    self.problems.append(doc.problem((op.name,), problem))
                    return
                self.tree.groups.setdefault(op.name, _Group(op.name))
            elif isinstance(op, IniGroupVar):
                self.group_var(op.group, _Var(op.value, doc, (op.group, "vars", op.key)))
            elif isinstance(op, IniChild):
                self.add_child(op.parent, op.child, doc, (op.parent, "children", op.child))
            else:
                path = (op.pattern,)
                variables = [_Var(value, doc, (*path, key)) for key, value in op.vars]
                self.add_hosts(op.names, op.port, op.group, variables, doc, path)

    def group(self, doc: YamlDocument, path: KeyPath, name: Any, data: Any) -> str | None:
        if not isinstance(name, str) or not name:
            self.problems.append(doc.problem(path, "a group name must be text"))
            return None
        if (problem := group_name_problem(name)) is not None:
            self.problems.append(doc.problem(path, problem))
            return None
        if data is not None and not isinstance(data, dict):
            self.problems.append(
                doc.problem(
                    path,
                    f"a group must be a mapping of hosts, vars and children, not {yaml_kind(data)}",
                )
            )
            return None
        self.tree.groups.setdefault(name, _Group(name))
        if data is None:
            return name
        sections: dict[str, Any] = {}
        for key, written in data.items():
            if key not in GROUP_SECTIONS:
                self.problems.append(
                    doc.problem(
                        (*path, _key(key)),
                        f"unknown key '{key}'{near_miss(str(key), GROUP_SECTIONS)};"
                        " a group has hosts, vars and children",
                    )
                )
                continue
            value = {written: None} if isinstance(written, str) else written
            if value is not None and not isinstance(value, dict):
                self.problems.append(
                    doc.problem((*path, key), f"must be a mapping, not {yaml_kind(value)}")
                )
                continue
            sections[key] = value
        for key, value in sections.items():  # in the order written, as Ansible walks them
            if value is None:
                continue
            if key == "vars":
                for var, var_value in value.items():
                    self.group_var(name, _Var(var_value, doc, (*path, "vars", _key(var))))
            elif key == "children":
                for child, child_data in value.items():
                    child_path = (*path, "children", _key(child))
                    added = self.group(doc, child_path, child, child_data)
                    if added is not None:
                        self.add_child(name, added, doc, child_path)
            else:
                for pattern, host_data in value.items():
                    self.hosts(doc, (*path, "hosts", _key(pattern)), pattern, host_data, name)
        return name

    def group_var(self, group: str, var: _Var) -> None:
        name = var.path[-1]
        if not isinstance(name, str):
            self.problems.append(var.doc.problem(var.path, "a variable name must be text"))
            return
        if name != PRIORITY_KEY:
            self.tree.groups[group].vars[name] = var
            return
        value = var.value
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            self.tree.groups[group].priority = value
        else:
            self.problems.append(
                var.doc.problem(var.path, f"must be a whole number, not {yaml_kind(value)}")
            )

    def hosts(self, doc: YamlDocument, path: KeyPath, pattern: Any, data: Any, group: str) -> None:
        if not isinstance(pattern, str):
            self.problems.append(doc.problem(path, "a host name must be text: write it in quotes"))
            return
        try:
            names, port = expand_host_pattern(pattern)
        except ValueError as error:
            self.problems.append(doc.problem(path, str(error)))
            return
        data = data or {}
        if not isinstance(data, dict):
            self.problems.append(
                doc.problem(path, f"host variables must be a mapping, not {yaml_kind(data)}")
            )
            return
        variables: list[_Var] = []
        for var, value in data.items():
            if isinstance(var, str):
                variables.append(_Var(value, doc, (*path, var)))
            else:
                self.problems.append(
                    doc.problem((*path, _key(var)), "a variable name must be text")
                )
        self.add_hosts(names, port, group, variables, doc, path)

    def add_hosts(
        self,
        names: Sequence[str],
        port: int | None,
        group: str,
        variables: Sequence[_Var],
        doc: YamlDocument,
        path: KeyPath,
    ) -> None:
        """Ansible's add_host and set_variable for each host a pattern names."""
        self.entries += len(names)
        if self.entries > MAX_HOST_ENTRIES:
            if not self.too_many:  # said once, where the limit is crossed
                self.too_many = True
                self.problems.append(
                    doc.problem(
                        path, f"the inventory names hosts more than {MAX_HOST_ENTRIES:,} times"
                    )
                )
            return
        for name in names:
            problem = host_name_problem(name)
            if problem is not None:  # said once per pattern: a range repeats it
                self.problems.append(doc.problem(path, problem))
                return
        for name in names:
            host = self.tree.hosts.get(name)
            if host is None:
                host = self.tree.hosts[name] = _Host(name)
                if port is not None:  # only where the host is first named, as in Ansible
                    host.vars["ansible_port"] = _Var(port, doc, path)
            if group not in host.groups:
                host.groups.append(group)
                self.tree.groups[group].hosts.append(name)
            for var in variables:
                host.vars[str(var.path[-1])] = var

    def add_child(self, parent: str, child: str, doc: YamlDocument, path: KeyPath) -> None:
        groups = self.tree.groups
        if child == parent or child in _ancestors(self.tree, parent):
            self.problems.append(
                doc.problem(path, f"group '{child}' under '{parent}' makes a loop")
            )
            return
        if child not in groups[parent].children:
            groups[parent].children.append(child)
        if parent not in groups[child].parents:
            groups[child].parents.append(parent)

    def reconcile(self) -> None:
        """Ansible's reconcile_inventory: orphan groups under `all`, lone hosts in `ungrouped`."""
        groups = self.tree.groups
        for name, group in list(groups.items()):
            if name != "all" and not group.parents:
                group.parents.append("all")
                groups["all"].children.append(name)
        ancestors = {name: _ancestors(self.tree, name) for name in groups}
        for host in self.tree.hosts.values():
            mine = _host_groups(host, ancestors)
            if "ungrouped" in mine:
                if mine - {"all", "ungrouped"} and "ungrouped" in host.groups:
                    host.groups.remove("ungrouped")
                    groups["ungrouped"].hosts.remove(host.name)
            elif mine <= {"all"}:
                host.groups.append("ungrouped")
                groups["ungrouped"].hosts.append(host.name)


def group_name_problem(name: str) -> str | None:
    """Why `name` cannot be a group's: it names the group's file in group_vars/."""
    problem = file_name_problem(name)
    return None if problem is None else f"group name {shown_name(name)} {problem}"


def _key(key: Any) -> str | int:
    """A mapping key as a KeyPath part: the text yamlsource records its line under."""
    return key if isinstance(key, str) else str(key)


# --- the I/O half -------------------------------------------------------------------------


def load_inventory(
    path: Path, decrypt: Decrypt | None = None, render: Render | None = None
) -> Inventory:
    """Read the inventory at `path` (a file or a directory, as `ansible-inventory -i` takes).

    `decrypt` (file, text) → text opens files ansible-vault encrypted whole, as Ansible does
    given the password (cli/edges/vault.py); without it such a variables file is skipped
    with a warning, and such an inventory source refused. Raises InputError naming the file,
    line and key of every problem found. `render` renders a template in ctl's keys (above).
    """
    files = [_opened(source, decrypt) for source in read_sources(path)]
    tree = parse_sources(files)
    problems: list[InputProblem] = []
    base = inventory_base(path)
    group_vars = {
        name: [_opened(text, decrypt) for text in vars_texts(base / "group_vars", name, problems)]
        for name in tree.groups
    }
    host_vars = {
        name: [_opened(text, decrypt) for text in vars_texts(base / "host_vars", name, problems)]
        for name in tree.hosts
    }
    if problems:
        raise InputError(problems)
    return resolve(tree, str(path), group_vars, host_vars, render)


def _opened(source: SourceText, decrypt: Decrypt | None) -> SourceText:
    if decrypt is None or not is_vaulted(source):
        return source
    return SourceText(source.file, decrypt(source.file, source.text))


def read_sources(path: Path) -> tuple[SourceText, ...]:
    """The inventory's source files as Ansible finds them, read; cli/inventory/edit.py
    edits exactly these. Raises InputError for a missing path or an unreadable file."""
    if not path.exists():
        raise InputError.single(str(path), None, (), "no such inventory file or directory")
    problems: list[InputProblem] = []
    files = tuple(
        SourceText(str(file), "")  # refused by name in parse_sources, so not read
        if file.suffix == ".toml"
        else _read(file, problems)
        for file in _source_files(path)
    )
    if problems:
        raise InputError(problems)
    return files


def inventory_base(path: Path) -> Path:
    """Where group_vars/ and host_vars/ are: beside an inventory file, in a directory."""
    return path if path.is_dir() else path.parent


def _source_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    found: list[Path] = []
    for name in sorted(entry.name for entry in path.iterdir()):
        if name.startswith(".") or name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
            continue
        found.extend(_source_files(path / name))
    return found


def vars_texts(base: Path, name: str, problems: list[InputProblem]) -> list[SourceText]:
    """Ansible's find_vars_files: NAME (a file or a directory), else NAME.yml/.yaml/.json."""
    if not base.is_dir() or file_name_problem(name) is not None:
        return []  # a host's name is checked where it is written; a group's may be anything
    for suffix in ("", *YAML_EXTENSIONS):
        path = file_in(base, name, suffix)
        if path.is_dir():
            return [_read(file, problems) for file in _vars_dir_files(path)]
        if path.exists():
            return [_read(path, problems)]
    return []


def _vars_dir_files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for name in sorted(entry.name for entry in directory.iterdir()):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = directory / name
        suffix = PurePath(name).suffix
        if path.is_dir() and not suffix:
            found.extend(_vars_dir_files(path))
        elif path.is_file() and (not suffix or suffix in YAML_EXTENSIONS):
            found.append(path)
    return found


def _read(path: Path, problems: list[InputProblem]) -> SourceText:
    try:  # no more than the parser would take
        return SourceText(
            str(path), decode_source(read_regular_file(path, MAX_SOURCE_BYTES), str(path))
        )
    except InputError as error:
        problems.extend(error.problems)
    except OSError as error:
        problems.append(InputProblem(str(path), None, (), f"cannot read: {error.strerror}"))
    return SourceText(str(path), "")
