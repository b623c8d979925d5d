"""Tokens by reference (docs/catalog.md): the catalog says where a model's token comes
from, and this reads it, on the operator's machine, when a step needs it.

An edge: it reads ctl's environment and files. The token it returns is a `SecretStr`,
whose repr and str are stars, so a token that reaches a log line, an exception, a
dataclass's repr or `--json` by mistake shows as `**********`; only `get_secret_value()`
gives it, for the one place it goes (the staging step's task environment, `no_log`). No
message here ever holds a token: each names the reference ($HF_TOKEN, the file) and what
is wrong with it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from cli.catalog.load import CatalogProfile, CatalogToken
from cli.errors import InputError, InputProblem, KeyPath

# A token is one line of about 40 characters; a file far bigger is not a token file, and
# is not read whole.
MAX_TOKEN_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ResolvedToken:
    """A model's token, resolved: its value (from an environment variable or a file), or
    the inventory variable the playbook reads it from (ctl never does). `description` is
    what to print; it never holds the value."""

    description: str  # "$HF_TOKEN", "file ~/.hf-token", "inventory variable hf_token"
    secret: SecretStr | None = None  # env and file
    inventory_variable: str | None = None  # var

    def __repr__(self) -> str:
        return f"ResolvedToken({self.description})"

    def __str__(self) -> str:
        return self.description


class _UnusableError(Exception):
    """Why a reference gives no token, in words safe to print."""


def resolve_token(token: CatalogToken, environ: Mapping[str, str]) -> ResolvedToken:
    """The token `token` refers to. A relative file is relative to the catalog file's
    directory. InputError (exit 2), at the reference's file, line and key, for a variable
    not set, a file missing, unreadable or open to others, or an empty token."""
    ref = token.ref
    description = ref.reference
    try:
        if ref.var is not None:
            return ResolvedToken(description, inventory_variable=ref.var)
        if ref.env is not None:
            value = environ.get(ref.env)
            if value is None:
                raise _UnusableError(f"{description} is not set in ctl's environment: export it")
            return ResolvedToken(description, secret=_checked(value, description))
        written = ref.file or ""  # the schema holds exactly one of env, file and var
        path = _path_of(written, token.file)
        shown = description if str(path) == written else f"{description} ({path})"
        line = _read_first_line(path, shown)
        return ResolvedToken(description, secret=_checked(line, f"{shown}: its first line"))
    except _UnusableError as why:
        raise InputError([_problem(token, str(why))]) from None


def resolve_tokens(
    profiles: Iterable[CatalogProfile], environ: Mapping[str, str]
) -> dict[str, ResolvedToken]:
    """Profile key (`model/profile`) → its token, for those of `profiles` that have one.
    Each reference is read once (a model's token serves all its profiles), and every
    one that gives no token is reported at once, before anything has been done."""
    resolved: dict[tuple[str, KeyPath], ResolvedToken] = {}
    problems: list[InputProblem] = []
    tokens: dict[str, ResolvedToken] = {}
    for profile in profiles:
        token = profile.token
        if token is None:
            continue
        site = (token.file, token.path)
        if site not in resolved:
            try:
                resolved[site] = resolve_token(token, environ)
            except InputError as error:
                problems += error.problems
                continue
        tokens[profile.key] = resolved[site]
    if problems:
        raise InputError(list(dict.fromkeys(problems)))
    return tokens


def _problem(token: CatalogToken, message: str) -> InputProblem:
    return InputProblem(token.file, token.line, token.path, f"{token.model}'s token: {message}")


def _path_of(written: str, catalog_file: str) -> Path:
    """`~` expanded; a relative path taken from the catalog file's directory, so a
    catalog and its token file can move together."""
    try:
        path = Path(written).expanduser()
    except RuntimeError:  # no HOME, and no passwd entry to find it in
        raise _UnusableError(f"file {written}: no home directory to expand ~ in") from None
    return path if path.is_absolute() else Path(catalog_file).parent / path


def _read_first_line(path: Path, shown: str) -> str:
    """The first line of the file at `path`. Refused, as ssh refuses a private key, when
    group or others may read or write it: a token others can read is no longer a secret,
    one others can write is no longer the operator's."""
    try:
        # O_NONBLOCK: a FIFO put where the file was must not hang ctl; a file ignores it.
        handle = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise _UnusableError(f"{shown}: no such file") from None
    except OSError as error:
        raise _UnusableError(f"{shown}: cannot read: {error.strerror}") from None
    try:
        status = os.fstat(handle)  # of the file opened, not of a path swapped since
        if not stat.S_ISREG(status.st_mode):
            raise _UnusableError(f"{shown}: not a regular file")
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077:
            raise _UnusableError(
                f"{shown}: open to group or others (mode {mode:04o}): chmod 600 it, as ssh"
                " asks of a private key"
            )
        data = b""
        while len(data) < MAX_TOKEN_FILE_BYTES:
            chunk = os.read(handle, MAX_TOKEN_FILE_BYTES - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        raise _UnusableError(f"{shown}: cannot read: {error.strerror}") from None
    finally:
        os.close(handle)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _UnusableError(f"{shown}: not UTF-8 text") from None
    return text.split("\n", 1)[0]


def _checked(value: str, shown: str) -> SecretStr:
    """`value` stripped, as a secret; refused empty, or holding a control character (a
    token goes into an HTTP header, where a newline would end it)."""
    value = value.strip()
    if not value:
        raise _UnusableError(f"{shown} is empty")
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        raise _UnusableError(f"{shown} holds a control character: a token is one line of text")
    return SecretStr(value)
