"""One inventory source as the Ansible plugin that would read it reads it: YAML (or JSON),
INI (cli/inventory/ini.py), or refused where Ansible would run or decrypt it (a script, a
TOML file, a plugin configuration, a file encrypted whole with ansible-vault); and the YAML
parse the variables files share.
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from cli.errors import InputError, InputProblem
from cli.inventory.ini import IniError, IniOp, parse_ini
from cli.yamlsource import YamlDocument, parse_yaml, yaml_kind

YAML_EXTENSIONS = (".yml", ".yaml", ".json")
VAULT_HEADER = "$ANSIBLE_VAULT;"  # a file ansible-vault encrypted whole


@dataclass(frozen=True)
class SourceText:
    """One file's text, and the name errors call it by."""

    file: str
    text: str


Form = Literal["yaml", "ini", "none"]


@dataclass(frozen=True)
class Reading:
    """One inventory source as the Ansible plugin that would read it reads it."""

    form: Form  # none: nothing to read, or refused (problems say why)
    doc: YamlDocument | None = None  # the YAML form's document
    ops: tuple[IniOp, ...] = ()  # the INI form's declarations
    problems: tuple[InputProblem, ...] = ()


def read_form(source: SourceText, known: Container[str]) -> Reading:
    """Which of Ansible's inventory plugins reads `source`, and what it reads there.

    ansible-core tries its enabled plugins in order (INVENTORY_ENABLED: host_list, script,
    auto, yaml, ini, toml) and keeps the first that parses the source, discarding what a
    failed one added (InventoryManager.parse_source). On a file, by each plugin's
    verify_file and parse:

    - script: a file that starts with `#!` or is executable; refused here.
    - auto, then yaml: a .yml, .yaml or .json file or one without extension; yaml declines
      an empty document, one that is not a mapping, and a `plugin:` file (auto's: refused
      here). A YAML mapping stays YAML: our stricter checks of it are errors, not a reason
      to read it as INI.
    - ini: any other file but .toml, and every file yaml declined (a `hosts` file in INI
      is such a file: YAML reads `[gpu]` as a list).
    - toml: a .toml file; refused here.

    When neither yaml nor ini reads a file, the error is the one of the form that read
    further into it; when both stop on the same line, both are said in one message.
    `known`: the groups earlier sources declared.
    """
    file, suffix = source.file, PurePath(source.file).suffix
    if suffix == ".toml":
        return _refused(file, None, "a TOML inventory is not read")
    if source.text.startswith("#!"):
        return _refused(file, 1, "an inventory script is not read")
    if is_vaulted(source):
        message = (
            "encrypted with ansible-vault: ctl reads it given the password"
            " (--vault-password-file, ANSIBLE_VAULT_PASSWORD_FILE), and never edits it"
        )
        return Reading("none", problems=(InputProblem(file, 1, (), message),))
    if suffix and suffix not in YAML_EXTENSIONS:
        return _read_ini(source, known)
    problems: list[InputProblem] = []
    doc = parse_source(source, problems)
    if doc is not None and isinstance(doc.data, dict):
        if doc.data.get("plugin"):
            message = (
                "an inventory plugin configuration is not read: ctl reads static inventories only"
            )
            return Reading("none", problems=(doc.problem(("plugin",), message),))
        return Reading("yaml", doc)
    if any(not problem.message.startswith("invalid YAML") for problem in problems):
        return Reading("none", problems=tuple(problems))  # YAML, but beyond our bounds
    ini = _read_ini(source, known)
    if doc is not None and doc.data is None and not (ini.ops and not ini.problems):
        # Nothing but comments (or `---`): no hosts in either form, and no form to edit it
        # in (Ansible warns it read nothing).
        return Reading("none")
    if not ini.problems:
        return ini
    if doc is not None:
        kind = yaml_kind(doc.data)
        problems = [doc.problem((), f"an inventory is a mapping of groups (all: ...), not {kind}")]
    as_yaml, (as_ini,) = problems[0], ini.problems
    if (as_yaml.line or 0) > (as_ini.line or 0):
        return Reading("none", problems=tuple(problems))
    if (as_ini.line or 0) > (as_yaml.line or 0):
        return ini
    # The same line: the form the file's name suggests first (a name without extension is
    # most often an INI `hosts` file), the other's reading after it.
    if suffix:
        message = f"{as_yaml.message} (read as INI: {as_ini.message})"
    else:
        message = f"{as_ini.message} (read as YAML: {as_yaml.message})"
    return Reading("none", problems=(InputProblem(file, as_ini.line, (), message),))


class _EveryGroup:
    """Every group name: a source's form judged alone, without the sources before it."""

    def __contains__(self, name: object) -> bool:
        return True


def read_alone(source: SourceText) -> Reading:
    """`source` read as Ansible would, without the sources before it (for an inventory
    already read whole: editors splice YAML and INI differently)."""
    return read_form(source, _EveryGroup())


def source_form(source: SourceText) -> Form:
    """The form Ansible reads `source` in."""
    return read_alone(source).form


def _read_ini(source: SourceText, known: Container[str]) -> Reading:
    try:
        return Reading("ini", ops=parse_ini(source.text, known))
    except IniError as error:
        return Reading("none", problems=(InputProblem(source.file, error.line, (), error.message),))


def _refused(file: str, line: int | None, what: str) -> Reading:
    message = (
        f"{what}: ctl reads Ansible's YAML and INI forms"
        " (save its hosts with: ansible-inventory -i FILE --list -y)"
    )
    return Reading("none", problems=(InputProblem(file, line, (), message),))


def is_vaulted(source: SourceText) -> bool:
    """Encrypted whole by ansible-vault (its header on the first line)."""
    return source.text.lstrip().startswith(VAULT_HEADER)


def parse_source(source: SourceText, problems: list[InputProblem]) -> YamlDocument | None:
    try:
        return parse_yaml(source.text, source.file)
    except InputError as error:
        if source.file.endswith(".json"):
            try:
                return YamlDocument(source.file, json.loads(source.text), {})
            except ValueError:
                pass
        problems.extend(error.problems)
        return None
