"""Ansible's INI inventory form, read as ansible-core 2.19's ini plugin reads it.

Pure: text in, a list of what the file declares out, in the order written; the tree
(cli/inventory/tree.py) applies it to the same groups and hosts a YAML source fills, so
precedence, group_vars/ and host_vars/ work alike for both forms. Followed as written in
ansible/plugins/inventory/ini.py (InventoryModule._parse and the methods it calls):

- Lines are the text's splitlines(), each stripped; empty lines and lines whose first
  character is `#` or `;` are skipped. Lines before any section are hosts of `ungrouped`.
- `[NAME]`, `[NAME:hosts]`, `[NAME:vars]`, `[NAME:children]` start a section (NAME: no
  `:`, `]` or whitespace; a `# comment` may follow); another `:type` is an error, and so is a
  line in brackets that is not a section (`[a b]`).
- A host line is split as a shell would (shlex, `#` starting a comment): the first word is
  a host pattern (ranges, `:port`), each other word `key=value`. A `[NAME:vars]` line is
  `key=value`, split at the first `=`, both sides stripped, nothing else removed (a
  `# comment` stays part of the value unless the value is a Python literal, where `#`
  starts a Python comment).
- Values go through Python's ast.literal_eval (`22` is a number, `True` a boolean, `'x'`
  and `"x"` text, `[1, 2]` a list); what is not a literal stays the text written (`true`
  and `yes` are text, unlike YAML). Tuples and sets become lists, `...` and complex numbers
  their text. That is ini.py's _parse_value, for host lines and `:vars` lines alike.
- `[NAME:vars]` before NAME is declared (by `[NAME]` or `[NAME:children]`, in this file or
  an earlier source), and a child group never declared, are errors, the first one
  reported at its line. A child declared later in the file is added when declared.
- A pattern ending in `:` without a port, and a host named `---` (a YAML file read as INI),
  are errors.

Errors name the line, as Ansible's do; the loader adds the file. Bounded by the loader's
limits (the file's size, a host range's size in cli/inventory/patterns.py).

The second half edits one host line in place, for `ctl cordon` (cli/inventory/cordon.py):
a `key=value` word added, replaced or removed, every other byte of the file kept.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from cli.inventory.patterns import expand_host_pattern

COMMENT_MARKERS = ("#", ";")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_STATES = ("hosts", "children", "vars")
# Values go through Python's parser, whose tree of a 16 MB list literal takes gigabytes;
# no real inventory value comes near this (a fabrics list of 8 HCAs is 120 characters).
MAX_VALUE_CHARS = 65_536


class IniError(Exception):
    """The first thing in an INI inventory Ansible would refuse, and its line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class IniGroup:
    """A group declared (a section header naming a group not yet known)."""

    name: str
    line: int


@dataclass(frozen=True)
class IniGroupVar:
    group: str
    key: str
    value: Any
    line: int


@dataclass(frozen=True)
class IniHosts:
    """A host line: the hosts its pattern names, in its section's group, with its variables."""

    group: str
    pattern: str
    names: tuple[str, ...]
    port: int | None
    vars: tuple[tuple[str, Any], ...]
    line: int


@dataclass(frozen=True)
class IniChild:
    parent: str
    child: str
    line: int


IniOp = IniGroup | IniGroupVar | IniHosts | IniChild


@dataclass
class _Pending:
    line: int
    state: str
    parents: list[str]


def parse_ini(text: str, known: Container[str]) -> tuple[IniOp, ...]:
    """What an INI inventory declares, in order; raises IniError for the first problem.

    `known`: the groups earlier sources declared (a `:vars` or `:children` section may
    name them without declaring them again)."""
    ops: list[IniOp] = []
    declared: set[str] = set()
    pending: dict[str, _Pending] = {}

    def has(name: str) -> bool:
        return name in declared or name in ("all", "ungrouped") or name in known

    def add_pending_children(group: str, line: int) -> None:
        for parent in pending[group].parents:
            ops.append(IniChild(parent, group, line))
            if parent in pending and pending[parent].state == "children":
                add_pending_children(parent, line)
        del pending[group]

    group, state = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in COMMENT_MARKERS:
            continue
        section = _SECTION.fullmatch(line)
        if section:
            group, state = section.group(1), section.group(2) or "hosts"
            if state not in _STATES:
                raise IniError(
                    number,
                    f"section [{group}:{state}] has unknown type '{state}'"
                    " (hosts, vars or children)",
                )
            if not has(group):
                if state == "vars" and group not in pending:
                    pending[group] = _Pending(number, state, [])
                declared.add(group)
                ops.append(IniGroup(group, number))
            if group in pending and state != "vars":
                if pending[group].state == "children":
                    add_pending_children(group, number)
                elif pending[group].state == "vars":
                    del pending[group]
            continue
        if line.startswith("[") and line.endswith("]"):
            raise IniError(
                number,
                f"invalid section '{line}': a section is [group], [group:vars] or"
                " [group:children], with no spaces",
            )
        if state == "hosts":
            ops.append(_host_line(line, group, number))
        elif state == "vars":
            key, equals, value = line.partition("=")
            if not equals:
                raise IniError(number, f"expected key=value in [{group}:vars], got: {line}")
            ops.append(IniGroupVar(group, key.strip(), ini_value(value.strip(), number), number))
        else:
            match = _GROUP_NAME.fullmatch(line)
            if not match:
                raise IniError(number, f"expected a group name in [{group}:children], got: {line}")
            child = match.group(1)
            if not has(child):
                pending.setdefault(child, _Pending(number, state, [])).parents.append(group)
            else:
                ops.append(IniChild(group, child, number))
    for name, decl in pending.items():  # Ansible reports the first one only
        if decl.state == "vars":
            raise IniError(
                decl.line, f"section [{name}:vars] is for group '{name}', never declared"
            )
        raise IniError(
            decl.line, f"section [{decl.parents[-1]}:children] names group '{name}', never declared"
        )
    return tuple(ops)


def _host_line(line: str, group: str, number: int) -> IniHosts:
    """`hgx-[1:4]:2222 labels="{'role': 'coding'}"` → the hosts and their variables."""
    words = split_host_line(line, number)
    if not words:
        raise IniError(number, f"no host name on the line: {line}")
    pattern = words[0]
    try:
        names, port = expand_host_pattern(pattern)
    except ValueError as error:
        raise IniError(number, str(error)) from None
    if pattern.strip().endswith(":") and port is None:
        raise IniError(
            number, f"host pattern '{pattern}' ends in ':', which only a port may follow"
        )
    if "" in names or "---" in (name.strip() for name in names):
        raise IniError(number, f"'{pattern}' is not a host name (a YAML file read as INI?)")
    variables: dict[str, Any] = {}
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals:
            raise IniError(number, f"expected key=value after the host name, got: {word}")
        variables[key] = ini_value(value, number)
    return IniHosts(group, pattern, tuple(names), port, tuple(variables.items()), number)


def split_host_line(line: str, number: int) -> list[str]:
    """A host line's words, as shlex.split(line, comments=True) gives them (ini.py's
    shlex_split); a line without quotes or backslashes (nearly every one) without shlex,
    which reads a character at a time: 16 MB of host lines took 33 s through it."""
    if not any(char in line for char in "'\"\\"):
        return [word for word in _BLANKS.split(line.partition("#")[0]) if word]
    try:
        return shlex.split(line, comments=True)
    except ValueError as error:
        raise IniError(number, f"cannot split the host line: {error}") from None


_BLANKS = re.compile(r"[ \t\r\n]+")  # shlex's whitespace: not every character str.split takes


def ini_value(text: str, line: int) -> Any:
    """A value as written in INI → what Ansible makes of it (ini.py's _parse_value)."""
    if len(text) > MAX_VALUE_CHARS:
        raise IniError(
            line,
            f"a value of {len(text):,} characters, more than {MAX_VALUE_CHARS:,}: refused"
            " before Python's parser reads it",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text  # not a Python literal: the text itself (Ansible catches the first two;
        # the others a hostile line could cause, and the text is what a person reads)
    except TypeError:  # `{[1]: 2}`: a literal Python cannot build, which Ansible refuses
        raise IniError(line, f"value {text[:40]!r} cannot be read (an unhashable key?)") from None
    return _coerce(value)


def _coerce(value: Any) -> Any:
    """ini.py's _parse_recursive_coerce_types_and_tag, without Ansible's trust tags."""
    if isinstance(value, list | tuple | set):
        return [_coerce(item) for item in value]
    if isinstance(value, dict):
        return {key: _coerce(item) for key, item in value.items()}
    if value is Ellipsis or isinstance(value, complex):
        return "..." if value is Ellipsis else str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


# --- editing one host line ------------------------------------------------------------------


def ini_literal(value: str | bool) -> str:
    """A value as a host-line word reads it back: `True`/`False`, or text quoted twice
    (Python quotes inside shell quotes, as ini.py's own example `"'03#pa33w0rd'"`), so
    that a reason such as `1` or `None` stays text and `#` or spaces stay in it."""
    if isinstance(value, bool):
        return str(value)
    python = repr(value)
    return '"' + python.replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_host_var(text: str, line: int, key: str, value: str) -> str:
    """`key=VALUE` (VALUE a host-line word, see ini_literal) on host line `line`: replaced
    where it is, or added after the line's last word (before a comment); raises IniError."""
    return _edit(text, line, key, value)


def remove_host_var(text: str, line: int, key: str) -> str:
    """Host line `line` without its `key=...` word; raises IniError."""
    return _edit(text, line, key, None)


def _edit(text: str, number: int, key: str, value: str | None) -> str:
    lines = text.splitlines(keepends=True)
    raw = lines[number - 1]
    body = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
    ending = raw[len(body) :]
    spans = _word_spans(body, number)
    words = [body[start:end] for start, end in spans]
    try:
        split = shlex.split(body, comments=True)
        alone = [shlex.split(word, comments=True) for word in words]
    except ValueError as error:
        raise IniError(number, f"cannot split the host line: {error}") from None
    if alone != [[word] for word in split]:  # our word boundaries are shlex's
        raise IniError(number, "ctl cannot find the words of this host line: edit it by hand")
    at = [index for index, word in enumerate(split) if index and word.partition("=")[0] == key]
    if len(at) > 1:
        raise IniError(number, f"is written {len(at)} times on this host line: edit it by hand")
    expected = list(split)
    if at:
        start, end = spans[at[0]]
        old = split[at[0]].partition("=")[2]
        if "{{" in old or "{%" in old:
            raise IniError(
                number, "is a Jinja template, which ctl does not render: edit it by hand"
            )
        if value is None:
            body = body[: spans[at[0] - 1][1]] + body[end:]
            del expected[at[0]]
        else:
            body = f"{body[:start]}{key}={value}{body[end:]}"
            expected[at[0]] = f"{key}={shlex.split(value)[0]}"
    elif value is not None:
        end = spans[-1][1]
        body = f"{body[:end]} {key}={value}{body[end:]}"
        expected.append(f"{key}={shlex.split(value)[0]}")
    if shlex.split(body, comments=True) != expected:
        raise IniError(
            number, "ctl cannot change it here without changing more of the line: edit it by hand"
        )
    lines[number - 1] = body + ending
    return "".join(lines)


_SPACE = " \t\r\n"


def _word_spans(line: str, number: int) -> list[tuple[int, int]]:
    """Where each word of a host line is, as shlex.split(line, comments=True) splits it
    (POSIX mode: quotes, backslash escapes, `#` starting a comment even inside a word)."""
    spans: list[tuple[int, int]] = []
    at, size = 0, len(line)
    while at < size:
        if line[at] in _SPACE:
            at += 1
            continue
        if line[at] == "#":
            break
        start = at
        while at < size and line[at] not in _SPACE and line[at] != "#":
            char = line[at]
            if char == "'":
                close = line.find("'", at + 1)
                if close < 0:
                    raise IniError(number, "cannot split the host line: no closing quotation")
                at = close + 1
            elif char == '"':
                at += 1
                while at < size and line[at] != '"':
                    at += 2 if line[at] == "\\" else 1
                if at >= size:
                    raise IniError(number, "cannot split the host line: no closing quotation")
                at += 1
            else:
                at += 2 if char == "\\" else 1
        spans.append((start, min(at, size)))
        if at < size and line[at] == "#":
            break
    return spans
