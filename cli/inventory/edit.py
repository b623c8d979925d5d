"""Set and clear a host's `cordoned` in the operator's own inventory files, keeping the rest.

What must survive an edit: every comment, the order of keys, each value's quoting, blank
lines and indentation, everywhere outside the lines that hold `cordoned`. So nothing is
ever dumped. ruamel.yaml's round-trip composer finds each key and value with its exact
position; the change is spliced into the original text there; the result is composed
again and compared, node by node, with the original plus that one change, and refused if
anything else moved. (A round-trip dump re-indents a file whose indentation it guesses
wrong and flattens a JSON source onto one line; splicing cannot.)

Where a cordon is written, for host NODE (each rule in order):

1. Where NODE's effective `cordoned` is already written at host level (a host_vars file,
   or inline under an entry that names NODE alone): changed there.
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

Pure half: `locate`, `set_key`, `remove_key`, `plan_cordon` and `plan_uncordon` take texts
and return texts; a plan is checked with the loader's own pure reader before any file is
touched. I/O half: `cordon_node` and `uncordon_node` read the files as `load_inventory`
does, write each atomically (keeping its mode), reload the inventory and restore every
file if the host's cordon is not what was asked or another host's changed. That transaction,
`write_verified`, is also how `ctl onboard-node` adds a host (cli/pki/addhost.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cli.edges.files import atomic_write
from cli.errors import InputError, InputProblem
from cli.inventory.load import (
    SourceText,
    expand_host_pattern,
    inventory_base,
    inventory_from_texts,
    load_inventory,
    parse_sources,
    read_sources,
    vars_texts,
)
from cli.inventory.schema import NO_CORDON_REASON, Host, Inventory

KEY = "cordoned"
DIR_FILE = "cordon.yml"  # the file written in a host_vars/NODE/ directory
CTL_HEADER = "# Written by ctl"  # the first line of every file ctl creates

_NULL_TAG = "tag:yaml.org,2002:null"
_LINE_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")

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


@dataclass(frozen=True)
class Located:
    entries: tuple[Entry, ...]  # every entry naming the host, in the order Ansible reads them
    cordons: tuple[Place, ...]  # every `cordoned` written for the host, wherever


def locate(texts: InventoryTexts, node: str, groups: Sequence[str]) -> Located:
    """Every entry naming `node`, and every `cordoned` that applies to it (`groups`: its groups)."""
    entries: list[Entry] = []
    cordons: list[Place] = []
    for source in texts.sources:
        root = compose(source.text, source.file)
        if isinstance(root, MappingNode):
            walker = _Walker(source.file, node, set(groups), entries, cordons)
            for key, value in root.value:
                if isinstance(key, ScalarNode):
                    walker.group((key.value,), key.value, value)
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
    """The loader's walk over one inventory source, noting what concerns one host."""

    file: str
    node: str
    groups: set[str]
    entries: list[Entry]
    cordons: list[Place]

    def group(self, path: tuple[str, ...], name: str, data: Node) -> None:
        if not isinstance(data, MappingNode):
            return
        for key, value in data.value:
            if not isinstance(key, ScalarNode):
                continue
            section = (*path, key.value)
            if key.value == "vars" and name in self.groups:
                pair = mapping_pair(value, KEY)
                if pair is not None:
                    self.cordons.append(_place(self.file, section, pair[0], "group", name))
            elif key.value == "children" and isinstance(value, MappingNode):
                for child, child_data in value.value:
                    if isinstance(child, ScalarNode):
                        self.group((*section, child.value), child.value, child_data)
            elif key.value == "hosts":
                self.hosts(section, value)

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
    if any(brk in reason for brk in _LINE_BREAKS):
        return "must be one line"
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
    created = _write_host_level(files, located, effective, own, node, quote(reason))
    view = files.view()
    after, origin = _evaluate(view, node)
    if after != reason:
        raise _outranked(node, after, origin, files)
    message = f"{node} cordoned: {quote(reason)} ({_where(origin)}{created})"
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
    created = _write_host_level(files, located, shared, target, node, "false")
    view = files.view()
    after, origin = _evaluate(view, node)
    if after is not None:
        raise _outranked(node, after, origin, files)
    shared = _relocated(shared, view, host)
    message = (
        f"{node} uncordoned: cordoned: false ({_where(origin)}{created}) overrides"
        f" {shown(remaining)} set for {shared.owner} ({shared.where}),"
        " which stays on its other hosts"
    )
    others = ", ".join(place.where for place in own if place != target)
    if others:
        message += f"; removed cordoned ({others})"
    return Plan(node, files.edits(), None, origin, message)


def _remove(files: _Files, places: Sequence[Place]) -> None:
    for place in places:
        files.set(place.file, remove_key(files.text(place.file), place.file, place.path))


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
    value: str,
) -> str:
    """Write `cordoned: VALUE` at host level by rules 1-4; returns a note when a file is new."""
    texts = files.base
    if target is not None:  # 1: where the host's own cordon is written
        files.set(target.file, set_key(files.text(target.file), target.file, target.path, value))
        return ""
    if files.exists(texts.vars_file):  # 2: its host_vars file
        text = files.text(texts.vars_file)
        files.set(texts.vars_file, set_key(text, texts.vars_file, (), value))
        return ""
    first = located.entries[0] if located.entries else None
    inline = first is not None and first.alone and first.takes_vars and first.path is not None
    outranks = effective is None or effective.scope == "group"  # host entries outrank groups
    if texts.vars_dir is None and inline and outranks and first and first.path is not None:
        # 3: inline, where the host is first named
        files.set(first.file, set_key(files.text(first.file), first.file, first.path, value))
        return ""
    if texts.vars_dir is not None:  # 2, in its host_vars directory; or else 4
        why = f"The cordon of {node}, beside its other host variables."
    elif first is not None and not first.alone:
        why = f"The inventory names {node} only through the host range {first.pattern}."
    elif inline and effective is not None:
        why = f"Here it outranks the cordon set for {effective.owner}."
    else:
        why = f"The inventory entry of {node} cannot hold variables of its own."
    header = (
        f"{CTL_HEADER} (ctl cordon, ctl uncordon): host variables of {node}.\n"
        f"# {why}\n"
        "# ctl uncordon deletes this file when nothing else is left in it.\n"
    )
    files.set(texts.vars_file, f"{header}{KEY}: {value}\n")
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
        f"after this edit {node} would still be {now} ({_where(origin)}) by Ansible's"
        " precedence; nothing was written: set cordoned by hand",
    )


def _where(origin: tuple[str, int | None] | None) -> str:
    if origin is None:
        return "nowhere"
    file, line = origin
    return file if line is None else f"{file}:{line}"


def quote(value: str) -> str:
    """A double-quoted YAML scalar that is valid JSON too: escapes what YAML cannot print."""
    text = json.dumps(value, ensure_ascii=False)
    return "".join(char if _printable(char) else f"\\u{ord(char):04x}" for char in text)


def shown(reason: str) -> str:
    """A reason as the operator wrote it: quoted, or `true` for a cordon without one."""
    return "true" if reason == NO_CORDON_REASON else quote(reason)


def _printable(char: str) -> bool:
    """YAML's printable characters, less the ones YAML 1.1 readers take for line breaks."""
    code = ord(char)
    return (
        0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)
        or code >= 0x10000
    ) and char not in ("\u2028", "\u2029")


class _Files:
    """The texts a plan writes, over the files as read."""

    def __init__(self, texts: InventoryTexts) -> None:
        self.base = texts
        self.read: dict[str, str] = {s.file: s.text for s in (*texts.sources, *texts.host_vars)}
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
        view.source, view.sources, view.group_vars, {node: view.host_vars}
    )
    host = inventory.host(node)
    return host.vars.cordoned, host.origin(KEY)


# --- the pure half: editing one YAML text in place ------------------------------------------


@functools.lru_cache(maxsize=64)
def compose(text: str, file: str) -> Node | None:
    """The document's node tree, each node with its position; None for an empty document.

    Cached: a plan composes the same texts several times. Nothing changes a node."""
    try:
        node: Node | None = YAML(typ="rt").compose(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = error.problem or error.context or "invalid YAML"
        raise InputError.single(file, line, (), f"invalid YAML: {reason}") from None
    except YAMLError as error:
        raise InputError.single(file, None, (), f"invalid YAML: {error}") from None
    return node


def set_key(text: str, file: str, path: Sequence[str], value: str, key: str = KEY) -> str:
    """`key: VALUE` (VALUE already YAML) in the mapping at `path`, everything else kept.

    An existing value is replaced where it stands; a new key goes after the mapping's last
    one, indented as its siblings are; an empty host entry (`hgx-5:`) becomes a mapping.
    """
    root = compose(text, file)
    nl = "\r\n" if "\r\n" in text else "\n"
    key_text = json.dumps(key) if file.endswith(".json") else key
    if not path and (root is None or (is_null(root) and _is_empty(root))):  # no mapping yet
        head = text if not text or text.endswith("\n") else text + nl
        new = f"{head}{key_text}: {value}{nl}"
    else:
        found = _find(root, path, file)
        target = found.value
        pair = mapping_pair(target, key)
        if pair is not None:
            _refuse_unsafe(file, path, pair)
            new = _replace_value(text, pair, value)
        elif isinstance(target, MappingNode):
            new = _add_pair(text, target, key_text, value, nl)
        elif is_null(target) and found.key is not None and found.parent is not None:
            new = _fill_null(text, found, key_text, value, nl)
        else:
            line = None if target is None else target.start_mark.line + 1
            raise InputError.single(file, line, tuple(path), "not a mapping: cannot add cordoned")
    _check(text, new, file, path, lambda mapping: _canon_set(mapping, key, value))
    return new


def remove_key(text: str, file: str, path: Sequence[str], key: str = KEY) -> str:
    """The text without `key` in the mapping at `path`: its lines, or its flow item, go."""
    found = _find(compose(text, file), path, file)
    mapping = found.value
    pair = mapping_pair(mapping, key)
    if pair is None or not isinstance(mapping, MappingNode):
        return text
    _refuse_unsafe(file, path, pair)
    index = [k for k, _ in mapping.value].index(pair[0])
    key_node, value_node = pair
    end = _end(text, value_node, _colon(text, key_node) + 1)
    if mapping.flow_style:
        if index > 0:
            prev_key, prev_value = mapping.value[index - 1]
            start = _end(text, prev_value, _colon(text, prev_key) + 1)
        else:
            start = key_node.start_mark.index
            if len(mapping.value) > 1:
                end = mapping.value[1][0].start_mark.index
        new = text[:start] + text[end:]
    else:
        start = text.rfind("\n", 0, key_node.start_mark.index) + 1
        if text[start : key_node.start_mark.index].strip():
            raise InputError.single(
                file,
                key_node.start_mark.line + 1,
                (*path, key),
                "does not start its line: remove it by hand",
            )
        new = text[:start] + text[_line_after(text, end) :]
    _check(text, new, file, path, lambda node: _canon_remove(node, key))
    return new


@dataclass(frozen=True)
class _Found:
    value: Node | None  # the node at the path
    key: Node | None  # its key in the parent mapping (None at the root)
    parent: MappingNode | None
    step: int  # indentation of one level, as this file writes it here


def _find(root: Node | None, path: Sequence[str], file: str) -> _Found:
    node, key, parent, columns = root, None, None, [0]
    for part in path:
        pair = mapping_pair(node, part)
        if pair is None or not isinstance(node, MappingNode):
            raise InputError.single(file, None, tuple(path), "no longer there: run ctl again")
        parent, (key, node) = node, pair
        columns.append(key.start_mark.column)
    step = columns[-1] - columns[-2] if len(columns) > 1 and columns[-1] > columns[-2] else 2
    return _Found(node, key, parent, step)


def mapping_pair(mapping: Node | None, name: str) -> tuple[Node, Node] | None:
    if not isinstance(mapping, MappingNode):
        return None
    for key, value in mapping.value:
        if isinstance(key, ScalarNode) and key.value == name:
            return key, value
    return None


def is_null(node: Node | None) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL_TAG


def _is_empty(node: Node) -> bool:
    """Nothing written: `key:` with no value, or a document of comments after `---`."""
    empty: bool = node.start_mark.index == node.end_mark.index
    return empty


def _refuse_unsafe(file: str, path: Sequence[str], pair: tuple[Node, Node]) -> None:
    """A value ctl must not overwrite: vaulted, templated, anchored, aliased or a collection."""
    key, value = pair
    problem = None
    if value.start_mark.index < key.end_mark.index:
        problem = f"is an alias (*{value.anchor}) of another value"
    elif value.anchor:
        problem = f"carries the anchor &{value.anchor}, which other values may use"
    elif value.tag == "!vault":
        problem = "is an Ansible Vault secret, which ctl cannot read"
    elif not isinstance(value, ScalarNode):
        problem = "is not a reason, true or false"
    elif "{{" in value.value or "{%" in value.value:
        problem = "is a Jinja template, which ctl does not render"
    if problem is not None:
        raise InputError.single(
            file, key.start_mark.line + 1, (*path, KEY), f"{problem}: edit it by hand"
        )


def _colon(text: str, key: Node) -> int:
    return text.index(":", key.end_mark.index)


def _end(text: str, node: Node, floor: int) -> int:
    """Where `node`, written after `floor` (past its key's colon or its dash), ends."""
    if node.start_mark.index < floor:  # an alias: the node itself is written earlier
        at = floor
        while at < len(text) and text[at] in " \t":
            at += 1
        return at + 1 + len(node.anchor or "") if text.startswith("*", at) else floor
    if _is_empty(node):
        return floor
    if isinstance(node, ScalarNode):
        end: int = node.end_mark.index
        if node.style in ("|", ">"):  # a block scalar ends with its line breaks
            while end > node.start_mark.index and text[end - 1] in " \t\r\n":
                end -= 1
        return end
    if not isinstance(node, MappingNode | SequenceNode) or node.flow_style or not node.value:
        flow_end: int = node.end_mark.index
        return flow_end
    last = node.value[-1]
    if isinstance(node, MappingNode):
        return _end(text, last[1], _colon(text, last[0]) + 1)
    dash = text.rfind("-", 0, last.start_mark.index + 1)
    return _end(text, last, dash + 1)


def _line_after(text: str, end: int) -> int:
    """The start of the line after the one where position `end` is."""
    newline = text.find("\n", end)
    return len(text) if newline < 0 else newline + 1


def _replace_value(text: str, pair: tuple[Node, Node], value: str) -> str:
    key, old = pair
    colon = _colon(text, key)
    if _is_empty(old):  # `cordoned:` with no value
        return f"{text[: colon + 1]} {value}{text[colon + 1 :]}"
    start = old.start_mark.index
    return text[:start] + value + text[_end(text, old, colon + 1) :]


def _add_pair(text: str, mapping: MappingNode, key: str, value: str, nl: str) -> str:
    if mapping.flow_style:
        if not mapping.value:
            at = text.index("{", mapping.start_mark.index) + 1
            return f"{text[:at]}{key}: {value}{text[at:]}"
        last_key, last_value = mapping.value[-1]
        at = _end(text, last_value, _colon(text, last_key) + 1)
        return f"{text[:at]}, {key}: {value}{text[at:]}"
    last_key, last_value = mapping.value[-1]
    indent = " " * mapping.value[0][0].start_mark.column
    return _insert_line(
        text, _end(text, last_value, _colon(text, last_key) + 1), f"{indent}{key}: {value}", nl
    )


def _fill_null(text: str, found: _Found, key: str, value: str, nl: str) -> str:
    """`hgx-5:` (or `hgx-5: ~`) → a mapping holding `key: value`."""
    assert found.key is not None and found.value is not None and found.parent is not None
    colon = _colon(text, found.key)
    null_end = colon + 1 if _is_empty(found.value) else found.value.end_mark.index
    if found.parent.flow_style:
        return f"{text[: colon + 1]} {{{key}: {value}}}{text[null_end:]}"
    head = text[: colon + 1] + text[null_end:]  # drop `~` or `null`, keep a comment after it
    indent = " " * (found.key.start_mark.column + found.step)
    return _insert_line(head, colon + 1, f"{indent}{key}: {value}", nl)


def _insert_line(text: str, end: int, line: str, nl: str) -> str:
    at = _line_after(text, end)
    if at == len(text) and not text.endswith("\n"):
        return f"{text}{nl}{line}{nl}"
    return f"{text[:at]}{line}{nl}{text[at:]}"


# The check: the new text composes to the old one's nodes with exactly one change.

Canon = tuple[Any, ...] | None


def _canon(node: Node | None) -> Canon:
    """A node tree as comparable values: tags and scalar values, not styles or positions."""
    if node is None or is_null(node):
        return None
    if isinstance(node, ScalarNode):
        return ("scalar", node.tag, node.value)
    if isinstance(node, SequenceNode):
        return ("seq", node.tag, tuple(_canon(item) for item in node.value))
    pairs = tuple((_canon(key), _canon(value)) for key, value in node.value)
    return ("map", node.tag, pairs) if pairs else None  # {} and an empty value alike


def _canon_set(mapping: Canon, key: str, value: str) -> Canon:
    new = _canon(compose(f"{key}: {value}", "<new value>"))
    assert new is not None
    pair = new[2][0]
    if mapping is None:
        return new
    pairs = list(mapping[2])
    for index, (old_key, _) in enumerate(pairs):
        if old_key == pair[0]:
            pairs[index] = pair
            return ("map", mapping[1], tuple(pairs))
    return ("map", mapping[1], (*pairs, pair))


def _canon_remove(mapping: Canon, key: str) -> Canon:
    assert mapping is not None
    pairs = tuple(pair for pair in mapping[2] if not (pair[0] and pair[0][2] == key))
    return ("map", mapping[1], pairs) if pairs else None


def _canon_at(canon: Canon, path: Sequence[str], change: Callable[[Canon], Canon]) -> Canon:
    if not path:
        return change(canon)
    assert canon is not None
    pairs = tuple(
        (key, _canon_at(value, path[1:], change) if key and key[2] == path[0] else value)
        for key, value in canon[2]
    )
    return (canon[0], canon[1], pairs)


def _check(
    old: str, new: str, file: str, path: Sequence[str], change: Callable[[Canon], Canon]
) -> None:
    """Refuse an edit that would change anything but the one key."""
    expected = _canon_at(_canon(compose(old, file)), path, change)
    try:
        got = _canon(compose(new, file))
    except InputError:
        got = ("unreadable",)
    if got != expected:
        raise InputError.single(
            file,
            None,
            tuple(path),
            "ctl cannot change cordoned here without changing more of the file: edit it by hand",
        )


# --- the I/O half ---------------------------------------------------------------------------


def read_texts(inventory: Path, node: str) -> InventoryTexts:
    """What `load_inventory` reads, as texts, and where `node`'s own variables go."""
    sources = read_sources(inventory)
    tree = parse_sources(sources)
    base = inventory_base(inventory)
    problems: list[InputProblem] = []
    group_vars = {
        name: tuple(vars_texts(base / "group_vars", name, problems)) for name in tree.groups
    }
    host_vars = tuple(vars_texts(base / "host_vars", node, problems))
    if problems:
        raise InputError(problems)
    home = base / "host_vars"
    vars_file, vars_dir = str(home / f"{node}.yml"), None
    for candidate in (node, f"{node}.yml", f"{node}.yaml", f"{node}.json"):
        path = home / candidate
        if path.is_dir():
            vars_file, vars_dir = str(path / DIR_FILE), str(path)
            break
        if path.exists():
            vars_file = str(path)
            break
    return InventoryTexts(str(inventory), sources, group_vars, host_vars, vars_file, vars_dir)


def cordon_node(inventory: Path, node: str, reason: str) -> str:
    """Cordon `node` in the inventory at `inventory`; returns the line that says what changed."""
    problem = reason_problem(reason)
    if problem is not None:
        raise InputError.single("--reason", None, (), problem)
    before = load_inventory(inventory)
    host = before.find(node)
    plan = plan_cordon(read_texts(inventory, node), host, reason)
    return commit(plan, inventory, before)


def uncordon_node(inventory: Path, node: str) -> str:
    """Uncordon `node`; returns the line that says what changed (or that nothing had to)."""
    before = load_inventory(inventory)
    host = before.find(node)
    plan = plan_uncordon(read_texts(inventory, node), host)
    return commit(plan, inventory, before)


def commit(plan: Plan, inventory: Path, before: Inventory) -> str:
    """Write the plan's files, reload, and restore them all unless the result is the plan's."""
    if not plan.edits:
        return plan.message

    def verify() -> Inventory:
        try:
            after = load_inventory(inventory)
        except InputError as error:
            raise noted(error, " (after the edit; the original files are restored)") from None
        problem = _mismatch(plan, before, after)
        if problem is not None:
            raise InputError.single(plan.edits[0].file, None, (), problem)
        return after

    write_verified(plan.edits, missing=None, verify=verify)
    return plan.message


_Saved = tuple[Path, bytes | None, int | None]  # a file's bytes and mode (None: not there)


def write_verified(
    edits: Sequence[FileEdit], *, missing: str | None, verify: Callable[[], Inventory]
) -> Inventory:
    """Write `edits` as one transaction: returns what `verify` returns (the inventory read
    again); restores every file and removes every directory made if anything raises.

    Each file must still have the text its edit was planned from (`missing`: the text a
    file that is not there counts as). An edit whose `after` is None deletes its file.
    """
    saved: list[_Saved] = []
    made: list[Path] = []
    try:
        for edit in edits:
            path = Path(edit.file)
            current = path.read_bytes() if path.exists() else None
            text = missing if current is None else current.decode("utf-8")
            if text != edit.before:
                raise InputError.single(
                    edit.file, None, (), "changed while ctl was editing it: run ctl again"
                )
            mode = path.stat().st_mode & 0o7777 if current is not None else None
            saved.append((path, current, mode))
            if edit.after is None:
                path.unlink()
            else:
                made += _make_parents(path.parent)
                atomic_write(path, edit.after, mode)
        return verify()
    except BaseException:
        _restore(saved, made)
        raise


def noted(error: InputError, note: str) -> InputError:
    """`error`'s first problem with `note` added to its message."""
    first = error.problems[0]
    return InputError.single(first.file, first.line, first.path, f"{first.message}{note}")


def _mismatch(plan: Plan, before: Inventory, after: Inventory) -> str | None:
    host = after.host(plan.node)
    if (host.vars.cordoned, host.origin(KEY)) != (plan.expected, plan.origin):
        now = host.vars.cordoned
        state = "uncordoned" if now is None else f"cordoned: {quote(now)}"
        return (
            f"reloaded, {plan.node} is {state} ({_where(host.origin(KEY))}), not as planned;"
            " the original files are restored"
        )
    for old in before.hosts:
        if old.name != plan.node and after.host(old.name).vars.cordoned != old.vars.cordoned:
            return f"the edit changed the cordon of {old.name}; the original files are restored"
    return None


def _make_parents(directory: Path) -> list[Path]:
    missing = [path for path in (directory, *directory.parents) if not path.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    return missing  # deepest first: the order to remove them in


def _restore(saved: Sequence[_Saved], made_dirs: Sequence[Path]) -> None:
    for path, data, mode in reversed(saved):
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, data, mode)
    for directory in made_dirs:  # deepest first
        if directory.exists() and not any(directory.iterdir()):
            directory.rmdir()
