"""What `up` writes into a node's overlay upper directory: its identity (hostname, machine
id, sshd's configuration and host key, root's authorized key, its spec) and its fake
hardware (tests/testfleet/hardware.py), with a digest that tells whether a node must be
restarted to see a change."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tests.testfleet.hardware import MACHINE_ID_NAMESPACE, NodeFile, hardware_files
from tests.testfleet.specs import FleetError, NodeSpec, node_address, node_index, node_spec_to_dict

SSH_PORT: Final = 22


def sshd_config(address: str) -> str:
    return f"""\
# Written by scripts/testfleet: this node's sshd, on its own loopback address only (the
# nodes share the host's network), with its own host key, keys only.
ListenAddress {address}:{SSH_PORT}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
# The benchmark opens a connection to every node at once, several times in a row.
MaxStartups 100:30:200
"""


def etc_hosts(name: str, address: str) -> str:
    return (
        f"127.0.0.1\tlocalhost\n{address}\t{name}\n"
        "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n"
    )


def node_files(
    name: str, spec: NodeSpec, host_key: bytes, host_key_pub: bytes, client_pub: bytes
) -> dict[str, NodeFile]:
    """Everything written into a node's upper directory before it boots: path → file."""
    index = node_index(name)
    address = node_address(index)
    files: dict[str, NodeFile] = {
        "etc/hostname": NodeFile(f"{name}\n".encode()),
        "etc/hosts": NodeFile(etc_hosts(name, address).encode()),
        "etc/machine-id": NodeFile(
            (uuid.uuid5(MACHINE_ID_NAMESPACE, name).hex + "\n").encode(), 0o444
        ),
        "etc/ssh/ssh_host_ed25519_key": NodeFile(host_key, 0o600),
        "etc/ssh/ssh_host_ed25519_key.pub": NodeFile(host_key_pub),
        "etc/ssh/sshd_config.d/modelfleet-testfleet.conf": NodeFile(sshd_config(address).encode()),
        "root/.ssh/authorized_keys": NodeFile(client_pub, 0o600),
        "etc/modelfleet-fake/spec.json": NodeFile(
            (json.dumps(node_spec_to_dict(spec), indent=2) + "\n").encode()
        ),
    }
    return files | hardware_files(name, spec)


# Paths of ours in an upper directory, removed before the files are written again (so a node
# whose spec lost its GPUs loses its nvidia-smi).
MANAGED_PATHS: Final = (
    "etc/modelfleet-fake",
    "usr/bin/nvidia-smi",
    "usr/local/lib/modelfleet-fake",
)


def files_digest(files: Mapping[str, NodeFile]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        item = files[path]
        digest.update(f"{path}\0{item.mode:o}\0{int(item.symlink)}\0".encode())
        digest.update(hashlib.sha256(item.content).digest())
    return digest.hexdigest()


def _make_parents(upper: Path, rootfs: Path, relative: Path) -> None:
    """Create the directories above `relative` in `upper` with the modes they have in the
    root filesystem: an overlay shows the upper directory's own mode and owner."""
    current = Path()
    for part in relative.parent.parts:
        current = current / part
        target = upper / current
        if target.is_dir() and not target.is_symlink():
            continue
        lower = rootfs / current
        if lower.is_symlink():
            raise FleetError(f"cannot write under /{current}: a symlink in the root filesystem")
        if target.exists() or target.is_symlink():
            target.unlink()  # an overlay whiteout or a stale file
        target.mkdir()
        if lower.is_dir():
            info = lower.stat()
            os.chown(target, info.st_uid, info.st_gid)
            target.chmod(info.st_mode & 0o7777)
        else:
            target.chmod(0o700 if current == Path("root/.ssh") else 0o755)


def install_node_files(upper: Path, rootfs: Path, files: Mapping[str, NodeFile]) -> None:
    for managed in MANAGED_PATHS:
        path = upper / managed
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for relative_text, item in sorted(files.items()):
        relative = Path(relative_text)
        target = upper / relative
        _make_parents(upper, rootfs, relative)
        if target.is_symlink() or target.exists():
            target.unlink()
        if item.symlink:
            target.symlink_to(item.content.decode())
            continue
        target.write_bytes(item.content)
        target.chmod(item.mode)
        os.chown(target, 0, 0)
