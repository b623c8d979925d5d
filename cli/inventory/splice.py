"""Edit one YAML text in place: a key set or removed, every other byte kept.

What must survive an edit of the operator's files: every comment, the order of keys, each
value's quoting, blank lines and indentation, everywhere outside the lines that change. So
nothing is ever dumped. ruamel.yaml's round-trip composer finds each key and value with its
exact position; the change is spliced into the original text there; the result is composed
again and compared, node by node, with the original plus that one change, and refused if
anything else moved. (A round-trip dump re-indents a file whose indentation it guesses
wrong and flattens a JSON source onto one line; splicing cannot.)

Pure: texts in, texts out. `ctl cordon` (cli/inventory/cordon.py) and `ctl onboard-node`
(cli/pki/addhost.py) plan their edits with it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cli.errors import InputError

CTL_HEADER = "# Written by ctl"  # the first line of every file ctl creates

_NULL_TAG = "tag:yaml.org,2002:null"


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


def set_key(text: str, file: str, path: Sequence[str], value: str, *, key: str) -> str:
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
            raise InputError.single(file, line, tuple(path), f"not a mapping: cannot add {key}")
    _check(text, new, file, path, key, lambda mapping: _canon_set(mapping, key, value))
    return new


def remove_key(text: str, file: str, path: Sequence[str], *, key: str, whole: bool = False) -> str:
    """The text without `key` in the mapping at `path`: its lines, or its flow item, go.

    `whole`: the key's value may be a collection (a host entry with its variables), and
    the comment lines right after it indented under the key go with it."""
    found = _find(compose(text, file), path, file)
    mapping = found.value
    pair = mapping_pair(mapping, key)
    if pair is None or not isinstance(mapping, MappingNode):
        return text
    _refuse_unsafe(file, path, pair, whole=whole)
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
        after = _line_after(text, end)
        if whole:
            after = _comments_under(text, after, key_node.start_mark.column)
        new = text[:start] + text[after:]
    _check(text, new, file, path, key, lambda node: _canon_remove(node, key))
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


@dataclass(frozen=True)
class GroupVisit:
    """A group of an inventory source as the walk meets it: first the group itself (`key`
    None), then each of its keys other than `children` (`vars`, `hosts`, ...) with its value.
    `path` is the group's own: (NAME,) at the top, (..., "children", NAME) below."""

    group: str
    path: tuple[str, ...]
    key: ScalarNode | None = None
    value: Node | None = None


def group_visits(root: Node | None) -> Iterator[GroupVisit]:
    """Every group of one inventory source and each of its keys, in the order written: a
    `children` key's groups where it stands (the one walk over the tree that `ctl cordon`
    and `ctl onboard-node` plan their edits with)."""
    if isinstance(root, MappingNode):
        for key, value in root.value:
            if isinstance(key, ScalarNode):
                yield from _visits((key.value,), key.value, value)


def _visits(path: tuple[str, ...], name: str, data: Node) -> Iterator[GroupVisit]:
    yield GroupVisit(name, path)
    if not isinstance(data, MappingNode):
        return
    for key, value in data.value:
        if not isinstance(key, ScalarNode):
            continue
        if key.value != "children":
            yield GroupVisit(name, path, key, value)
        elif isinstance(value, MappingNode):
            for child, child_data in value.value:
                if isinstance(child, ScalarNode):
                    yield from _visits((*path, "children", child.value), child.value, child_data)


def _is_empty(node: Node) -> bool:
    """Nothing written: `key:` with no value, or a document of comments after `---`."""
    empty: bool = node.start_mark.index == node.end_mark.index
    return empty


def _comments_under(text: str, at: int, column: int) -> int:
    """Past the comment lines from `at` on that are indented more than `column`."""
    while at < len(text):
        end = _line_after(text, at)
        line = text[at:end]
        stripped = line.lstrip(" \t")
        if not stripped.startswith("#") or len(line) - len(stripped) <= column:
            break
        at = end
    return at


def _refuse_unsafe(
    file: str, path: Sequence[str], pair: tuple[Node, Node], *, whole: bool = False
) -> None:
    """A value ctl must not overwrite: vaulted, templated, anchored, aliased or a collection
    (`whole`: a collection is removed whole, so only aliases and anchors are refused)."""
    key, value = pair
    problem = None
    if value.start_mark.index < key.end_mark.index:
        problem = f"is an alias (*{value.anchor}) of another value"
    elif value.anchor:
        problem = f"carries the anchor &{value.anchor}, which other values may use"
    elif whole:
        pass
    elif value.tag == "!vault":
        problem = "is an Ansible Vault secret, which ctl cannot read"
    elif not isinstance(value, ScalarNode):
        problem = "is not a reason, true or false"
    elif "{{" in value.value or "{%" in value.value:
        problem = "is a Jinja template, which ctl does not render"
    if problem is not None:
        raise InputError.single(
            file, key.start_mark.line + 1, (*path, key.value), f"{problem}: edit it by hand"
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
    old: str, new: str, file: str, path: Sequence[str], key: str, change: Callable[[Canon], Canon]
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
            f"ctl cannot change {key} here without changing more of the file: edit it by hand",
        )


def quote(value: str) -> str:
    """A double-quoted YAML scalar that is valid JSON too: escapes what YAML cannot print."""
    text = json.dumps(value, ensure_ascii=False)
    return "".join(char if _printable(char) else f"\\u{ord(char):04x}" for char in text)


def _printable(char: str) -> bool:
    """YAML's printable characters, less the ones YAML 1.1 readers take for line breaks."""
    code = ord(char)
    return (
        0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)
        or code >= 0x10000
    ) and char not in ("\u2028", "\u2029")
