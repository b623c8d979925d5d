"""The inventory's structure, built from its sources as Ansible's InventoryData and YAML
and INI plugins build it: groups (parents, children, priority, depth), hosts (ranges, a
port in the name, the groups that list them) and every variable where it is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli.errors import InputError, InputProblem, KeyPath, near_miss
from cli.inventory.forms import SourceText, read_form
from cli.inventory.ini import IniChild, IniGroup, IniGroupVar, IniOp
from cli.inventory.patterns import MAX_HOST_ENTRIES, expand_host_pattern, host_name_problem
from cli.names import file_name_problem, shown_name
from cli.yamlsource import YamlDocument, yaml_kind

GROUP_SECTIONS = ("hosts", "vars", "children")
PRIORITY_KEY = "ansible_group_priority"


@dataclass(frozen=True)
class Var:
    """One variable as written: its value, and where."""

    value: Any
    doc: YamlDocument
    path: KeyPath

    @property
    def origin(self) -> tuple[str, int | None]:
        return (self.doc.file, self.doc.line_of(self.path))


@dataclass
class TreeGroup:
    """A group as the sources declare it, with its inventory-file variables."""

    name: str
    vars: dict[str, Var] = field(default_factory=dict)
    priority: int = 1
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass
class TreeHost:
    """A host as the sources name it, with its inventory-file variables."""

    name: str
    vars: dict[str, Var] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)  # the groups that list it


@dataclass
class InventoryTree:
    """The inventory files parsed: groups, hosts and their inventory-file variables."""

    groups: dict[str, TreeGroup] = field(default_factory=dict)
    hosts: dict[str, TreeHost] = field(default_factory=dict)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self.groups)

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(self.hosts)


def parse_sources(files: Sequence[SourceText]) -> InventoryTree:
    """Inventory files, in Ansible's order → groups and hosts; raises InputError."""
    builder = _Builder()
    for source in files:
        builder.read(source)
    builder.reconcile()
    if builder.problems:
        raise InputError(builder.problems)
    return builder.tree


def group_depths(tree: InventoryTree) -> dict[str, int]:
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


def group_ancestors(tree: InventoryTree, name: str) -> list[str]:
    seen: list[str] = []
    pending = list(tree.groups[name].parents)
    while pending:
        parent = pending.pop(0)
        if parent not in seen:
            seen.append(parent)
            pending.extend(tree.groups[parent].parents)
    return seen


def host_groups(host: TreeHost, ancestors: Mapping[str, Sequence[str]]) -> set[str]:
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
        self.tree.groups["all"] = TreeGroup("all")
        self.tree.groups["ungrouped"] = TreeGroup("ungrouped")
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
                self.tree.groups.setdefault(op.name, TreeGroup(op.name))
            elif isinstance(op, IniGroupVar):
                self.group_var(op.group, Var(op.value, doc, (op.group, "vars", op.key)))
            elif isinstance(op, IniChild):
                self.add_child(op.parent, op.child, doc, (op.parent, "children", op.child))
            else:
                path = (op.pattern,)
                variables = [Var(value, doc, (*path, key)) for key, value in op.vars]
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
        self.tree.groups.setdefault(name, TreeGroup(name))
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
                    self.group_var(name, Var(var_value, doc, (*path, "vars", _key(var))))
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

    def group_var(self, group: str, var: Var) -> None:
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
        variables: list[Var] = []
        for var, value in data.items():
            if isinstance(var, str):
                variables.append(Var(value, doc, (*path, var)))
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
        variables: Sequence[Var],
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
                host = self.tree.hosts[name] = TreeHost(name)
                if port is not None:  # only where the host is first named, as in Ansible
                    host.vars["ansible_port"] = Var(port, doc, path)
            if group not in host.groups:
                host.groups.append(group)
                self.tree.groups[group].hosts.append(name)
            for var in variables:
                host.vars[str(var.path[-1])] = var

    def add_child(self, parent: str, child: str, doc: YamlDocument, path: KeyPath) -> None:
        groups = self.tree.groups
        if child == parent or child in group_ancestors(self.tree, parent):
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
        ancestors = {name: group_ancestors(self.tree, name) for name in groups}
        for host in self.tree.hosts.values():
            mine = host_groups(host, ancestors)
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
