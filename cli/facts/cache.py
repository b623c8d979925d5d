"""The facts cache: each node's last facts and when it was last reached.

Kept in the user's state directory ($XDG_STATE_HOME/modelfleet, else
~/.local/state/modelfleet), one directory per inventory. Deleting it loses nothing but
the clocks: a node not reached now and never reached before is Unreachable, not Lost.
"""

from __future__ import annotations

from pathlib import Path

from cli.edges.files import state_dir, state_key
from cli.errors import InputError
from cli.facts.model import NodeFacts
from cli.facts.store import parse_facts, save_facts


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
            try:
                facts[path.stem] = parse_facts(path.read_text(encoding="utf-8"), str(path))
            except (InputError, OSError) as error:
                warnings.append(f"ignoring unreadable cache file {path}: {error}")
        return facts, warnings

    def save(self, facts: dict[str, NodeFacts]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, node_facts in facts.items():
            save_facts(self.directory, name, node_facts)
