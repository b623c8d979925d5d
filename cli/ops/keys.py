"""Where ctl keeps the teams' keys (hashed), and the key made: the edges of `ctl keys`.

One file per inventory, `STATE/keys/INVENTORY-KEY.json`, 0600 in a 0700 directory: it
holds no key, only their SHA-256, but who may call which model at what rate is the
operator's business alone. The routers get it rendered at each route update
(cli/routes/deploy.py).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from cli.edges.files import atomic_write, state_key
from cli.errors import InputError
from cli.names import file_in
from cli.regularfile import read_regular_file
from cli.routes.keys import TeamKey, keys_document, parse_keys


def keys_file(state: Path, inventory: Path) -> Path:
    return file_in(state / "keys", state_key(inventory), ".json")


# Far above a real one: a few hundred bytes a key.
MAX_KEYS_BYTES = 16 * 1024 * 1024


def load_keys(path: Path) -> tuple[TeamKey, ...]:
    """The keys kept in `path`; none when there is no file yet. InputError when it cannot
    be read (a FIFO or a symlink is not: nothing in the state directory is followed) or is
    not a keys file, naming the file and the key that is wrong: never taken for no keys,
    which would lose them at the next write."""
    try:
        data = read_regular_file(path, MAX_KEYS_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return ()
    except OSError as error:
        why = error.strerror or type(error).__name__
        raise InputError.single(str(path), None, (), f"cannot read: {why}") from None
    if len(data) > MAX_KEYS_BYTES:
        raise InputError.single(str(path), None, (), "too big for a keys file")
    return parse_keys(data.decode("utf-8", errors="replace"), str(path))


def save_keys(path: Path, keys: tuple[TeamKey, ...]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    atomic_write(path, keys_document(keys) + "\n", 0o600)


def fresh_key_parts(taken: set[str]) -> tuple[str, str]:
    """A key id not in `taken`, and a secret: 32 random bytes, URL-safe base64."""
    while True:
        key_id = secrets.token_hex(4)
        if key_id not in taken:
            return key_id, secrets.token_urlsafe(32)
