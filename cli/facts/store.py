"""Read and write a facts snapshot: a directory with one NAME.json per node (docs/facts.md)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from cli.edges.files import atomic_write
from cli.errors import InputError, InputProblem
from cli.facts.model import NodeFacts
from cli.names import file_in
from cli.regularfile import read_regular_file
from cli.schemaerrors import problems_from_validation
from cli.yamlsource import MAX_SOURCE_BYTES, decode_source, parse_yaml


def parse_facts(text: str, file: str) -> NodeFacts:
    """One facts file's node; InputError naming its lines and keys, never quoting what the
    file holds (a facts file is a machine's, and may be anything)."""
    # JSON is read through the YAML parser because it remembers lines for the errors.
    document = parse_yaml(text, file)
    if not isinstance(document.data, dict):
        raise InputError([document.problem((), "a facts file is a JSON object")])
    try:
        return NodeFacts.model_validate(document.data)
    except ValidationError as error:
        raise InputError(
            problems_from_validation(error, NodeFacts, document, quote=False)
        ) from None


def load_facts_dir(directory: Path) -> dict[str, NodeFacts]:
    """Every NAME.json in `directory`, keyed by NAME (the file name is the node's name)."""
    if not directory.is_dir():
        raise InputError.single(str(directory), None, (), "not a directory of facts files")
    facts: dict[str, NodeFacts] = {}
    problems: list[InputProblem] = []
    for path in sorted(directory.glob("*.json")):
        try:  # a regular file only, not through a symlink; no more than the parser takes
            data = read_regular_file(path, MAX_SOURCE_BYTES, follow_symlinks=False)
            facts[path.stem] = parse_facts(decode_source(data, str(path)), str(path))
        except InputError as error:
            problems += error.problems
        except OSError as error:
            problems.append(InputProblem(str(path), None, (), f"cannot read: {error.strerror}"))
    if problems:
        raise InputError(problems)
    return facts


def facts_json(facts: NodeFacts) -> str:
    return json.dumps(facts.model_dump(mode="json", exclude_none=False), indent=2) + "\n"


def save_facts(directory: Path, name: str, facts: NodeFacts, *, durable: bool = True) -> Path:
    """Write atomically, so a reader never sees half a file; not `durable`: not synced to
    disk either (cli/edges/files.py atomic_write), for the facts cache."""
    directory.mkdir(parents=True, exist_ok=True)
    target = file_in(directory, name, ".json")
    atomic_write(target, facts_json(facts), 0o600, durable=durable)
    return target
