"""The offboarding `ctl offboard-node` does, and `ctl deprovision-node` first for a node still
in the inventory: plan, say, drain, remove its key, revoke, forget, take it out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from cli.ops.fleet import Fleet
    from cli.reconcile.planner import Plan

OFFBOARDING = "offboarding"  # the cordon the drain writes


def offboard(
    context: typer.Context,
    name: str,
    dry_run: bool,
    force: bool,
    inventory: Path,
    ca_dir: Path | None,
    catalog: Path,
    facts: Path | None,
) -> int:
    """Offboard `name` (or print the plan, `dry_run`); the exit code. `ctl deprovision-node`
    runs it first for a node still in the inventory."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from cli.commands.inputs import (
        app_context,
        pass_hooks,
        read_ca,
        read_catalog,
        require_tools,
    )
    from cli.edges.templating import render_template
    from cli.inventory.load import load_inventory
    from cli.ops import offboard as ops
    from cli.ops.reconcile import PassRequest, run_pass
    from cli.ui import console
    from cli.ui.offboard import plan_lines

    if facts is not None and not dry_run:
        console.fail(
            "--facts reads a snapshot: use it with --dry-run; offboarding needs live facts"
        )
    options = app_context(context)
    decrypt = options.decrypt()
    now = datetime.now(UTC)

    def say(line: str) -> None:
        console.err.print(line, markup=False, emoji=False, highlight=False)

    def run() -> int:
        with console.input_errors():
            ca = read_ca(ca_dir, now)  # a CA near its end: a warning
            model = load_inventory(inventory, decrypt, render=render_template)
            present = name in model.names()
            loaded = read_catalog(catalog) if present else None
            if present and not dry_run:
                require_tools("ansible-playbook")
            held: dict[str, Fleet] = {}

            def drain() -> tuple[Fleet, Plan]:
                assert loaded is not None
                # The plan of the pass that drains it (carried out by ops.carry_out), under
                # the lock this command already holds.
                request = PassRequest(
                    loaded, inventory, True, frozenset({name}), force, OFFBOARDING, renew=False
                )
                hooks = replace(pass_hooks(context, inventory, facts), show_plan=lambda _: None)
                result = run_pass(options, request, hooks)
                assert result.fleet is not None and result.plan is not None
                held["fleet"] = result.fleet
                return result.fleet, result.plan

            plan = ops.plan_offboard(
                options, name, inventory, model, ca, drain if present else None, now, decrypt,
                ask_node=facts is None,
            )  # fmt: skip
        for line in plan_lines(plan):
            console.out.print(line, markup=False, highlight=False, overflow="ignore", crop=False)
        if plan.done_already:
            console.out.print(f"{name} is already offboarded: nothing left to do", markup=False)
            return console.EXIT_OK
        refusals = plan.refusals
        if refusals and not force:
            for why in refusals:
                say(f"refused: {why}; nothing was changed")
            return console.EXIT_INCOMPLETE
        for why in refusals:
            say(f"--force: {why.split(' (--force')[0]}")
        if dry_run:
            return console.EXIT_OK
        if present:
            from cli.inventory.edit import cordon_node

            host = model.host(name)
            if host.vars.cordoned is None:
                with console.input_errors():
                    say(cordon_node(inventory, name, OFFBOARDING, decrypt))
        with console.input_errors():
            done = ops.carry_out(
                options, plan, held.get("fleet"), inventory, loaded, ca, now,
                on_run=console.say_run, say=say, decrypt=decrypt, force=force,
            )  # fmt: skip
        console.print_lines(done.lines)  # a node's text among them: escaped, never markup
        return console.EXIT_OK if done.complete else console.EXIT_INCOMPLETE

    if dry_run:
        return run()
    from cli.commands.locking import fleet_lock

    with fleet_lock(context, inventory):
        return run()
