"""Write a plan of edits to the operator's inventory files as one verified transaction.

`cordon_node` and `uncordon_node` read the files as `load_inventory` does, plan the edit
(cli/inventory/cordon.py), write each file atomically (keeping its mode), reload the
inventory and restore every file if the host's cordon is not what was asked or another
host's changed. That transaction, `write_verified`, is also how `ctl onboard-node` adds a
host (cli/pki/addhost.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from cli.edges.files import atomic_write
from cli.edges.templating import render_template
from cli.errors import InputError, InputProblem
from cli.inventory.cordon import (
    DIR_FILE,
    KEY,
    FileEdit,
    InventoryTexts,
    Plan,
    origin_text,
    plan_cordon,
    plan_uncordon,
    reason_problem,
)
from cli.inventory.forms import SourceText, is_vaulted
from cli.inventory.load import Decrypt, inventory_base, load_inventory, read_sources, vars_texts
from cli.inventory.remove import Removal, plan_removal
from cli.inventory.schema import Host, Inventory, changed_hosts
from cli.inventory.splice import quote
from cli.inventory.tree import parse_sources
from cli.names import file_in


def read_texts(inventory: Path, node: str) -> InventoryTexts:
    """What `load_inventory` reads, as texts, and where `node`'s own variables go."""
    sources = read_sources(inventory)
    tree = parse_sources(sources)
    base = inventory_base(inventory)
    problems: list[InputProblem] = []
    group_vars = {
        name: tuple(vars_texts(base / "group_vars", name, problems)) for name in tree.groups
    }
    host_vars = tuple(vars_texts(base / "host_vars", node, problems))
    if problems:
        raise InputError(problems)
    home = base / "host_vars"
    vars_file, vars_dir = str(file_in(home, node, ".yml")), None
    for suffix in ("", ".yml", ".yaml", ".json"):
        path = file_in(home, node, suffix)
        if path.is_dir():
            vars_file, vars_dir = str(path / DIR_FILE), str(path)
            break
        if path.exists():
            vars_file = str(path)
            break
    return InventoryTexts(
        str(inventory), sources, group_vars, host_vars, vars_file, vars_dir, render_template
    )


def cordon_node(inventory: Path, node: str, reason: str, decrypt: Decrypt | None = None) -> str:
    """Cordon `node` in the inventory at `inventory`; returns the line that says what changed.

    `decrypt` opens vaulted files as the fleet's commands open them (load_inventory), so
    that what is edited is the cordon they see."""
    problem = reason_problem(reason)
    if problem is not None:
        raise InputError.single("--reason", None, (), problem)
    before = load_inventory(inventory, decrypt, render=render_template)
    host = before.find(node)
    _refuse_vaulted_cordon(host)
    plan = plan_cordon(read_texts(inventory, node), host, reason)
    return commit(plan, inventory, before, decrypt)


def uncordon_node(inventory: Path, node: str, decrypt: Decrypt | None = None) -> str:
    """Uncordon `node`; returns the line that says what changed (or that nothing had to)."""
    before = load_inventory(inventory, decrypt, render=render_template)
    host = before.find(node)
    _refuse_vaulted_cordon(host)
    plan = plan_uncordon(read_texts(inventory, node), host)
    return commit(plan, inventory, before, decrypt)


def plan_node_removal(inventory: Path, node: str, decrypt: Decrypt | None = None) -> Removal:
    """What taking `node` out of the inventory deletes (cli/inventory/remove.py); writes
    nothing."""
    host = load_inventory(inventory, decrypt, render=render_template).find(node)
    return plan_removal(read_texts(inventory, node), host)


def remove_node(inventory: Path, node: str, decrypt: Decrypt | None = None) -> Removal:
    """Take `node` out of the inventory: its own lines and host_vars go, as one verified
    transaction (every file restored unless, read again, `node` is gone and every other
    host is as it was)."""
    before = load_inventory(inventory, decrypt, render=render_template)
    texts = read_texts(inventory, before.find(node).name)
    removal = plan_removal(texts, before.host(node))
    first = removal.edits[0].file if removal.edits else str(inventory)

    def problem(after: Inventory) -> str | None:
        changed = changed_hosts(before, after, node)
        if node not in after.names() and not changed:
            return None
        what = f"changed {', '.join(changed)}" if changed else f"left {node} in it"
        return f"the edit {what}; the original files are restored"

    write_verified(
        removal.edits, missing=None, verify=_reloaded(inventory, decrypt, first, problem)
    )
    if texts.vars_dir is not None:
        with contextlib.suppress(OSError):  # not empty: files ctl does not read stay
            Path(texts.vars_dir).rmdir()
    return removal


def _refuse_vaulted_cordon(host: Host) -> None:
    """ctl splices plain text only: a cordon read from a vaulted file is the operator's."""
    origin = host.origin(KEY)
    if origin is None:
        return
    file, _ = origin
    text = Path(file).read_text(encoding="utf-8", errors="replace")
    if is_vaulted(SourceText(file, text)):
        raise InputError.single(
            file,
            None,
            (KEY,),
            f"the cordon of {host.name} is in this file, encrypted with ansible-vault:"
            " change it with ansible-vault edit",
        )


def commit(plan: Plan, inventory: Path, before: Inventory, decrypt: Decrypt | None = None) -> str:
    """Write the plan's files, reload, and restore them all unless the result is the plan's."""
    if not plan.edits:
        return plan.message

    verify = _reloaded(
        inventory, decrypt, plan.edits[0].file, lambda after: _mismatch(plan, before, after)
    )
    write_verified(plan.edits, missing=None, verify=verify)
    return plan.message


_Saved = tuple[Path, bytes | None, int | None]  # a file's bytes and mode (None: not there)


def write_verified(
    edits: Sequence[FileEdit], *, missing: str | None, verify: Callable[[], Inventory]
) -> Inventory:
    """Write `edits` as one transaction: returns what `verify` returns (the inventory read
    again); restores every file and removes every directory made if anything raises.

    Each file must still have the text its edit was planned from (`missing`: the text a
    file that is not there counts as). An edit whose `after` is None deletes its file.
    """
    saved: list[_Saved] = []
    made: list[Path] = []
    try:
        for edit in edits:
            path = Path(edit.file)
            current = path.read_bytes() if path.exists() else None
            text = missing if current is None else current.decode("utf-8")
            if text != edit.before:
                raise InputError.single(
                    edit.file, None, (), "changed while ctl was editing it: run ctl again"
                )
            mode = path.stat().st_mode & 0o7777 if current is not None else None
            saved.append((path, current, mode))
            if edit.after is None:
                path.unlink()
            else:
                made += _make_parents(path.parent)
                atomic_write(path, edit.after, mode)
        return verify()
    except BaseException:
        _restore(saved, made)
        raise


def _reloaded(
    inventory: Path,
    decrypt: Decrypt | None,
    file: str,
    problem: Callable[[Inventory], str | None],
) -> Callable[[], Inventory]:
    """The check `write_verified` runs once the files are written: the inventory read again
    from disk, refused (naming `file`) when `problem` finds one in it."""

    def verify() -> Inventory:
        try:
            after = load_inventory(inventory, decrypt, render=render_template)
        except InputError as error:
            raise noted(error, " (after the edit; the original files are restored)") from None
        why = problem(after)
        if why is not None:
            raise InputError.single(file, None, (), why)
        return after

    return verify


def noted(error: InputError, note: str) -> InputError:
    """`error`'s first problem with `note` added to its message."""
    first = error.problems[0]
    return InputError.single(first.file, first.line, first.path, f"{first.message}{note}")


def _mismatch(plan: Plan, before: Inventory, after: Inventory) -> str | None:
    host = after.host(plan.node)
    if (host.vars.cordoned, host.origin(KEY)) != (plan.expected, plan.origin):
        now = host.vars.cordoned
        state = "uncordoned" if now is None else f"cordoned: {quote(now)}"
        return (
            f"reloaded, {plan.node} is {state} ({origin_text(host.origin(KEY))}), not as planned;"
            " the original files are restored"
        )
    for old in before.hosts:
        if old.name != plan.node and after.host(old.name).vars.cordoned != old.vars.cordoned:
            return f"the edit changed the cordon of {old.name}; the original files are restored"
    return None


def _make_parents(directory: Path) -> list[Path]:
    missing = [path for path in (directory, *directory.parents) if not path.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    return missing  # deepest first: the order to remove them in


def _restore(saved: Sequence[_Saved], made_dirs: Sequence[Path]) -> None:
    for path, data, mode in reversed(saved):
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, data, mode)
    for directory in made_dirs:  # deepest first
        if directory.exists() and not any(directory.iterdir()):
            directory.rmdir()
