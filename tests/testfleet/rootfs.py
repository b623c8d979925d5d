"""The root filesystem every node boots from, through its own overlay: Debian bookworm
minbase, debootstrapped once from the mirror apt uses here and cached in the state directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tests.testfleet.nspawn import log_tail
from tests.testfleet.specs import FleetError
from tests.testfleet.state import Say, rootfs_dir, rootfs_marker, write_text

MIRROR_ENV: Final = "MODELFLEET_TESTFLEET_MIRROR"
DEFAULT_MIRROR: Final = "http://deb.debian.org/debian"
SUITE: Final = "bookworm"
PACKAGES: Final = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "iproute2",
    "openssl",
)
# Units of the debootstrapped system that only make noise in a test node (apt downloads at
# random times would skew a benchmark).
QUIET_UNITS: Final = (
    "etc/systemd/system/timers.target.wants/apt-daily.timer",
    "etc/systemd/system/timers.target.wants/apt-daily-upgrade.timer",
    "etc/systemd/system/timers.target.wants/dpkg-db-backup.timer",
    "etc/systemd/system/timers.target.wants/e2scrub_all.timer",
    "etc/systemd/system/timers.target.wants/fstrim.timer",
    "etc/systemd/system/multi-user.target.wants/e2scrub_reap.service",
)


def apt_mirror(sources: Sequence[Path] | None = None) -> str:
    """The Debian mirror apt uses here (one-line and deb822 sources), for debootstrap."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    if sources is None:
        sources = [Path("/etc/apt/sources.list")]
        directory = Path("/etc/apt/sources.list.d")
        if directory.is_dir():
            sources += sorted(directory.iterdir())
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    key, colon, value = line.partition(":")
                    if colon and not line.startswith(("#", " ", "\t")):
                        fields[key.strip().lower()] = value.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and SUITE in fields.get("suites", "").split()
                    and fields.get("enabled", "yes").lower() != "no"
                ):
                    return fields.get("uris", DEFAULT_MIRROR).split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return DEFAULT_MIRROR


def ensure_rootfs(state: Path, say: Say, mirror: str | None = None) -> Path:
    """The cached root filesystem, debootstrapped on first use (a marker file says it is
    complete, so an interrupted debootstrap is started again)."""
    rootfs = rootfs_dir(state)
    marker = rootfs_marker(state)
    if marker.exists() and rootfs.is_dir():
        return rootfs
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise FleetError("debootstrap is missing (apt-get install debootstrap)")
    mirror = mirror or apt_mirror()
    partial = state / "rootfs.partial"
    for stale in (partial, rootfs):
        if stale.exists():
            shutil.rmtree(stale)
    log_path = state / "debootstrap.log"
    say(f"debootstrap {SUITE} from {mirror} into {rootfs} (about a minute; log: {log_path})")
    began = time.monotonic()
    with log_path.open("wb") as log:
        result = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(partial),
                mirror,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        raise FleetError(
            f"debootstrap failed with exit code {result.returncode}; {log_path} ends with:\n"
            + log_tail(log_path)
        )
    # The debootstrapped host keys would be shared by every node: each gets its own.
    for key in (partial / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    for unit in QUIET_UNITS:
        (partial / unit).unlink(missing_ok=True)
    (partial / "etc" / "machine-id").write_text("")
    partial.rename(rootfs)
    seconds = time.monotonic() - began
    write_text(
        marker,
        json.dumps(
            {"suite": SUITE, "mirror": mirror, "packages": PACKAGES, "seconds": round(seconds)}
        )
        + "\n",
    )
    say(f"root filesystem ready ({seconds:.0f} s)")
    return rootfs
