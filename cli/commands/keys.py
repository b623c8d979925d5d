"""`ctl keys`: the teams' keys to the routers (docs/routing.md, "Keys")."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.options import (
    DEFAULT_CATALOG,
    DEFAULT_INVENTORY,
    CatalogOption,
    InventoryOption,
    JsonOption,
)

if TYPE_CHECKING:
    from cli.routes.keys import TeamKey

KEYS_LIST_FORMAT = "modelfleet.keys/v1"

app = typer.Typer(
    help="The teams' keys to the routers: which models, how fast, until when.",
    no_args_is_help=True,
)

ApplyOption = Annotated[
    bool,
    typer.Option(
        "--apply",
        help="Update the routers now, as `ctl routes --apply` does (live facts); otherwise"
        " they get the change at the next `ctl routes --apply` or `ctl reconcile`.",
    ),
]
TeamArgument = Annotated[str, typer.Argument(help="The team: 1-63 of a-z, 0-9, '.', '_', '-'.")]
LimitHelp = "at most this many per minute, on each router (default: no limit)"


def _limits(rpm: int | None, tpm: int | None, max_parallel: int | None) -> dict[str, int | None]:
    return {"rpm": rpm, "tpm": tpm, "max_parallel": max_parallel}


def create(
    context: typer.Context,
    team: TeamArgument,
    models: Annotated[
        str | None,
        typer.Option("--models", help="Comma-separated models or aliases of the catalog."),
    ] = None,
    every_model: Annotated[bool, typer.Option("--all", help="Every model, now and later.")] = False,
    rpm: Annotated[int | None, typer.Option("--rpm", min=1, help=f"Requests: {LimitHelp}.")] = None,
    tpm: Annotated[int | None, typer.Option("--tpm", min=1, help=f"Tokens: {LimitHelp}.")] = None,
    max_parallel: Annotated[
        int | None,
        typer.Option("--max-parallel", min=1, help="Requests at once, on each router."),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="Valid this long, e.g. 90d or 12h (default: no end)."),
    ] = None,
    apply: ApplyOption = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Make a key for TEAM to the models given (--models M1,M2 or --all).

    The key is printed once, on standard output; ctl keeps only its SHA-256 (in its state
    directory, 0600) and so do the routers. Exit code 0 when made (and, with --apply, on
    every router), 1 when a router could not be updated (the key is made: it reaches the
    router at the next update) or another ctl held the fleet past --lock-timeout, 2 on bad
    input (nothing made).
    """
    from cli.commands.inputs import read_catalog
    from cli.commands.locking import fleet_lock
    from cli.commands.options import parse_duration
    from cli.ops.keys import fresh_key_parts
    from cli.routes.keys import new_key, resolve_models, team_problem
    from cli.ui import console

    problem = team_problem(team)
    if problem is not None:
        console.fail(problem)
    if every_model == (models is not None):
        console.fail("give the key's models: --models M1,M2 or --all (one of the two)")
    lifetime = None
    if expires is not None:
        try:
            lifetime = parse_duration(expires)
        except typer.BadParameter as error:
            console.fail(f"--expires: {error.message}")
    chosen = None
    if models is not None:
        names = [name.strip() for name in models.split(",") if name.strip()]
        if not names:
            console.fail("--models: name at least one model or alias")
        with console.input_errors():
            chosen = resolve_models(read_catalog(catalog), names)
    with fleet_lock(context, inventory):
        path, kept = _kept(context, inventory)
        key_id, secret = fresh_key_parts({key.key_id for key in kept})
        text, record = new_key(
            key_id, secret, team, chosen, _limits(rpm, tpm, max_parallel), _now(), lifetime
        )
        _save(path, (*kept, record))
        # The one place the key is ever written: standard output.
        typer.echo(text)
        console.err.print(f"key {key_id} made for team {team}")
        code = _push(context, inventory, catalog, apply)
    raise SystemExit(code)


def list_keys(
    context: typer.Context,
    as_json: JsonOption = False,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """The keys made for this inventory's fleet: team, models, limits, created, expires and
    state (valid, expired, revoked); never a key, which ctl does not keep.

    Exit code 0, 2 on bad input (a keys file that is not one).
    """
    from cli.routes.keys import key_json
    from cli.ui import console
    from cli.ui.keys import key_state, keys_table

    _, kept = _kept(context, inventory)
    now = _now()
    if as_json:
        entries = [key_json(key) | {"state": key_state(key, now)} for key in kept]
        console.print_json({"format": KEYS_LIST_FORMAT, "keys": entries})
    else:
        console.print_table(keys_table(kept, now))
    raise SystemExit(console.EXIT_OK)


def revoke(
    context: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's ID, as `ctl keys list` shows it.")],
    apply: ApplyOption = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Take a key back: the routers refuse it from their next update on (at once with
    --apply), and every other key is left as it was.

    Exit code 0 when revoked (and, with --apply, refused by every router), 1 when a router
    could not be updated (it still takes the key until its next update) or another ctl
    held the fleet past --lock-timeout, 2 on bad input (no such key: nothing changed).
    """
    from cli.commands.locking import fleet_lock
    from cli.routes import keys as team_keys
    from cli.ui import console

    with fleet_lock(context, inventory):
        path, kept = _kept(context, inventory)
        try:
            after = team_keys.revoke(kept, key_id, _now())
        except KeyError:
            console.fail(f"no key {key_id[:64]!r} in {path}: `ctl keys list` shows them")
        _save(path, after)
        console.err.print(f"key {key_id} revoked")
        code = _push(context, inventory, catalog, apply, revoked=True)
    raise SystemExit(code)


def rotate(
    context: typer.Context,
    team: TeamArgument,
    apply: ApplyOption = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
    inventory: InventoryOption = DEFAULT_INVENTORY,
) -> None:
    """Replace each valid key of TEAM by a new one with the same models, limits and
    lifetime, and revoke the old ones: the new keys are printed once, one a line, on
    standard output.

    Exit code 0 when replaced (and, with --apply, on every router), 1 when a router could
    not be updated (it takes the old keys until its next update) or another ctl held the
    fleet past --lock-timeout, 2 on bad input (TEAM has no valid key: nothing changed).
    """
    from cli.commands.locking import fleet_lock
    from cli.ops.keys import fresh_key_parts
    from cli.routes import keys as team_keys
    from cli.ui import console

    with fleet_lock(context, inventory):
        path, kept = _kept(context, inventory)
        now = _now()
        old = [key for key in kept if key.team == team and key.valid(now)]
        if not old:
            console.fail(f"team {team[:64]!r} has no valid key in {path}")
        after = kept
        made = []
        for key in old:
            key_id, secret = fresh_key_parts({k.key_id for k in after})
            lifetime = None if key.expires is None else key.expires - key.created
            limits = _limits(key.rpm, key.tpm, key.max_parallel)
            text, record = team_keys.new_key(
                key_id, secret, team, key.models, limits, now, lifetime
            )
            after = (*team_keys.revoke(after, key.key_id, now), record)
            made.append((key.key_id, text, key_id))
        _save(path, after)
        for _, text, _ in made:
            typer.echo(text)
        for old_id, _, new_id in made:
            console.err.print(f"key {old_id} revoked, replaced by {new_id}")
        code = _push(context, inventory, catalog, apply, revoked=True)
    raise SystemExit(code)


app.command("create")(create)
app.command("list")(list_keys)
app.command("revoke")(revoke)
app.command("rotate")(rotate)


def _now() -> datetime:
    return datetime.now(UTC)


def _kept(context: typer.Context, inventory: Path) -> tuple[Path, tuple[TeamKey, ...]]:
    from cli.commands.inputs import app_context
    from cli.ops.keys import keys_file, load_keys
    from cli.ui import console

    with console.input_errors():
        path = keys_file(app_context(context).state, inventory)
        return path, load_keys(path)


def _save(path: Path, keys: tuple[TeamKey, ...]) -> None:
    from cli.ops.keys import save_keys

    save_keys(path, keys)


def _push(
    context: typer.Context, inventory: Path, catalog: Path, apply: bool, revoked: bool = False
) -> int:
    """The routers updated now (--apply), or said when they will be; the exit code."""
    from cli.commands.inputs import read_catalog, read_fleet, require_tools
    from cli.commands.routers import push_routes
    from cli.routes.table import route_table
    from cli.ui import console

    if not apply:
        what = "refuse it" if revoked else "take it"
        console.err.print(
            f"the routers {what} from the next `ctl routes --apply` or `ctl reconcile`"
            " on (a running `ctl controller`'s next pass), or now with --apply"
        )
        return console.EXIT_OK
    require_tools("ansible-playbook")
    loaded = read_catalog(catalog)
    fleet = read_fleet(context, inventory, None)
    addresses, _ = fleet.serving
    return push_routes(context, fleet, inventory, route_table(loaded, fleet.snapshot, addresses))
