"""Names and text from outside: what a control character is, and the one way a name (a
host, a model, a replica, a unit) becomes a path. Pure.

An inventory host named `../../../../ca/revoked` once had `ctl nodes` write its facts cache
over the CA's revocation list: a name joined to a directory may name any file. Every path
ctl makes from such a name goes through `file_in`, which refuses a name that could leave
its directory or break the file it is written into (`/`, `.` or `..` alone, NUL and the
other control characters) and one longer than a file name can be, and then checks that
the path it made has `directory` as its parent.

Control characters are one set for every check that refuses them and for the terminal,
which escapes them (cli/ui/safe.py): the C0 set (NUL, TAB, LF, VT, FF, CR, ESC, ...),
DEL, the C1 set (NEL, U+0085, and the 8-bit CSI), the line and paragraph separators U+2028
and U+2029 (Python's `str.splitlines`, and so any reader of a unit file or an inventory
line, ends a line at most of these), and the bidirectional overrides and isolates that
reorder what is shown ("Trojan Source").
"""

from __future__ import annotations

import posixpath
import unicodedata
import urllib.parse
from pathlib import PurePath
from typing import TypeVar

# NAME_MAX of Linux's file systems, and systemd's longest unit name (UNIT_NAME_MAX, 256
# with its NUL).
MAX_FILE_NAME_BYTES = 255
# What atomic writes add to a file's name for their temporary file: ctl's own
# (cli/edges/files.py: `.NAME.` and 8 random characters and `.tmp`) and Ansible's copy on
# the node (`.ansible_tmp`, 8 random characters, then NAME): the longer of the two.
TEMPORARY_NAME_EXTRA = len(".ansible_tmp") + 8

P = TypeVar("P", bound=PurePath)

# The Unicode categories that are never text as written: control characters (Cc: C0, DEL,
# C1), format characters (Cf: the bidirectional overrides and isolates, zero-width and tag
# characters), lone surrogates (Cs), and the line and paragraph separators (Zl, Zp).
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class UnsafeNameError(ValueError):
    """A name that cannot be a file name in its directory; says why, never quoting it whole."""


def is_control(char: str) -> bool:
    """A character of the categories in UNSAFE_CATEGORIES (C0, DEL, C1, the bidirectional
    and zero-width format characters, U+2028 and U+2029 among them)."""
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def control_character(text: str) -> str | None:
    """The first control character in `text`, as `U+000D`; None when there is none."""
    if text.isascii() and text.isprintable():
        return None
    for char in text:
        if is_control(char):
            return f"U+{ord(char):04X}"
    return None


def file_name_problem(name: str) -> str | None:
    """Why `name` cannot be one file's name in a directory; None when it can."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is '{name}', a directory, not a file"
    if "/" in name:
        return "has a '/', which would put it in another directory"
    control = control_character(name)
    if control is not None:
        return f"has a control character ({control})"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_NAME_BYTES - TEMPORARY_NAME_EXTRA:
        return (
            f"is {size} bytes long: a file name (and its temporary copy while written) has"
            f" at most {MAX_FILE_NAME_BYTES}"
        )
    return None


def file_in(directory: P, name: str, suffix: str = "") -> P:
    """`directory / (name + suffix)`, proven to be a file directly inside `directory`.

    Raises UnsafeNameError naming the problem (the name shown without its control
    characters, and cut short)."""
    whole = name + suffix
    problem = file_name_problem(whole)
    if problem is None:
        path = directory / whole
        if path.parent == directory and path.name == whole:
            return path
        problem = "does not stay inside its directory"
    raise UnsafeNameError(f"the name {shown_name(name)} {problem}")


def shown_name(name: str, limit: int = 60) -> str:
    """`name` quoted for an error: control characters as `?`, at most `limit` characters."""
    printable = "".join("?" if is_control(char) else char for char in name[:limit])
    return repr(printable + ("…" if len(name) > limit else ""))


def staged_file_name(source: str) -> str:
    """The name an `http(s)://` source's one file gets in its store directory: the last
    part of the URL's path (`model` when there is none). The catalog refuses a source
    whose name could not be a file's (`https://host/a/..`: cli/names.py)."""
    return posixpath.basename(urllib.parse.urlsplit(source).path) or "model"
