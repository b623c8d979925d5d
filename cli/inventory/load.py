"""Read an Ansible inventory the way `ansible-inventory -i PATH --list` does.

Two halves. The pure half (`resolve`, `inventory_from_texts`) takes texts already read and
returns an `Inventory`; it never touches a file. The I/O half (`load_inventory`) finds and
reads the files, as Ansible would, and hands them over. The parts this module puts
together, each in a module of its own: how a source is read (forms.py), the groups and
hosts built from the sources (tree.py), how a host is reached (connection.py), and the
checking and templating of the values ctl reads (values.py).

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

The test that holds these rules to `ansible-inventory --list` is
tests/integration/test_inventory_matches_ansible.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath

from cli.errors import InputError, InputProblem, KeyPath
from cli.inventory.connection import (
    CONNECTION_PLUGIN_KEY,
    EXPOSED_KEYS,
    host_from_vars,
    unfollowed_connection,
)
from cli.inventory.forms import YAML_EXTENSIONS, SourceText, is_vaulted, parse_source
from cli.inventory.schema import Host, Inventory
from cli.inventory.tree import (
    InventoryTree,
    Var,
    group_ancestors,
    group_depths,
    host_groups,
    parse_sources,
)
from cli.inventory.values import Render, check_value, rendered_vars, template_in
from cli.names import file_in, file_name_problem
from cli.regularfile import read_regular_file
from cli.yamlsource import MAX_SOURCE_BYTES, decode_source, yaml_kind

IGNORED_NAMES = frozenset({"group_vars", "host_vars", "vars_plugins"})
# ansible-core's REJECT_EXTS + ['.orig', '.cfg', '.retry'] (INVENTORY_IGNORE_EXTS default)
_REJECT_EXTS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst")
IGNORED_SUFFIXES = (*_REJECT_EXTS, ".orig", ".cfg", ".retry")
Decrypt = Callable[[str, str], str]  # (file, its vaulted text) → its plain text


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
    layers: list[Mapping[str, Var]] = [group.vars for group in tree.groups.values()]
    layers += [host.vars for host in tree.hosts.values()]
    layers += list(group_files.values()) + list(host_files.values())
    for layer in layers:
        for key, var in layer.items():
            if key in EXPOSED_KEYS and (var.origin, var.path) not in checked:
                checked.add((var.origin, var.path))
                if render is None or template_in(var.value) is None:
                    problems.extend(check_value(key, var))
    if problems:
        raise InputError(problems)

    depths = group_depths(tree)
    ancestors = {name: group_ancestors(tree, name) for name in tree.groups}
    hosts: list[Host] = []
    members: dict[str, list[str]] = {name: [] for name in tree.groups}
    for host in tree.hosts.values():
        names = host_groups(host, ancestors)
        for name in names:
            members[name].append(host.name)
        ordered = sorted(
            (name for name in names if name != "all"),
            key=lambda name: (depths[name], tree.groups[name].priority, name),
        )
        merged: dict[str, Var] = {}
        merged |= tree.groups["all"].vars
        for name in ordered:
            merged |= tree.groups[name].vars
        merged |= group_files["all"]
        for name in ordered:
            merged |= group_files[name]
        merged |= host.vars
        merged |= host_files[host.name]
        if render is not None:
            rendered = rendered_vars(host.name, ("all", *ordered), merged, render)
            if isinstance(rendered, list):
                problems += rendered
                continue
            merged = rendered
        hosts.append(host_from_vars(host.name, ("all", *ordered), merged))
        unfollowed = unfollowed_connection(host.name, merged.get(CONNECTION_PLUGIN_KEY))
        if unfollowed is not None:
            warnings.append(unfollowed)

    if problems:  # a group's template that fails fails for each of its hosts: said once
        raise InputError(list(dict.fromkeys(problems)))
    groups = {group: tuple(names) for group, names in members.items()}
    return Inventory(source=source, hosts=tuple(hosts), groups=groups, warnings=tuple(warnings))


def _read_vars_files(
    files: Sequence[SourceText], problems: list[InputProblem], warnings: list[str]
) -> dict[str, Var]:
    """group_vars or host_vars files for one name, merged in order (later replaces earlier).

    A Vault-encrypted file still encrypted (load_inventory was given no password) is left
    out and said in `warnings`: Ansible, given the password, would read it, and ctl's own
    keys never need one."""
    merged: dict[str, Var] = {}
    for source in files:
        if is_vaulted(source):
            warnings.append(
                f"{source.file}: encrypted with ansible-vault; ctl reads no variable from it"
                " (give ctl the password with --vault-password-file, or write labels,"
                " fabrics, cordoned and the rest of ctl's keys in a plain file)"
            )
            continue
        doc = parse_source(source, problems)
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
            merged[key] = Var(value, doc, (key,))
    return merged


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
