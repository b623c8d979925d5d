"""The root `ctl` command: connection settings for every command, then registration."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

from cli import __version__
from cli.commands import (
    ca,
    catalog,
    cordon,
    deprovision,
    facts,
    keys,
    nodes,
    offboard,
    onboard,
    place,
    provision,
    reconcile,
    routes,
    targets,
    top,
)
from cli.commands.options import parse_duration
from cli.edges.tools import ToolMissingError
from cli.errors import InputError
from cli.ops.context import AppContext
from cli.ui.safe import shown

# Help as click writes it: docstring paragraphs reflowed to the terminal's width, flags
# without a value shown without one (Typer's rich panels print `<bool>` after every flag
# and keep a docstring's line breaks). --install-completion / --show-completion: Typer's.
app = typer.Typer(
    name="ctl",
    help="Place, run and grow a self-hosted fleet of LLM model servers.",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    # The terminal's width, up to 100 columns (click stops at 80).
    context_settings={"max_content_width": 100},
    pretty_exceptions_enable=False,
)


def version() -> str:
    """The installed distribution's version, as pip and the wheel know it."""
    try:
        return metadata.version("modelfleet")
    except metadata.PackageNotFoundError:  # a clone run with python -m cli, never installed
        return __version__


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"ctl (modelfleet) {version()}")
        raise typer.Exit()


@app.callback()
def settings(
    context: typer.Context,
    known_hosts: Annotated[
        Path | None,
        typer.Option(
            envvar="MODELFLEET_KNOWN_HOSTS",
            help="The fleet's known_hosts (default: .known_hosts in the inventory's directory).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(envvar="MODELFLEET_TIMEOUT", help="SSH connect timeout, seconds.")
    ] = 10.0,
    command_timeout: Annotated[
        float,
        typer.Option(envvar="MODELFLEET_COMMAND_TIMEOUT", help="Probe run timeout, seconds."),
    ] = 30.0,
    parallel: Annotated[
        int, typer.Option(envvar="MODELFLEET_PARALLEL", min=1, help="Nodes gathered at once.")
    ] = 32,
    lost_after: Annotated[
        str,
        typer.Option(
            envvar="MODELFLEET_LOST_AFTER",
            help="An unreachable node counts as Lost after this long (e.g. 90m, 2h).",
        ),
    ] = "1h",
    lock_timeout: Annotated[
        float,
        typer.Option(
            envvar="MODELFLEET_LOCK_TIMEOUT",
            min=0,
            help="Seconds to wait for another ctl that is changing the same fleet.",
        ),
    ] = 60.0,
    vault_password_file: Annotated[
        Path | None,
        typer.Option(
            envvar="ANSIBLE_VAULT_PASSWORD_FILE",
            help="Open the inventory's ansible-vault encrypted files with the password in this"
            " file (as Ansible reads it); without one they are skipped with a warning.",
        ),
    ] = None,
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            expose_value=False,
            callback=_print_version,
            help="Print ctl's version and exit.",
        ),
    ] = False,
) -> None:
    """Settings for reaching the fleet; they apply to the command that follows."""
    context.obj = AppContext(
        known_hosts_file=known_hosts,
        connect_timeout=timeout,
        command_timeout=command_timeout,
        parallel=parallel,
        lost_after=parse_duration(lost_after),
        lock_timeout=lock_timeout,
        vault_password_file=vault_password_file,
    )
    if vault_password_file is not None:
        # ansible-playbook reads the same inventory: it gets the file's path the way Ansible
        # takes it from an operator, in its environment, never the password on its argv.
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = str(vault_password_file.absolute())


app.command("place")(place.place)
app.command("nodes")(nodes.nodes)
app.command("top")(top.top)
app.command("facts")(facts.facts)
app.command("reconcile")(reconcile.reconcile)
app.command("routes")(routes.routes)
app.command("targets")(targets.targets)
app.command("drain")(reconcile.drain)
app.command("cordon")(cordon.cordon)
app.command("uncordon")(cordon.uncordon)
app.command("provision-node")(provision.provision_node)
app.add_typer(catalog.app, name="catalog")
app.add_typer(ca.app, name="ca")
app.add_typer(keys.app, name="keys")
app.command("onboard-node")(onboard.onboard_node)
app.command("offboard-node")(offboard.offboard_node)
app.command("deprovision-node")(deprovision.deprovision_node)


def main() -> None:
    # One name in every usage line and hint, however it was started (ctl, python -m cli).
    try:
        app(prog_name="ctl")
    except InputError as error:
        # Bad input found deep in a pass (a tool ctl runs is not installed): one line a
        # problem, exit 2, never a traceback.
        for problem in error.problems:
            sys.stderr.write(f"error: {shown(str(problem))}\n")  # a file's text: no ESC
        raise SystemExit(2) from None
    except ToolMissingError as error:
        sys.stderr.write(f"error: {shown(str(error))}\n")
        raise SystemExit(2) from None
