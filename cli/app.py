"""The root `ctl` command: registration only."""

from __future__ import annotations

import typer

from cli.commands import catalog, nodes, place

app = typer.Typer(
    name="ctl",
    help="Place, run and grow a self-hosted fleet of LLM model servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("place")(place.place)
app.command("nodes")(nodes.nodes)
app.add_typer(catalog.app, name="catalog")


def main() -> None:
    app()
