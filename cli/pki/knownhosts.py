"""Forget a host in a known_hosts text: its names go, every other byte stays (pure).

A known_hosts line is `[@marker] NAMES KEYTYPE KEY [COMMENT]`, NAMES comma-separated,
each a name, `[name]:port`, a pattern, or hashed (`|1|SALT|HMAC-SHA1(SALT, name)`, as
`ssh-keygen -H` writes them; sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"). A name equal to one
forgotten (hashed ones by their HMAC) is removed from its line; a line left with no name
is removed whole. Patterns (`*`, `?`, `!`) are never matched against: they may stand for
other hosts. Comments, blank lines, line endings and every other line are kept.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Collection
from dataclasses import dataclass

_LINE = re.compile(r"(\s*)(@\S+\s+)?(\S+)(\s.*)?", re.DOTALL)


@dataclass(frozen=True)
class Forgotten:
    text: str  # the known_hosts text without the names
    lines: tuple[int, ...]  # the numbers (from 1) of the lines changed or removed


def _hashed_match(entry: str, name: str) -> bool:
    parts = entry.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(mine, digest)


def _matches(entry: str, names: Collection[str]) -> bool:
    if entry.startswith("|"):
        return any(_hashed_match(entry, name) for name in names)
    return entry in names


def forget_hosts(text: str, names: Collection[str]) -> Forgotten:
    """`text` without `names` (as known_hosts writes a host: `addr`, `[addr]:port`)."""
    out: list[str] = []
    changed: list[int] = []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        words = body.split(maxsplit=1) if body.strip() else []
        if not words or words[0].startswith("#"):
            out.append(line)
            continue
        match = _LINE.fullmatch(body)
        if match is None:
            out.append(line)
            continue
        lead, marker, field, tail = (
            match.group(1),
            match.group(2) or "",
            match.group(3),
            match.group(4) or "",
        )
        entries = field.split(",")
        kept = [entry for entry in entries if not _matches(entry, names)]
        if len(kept) == len(entries):
            out.append(line)
            continue
        changed.append(number)
        if kept:
            out.append(f"{lead}{marker}{','.join(kept)}{tail}{ending}")
    return Forgotten("".join(out), tuple(changed))
