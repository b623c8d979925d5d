"""Turn pydantic validation errors into InputProblems with lines and near-miss suggestions."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cli.errors import InputProblem, KeyPath, near_miss
from cli.yamlsource import YamlDocument

_FRIENDLY_PATTERNS = {
    "source": "expected hf://ORG/NAME, file:///ABSOLUTE/PATH, s3://BUCKET/KEY or https://URL",
    "name": "use letters, digits, '.', '_' and '-', starting with a letter or digit",
}


def problems_from_validation(
    error: ValidationError, root: type[BaseModel], document: YamlDocument, prefix: KeyPath = ()
) -> list[InputProblem]:
    """One problem per pydantic error, pointing at the key's line in `document`."""
    details = error.errors()
    locs = [tuple(detail["loc"]) for detail in details]
    # A container whose items failed is also reported as too short; the items say more.
    return [
        _problem(detail, root, document, prefix)
        for detail, loc in zip(details, locs, strict=True)
        if not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)
    ]


def _problem(
    detail: ErrorDetails, root: type[BaseModel], document: YamlDocument, prefix: KeyPath
) -> InputProblem:
    loc: KeyPath = tuple(detail["loc"])
    path = (*prefix, *loc)
    kind = detail["type"]
    value = detail.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _fields_at(root, loc[:-1])
        return document.problem(path, f"unknown key '{key}'{near_miss(key, allowed)}")
    if kind == "missing":
        return document.problem(path, f"missing required key '{loc[-1]}'")
    if kind == "literal_error":
        choices = _literal_choices(root, loc)
        listed = ", ".join(choices)
        hint = near_miss(str(value), choices) if isinstance(value, str) else ""
        return document.problem(path, f"'{value}' is not one of {listed}{hint}")
    if kind == "string_pattern_mismatch":
        field = str(loc[-1]) if loc and isinstance(loc[-1], str) else ""
        hint = _FRIENDLY_PATTERNS.get(field, f"must match {detail.get('ctx', {}).get('pattern')}")
        return document.problem(path, f"'{value}' is not valid: {hint}")
    message = detail["msg"]
    message = message[0].lower() + message[1:]
    if value is not None and not isinstance(value, dict | list):
        message += f", got {value!r}"
    return document.problem(path, message)


def _unwrap(annotation: Any) -> Any:
    """`X | None` → X."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
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


def _fields_at(root: type[BaseModel], loc: KeyPath) -> list[str]:
    model = _type_at(root, loc)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _literal_choices(root: type[BaseModel], loc: KeyPath) -> list[str]:
    annotation = _type_at(root, loc)
    if typing.get_origin(annotation) is Literal:
        return [str(choice) for choice in typing.get_args(annotation)]
    return []
