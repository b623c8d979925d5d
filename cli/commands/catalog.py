"""`ctl catalog check`: load and validate a catalog, changing nothing."""

from __future__ import annotations

import typer

from cli.commands.options import DEFAULT_CATALOG, CatalogOption, JsonOption

CATALOG_FORMAT = "modelfleet.catalog/v1"

app = typer.Typer(help="Inspect the catalog of models.", no_args_is_help=True)


@app.command("check")
def check(catalog: CatalogOption = DEFAULT_CATALOG, as_json: JsonOption = False) -> None:
    """Validate the catalog: schema, aliases, fallbacks and parallelism arithmetic.

    Exit code 0 when it is valid, 2 when it is not: one line per problem, each naming the
    file, the line and the key.
    """
    from cli.commands.inputs import read_catalog
    from cli.ui import console
    from cli.ui.tables import catalog_table

    loaded = read_catalog(catalog)
    if as_json:
        console.print_json(
            {
                "format": CATALOG_FORMAT,
                "catalog": str(catalog),
                "models": {
                    name: {
                        "aliases": list(m.aliases),
                        "fallbacks": list(m.fallbacks),
                        "replicas": {"min": m.replicas_min, "max": m.replicas_max},
                        "profiles": [p.name for p in m.profiles],
                        # profile → where its token comes from; the catalog holds no token
                        "tokens": {
                            p.name: p.token.reference for p in m.profiles if p.token is not None
                        },
                    }
                    for name, m in loaded.models.items()
                },
            }
        )
        return
    console.print_table(catalog_table(loaded))
    profiles = sum(len(m.profiles) for m in loaded.models.values())
    counts = (
        console.plural(len(loaded.models), "model"),
        console.plural(profiles, "profile"),
        console.plural(len(loaded.aliases), "alias", "aliases"),
    )
    console.out.print(f"{catalog}: OK — {', '.join(counts)}", markup=False)
