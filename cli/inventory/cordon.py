"""Where `ctl cordon` and `ctl uncordon` write a host's `cordoned`, as a plan of text edits.

Where a cordon is written, for host NODE (each rule in order):

1. Where NODE's own `cordoned` is set already (in its host_vars, or inline under an entry
   that names NODE alone): changed there.
2. NODE's host_vars: host_vars/NODE (a file), NODE.yml, NODE.yaml or NODE.json, whichever
   Ansible reads; for a host_vars/NODE/ directory, the file cordon.yml in it.
3. Inline, under the entry that first names NODE in the inventory sources, when that entry
   names NODE alone (not a range like hgx-[1:5]) and no other host entry's `cordoned`
   would outrank it.
4. A new host_vars/NODE.yml beside the inventory, whose header says ctl wrote it.

`uncordon` removes `cordoned` from every place that concerns NODE alone. When a group's (or
a host range's) cordon would still apply, it writes `cordoned: false` at host level instead
(rules 1-4): removing the group's cordon would uncordon its other hosts too. A file ctl
created is deleted once nothing but comments is left in it.

In an INI source a host line is an entry, and `:vars` sections are a group's variables:
the same rules hold, the edit being one `cordoned=...` word of one host line
(cli/inventory/ini.py), so INI line numbers never move; a range's line takes no one host's
variables (rule 4 then).

Pure: `locate`, `plan_cordon` and `plan_uncordon` take the inventory's texts and return a
plan, checked with the loader's own pure reader before any file is touched; the edits are
spliced with cli/inventory/splice.py (YAML) or ini.py (INI), and written by
cli/inventory/edit.py. About 520 lines: the four rules above and uncordon's reverse of
them read the same places, kept in one module so that a rule changed in one direction is
seen changed in the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from cli.errors import InputError
from cli.inventory.forms import SourceText, read_alone
from cli.inventory.ini import (
    IniError,
    IniGroupVar,
    IniHosts,
    IniOp,
    ini_literal,
    remove_host_var,
    set_host_var,
)
from cli.inventory.load import inventory_from_texts
from cli.inventory.patterns import expand_host_pattern
from cli.inventory.schema import NO_CORDON_REASON, Host
from cli.inventory.splice import (
    CTL_HEADER,
    GroupVisit,
    compose,
    group_visits,
    is_null,
    mapping_pair,
    quote,
    remove_key,
    set_key,
)
from cli.inventory.values import Render
from cli.names import control_character

KEY = "cordoned"
DIR_FILE = "cordon.yml"  # the file written in a host_vars/NODE/ directory

_NULL_TAG = "tag:yaml.org,2002:null"

Scope = Literal["host", "range", "group", "other"]


# --- the pure half: where a host's cordon is written ----------------------------------------


@dataclass(frozen=True)
class InventoryTexts:
    """The files `load_inventory` reads, as texts, and where NODE's own variables go."""

    source: str  # the inventory path as given: the loader's name for it
    sources: tuple[SourceText, ...]  # inventory source files, in Ansible's order
    group_vars: Mapping[str, tuple[SourceText, ...]]  # every group's, in merge order
    host_vars: tuple[SourceText, ...]  # NODE's host_vars files, in merge order
    vars_file: str  # NODE's host_vars file: the existing one, or where a new one goes
    vars_dir: str | None = None  # host_vars/NODE/ when that is a directory
    # How a template in ctl's keys is rendered, as the loader renders it (load_inventory).
    render: Render | None = None


@dataclass(frozen=True)
class Place:
    """A `cordoned` that applies to the host: which mapping of which file holds it."""

    file: str
    path: tuple[str, ...]  # key path of the mapping holding it; () for a whole vars file
    line: int | None
    scope: Scope  # host: this host alone; range: a host range; group: a group's variables;
    # other: what the walk does not see (a value merged in with `<<:`), never edited
    name: str  # the host, the range pattern or the group

    @property
    def where(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    @property
    def owner(self) -> str:
        if self.scope == "other":
            return "another entry"
        return {"host": "", "range": "host range ", "group": "group "}[self.scope] + self.name


@dataclass(frozen=True)
class Entry:
    """One host key of an inventory source that names the host."""

    file: str
    path: tuple[str, ...] | None  # key path of the host key; None when `hosts:` is a string
    pattern: str
    alone: bool  # names this host only: no range
    takes_vars: bool  # its value is a mapping or empty, so variables can be added inline
    line: int | None = None  # an INI host line's number (its path is that number)


@dataclass(frozen=True)
class Located:
    entries: tuple[Entry, ...]  # every entry naming the host, in the order Ansible reads them
    cordons: tuple[Place, ...]  # every `cordoned` written for the host, wherever


def locate(texts: InventoryTexts, node: str, groups: Sequence[str]) -> Located:
    """Every entry naming `node`, and every `cordoned` that applies to it (`groups`: its groups)."""
    entries: list[Entry] = []
    cordons: list[Place] = []
    for source in texts.sources:
        reading = read_alone(source)
        if reading.form == "ini":
            _walk_ini(source.file, reading.ops, node, set(groups), entries, cordons)
            continue
        walker = _Walker(source.file, node, set(groups), entries, cordons)
        for visit in group_visits(compose(source.text, source.file)):
            walker.visit(visit)
    for group in groups:
        for vars_file in texts.group_vars.get(group, ()):
            place = _cordon_in(vars_file, (), "group", group)
            if place is not None:
                cordons.append(place)
    for vars_file in texts.host_vars:
        place = _cordon_in(vars_file, (), "host", node)
        if place is not None:
            cordons.append(place)
    return Located(tuple(entries), tuple(cordons))


@dataclass
class _Walker:
    """What concerns one host in the groups of one inventory source, met in walk order."""

    file: str
    node: str
    groups: set[str]
    entries: list[Entry]
    cordons: list[Place]

    def visit(self, visit: GroupVisit) -> None:
        if visit.key is None or visit.value is None:
            return
        section = (*visit.path, visit.key.value)
        if visit.key.value == "vars" and visit.group in self.groups:
            pair = mapping_pair(visit.value, KEY)
            if pair is not None:
                self.cordons.append(_place(self.file, section, pair[0], "group", visit.group))
        elif visit.key.value == "hosts":
            self.hosts(section, visit.value)

    def hosts(self, path: tuple[str, ...], data: Node) -> None:
        if isinstance(data, ScalarNode) and data.tag != _NULL_TAG:  # `hosts: hgx-5`
            if self.node in _names(data.value):
                self.entries.append(Entry(self.file, None, data.value, False, False))
            return
        if not isinstance(data, MappingNode):
            return
        for key, value in data.value:
            if not isinstance(key, ScalarNode) or self.node not in _names(key.value):
                continue
            alone = _names(key.value) == [self.node] and self.node in key.value
            takes_vars = isinstance(value, MappingNode) or is_null(value)
            entry = Entry(self.file, (*path, key.value), key.value, alone, takes_vars)
            self.entries.append(entry)
            pair = mapping_pair(value, KEY)
            if pair is not None:
                scope: Scope = "host" if alone else "range"
                name = self.node if alone else key.value
                self.cordons.append(_place(self.file, (*path, key.value), pair[0], scope, name))


def _walk_ini(
    file: str,
    ops: Sequence[IniOp],
    node: str,
    groups: set[str],
    entries: list[Entry],
    cordons: list[Place],
) -> None:
    """What concerns one host in an INI source: its host lines, and `cordoned` in the
    `:vars` sections of its groups. A place's path is its line (INI edits keep lines)."""
    for op in ops:
        if isinstance(op, IniGroupVar) and op.group in groups and op.key == KEY:
            cordons.append(Place(file, (str(op.line),), op.line, "group", op.group))
        elif isinstance(op, IniHosts) and node in op.names:
            alone = op.names == (node,) and node in op.pattern
            entries.append(Entry(file, (str(op.line),), op.pattern, alone, True, op.line))
            if any(key == KEY for key, _ in op.vars):
                scope: Scope = "host" if alone else "range"
                name = node if alone else op.pattern
                cordons.append(Place(file, (str(op.line),), op.line, scope, name))


def _names(pattern: str) -> list[str]:
    try:
        return expand_host_pattern(pattern)[0]
    except ValueError:
        return []


def _place(file: str, path: tuple[str, ...], key: Node, scope: Scope, name: str) -> Place:
    return Place(file, path, key.start_mark.line + 1, scope, name)


def _cordon_in(source: SourceText, path: tuple[str, ...], scope: Scope, name: str) -> Place | None:
    root = compose(source.text, source.file)
    pair = mapping_pair(root, KEY)
    return None if pair is None else _place(source.file, path, pair[0], scope, name)


def effective_place(located: Located, host: Host) -> Place | None:
    """The place the host's effective `cordoned` comes from, as the loader says."""
    origin = host.origin(KEY)
    if origin is None:
        return None
    for place in reversed(located.cordons):
        if (place.file, place.line) == origin:
            return place
    file, line = origin
    return Place(file, (), line, "other", "")


# --- the pure half: plans -------------------------------------------------------------------


@dataclass(frozen=True)
class FileEdit:
    file: str
    before: str | None  # None: the file is created
    after: str | None  # None: the file is deleted


@dataclass(frozen=True)
class Plan:
    """What to write, what the host's cordon is then, and the line that says so."""

    node: str
    edits: tuple[FileEdit, ...]
    expected: str | None  # the host's effective cordon once written
    origin: tuple[str, int | None] | None  # where that comes from once written
    message: str


def reason_problem(reason: str) -> str | None:
    """Why `reason` cannot be a cordon reason, or None."""
    if not reason.strip():
        return 'empty: say why the node is cordoned (--reason "PSU fan failing")'
    control = control_character(reason)
    if control is not None:
        # Not only LF and CR: the INI reader's splitlines also ends a line at VT, FF and more.
        return f"must be one line of text, without a control character ({control})"
    if "{{" in reason or "{%" in reason:
        return "must not hold {{ or {% (Ansible would read it as a Jinja template)"
    return None


def plan_cordon(texts: InventoryTexts, host: Host, reason: str) -> Plan:
    """Cordon `host` with `reason` (see the module docstring for where it is written)."""
    reason = reason.strip()
    problem = reason_problem(reason)
    if problem is not None:
        raise ValueError(problem)
    node, before = host.name, host.vars.cordoned
    located = locate(texts, node, host.groups)
    effective = effective_place(located, host)
    own = effective if effective is not None and effective.scope == "host" else None
    if own is not None and before == reason:
        message = f"{node} is already cordoned: {quote(reason)} ({own.where})"
        return Plan(node, (), reason, host.origin(KEY), message)
    files = _Files(texts)
    created = _write_host_level(files, located, effective, own, node, reason)
    view = files.view()
    after, origin = _evaluate(view, node)
    if after != reason:
        raise _outranked(node, after, origin, files)
    message = f"{node} cordoned: {quote(reason)} ({origin_text(origin)}{created})"
    if before is not None and effective is not None:
        if own is not None:
            message += f", was {shown(before)}"
        else:
            shared = _relocated(effective, view, host)
            message += f", over {shown(before)} set for {shared.owner} ({shared.where})"
    return Plan(node, files.edits(), reason, origin, message)


def plan_uncordon(texts: InventoryTexts, host: Host) -> Plan:
    """Uncordon `host`: remove its own cordons; override a group's with `cordoned: false`."""
    node, before = host.name, host.vars.cordoned
    if before is None:
        return Plan(node, (), None, host.origin(KEY), f"{node} was not cordoned")
    located = locate(texts, node, host.groups)
    effective = effective_place(located, host)
    own = [place for place in located.cordons if place.scope == "host"]
    files = _Files(texts)
    _remove(files, own)
    view = files.view()
    remaining, origin = _evaluate(view, node)
    if remaining is None:
        note = ", file deleted" if files.delete_if_only_header(texts.vars_file) else ""
        removed = ", ".join(place.where for place in own)
        message = f"{node} uncordoned: removed cordoned: {shown(before)} ({removed}{note})"
        return Plan(node, files.edits(), None, origin, message)

    # What is left is set for more hosts than this one: override it at host level.
    with_origin = host.model_copy(update={"origins": {KEY: origin} if origin else {}})
    shared = effective_place(locate(view, node, host.groups), with_origin)
    assert shared is not None  # the evaluation found a cordon, so it comes from somewhere
    target = effective if effective is not None and effective.scope == "host" else None
    files = _Files(texts)
    _remove(files, [place for place in own if place != target])
    created = _write_host_level(files, located, shared, target, node, False)
    view = files.view()
    after, origin = _evaluate(view, node)
    if after is not None:
        raise _outranked(node, after, origin, files)
    shared = _relocated(shared, view, host)
    message = (
        f"{node} uncordoned: cordoned: false ({origin_text(origin)}{created}) overrides"
        f" {shown(remaining)} set for {shared.owner} ({shared.where}),"
        " which stays on its other hosts"
    )
    others = ", ".join(place.where for place in own if place != target)
    if others:
        message += f"; removed cordoned ({others})"
    return Plan(node, files.edits(), None, origin, message)


def _remove(files: _Files, places: Sequence[Place]) -> None:
    for place in places:
        text = files.text(place.file)
        if place.file in files.ini:
            assert place.line is not None  # an INI place is a line
            files.set(place.file, _ini_edit(place.file, place.line, remove_host_var, text))
        else:
            files.set(place.file, remove_key(text, place.file, place.path, key=KEY))


def _put(
    files: _Files, file: str, path: Sequence[str], line: int | None, value: str | bool
) -> None:
    """`cordoned` set to `value` in the mapping at `path` (YAML) or on host line `line` (INI)."""
    text = files.text(file)
    if file in files.ini:
        assert line is not None  # an INI place is a line

        def edit(text: str, line: int, key: str) -> str:
            return set_host_var(text, line, key, ini_literal(value))

        files.set(file, _ini_edit(file, line, edit, text))
    else:
        files.set(file, set_key(text, file, path, _yaml(value), key=KEY))


def _ini_edit(file: str, line: int, edit: Callable[[str, int, str], str], text: str) -> str:
    try:
        return edit(text, line, KEY)
    except IniError as error:
        raise InputError.single(file, error.line, (KEY,), error.message) from None


def _yaml(value: str | bool) -> str:
    return quote(value) if isinstance(value, str) else str(value).lower()


def _relocated(place: Place, view: InventoryTexts, host: Host) -> Place:
    """`place` in the edited texts, where an edit above it may have moved its line."""
    for found in locate(view, host.name, host.groups).cordons:
        if (found.file, found.path, found.scope, found.name) == (
            place.file,
            place.path,
            place.scope,
            place.name,
        ):
            return found
    return place


def _write_host_level(
    files: _Files,
    located: Located,
    effective: Place | None,
    target: Place | None,
    node: str,
    value: str | bool,
) -> str:
    """Write `cordoned: VALUE` at host level by rules 1-4; returns a note when a file is new."""
    texts = files.base
    if target is not None:  # 1: where the host's own cordon is written
        _put(files, target.file, target.path, target.line, value)
        return ""
    if files.exists(texts.vars_file):  # 2: its host_vars file
        _put(files, texts.vars_file, (), None, value)
        return ""
    first = located.entries[0] if located.entries else None
    inline = first is not None and first.alone and first.takes_vars and first.path is not None
    outranks = effective is None or effective.scope == "group"  # host entries outrank groups
    if texts.vars_dir is None and inline and outranks and first and first.path is not None:
        # 3: inline, where the host is first named
        _put(files, first.file, first.path, first.line, value)
        return ""
    if texts.vars_dir is not None:  # 2, in its host_vars directory; or else 4
        why = f"The cordon of {node}, beside its other host variables."
    elif first is not None and not first.alone:
        how = "first" if any(entry.alone for entry in located.entries) else "only"
        why = f"The inventory names {node} {how} through the host range {first.pattern}."
    elif inline and effective is not None:
        why = f"Here it outranks the cordon set for {effective.owner}."
    else:
        why = f"The inventory entry of {node} cannot hold variables of its own."
    header = (
        f"{CTL_HEADER} (ctl cordon, ctl uncordon): host variables of {node}.\n"
        f"# {why}\n"
        "# ctl uncordon deletes this file when nothing else is left in it.\n"
    )
    files.set(texts.vars_file, f"{header}{KEY}: {_yaml(value)}\n")
    return ", new file"


def _outranked(
    node: str, after: str | None, origin: tuple[str, int | None] | None, files: _Files
) -> InputError:
    written = ", ".join(edit.file for edit in files.edits()) or files.base.source
    now = "uncordoned" if after is None else f"cordoned: {quote(after)}"
    return InputError.single(
        written,
        None,
        (),
        f"after this edit {node} would still be {now} ({origin_text(origin)}) by Ansible's"
        " precedence; nothing was written: set cordoned by hand",
    )


def origin_text(origin: tuple[str, int | None] | None) -> str:
    if origin is None:
        return "nowhere"
    file, line = origin
    return file if line is None else f"{file}:{line}"


def shown(reason: str) -> str:
    """A reason as the operator wrote it: quoted, or `true` for a cordon without one."""
    return "true" if reason == NO_CORDON_REASON else quote(reason)


class _Files:
    """The texts a plan writes, over the files as read."""

    def __init__(self, texts: InventoryTexts) -> None:
        self.base = texts
        self.read: dict[str, str] = {s.file: s.text for s in (*texts.sources, *texts.host_vars)}
        self.ini = {s.file for s in texts.sources if read_alone(s).form == "ini"}
        self.changed: dict[str, str | None] = {}

    def current(self, file: str) -> str | None:
        return self.changed[file] if file in self.changed else self.read.get(file)

    def exists(self, file: str) -> bool:
        return self.current(file) is not None

    def text(self, file: str) -> str:
        text = self.current(file)
        assert text is not None, file
        return text

    def set(self, file: str, text: str | None) -> None:
        self.changed[file] = text

    def delete_if_only_header(self, file: str) -> bool:
        """Delete a file ctl created once it holds nothing but comments."""
        text = self.changed.get(file)
        if text is None or not text.startswith(CTL_HEADER):
            return False
        if any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
            return False
        self.changed[file] = None
        return True

    def edits(self) -> tuple[FileEdit, ...]:
        return tuple(
            FileEdit(file, self.read.get(file), text)
            for file, text in self.changed.items()
            if text != self.read.get(file)
        )

    def view(self) -> InventoryTexts:
        """The inventory's texts as they are once written."""
        texts = self.base
        sources = tuple(SourceText(s.file, self.text(s.file)) for s in texts.sources)
        host_vars = [
            SourceText(s.file, self.text(s.file)) for s in texts.host_vars if self.exists(s.file)
        ]
        new = texts.vars_file
        if new not in self.read and self.exists(new):
            at = len(host_vars)
            if texts.vars_dir is not None:  # a directory's files are read in sorted order
                names = [Path(s.file).relative_to(texts.vars_dir).parts[0] for s in host_vars]
                at = next((i for i, name in enumerate(names) if name > DIR_FILE), at)
            host_vars.insert(at, SourceText(new, self.text(new)))
        return replace(texts, sources=sources, host_vars=tuple(host_vars))


def _evaluate(view: InventoryTexts, node: str) -> tuple[str | None, tuple[str, int | None] | None]:
    """The host's cordon, and where it comes from, in these texts: the loader's pure half."""
    inventory = inventory_from_texts(
        view.source, view.sources, view.group_vars, {node: view.host_vars}, view.render
    )
    host = inventory.host(node)
    return host.vars.cordoned, host.origin(KEY)
