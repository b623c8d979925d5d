"""The values of ctl's keys and of the SSH settings, wherever they are written: checked
where written, and a Jinja template in one found and, given a `Render` (ansible-core's own
templating, cli/edges/templating.py), rendered with the host's variables as Ansible would
render it, the value it renders to checked at the template's line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from cli.errors import InputProblem, KeyPath
from cli.inventory.connection import (
    ADDRESS_KEYS,
    CONNECTION_KEYS,
    EXPOSED_KEYS,
    PORT_KEYS,
    PROXY_ARG_KEYS,
)
from cli.inventory.schema import HostVars
from cli.inventory.tree import Var
from cli.names import control_character
from cli.schemaerrors import problems_from_validation
from cli.yamlsource import VaultedValue, yaml_kind

# (a value holding templates, the host's variables) → the value rendered; ValueError (its
# message the reason) for a template it refuses or cannot render.
Render = Callable[[Any, Mapping[str, Any]], Any]


def check_value(key: str, var: Var) -> list[InputProblem]:
    """Problems with one value of one of the variables we read, where it is written."""
    template = template_in(var.value)
    if template is not None:
        return [
            var.doc.problem(
                var.path + template,
                "ctl does not render Jinja templates: write the value itself",
            )
        ]
    if key in PORT_KEYS:
        value = var.value
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            if value is None or 1 <= value <= 65535:
                return []
            return [var.doc.problem(var.path, f"port {value} is not between 1 and 65535")]
        return [var.doc.problem(var.path, f"must be a port number, not {yaml_kind(var.value)}")]
    if key in CONNECTION_KEYS:
        if isinstance(var.value, str) and (control := control_character(var.value)):
            # The address reaches the shards' unit and environment files (VLLM_HOST_IP,
            # --host), and every one of these ssh's command line.
            return [var.doc.problem(var.path, f"has a control character ({control})")]
        if key in ADDRESS_KEYS and isinstance(var.value, str) and var.value.startswith("-"):
            # ssh, which Ansible runs with the address as an argument, would read an option.
            return [var.doc.problem(var.path, "an address does not start with '-'")]
        if var.value is None or (isinstance(var.value, str) and var.value.strip()):
            return []
        if isinstance(var.value, str):
            return [var.doc.problem(var.path, "must not be empty")]
        return [var.doc.problem(var.path, f"must be text, not {yaml_kind(var.value)}")]
    try:
        HostVars.model_validate({key: var.value})
    except ValidationError as error:
        return problems_from_validation(error, HostVars, var.doc, var.path[:-1])
    return []


def template_in(value: Any, at: KeyPath = ()) -> KeyPath | None:
    """Where in `value` a Jinja expression is written, if anywhere."""
    if isinstance(value, str):
        return at if "{{" in value or "{%" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = template_in(item, (*at, str(key)))
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = template_in(item, (*at, index))
            if found is not None:
                return found
    return None


def rendered_vars(
    host: str,
    groups: tuple[str, ...],
    merged: Mapping[str, Var],
    render: Render,
) -> dict[str, Var] | list[InputProblem]:
    """The host's variables with a template in any of our keys rendered as Ansible would
    render it for this host; or the problems, each rendered value checked where its
    template is written."""
    templated = [
        key
        for key in (*EXPOSED_KEYS, *PROXY_ARG_KEYS)
        if key in merged and template_in(merged[key].value) is not None
    ]
    if not templated:
        return dict(merged)
    variables: dict[str, Any] = {
        key: var.value for key, var in merged.items() if not isinstance(var.value, VaultedValue)
    }
    # The magic variables an inventory's templates use (Ansible's, of the same names).
    variables |= {
        "inventory_hostname": host,
        "inventory_hostname_short": host.split(".", 1)[0],
        "group_names": sorted(group for group in groups if group != "all"),
    }
    rendered = dict(merged)
    problems: list[InputProblem] = []
    for key in templated:
        var = merged[key]
        where = template_in(var.value) or ()
        try:
            value = render(var.value, variables)
        except ValueError as error:
            problems.append(var.doc.problem(var.path + where, str(error)))
            continue
        rendered[key] = Var(value, var.doc, var.path)
        if key not in PROXY_ARG_KEYS:
            problems.extend(check_value(key, rendered[key]))
    return problems or rendered
