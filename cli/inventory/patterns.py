"""Ansible's host patterns: `hgx-[01:08]`, `node-[a:c]`, `n[0:10:2]`, `host:2222`, `[::1]:22`.

Pure. Followed as ansible-core 2.19 writes them: ansible.parsing.utils.addresses
(parse_address: a host name, IPv4 or IPv6 address, ranges allowed, and an optional port;
anything else is taken whole as the name) and ansible.plugins.inventory
(expand_hostname_range: the first range, then the rest of the name again). Both the YAML
and the INI forms name hosts this way.

Bounded where Ansible is not: a pattern that names more than MAX_RANGE_HOSTS hosts
(`n[0:99999999]`, or two ranges that multiply) is refused before anything is expanded;
Ansible would build the whole list (a 100-million-host range takes gigabytes). The loader
also stops at MAX_HOST_ENTRIES host names in all, however many patterns give them.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Sequence

from cli.names import MAX_FILE_NAME_BYTES, TEMPORARY_NAME_EXTRA, shown_name

MAX_RANGE_HOSTS = 100_000  # far above any fleet ctl drives (a few thousand nodes)
# Host names an inventory may give in all, a range counting each of its hosts: a 10,000-host
# inventory naming each host in twenty groups is 200,000. This bounds what hostile input can
# make the loader use whatever the ranges: 200,000 distinct hosts, measured, take 6 s and
# 560 MB (500,000 took 25 s and 1.3 GB).
MAX_HOST_ENTRIES = 200_000

_ALNUM_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_NUM_RANGE = r"\[[0-9]+:[0-9]+(?::[0-9]+)?\]"
_HEX_RANGE = re.compile(r"\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\]", re.I)
_LABEL = rf"(?:\w|{_ALNUM_RANGE})(?:[\w-]|{_ALNUM_RANGE})*(?<![_-])"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.I)
_IPV4_PART = rf"(?:[01]?[0-9]{{1,2}}|2[0-4][0-9]|25[0-5]|{_NUM_RANGE})"
_IPV4 = re.compile(rf"(?:{_IPV4_PART}\.){{3}}{_IPV4_PART}")
# The longest file name ctl makes from a host's name is its facts file, NAME.json, while
# written (cli.names.py): 230 characters, where DNS allows 253.
MAX_HOST_NAME = MAX_FILE_NAME_BYTES - TEMPORARY_NAME_EXTRA - len(".json")
_HOST_NAME_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")
_BRACKETED_PORT = re.compile(r"\[(.+)\]:([0-9]+)")
_HOST_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)")


def expand_host_pattern(pattern: str) -> tuple[list[str], int | None]:
    """`hgx-[01:03]:2222` → (['hgx-01', 'hgx-02', 'hgx-03'], 2222); ValueError if malformed.

    As Ansible does: a pattern that is not a host name, IPv4 or IPv6 address (ranges
    allowed) with an optional port is taken whole as the name, and its ranges expanded.
    """
    address, port = pattern, None
    for form in (_BRACKETED_PORT, _HOST_PORT):
        match = form.fullmatch(address)
        if match:
            address, port = match.group(1), int(match.group(2))
    if not (_IPV4.fullmatch(address) or _is_ipv6(address) or _HOSTNAME.fullmatch(address)):
        address, port = pattern, None
    return _expand_ranges(address), port


def host_name_problem(name: str) -> str | None:
    """Why `name` cannot be a host's name in ctl's inventory; None when it can.

    A host's name becomes file names (its facts, its host_vars) and reaches ssh's command
    line, so it is held to what host names and addresses are made of: ASCII letters,
    digits, '-', '.', ':' (an IPv6 address) and '_' (which Ansible takes and DNS does not),
    not starting with '-' or '.', no '..', at most MAX_HOST_NAME characters."""
    shown = shown_name(name)
    if not name:
        return "a host name must not be empty"
    if len(name) > MAX_HOST_NAME:
        return f"host name {shown} is {len(name)} characters long, more than {MAX_HOST_NAME}"
    if not _HOST_NAME_CHARS.fullmatch(name):
        return (
            f"host name {shown} is not a host name or address: letters, digits,"
            " '-', '_', '.' and ':' only"
        )
    if name.startswith(("-", ".")) or ".." in name:
        return f"host name {shown} starts with '-' or '.', or has '..': not a host name"
    return None


def _is_ipv6(address: str) -> bool:
    try:
        ipaddress.IPv6Address(_HEX_RANGE.sub("0", address))
    except ValueError:
        return False
    return True


def _expand_ranges(name: str) -> list[str]:
    """Every name of a pattern; its ranges read left to right, as expand_hostname_range
    does, and counted before one name is made."""
    parts: list[Sequence[str]] = []  # literal text and ranges' items, in order
    rest = name
    while "[" in rest:
        head, _, after = rest.partition("[")
        inner, closed, rest = after.partition("]")
        if not closed:
            raise ValueError(f"host range in '{name}' has no closing ']'")
        parts += [(head,), _range_items(inner)]
    parts.append((rest,))
    count = 1
    for items in parts:
        count *= len(items)
    if count > MAX_RANGE_HOSTS:
        raise ValueError(
            f"host pattern '{name}' names {count:,} hosts, more than {MAX_RANGE_HOSTS:,}:"
            " refused before expanding it"
        )
    names = [""]
    for items in parts:
        names = [done + item for done in names for item in items]
    return names


def _range_items(inner: str) -> Sequence[str]:
    """`01:03` → ('01', '02', '03'), lazily: a range of numbers is not built until used."""
    bounds = inner.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"host range [{inner}] must be [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise ValueError(f"host range [{inner}] has no end")
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        raise ValueError(f"host range [{inner}] has a step that is not a number") from None
    if step < 1:
        raise ValueError(f"host range [{inner}] needs a step of at least 1")
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and len(end) != width:
        raise ValueError(f"host range [{inner}]: begin and end must have the same width")
    letters = string.ascii_letters
    if len(begin) == 1 and len(end) == 1 and begin in letters and end in letters:
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise ValueError(f"host range [{inner}] begins after it ends")
        return tuple(letters[first : last + 1 : step])
    try:
        numbers = range(int(begin), int(end) + 1, step)
    except ValueError:
        raise ValueError(
            f"host range [{inner}] must run between two numbers or two letters"
        ) from None
    if not numbers:
        raise ValueError(f"host range [{inner}] begins after it ends")
    return _Padded(numbers, width)


class _Padded(Sequence[str]):
    """A range of numbers as zero-padded text, made one item at a time."""

    def __init__(self, numbers: range, width: int) -> None:
        self.numbers, self.width = numbers, width

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return str(self.numbers[index]).zfill(self.width)
