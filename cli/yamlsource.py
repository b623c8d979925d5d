"""YAML documents that remember the line of every key, so errors can point at it.

Pure: takes text, returns data. Duplicate keys are refused, because YAML silently keeps
the last one and an operator who wrote a key twice meant one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cli.errors import InputError, InputProblem, KeyPath


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


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document; an empty document is `None`."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(file, None, {})
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = error.problem or error.context or "invalid YAML"
        raise InputError([InputProblem(file, line, (), f"invalid YAML: {reason}")]) from None
    except yaml.YAMLError as error:
        raise InputError([InputProblem(file, None, (), f"invalid YAML: {error}")]) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {(): node.start_mark.line + 1}
    problems: list[InputProblem] = []
    _collect_lines(node, (), lines, problems, file)
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
