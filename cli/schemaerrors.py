"""Turn pydantic validation errors into InputProblems: the line, the key, a plain message,
and the nearest valid key for a misspelt one. Used by every YAML or JSON input we read."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cli.errors import InputProblem, KeyPath, near_miss
from cli.yamlsource import YamlDocument, yaml_kind

_FRIENDLY_PATTERNS = {
    "source": "expected hf://ORG/NAME, file:///ABSOLUTE/PATH, s3://BUCKET/KEY or https://URL",
    "name": "use letters, digits, '.', '_' and '-', starting with a letter or digit",
}


def problems_from_validation(
    error: ValidationError,
    root: type[BaseModel],
    document: YamlDocument,
    prefix: KeyPath = (),
    *,
    quote: bool = True,
) -> list[InputProblem]:
    """One problem per pydantic error, at the line of the key in `document`.

    `prefix` is where `root` sits in the document. A custom error may name a deeper
    position than pydantic knows with `at` in its context (a duplicate inside a list).
    `quote` False: no text of the document is quoted (an unknown key is not named, a wrong
    value is said by its kind), for a file that is no operator's writing.
    """
    errors: list[tuple[ErrorDetails, KeyPath]] = []
    for detail in error.errors():
        loc = tuple(_loc_part(part) for part in detail["loc"] if part != "[key]")
        errors.append((detail, loc + tuple(detail.get("ctx", {}).get("at", ()))))
    locs = [loc for _, loc in errors]
    problems: list[InputProblem] = []
    misspelt: dict[KeyPath, list[str]] = {}
    for detail, loc in errors:
        if detail["type"] == "extra_forbidden":
            key = str(loc[-1])
            hint = near_miss(key, fields_at(root, loc[:-1]))
            misspelt.setdefault(loc[:-1], []).append(hint)
            line = document.line_of((*prefix, *loc))
            message = f"unknown key '{key}'{hint}" if quote else "an unknown key"
            problems.append(InputProblem(document.file, line, (*prefix, *loc[:-1]), message))
    for detail, loc in errors:
        kind = detail["type"]
        if kind == "extra_forbidden":
            continue
        if any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs):
            continue  # a container whose items failed: the items say more
        if kind == "missing":
            # a misspelt key is reported once, as unknown with its near miss
            if not any(f"'{loc[-1]}'" in hint for hint in misspelt.get(loc[:-1], ())):
                problems.append(
                    document.problem((*prefix, *loc[:-1]), f"missing required key '{loc[-1]}'")
                )
            continue
        problems.append(document.problem((*prefix, *loc), _message(detail, root, loc, quote)))
    return problems


def _loc_part(part: Any) -> str | int:
    if isinstance(part, str) or (isinstance(part, int) and not isinstance(part, bool)):
        return part
    return str(part)


def _message(detail: ErrorDetails, root: type[BaseModel], loc: KeyPath, quote: bool) -> str:
    kind = detail["type"]
    value = detail.get("input")
    ctx = detail.get("ctx") or {}
    shown = _shown if quote else yaml_kind
    if not quote and kind in ("literal_error", "string_pattern_mismatch"):
        kind = f"{kind}:unquoted"
    if kind == "literal_error":
        choices = _literal_choices(root, loc)
        hint = near_miss(str(value), choices) if isinstance(value, str) else ""
        return f"'{value}' is not one of {', '.join(choices)}{hint}"
    if kind == "literal_error:unquoted":
        return f"is not one of {', '.join(_literal_choices(root, loc))}"
    if kind == "string_pattern_mismatch:unquoted":
        return "is not valid here"
    if kind == "string_pattern_mismatch":
        field = str(loc[-1]) if loc and isinstance(loc[-1], str) else ""
        hint = _FRIENDLY_PATTERNS.get(field, f"must match {ctx.get('pattern')}")
        return f"'{value}' is not valid: {hint}"
    if kind == "string_type":
        return f"must be text, not {yaml_kind(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, not {yaml_kind(value)}"
    if kind in ("tuple_type", "list_type"):
        return f"must be a list, not {yaml_kind(value)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number, not {shown(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, not {shown(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, not {shown(value)}"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind in ("greater_than", "greater_than_equal", "less_than_equal", "less_than"):
        bound = {"greater_than": "more than", "greater_than_equal": "at least"}.get(
            kind, "at most" if kind == "less_than_equal" else "less than"
        )
        limit = next(iter(ctx.values()), "")
        return f"must be {bound} {limit}, not {shown(value)}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    message = str(detail["msg"])
    # pydantic's own sentences start "Input should…"; ours may start with "HCA".
    if message[:2].istitle():
        message = message[0].lower() + message[1:]
    return message


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return yaml_kind(value)


def _unwrap(annotation: Any) -> Any:
    """`X | None` → X."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    return annotation


def _type_at(root: Any, loc: KeyPath) -> Any:
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin is dict and len(args) == 2:
            current = args[1]
        elif origin in (list, tuple) and args:
            current = args[0]
        else:
            return None
    return _unwrap(current)


def fields_at(root: type[BaseModel], loc: KeyPath) -> list[str]:
    """The keys allowed at `loc` inside `root`, for near-miss suggestions."""
    model = _type_at(root, loc)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _literal_choices(root: type[BaseModel], loc: KeyPath) -> list[str]:
    annotation = _type_at(root, loc)
    if typing.get_origin(annotation) is Literal:
        return [str(choice) for choice in typing.get_args(annotation)]
    return []
