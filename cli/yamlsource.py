"""YAML documents that remember the line of every key, so errors can point at it.

Pure: takes text, returns data. Duplicate keys are refused, because YAML silently keeps
the last one and an operator who wrote a key twice meant one of them.

Bounded: every file ctl reads (catalog, inventory, facts) comes through `decode_source` and
`parse_yaml`, which refuse, in time and memory proportional to the file's size, what would
otherwise take minutes or gigabytes: a file over MAX_SOURCE_BYTES, text that is not
UTF-8 or holds NUL bytes (a binary file), nesting deeper than MAX_DEPTH, and aliases that
expand to more than MAX_VALUES values (an alias bomb: 398 bytes of 8 nested levels made
`ctl catalog check` run past 60 s and 4.6 GB, since every alias is read again where used).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cli.errors import InputError, InputProblem, KeyPath

MAX_SOURCE_BYTES = 16 * 1024 * 1024  # far above a 10,000-host inventory (about 2 MB)
MAX_DEPTH = 64  # mappings and lists inside each other; real files stay under 10
MAX_VALUES = 1_000_000  # values once every alias is expanded where it is used


@dataclass(frozen=True)
class VaultedValue:
    """An Ansible Vault secret (`!vault`): carried along, never decrypted, never printed."""

    def __repr__(self) -> str:
        return "<vaulted>"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (libyaml's when present: ten times faster on big inventories) that
    also reads Ansible's own tags, so an inventory with vaulted group_vars still loads."""


def _vaulted(_loader: yaml.BaseLoader, _node: yaml.Node) -> VaultedValue:
    return VaultedValue()


def _unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    return loader.construct_object(node, deep=True)


_Loader.add_constructor("!vault", _vaulted)
_Loader.add_constructor("!unsafe", _unsafe)


def yaml_kind(value: object) -> str:
    """How an operator would name the YAML type of `value`, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, VaultedValue):
        return "an Ansible Vault secret (ctl does not decrypt)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


@dataclass(frozen=True)
class YamlDocument:
    file: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def problem(self, path: KeyPath, message: str) -> InputProblem:
        return InputProblem(self.file, self.line_of(path), path, message)


def decode_source(data: bytes, file: str) -> str:
    """A file's bytes as text; InputError (naming the file) for a file too big or binary."""
    if len(data) > MAX_SOURCE_BYTES:
        limit = MAX_SOURCE_BYTES // (1024 * 1024)
        raise InputError.single(file, None, (), f"{len(data)} bytes: more than {limit} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError.single(
            file, None, (), f"not UTF-8 text (byte {error.start}): a binary file?"
        ) from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise InputError.single(file, line, (), "holds a NUL byte: a binary file?")
    return text


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document; an empty document is `None`."""
    if len(text) > MAX_SOURCE_BYTES:
        limit = MAX_SOURCE_BYTES // (1024 * 1024)
        raise InputError.single(file, None, (), f"{len(text)} characters: more than {limit} MiB")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(file, None, {})
        _check_size(node, file)
        # Lines and duplicate keys from the document as written: constructing it flattens
        # a merge key's mapping into the node (PyYAML's flatten_mapping), and the keys an
        # override replaces (`<<: *defaults` then `b: 3`, which Ansible reads) would look
        # written twice.
        lines: dict[KeyPath, int] = {(): node.start_mark.line + 1}
        problems: list[InputProblem] = []
        _collect_lines(node, (), lines, problems, file)
        data = loader.construct_document(node)
    except RecursionError:
        raise InputError.single(file, None, (), f"nested more than {MAX_DEPTH} deep") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = error.problem or error.context or "invalid YAML"
        raise InputError([InputProblem(file, line, (), f"invalid YAML: {reason}")]) from None
    except yaml.YAMLError as error:
        raise InputError([InputProblem(file, None, (), f"invalid YAML: {error}")]) from None
    finally:
        loader.dispose()
    if problems:
        raise InputError(problems)
    return YamlDocument(file, data, lines)


def _collect_lines(
    node: yaml.Node,
    path: KeyPath,
    lines: dict[KeyPath, int],
    problems: list[InputProblem],
    file: str,
) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    InputProblem(
                        file,
                        line,
                        (*path, key),
                        f"duplicate key (first written on line {seen[key]})",
                    )
                )
                continue
            seen[key] = line
            lines[(*path, key)] = line
            _collect_lines(value_node, (*path, key), lines, problems, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _collect_lines(item, (*path, index), lines, problems, file)


def _check_size(root: yaml.Node, file: str) -> None:
    """Refuse a document nested more than MAX_DEPTH deep, or whose aliases expand to more
    than MAX_VALUES values; in one pass over its nodes, each node seen once."""
    expanded: dict[int, int] = {}  # id(node) → values under it, aliases expanded
    depth: dict[int, int] = {}  # id(node) → levels under it
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if not children_done and key in expanded:
            continue  # an alias of a node done already: no second look at its children
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(child)] for child in children)
            depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
            if depth[key] > MAX_DEPTH:
                line = node.start_mark.line + 1
                raise InputError.single(file, line, (), f"nested more than {MAX_DEPTH} deep")
            if expanded[key] > MAX_VALUES:
                raise InputError.single(
                    file,
                    node.start_mark.line + 1,
                    (),
                    f"its aliases expand to more than {MAX_VALUES:,} values: refused as an"
                    " alias bomb",
                )
            continue
        if key in open_nodes:
            line = node.start_mark.line + 1
            raise InputError.single(file, line, (), "an alias refers to a value that holds it")
        if len(open_nodes) > MAX_DEPTH:
            line = node.start_mark.line + 1
            raise InputError.single(file, line, (), f"nested more than {MAX_DEPTH} deep")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in expanded)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
