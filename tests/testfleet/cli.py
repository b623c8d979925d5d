"""`scripts/testfleet COMMAND`: the command line over the fleet's operations."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tests.testfleet.defaults import default_spec
from tests.testfleet.engines import install_engines
from tests.testfleet.faults import cut, freeze, heal, thaw
from tests.testfleet.fleet import clean, down, fleet_or_error, start, status, stop, up
from tests.testfleet.nspawn import check_host
from tests.testfleet.router import prepare_router, requests_during
from tests.testfleet.specs import (
    MAX_NODES,
    FleetError,
    SpecError,
    node_name,
    specs_from_file,
    specs_yaml,
)
from tests.testfleet.state import print_say, state_dir


def _print_status(state: Path, out: TextIO) -> int:
    rows = status(state)
    if not rows:
        out.write(f"no fleet in {state}\n")
        return 0
    for node, node_state_ in rows:
        out.write(f"{node.name:<8} {node.address:<12} {node_state_:<8} {node.spec.summary()}\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testfleet",
        description="A local fleet of systemd-nspawn Debian nodes with fake GPUs, memory and"
        " InfiniBand, for trying and testing ctl (docs/testfleet.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="boot node-1..node-N (idempotent)")
    up_parser.add_argument("count", type=int, metavar="N")
    up_parser.add_argument("--specs", type=Path, metavar="FILE", help="node specs (YAML)")
    up_parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="for each node's sshd to answer"
    )
    up_parser.add_argument("--mirror", help="Debian mirror for debootstrap (default: apt's)")
    up_parser.add_argument(
        "--no-engines",
        action="store_true",
        help="leave out the stand-in engines (tests/fakes/engine.py) up installs on each node",
    )
    up_parser.add_argument(
        "--router",
        metavar="NODE",
        help="put NODE in the inventory group `routers`: ctl reconcile installs the router there",
    )
    commands.add_parser("status", help="one line per node")
    commands.add_parser("down", help="power every node off")
    for name, text in (("stop", "power one node off"), ("start", "boot one node")):
        node_parser = commands.add_parser(name, help=text)
        node_parser.add_argument("node", metavar="NODE")
    for name, text in (
        ("cut", "drop every packet to and from one node (it vanishes from the network)"),
        ("heal", "undo cut"),
        ("freeze", "freeze one node's cgroup (it accepts connections, answers none)"),
        ("thaw", "undo freeze"),
    ):
        node_parser = commands.add_parser(name, help=text)
        node_parser.add_argument("node", metavar="NODE")
    specs_parser = commands.add_parser("specs", help="print the default specs of N nodes")
    specs_parser.add_argument("count", type=int, metavar="N")
    commands.add_parser("check", help="can this machine run the fleet?")
    ssh_parser = commands.add_parser("ssh", help="ssh to a node as root")
    ssh_parser.add_argument("node", metavar="NODE")
    ssh_parser.add_argument("remote", nargs=argparse.REMAINDER, metavar="COMMAND")
    requests_parser = commands.add_parser(
        "requests", help="ask the router for MODELs while COMMAND runs; count what failed"
    )
    requests_parser.add_argument("words", nargs=argparse.REMAINDER, metavar="MODEL... -- COMMAND")
    clean_parser = commands.add_parser("clean", help="forget nodes, keys and inventory")
    clean_parser.add_argument("--all", action="store_true", help="the cached rootfs too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    state = state_dir()
    try:
        if arguments.command == "up":
            specs = specs_from_file(arguments.specs) if arguments.specs else None
            result = up(
                arguments.count,
                specs,
                state=state,
                timeout=arguments.timeout,
                mirror=arguments.mirror,
                router=arguments.router,
            )
            if not arguments.no_engines:
                names = [node.name for node in result.fleet.nodes]
                install_engines(result.fleet, names, print_say)
            if arguments.router:
                prepare_router(result.fleet, arguments.router)
            print(f"inventory: {result.fleet.inventory}")
            print(f"key:       {result.fleet.client_key}")
            return _print_status(state, sys.stdout)
        if arguments.command == "status":
            return _print_status(state, sys.stdout)
        if arguments.command == "down":
            down(state=state)
            return 0
        if arguments.command == "stop":
            stop(arguments.node, state=state)
            return 0
        if arguments.command == "start":
            start(arguments.node, state=state)
            return 0
        faults = {"cut": cut, "heal": heal, "freeze": freeze, "thaw": thaw}
        if arguments.command in faults:
            faults[arguments.command](arguments.node, state=state)
            return 0
        if arguments.command == "specs":
            if not 1 <= arguments.count <= MAX_NODES:
                raise FleetError(f"a fleet has 1 to {MAX_NODES} nodes")
            sys.stdout.write(
                specs_yaml({node_name(i): default_spec(i) for i in range(1, arguments.count + 1)})
            )
            return 0
        if arguments.command == "check":
            problem = check_host()
            print(f"cannot run the fleet: {problem}" if problem else "ok")
            return 1 if problem else 0
        if arguments.command == "ssh":
            command = fleet_or_error(state).ssh_command(arguments.node, *arguments.remote)
            os.execvp(command[0], command)
        if arguments.command == "requests":
            words: list[str] = arguments.words
            split = words.index("--") if "--" in words else len(words)
            models, command = words[:split], words[split + 1 :]
            if not models or not command:
                raise SpecError("usage: testfleet requests MODEL... -- COMMAND...")
            return requests_during(fleet_or_error(state), models, command)
        if arguments.command == "clean":
            clean(everything=arguments.all, state=state)
            return 0
    except SpecError as error:
        print(f"testfleet: {error}", file=sys.stderr)
        return 2
    except FleetError as error:
        print(f"testfleet: {error}", file=sys.stderr)
        return 1
    return 2
