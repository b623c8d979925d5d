"""Two ways a node dies without a clean shutdown, and their cures, for the router's tests:

- `cut` / `heal`: the node vanishes from the network, as one that lost power or its switch
  port: iptables drops every packet to or from its address on the loopback (where the
  nodes live, sharing the host's network), both ways, so a connection to it times out
  rather than being refused. Only the loopback interface and the node's own 127.0.1.N
  address are ever matched: nothing else on the machine is touched.
- `freeze` / `thaw`: the node hangs, as one whose engine is wedged: its cgroup is frozen
  (cgroup v2 `cgroup.freeze`), so the kernel still accepts connections on its listening
  sockets but no process of the node ever answers them.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Final

from tests.testfleet.cgroups import node_cgroups
from tests.testfleet.nspawn import running_pid
from tests.testfleet.specs import FleetError
from tests.testfleet.state import Fleet, Say, load_fleet, locked, print_say, state_dir

LOOPBACK: Final = "lo"
FREEZE_TIMEOUT: Final = 10.0  # seconds for the kernel to say the cgroup is frozen


def cut_rules(address: str, name: str) -> list[list[str]]:
    """The iptables rules (after -I/-C/-D INPUT) that cut ADDRESS off, both ways: every
    packet between two processes on the host passes INPUT on the loopback once."""
    tag = ["-m", "comment", "--comment", f"modelfleet-testfleet cut {name}"]
    return [
        ["-i", LOOPBACK, "-s", f"{address}/32", "-j", "DROP", *tag],
        ["-i", LOOPBACK, "-d", f"{address}/32", "-j", "DROP", *tag],
    ]


def _fleet(state: Path) -> Fleet:
    fleet = load_fleet(state)
    if fleet is None:
        raise FleetError(f"no fleet in {state}: run `testfleet up N` first")
    return fleet


def _iptables(action: str, rule: list[str]) -> subprocess.CompletedProcess[str]:
    program = shutil.which("iptables")
    if program is None:
        raise FleetError("iptables is not installed: apt-get install iptables")
    return subprocess.run(
        [program, "-w", action, "INPUT", *rule], capture_output=True, text=True, check=False
    )


def is_cut(address: str, name: str) -> bool:
    return all(_iptables("-C", rule).returncode == 0 for rule in cut_rules(address, name))


def cut(name: str, *, state: Path | None = None, say: Say = print_say) -> None:
    """Drop every packet to and from NAME's address (idempotent)."""
    state = state or state_dir()
    with locked(state, say):
        address = _fleet(state).node(name).address
        for rule in cut_rules(address, name):
            if _iptables("-C", rule).returncode != 0:
                done = _iptables("-I", rule)
                if done.returncode != 0:
                    raise FleetError(f"iptables could not cut {name}: {done.stderr.strip()}")
        say(f"{name} ({address}) cut off: packets to and from it are dropped")


def remove_cut(address: str, name: str) -> bool:
    """Take `cut`'s rules out, if there are any (no lock: `down` holds it); whether there were."""
    if shutil.which("iptables") is None:
        return False  # nothing can have been cut
    found = False
    for rule in cut_rules(address, name):
        while _iptables("-C", rule).returncode == 0:
            found = True
            done = _iptables("-D", rule)
            if done.returncode != 0:
                raise FleetError(f"iptables could not heal {name}: {done.stderr.strip()}")
    return found


def heal(name: str, *, state: Path | None = None, say: Say = print_say) -> None:
    """Take `cut`'s rules out again (idempotent)."""
    state = state or state_dir()
    with locked(state, say):
        address = _fleet(state).node(name).address
        remove_cut(address, name)
        say(f"{name} ({address}) on the network again")


def _unified_cgroup(state: Path, name: str) -> Path:
    for cgroup in node_cgroups(state, name):
        if (cgroup / "cgroup.freeze").exists():
            return cgroup
    raise FleetError(f"{name} has no cgroup v2 cgroup to freeze: is it running?")


def is_frozen(state: Path, name: str) -> bool:
    events = (_unified_cgroup(state, name) / "cgroup.events").read_text()
    return "frozen 1" in events.splitlines()


def _set_frozen(name: str, frozen: bool, state: Path | None, say: Say) -> None:
    state = state or state_dir()
    with locked(state, say):
        _fleet(state).node(name)
        if running_pid(state, name) is None:
            raise FleetError(f"{name} is not running")
        cgroup = _unified_cgroup(state, name)
        (cgroup / "cgroup.freeze").write_text("1" if frozen else "0")
        deadline = time.monotonic() + FREEZE_TIMEOUT
        while is_frozen(state, name) != frozen:
            if time.monotonic() > deadline:
                raise FleetError(f"{cgroup}: still {'thawed' if frozen else 'frozen'}")
            time.sleep(0.05)
    say(f"{name} {'frozen: it accepts connections and answers none' if frozen else 'thawed'}")


def freeze(name: str, *, state: Path | None = None, say: Say = print_say) -> None:
    _set_frozen(name, True, state, say)


def thaw(name: str, *, state: Path | None = None, say: Say = print_say) -> None:
    _set_frozen(name, False, state, say)
