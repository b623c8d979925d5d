"""The stand-in engines on the nodes, so that `ctl reconcile` on a fresh fleet starts
replicas that serve (docs/standin-engine.md).

tests/fakes/engine.py goes where ctl's command lines look for each engine: `vllm` and
`llama-server` in /usr/local/bin, SGLang's `sglang/launch_server.py` in python3's
dist-packages; with the real parsers' options it checks every command line against
(cli/engines/engine_flags), a config that loads a model in half a second, and a file at
every `file://` path the fleet's catalogs name (tests/fakes/standin_install.py). Installed
over SSH once the nodes answer, into what each node keeps across `down`/`up`; a node that
has them already is left alone (a digest file says which version it has).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path
from typing import Final

from tests.fakes.standin_install import INSTALL_ENGINES, INSTALL_FLAG_DATA, flag_data_tar
from tests.testfleet.specs import FleetError
from tests.testfleet.state import Fleet, Say

ENGINE: Final = Path(__file__).resolve().parents[1] / "fakes" / "engine.py"
DIGEST_FILE: Final = "/etc/modelfleet-fake/standin.sha256"

# Every replica unit of ctl's on a node killed and removed, with its records: what a
# benchmark leaves behind it, however it ended.
REMOVE_REPLICAS: Final = (
    "for unit in $(systemctl list-units 'modelfleet-*-rank*' --all --plain --no-legend"
    ' | awk \'{print $1}\'); do systemctl kill -s KILL "$unit"; systemctl stop "$unit";'
    " done; rm -f /etc/systemd/system/modelfleet-*-rank*.service /etc/modelfleet/shards/*"
    " /var/lib/modelfleet/shards/*; systemctl daemon-reload; systemctl reset-failed"
)


def standin_digest() -> str:
    """What the nodes should have: the engine, its flag data and its config."""
    digest = hashlib.sha256(ENGINE.read_bytes())
    digest.update(flag_data_tar())
    digest.update(INSTALL_ENGINES.encode())
    return digest.hexdigest()


def _ssh(fleet: Fleet, node: str, script: str, data: bytes = b"") -> bytes:
    done = subprocess.run(
        fleet.ssh_command(node, f"sh -c {shlex.quote(script)}"),
        input=data, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise FleetError(f"{node}: installing the stand-in engines failed: {why}")
    return done.stdout


def install_engines(fleet: Fleet, nodes: list[str], say: Say) -> list[str]:
    """The stand-ins on each of `nodes` that lacks them (or has another version): the
    names of the nodes that got them."""
    wanted = standin_digest()
    installed = []
    for node in nodes:
        have = _ssh(fleet, node, f"cat {DIGEST_FILE} 2>/dev/null || true").decode().strip()
        if have == wanted:
            continue
        _ssh(fleet, node, INSTALL_ENGINES, ENGINE.read_bytes())
        _ssh(fleet, node, INSTALL_FLAG_DATA, flag_data_tar())
        _ssh(fleet, node, f"echo {wanted} > {DIGEST_FILE}")
        installed.append(node)
    if installed:
        say(f"stand-in engines (vllm, sglang, llama-server) installed on {', '.join(installed)}")
    return installed
