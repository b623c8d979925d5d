"""Take a host out of the inventory: its own lines go, every other byte stays (pure).

A host's lines, for `ctl offboard-node`:

- in a YAML source, each entry that names the host alone under a group's `hosts:`: the
  key's line, its value's lines (its variables), and the comment lines right after them
  indented under the key (cli/inventory/splice.py `remove_key(whole=True)`); a group left
  without hosts keeps its `hosts:` key, empty, which Ansible reads as no hosts;
- in an INI source, each host line that names the host alone: that one line;
- its host_vars: `host_vars/NODE`, `NODE.yml`, `NODE.yaml`, `NODE.json`, or the files of a
  `host_vars/NODE/` directory, which exist for that host only: deleted.

A host named only through a range (`hgx-[1:4]`, in YAML or INI) shares its lines with other
hosts and cannot be removed by deleting them: refused, naming the file and the line, as is
a host written in `hosts:` as a plain string. Before anything is written the edited texts
are read as `load_inventory` reads them: the host must be gone and every other host exactly
as before (cli/inventory/edit.py writes them, and checks again on disk).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cli.errors import InputError
from cli.inventory.cordon import Entry, FileEdit, InventoryTexts, locate
from cli.inventory.forms import SourceText, read_alone
from cli.inventory.load import inventory_from_texts
from cli.inventory.schema import Host, changed_hosts
from cli.inventory.splice import remove_key


@dataclass(frozen=True)
class Removal:
    node: str
    edits: tuple[FileEdit, ...]
    lines: tuple[str, ...]  # each place that goes, for the operator: `hosts.yml:12-15`


def plan_removal(texts: InventoryTexts, host: Host) -> Removal:
    """The edits that take `host` out of the inventory read from `texts`."""
    node = host.name
    located = locate(texts, node, host.groups)
    for entry in located.entries:
        if not entry.alone:
            where = entry.file if entry.line is None else f"{entry.file}:{entry.line}"
            if entry.line is None and entry.path is not None:
                where = f"{entry.file} ({'.'.join(entry.path)})"
            raise InputError.single(
                where,
                None,
                (),
                f"{node} is named here through {entry.pattern!r}, which names other hosts too:"
                " ctl removes a host by deleting its own lines; write the other hosts of the"
                f" range out by hand (or narrow it), then run ctl offboard-node {node} again",
            )
    texts_now = {source.file: source.text for source in texts.sources}
    said: list[str] = []
    for entry in reversed(located.entries):  # an INI file's later lines first: lines stay put
        texts_now[entry.file], place = _without(texts_now[entry.file], entry)
        said.insert(0, place)
    edits = [
        FileEdit(source.file, source.text, texts_now[source.file])
        for source in texts.sources
        if texts_now[source.file] != source.text
    ]
    for vars_file in texts.host_vars:
        edits.append(FileEdit(vars_file.file, vars_file.text, None))
        said.append(f"{vars_file.file} (deleted)")
    _check(texts, texts_now, node)
    return Removal(node, tuple(edits), tuple(said))


def _without(text: str, entry: Entry) -> tuple[str, str]:
    """`text` without the entry's lines, and where they were."""
    if entry.line is not None:  # an INI host line
        lines = text.splitlines(keepends=True)
        del lines[entry.line - 1]
        return "".join(lines), f"{entry.file}:{entry.line}"
    assert entry.path is not None
    *parent, key = entry.path
    new = remove_key(text, entry.file, parent, key=key, whole=True)
    first = _first_changed_line(text, new)
    gone = text.count("\n") - new.count("\n")
    span = str(first) if gone <= 1 else f"{first}-{first + gone - 1}"
    return new, f"{entry.file}:{span}"


def _first_changed_line(old: str, new: str) -> int:
    at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), len(new))
    return old.count("\n", 0, old.rfind("\n", 0, at) + 1) + 1


def _check(texts: InventoryTexts, sources: Mapping[str, str], node: str) -> None:
    """The edited texts, read as the loader reads them: `node` gone, the rest unchanged
    (other hosts' host_vars are not read here, nor changed; the check on disk reads all)."""
    before = inventory_from_texts(texts.source, texts.sources, texts.group_vars, {}, texts.render)
    files = [SourceText(s.file, sources[s.file]) for s in texts.sources]
    first = texts.sources[0].file if texts.sources else texts.source
    for source in files:  # each must still read in the form it was written in
        read_alone(source)
    after = inventory_from_texts(texts.source, files, texts.group_vars, {}, texts.render)
    if node in after.names():
        raise InputError.single(
            first, None, (), f"{node} is still in the inventory once its lines are removed"
            " (named where ctl does not look): remove it by hand"
        )  # fmt: skip
    changed = changed_hosts(before, after, node)
    if changed:
        raise InputError.single(
            first, None, (), f"removing {node} would change {', '.join(changed)}: remove it by hand"
        )
