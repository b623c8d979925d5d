"""The root `ctl` command: connection settings for every command, then registration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.commands import (
    ca,
    catalog,
    cordon,
    facts,
    nodes,
    onboard,
    place,
    provision,
    reconcile,
    routes,
)
from cli.commands.options import parse_duration
from cli.ops.context import AppContext

app = typer.Typer(
    name="ctl",
    help="Place, run and grow a self-hosted fleet of LLM model servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
) -> None:
    """Settings for reaching the fleet; they apply to the command that follows."""
    context.obj = AppContext(
        known_hosts_file=known_hosts,
        connect_timeout=timeout,
        command_timeout=command_timeout,
        parallel=parallel,
        lost_after=parse_duration(lost_after),
    )


app.command("place")(place.place)
app.command("nodes")(nodes.nodes)
app.command("facts")(facts.facts)
app.command("reconcile")(reconcile.reconcile)
app.command("routes")(routes.routes)
app.command("drain")(reconcile.drain)
app.command("cordon")(cordon.cordon)
app.command("uncordon")(cordon.uncordon)
app.command("provision-node")(provision.provision_node)
app.add_typer(catalog.app, name="catalog")
app.add_typer(ca.app, name="ca")
app.command("onboard-node")(onboard.onboard_node)


def main() -> None:
    # One name in every usage line and hint, however it was started (ctl, python -m cli).
    app(prog_name="ctl")
