"""The facts cache: each node's last facts and when it was last reached.

Kept in the user's state directory ($XDG_STATE_HOME/modelfleet, else
~/.local/state/modelfleet), one directory per inventory. Deleting it loses nothing but
the clocks: a node not reached now and never reached before is Unreachable, not Lost.

ctl writes it (atomically, 0600) and reads it back with the JSON parser alone: not the
YAML parser that reads an operator's snapshot for its line numbers, which took 64 s and
2.5 GB for a 70 MB file. A file that is too big, not JSON, or not facts, and anything
that is no regular file (a FIFO, a symlink: cli/regularfile.py) is ignored with a warning:
what it held, the next gather learns again. A node's file is named through cli/names.py.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from cli.edges.files import state_dir, state_key
from cli.facts.model import NodeFacts
from cli.facts.store import save_facts
from cli.regularfile import read_regular_file

# Far above what one node's facts take (1,024 GPUs come to about 1 MiB).
MAX_CACHE_FILE_BYTES = 16 * 1024 * 1024


class FactsCache:
    def __init__(self, inventory: Path, root: Path | None = None) -> None:
        self.directory = (root or state_dir()) / "facts" / state_key(inventory)

    def load(self) -> tuple[dict[str, NodeFacts], list[str]]:
        """The cached facts, and a warning per file that could not be read (it is ignored:
        the cache only ever holds what the next gather can learn again)."""
        facts: dict[str, NodeFacts] = {}
        warnings: list[str] = []
        if not self.directory.is_dir():
            return facts, warnings
        for path in sorted(self.directory.glob("*.json")):
            why = None
            try:
                data = read_regular_file(path, MAX_CACHE_FILE_BYTES, follow_symlinks=False)
                why = _unreadable(path.lstat().st_size if len(data) > MAX_CACHE_FILE_BYTES else 0)
                if why is None:
                    facts[path.stem] = NodeFacts.model_validate_json(data)
            except OSError as error:
                why = error.strerror or str(error)
            except ValidationError as error:
                why = f"not facts: {_first_error(error)}"
            if why is not None:
                warnings.append(f"ignoring unreadable cache file {path}: {why}")
        return facts, warnings

    def save(self, facts: dict[str, NodeFacts]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, node_facts in facts.items():
            # Not synced: a file a power loss takes is read as unreadable and ignored, and
            # the next gather learns it again; only its clocks start afresh (docs/gathering.md).
            save_facts(self.directory, name, node_facts, durable=False)


def _unreadable(size: int) -> str | None:
    if size > MAX_CACHE_FILE_BYTES:
        return f"{size} bytes, more than the {MAX_CACHE_FILE_BYTES} a node's facts can take"
    return None


def _first_error(error: ValidationError) -> str:
    """pydantic's first error in one line: where, and what (its JSON errors included)."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
