#!/usr/bin/python
"""Ansible module: put a host's files in place, or remove them, all in one module run.

ansible.builtin.copy costs several round trips a file (stat, transfer, copy), and a node
gets three files a shard; this writes them all in one, each atomically and only when its
content, mode or owner differs, so a second run changes nothing. The contents may carry
secrets (engine environments): they are no_log, as copy's are. Stopping removes the same
three files a shard, again in one run rather than a `file` task per path. The router's
master key goes through it too: a new file here is never readable by others, not even
for the moment copy leaves it at the umask's mode.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule  # type: ignore[import-untyped]

DOCUMENTATION = r"""
module: modelfleet_files
short_description: Write many small files, each atomically and only if it differs
description:
  - Each file is written to a temporary file in its directory, then renamed over the
    destination, only when its content differs; owner, group and mode are then set if
    they differ. Missing parent directories are made (root, 0755).
options:
  files:
    description: >-
      The files, as path, content and mode (a number, or an octal string); an
      environment file may get lines added, NAME="value", for each of environment_names
      with environment_value and each of secret_names with secret_value (no_log), none
      for an empty value.
    type: list
    elements: dict
    default: []
  absent:
    description: Files to remove; one that is already gone is not an error.
    type: list
    elements: path
    default: []
  owner:
    description: Owner of every file.
    type: str
    default: root
  group:
    description: Group of every file.
    type: str
    default: root
"""

RETURN = r"""
written:
  description: The files whose content was (or in check mode would be) written.
  type: list
  returned: always
removed:
  description: The files that were (or in check mode would be) removed.
  type: list
  returned: always
"""

DIRECTORY_MODE = 0o755


def _write(path: Path, content: bytes, mode: int, uid: int, gid: int) -> None:
    """Owner and mode are set before the first byte and the rename is the only change a
    reader can see: no moment where a secret is readable by others or half-written."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=".modelfleet-")
    temporary = Path(name)
    try:
        os.fchown(handle, uid, gid)
        os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as output:
            output.write(content)
            output.flush()
            os.fsync(output.fileno())
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def _mode(module: AnsibleModule, path: Path, given: object) -> int:
    """As copy takes it: a number, or an octal string ("0600")."""
    if isinstance(given, int) and not isinstance(given, bool):
        return given
    try:
        return int(str(given), 8)
    except ValueError:
        module.fail_json(msg=f"{path}: mode {given!r} is neither a number nor octal")
        raise


def _environment_lines(entry: dict[str, Any]) -> str:
    """`NAME="value"` lines, quoted as cli/shards/units.py environment_file quotes them, for
    each of environment_names (environment_value) and secret_names (secret_value); none
    for an empty value."""
    lines: list[str] = []
    for names, value in (
        (entry.get("environment_names") or [], str(entry.get("environment_value") or "")),
        (entry.get("secret_names") or [], str(entry.get("secret_value") or "")),
    ):
        if value:
            quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            lines += [f'{name}="{quoted}"\n' for name in names]
    return "".join(lines)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "path", "required": True},
                    "content": {"type": "str", "required": True, "no_log": True},
                    "mode": {"type": "raw", "required": True},
                    "keep_existing": {"type": "bool", "default": False},
                    "environment_names": {"type": "list", "elements": "str", "default": []},
                    "environment_value": {"type": "str", "default": ""},
                    "secret_names": {"type": "list", "elements": "str", "default": []},
                    "secret_value": {"type": "str", "default": "", "no_log": True},
                },
            },
            "absent": {"type": "list", "elements": "path", "default": []},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    owner, group = module.params["owner"], module.params["group"]
    try:
        uid, gid = pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError as missing:
        module.fail_json(msg=f"no such user or group on this host: {missing}")
    changed = False
    written: list[str] = []
    # Every mode is read before anything is written: bad input changes nothing.
    wanted = []
    for entry in module.params["files"]:
        path = Path(entry["path"])
        mode = _mode(module, path, entry["mode"])
        content = entry["content"] + _environment_lines(entry)
        wanted.append((path, content.encode("utf-8"), mode, entry["keep_existing"]))
    for path, content, mode, keep_existing in wanted:
        if not path.parent.is_dir():
            changed = True
            if not module.check_mode:
                path.parent.mkdir(DIRECTORY_MODE, parents=True)
        same = path.exists() and (keep_existing or path.read_bytes() == content)
        if not same:
            changed = True
            written.append(str(path))
            if not module.check_mode:
                _write(path, content, mode, uid, gid)
            continue
        attributes = {
            "path": str(path), "owner": owner, "group": group, "mode": mode,
            "attributes": None, "secontext": [None, None, None],
        }  # fmt: skip
        changed = module.set_fs_attributes_if_different(attributes, changed)
    removed = [path for path in module.params["absent"] if os.path.lexists(path)]
    if not module.check_mode:
        for path in removed:
            try:
                Path(path).unlink(missing_ok=True)
            except OSError as error:
                module.fail_json(msg=f"{path}: cannot remove: {error.strerror}")
    module.exit_json(changed=changed or bool(removed), written=written, removed=removed)


if __name__ == "__main__":
    main()
