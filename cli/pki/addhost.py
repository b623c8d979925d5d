"""Add an onboarded host to the operator's inventory, keeping every comment and the order.

The same machinery as `ctl cordon` (cli/inventory/splice.py, cli/inventory/edit.py): each
change is spliced into the text where ruamel.yaml's composer says it goes, and checked to
change nothing else;
then the whole inventory is read again, as `load_inventory` reads it, and every file is
restored unless the new host is as planned and every other host exactly as before.

Where the host goes: under `hosts:` of the group named by --group (default `all`), in the
first inventory source that defines that group, after the group's last host. A group the
inventory does not have yet is added under `all: children:` of the first source (or as a
top-level group when that file has no `all:`). A new inventory (the path does not exist)
is one file, hosts.yml, headed by a comment that says ctl wrote it.

What is written for the host: ansible_host, ansible_port (when not 22), ansible_user,
ansible_ssh_private_key_file (when --identity was given) and labels. A host the inventory
already has is never edited: its cordon, labels and everything else stay as they are.

Pure half: `plan_new_host` (texts in, texts out, checked with the loader's pure reader).
I/O half: `read_inventory_texts`, `commit_host`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ruamel.yaml.nodes import MappingNode, Node

from cli.edges.templating import render_template
from cli.errors import InputError
from cli.inventory.cordon import FileEdit, InventoryTexts
from cli.inventory.edit import read_texts, write_verified
from cli.inventory.forms import SourceText, source_form
from cli.inventory.load import inventory_from_texts, load_inventory
from cli.inventory.schema import DEFAULT_SSH_PORT, Host, Inventory, changed_hosts
from cli.inventory.splice import (
    CTL_HEADER,
    compose,
    group_visits,
    is_null,
    mapping_pair,
    quote,
    set_key,
)
from cli.yamlsource import parse_yaml

NEW_FILE = "hosts.yml"
DEFAULT_USER = "root"
NEW_HEADER = (  # the text a new inventory file starts from (before is None: not yet there)
    f"{CTL_HEADER} (ctl onboard-node): the fleet's Ansible inventory.\n"
    "# Edit it freely: ctl keeps comments and order when it adds a host.\n"
)


@dataclass(frozen=True)
class NewHost:
    """A host as onboarding adds it."""

    name: str
    address: str
    port: int | None = None  # None: what the inventory gives it (22 unless a group says)
    user: str | None = None  # None: what the inventory gives it, else root
    key_file: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    group: str = "all"

    def variables(self) -> list[tuple[str, str | int]]:
        """The variables written for it: each one that is not None."""
        found: list[tuple[str, str | int]] = [("ansible_host", self.address)]
        if self.port is not None:
            found.append(("ansible_port", self.port))
        if self.user is not None:
            found.append(("ansible_user", self.user))
        if self.key_file is not None:
            found.append(("ansible_ssh_private_key_file", self.key_file))
        return found


@dataclass(frozen=True)
class HostPlan:
    new: NewHost
    host: Host  # the host as the inventory will read once written
    edits: tuple[FileEdit, ...]
    where: str  # "inventory/hosts.yml, group gpu"


# --- the pure half --------------------------------------------------------------------------


def plan_new_host(texts: InventoryTexts, new: NewHost) -> HostPlan:
    """Where and how `new` is written; raises InputError when it cannot be, or would not
    read back as asked (a host_vars file of the same name outranking it, say).

    ansible_port is written when not 22, or when the inventory would give another port;
    ansible_user when given, or as root when the inventory gives none.
    """
    port = new.port if new.port != DEFAULT_SSH_PORT else None
    plan = _plan(texts, replace(new, port=port))
    inherited = plan.host
    if new.port is not None and inherited.port != new.port:
        port = new.port
    user = new.user if new.user is not None or inherited.user is not None else DEFAULT_USER
    if (port, user) == (plan.new.port, plan.new.user):
        return plan
    return _plan(texts, replace(new, port=port, user=user))


def _plan(texts: InventoryTexts, new: NewHost) -> HostPlan:
    for source in texts.sources:  # where the host goes is found by walking YAML
        if source_form(source) == "ini":
            raise InputError.single(
                source.file,
                None,
                (),
                f"an INI inventory: ctl onboard-node adds hosts to YAML inventories only;"
                f" add {new.name} to [{new.group}] by hand, then run ctl onboard-node again",
            )
    changed: dict[str, str] = {}

    def text(file: str) -> str:
        return changed.get(file) or next(s.text for s in texts.sources if s.file == file)

    found = _find_group(texts.sources, new.group)
    if found is None:
        if not texts.sources:
            raise InputError.single(texts.source, None, (), "no inventory source file here")
        file = texts.sources[0].file
        changed[file] = text(file)
        path = _add_group(changed, file, new.group)
    else:
        file, path = found
        changed[file] = text(file)
    empty = _empty(file)

    def put(at: Sequence[str], key: str, value: str) -> None:
        changed[file] = set_key(changed[file], file, at, value, key=key)

    hosts = mapping_pair(_node_at(compose(changed[file], file), path), "hosts")
    if hosts is None:
        put(path, "hosts", empty)
    elif not (isinstance(hosts[1], MappingNode) or is_null(hosts[1])):
        raise InputError.single(
            file,
            hosts[0].start_mark.line + 1,
            (*path, "hosts"),
            "is not a mapping of hosts: make it one by hand, then run ctl again",
        )
    put((*path, "hosts"), _key(new.name, file), empty)
    entry = (*path, "hosts", new.name)
    for key, value in new.variables():
        put(entry, key, _scalar(value, file))
    if new.labels:
        put(entry, "labels", empty)
        for key, value in new.labels.items():
            put((*entry, "labels"), _key(key, file), _scalar(value, file))

    sources = tuple(SourceText(s.file, changed.get(s.file, s.text)) for s in texts.sources)
    before = _evaluate(texts, texts.sources, new.name)
    after = _evaluate(texts, sources, new.name)
    host = after.host(new.name)
    _check_host(host, new, file)
    _check_others(before, after, new.name, file)
    edits = tuple(
        FileEdit(name, next((s.text for s in texts.sources if s.file == name), None), value)
        for name, value in changed.items()
    )
    group = "" if new.group == "all" else f", group {new.group}"
    return HostPlan(new, host, edits, f"{file}{group}")


def new_inventory_texts(inventory: Path) -> InventoryTexts:
    """The texts of an inventory that does not exist yet: one file with a header."""
    file = inventory if inventory.suffix in (".yml", ".yaml") else inventory / NEW_FILE
    header = NEW_HEADER
    base = inventory.parent if file == inventory else inventory
    return InventoryTexts(
        str(inventory),
        (SourceText(str(file), header),),
        {},
        (),
        str(base / "host_vars" / "none.yml"),
        render=render_template,
    )


def _evaluate(texts: InventoryTexts, sources: Sequence[SourceText], name: str) -> Inventory:
    return inventory_from_texts(
        texts.source, sources, texts.group_vars, {name: texts.host_vars}, texts.render
    )


def _check_host(host: Host, new: NewHost, file: str) -> None:
    wanted: list[tuple[str, object, object]] = [("ansible_host", host.address, new.address)]
    if new.port is not None:
        wanted.append(("ansible_port", host.port, new.port))
    if new.user is not None:
        wanted.append(("ansible_user", host.user, new.user))
    if new.key_file is not None:
        wanted.append(("ansible_ssh_private_key_file", host.private_key_file, new.key_file))
    wanted += [
        (f"labels.{key}", host.vars.labels.get(key), value) for key, value in new.labels.items()
    ]
    for key, got, expected in wanted:
        if got != expected:
            origin = host.origin(key.split(".")[0])
            where = "" if origin is None else f" from {origin[0]}:{origin[1]}"
            raise InputError.single(
                file,
                None,
                (),
                f"once added, {new.name} would have {key} {got}{where}, not {expected}:"
                " a variable of higher precedence wins; nothing was written",
            )
    if new.group not in host.groups:
        raise InputError.single(file, None, (), f"{new.name} would not be in group {new.group}")


def _check_others(before: Inventory, after: Inventory, name: str, file: str) -> None:
    changed = changed_hosts(before, after, name)
    if changed:
        raise InputError.single(
            file,
            None,
            (),
            f"adding {name} would change {', '.join(changed)}: add it by hand",
        )


def _find_group(sources: Sequence[SourceText], group: str) -> tuple[str, tuple[str, ...]] | None:
    """The first source that defines `group` (as a top-level key or under `children:`)."""
    for source in sources:
        for visit in group_visits(compose(source.text, source.file)):
            if (
                visit.key is None
                and visit.group == group
                and (group != "all" or len(visit.path) == 1)
            ):
                return source.file, visit.path
    return None


def _add_group(changed: dict[str, str], file: str, group: str) -> tuple[str, ...]:
    """Make `group` in `file`: under all.children when the file has `all:`, else top-level."""
    empty = _empty(file)
    root = compose(changed[file], file)
    all_pair = mapping_pair(root, "all")
    if group == "all" or all_pair is None:
        changed[file] = set_key(changed[file], file, (), empty, key=_key(group, file))
        return (group,)
    if mapping_pair(all_pair[1], "children") is None:
        changed[file] = set_key(changed[file], file, ("all",), empty, key="children")
    changed[file] = set_key(changed[file], file, ("all", "children"), empty, key=_key(group, file))
    return ("all", "children", group)


def _node_at(root: Node | None, path: Sequence[str]) -> Node | None:
    node = root
    for part in path:
        pair = mapping_pair(node, part)
        node = None if pair is None else pair[1]
    return node


def _empty(file: str) -> str:
    """An empty value, to set_key a mapping that is filled in next."""
    return "{}" if file.endswith(".json") else "~"


def _key(name: str, file: str) -> str:
    """A mapping key as set_key takes it: as is in JSON (set_key quotes it), else as YAML."""
    return name if file.endswith(".json") else _scalar(name, file)


def _scalar(value: str | int, file: str) -> str:
    """A value as YAML: plain where the loader reads it back as the same text, else quoted."""
    if isinstance(value, int):
        return str(value)
    if not file.endswith(".json") and value and value.strip() == value:
        plain = value.replace(":", "").replace("#", "")
        if plain == value and not value.startswith(("&", "*", "!", "%", "@", "`", "'", '"')):
            try:
                if parse_yaml(f"k: {value}\n", "<value>").data == {"k": value}:
                    return value
            except InputError:
                pass
    return quote(value)


# --- the I/O half ---------------------------------------------------------------------------


def read_inventory_texts(inventory: Path, name: str) -> InventoryTexts:
    if not inventory.exists():
        return new_inventory_texts(inventory)
    texts = read_texts(inventory, name)
    if not texts.sources and inventory.is_dir():
        new = new_inventory_texts(inventory)
        return InventoryTexts(
            texts.source, new.sources, texts.group_vars, texts.host_vars, texts.vars_file,
            render=texts.render,
        )  # fmt: skip
    return texts


def commit_host(plan: HostPlan, inventory: Path, before: Inventory | None) -> Inventory:
    """Write the plan's files, read the inventory again and check it; restore them all if
    anything is not as planned."""

    def verify() -> Inventory:
        after = load_inventory(inventory, render=render_template)
        problem = _mismatch(plan, before, after)
        if problem is not None:
            raise InputError.single(
                plan.edits[0].file, None, (), f"{problem}; the original files are restored"
            )
        return after

    return write_verified(plan.edits, missing=NEW_HEADER, verify=verify)


def _mismatch(plan: HostPlan, before: Inventory | None, after: Inventory) -> str | None:
    try:
        host = after.host(plan.new.name)
    except KeyError:
        return f"read back, the inventory has no {plan.new.name}"
    try:
        _check_host(host, plan.new, plan.edits[0].file)
    except InputError as error:
        return error.problems[0].message.replace("; nothing was written", "")
    return None if before is None else _same_hosts(before, after, plan.new.name)


def _same_hosts(before: Inventory, after: Inventory, name: str) -> str | None:
    changed = changed_hosts(before, after, name)
    return f"the edit changed {', '.join(changed)}" if changed else None
