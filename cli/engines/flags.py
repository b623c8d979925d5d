"""Which options each engine release's own parser accepts, and the check of a command line.

The data, cli/engines/engine_flags/ENGINE-VERSION.json, is made by scripts/engine_flags.py
from the released package (never typed by hand); `--check` there keeps it honest. Reading
a file is the only I/O here.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from cli.engines.specs import EngineSpec, option_name

DATA_DIR = Path(__file__).resolve().parent / "engine_flags"


def data_file_name(engine: str, version: str) -> str:
    return f"{engine}-{version}.json"


def versions_with_data(engine: str) -> list[str]:
    prefix = f"{engine}-"
    return sorted(
        path.name.removeprefix(prefix).removesuffix(".json")
        for path in DATA_DIR.glob(f"{prefix}*.json")
    )


@cache
def _data(engine: str, version: str) -> dict[str, Any] | None:
    path = DATA_DIR / data_file_name(engine, version)
    try:
        return cast(dict[str, Any], json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


@cache
def accepted_options(engine: str, version: str) -> frozenset[str] | None:
    """The options of that release's parser; None when no data file covers it."""
    data = _data(engine, version)
    return None if data is None else frozenset(str(option) for option in data["options"])


@cache
def pooling_only_architectures(engine: str, version: str) -> frozenset[str]:
    """The model architectures that release serves only as pooling (embedding) models,
    from its model registry; none known for an engine without that data."""
    data = _data(engine, version)
    return frozenset(str(a) for a in (data or {}).get("pooling_only_architectures", ()))


@dataclass(frozen=True)
class ValueRule:
    """How the parser reads an option's one value (scripts/engine_flags.py's "values")."""

    kind: str = ""  # int, float (Python's, argparse's type=); c-int, c-float, c-unsigned
    # (C++'s std::stoi, std::stof, std::stoul); "": any text
    choices: tuple[object, ...] = ()  # after conversion by `kind`
    words: tuple[str, ...] = ()  # taken as they are, besides what `kind` reads
    none: bool = False  # "" and "None" read as no value (vLLM's optional_type)

    def problem(self, value: str) -> str | None:
        """Why the parser refuses `value`; None when it takes it."""
        if value in self.words or (self.none and value in ("", "None")):
            return None
        converted: object = value
        try:
            converted = _CONVERSIONS[self.kind](value)
        except ValueError:
            return f"takes {_KIND_NAMES[self.kind]}, not {value!r}"
        if self.choices and converted not in self.choices:
            shown = ", ".join(str(choice) for choice in self.choices)
            return f"takes one of {shown}, not {value!r}"
        return None


@cache
def option_values(engine: str, version: str) -> dict[str, ValueRule]:
    """The value rule of each option whose value that release's parser checks."""
    data = _data(engine, version)
    rules: dict[str, ValueRule] = {}
    for option, rule in ({} if data is None else data.get("values", {})).items():
        rules[option] = ValueRule(
            kind=str(rule.get("type", "")),
            choices=tuple(rule.get("choices", ())),
            words=tuple(str(word) for word in rule.get("words", ())),
            none=bool(rule.get("none", False)),
        )
    return rules


# std::stoi and friends: leading white space, a sign, digits (then anything, ignored).
_C_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")
_C_FLOAT = re.compile(
    r"[ \t\n\v\f\r]*([+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|0[xX][0-9a-fA-F.]+"
    r"|[iI][nN][fF]|[nN][aA][nN]))"
)
_INT_RANGE = (-(2**31), 2**31 - 1)  # std::stoi: out_of_range past int's
_FLOAT_MAX = 3.4028234663852886e38  # std::stof: out_of_range past float's


def _c_int(value: str) -> int:
    found = _C_INTEGER.match(value)
    if found is None or not _INT_RANGE[0] <= int(found.group(1)) <= _INT_RANGE[1]:
        raise ValueError(value)
    return int(found.group(1))


def _c_unsigned(value: str) -> int:
    found = _C_INTEGER.match(value)
    if found is None or abs(int(found.group(1))) >= 2**64:  # strtoul negates a "-"
        raise ValueError(value)
    return int(found.group(1)) % 2**64


def _c_float(value: str) -> float:
    found = _C_FLOAT.match(value)
    if found is None:
        raise ValueError(value)
    text = found.group(1)
    number = float.fromhex(text) if "x" in text.lower() else float(text)
    if abs(number) > _FLOAT_MAX and text.lstrip("+-").lower() != "inf":  # ERANGE
        raise ValueError(value)
    return number


_CONVERSIONS: dict[str, Callable[[str], object]] = {
    "": str,
    "int": int,
    "float": float,
    "c-int": _c_int,
    "c-unsigned": _c_unsigned,
    "c-float": _c_float,
}
_KIND_NAMES = {
    "": "text",
    "int": "an integer",
    "float": "a number",
    "c-int": "an integer",
    "c-unsigned": "an integer",
    "c-float": "a number",
}


@dataclass(frozen=True)
class OptionProblem:
    index: int  # in the checked argv
    option: str  # as written
    message: str


_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and _NUMBER.fullmatch(token) is None


def normalized(spec: EngineSpec, token: str) -> str:
    """The option a token names, as the parser looks it up."""
    name = option_name(spec, token)
    if spec.dotted_options and name.startswith("--"):
        # vLLM's JSON arguments: --compilation-config.level 3, --x.list+ v
        name = name.split(".", 1)[0].rstrip("+")
    if spec.dotted_options and name.startswith("-O"):
        name = "--optimization-level"  # vLLM reads -O3, -O=3 and -O 3 as that
    return name


def resolved(spec: EngineSpec, name: str, options: frozenset[str]) -> list[str]:
    """The options the parser could read `name` as: itself when it has it; else, where it
    takes abbreviations, every `--` option that `name` is a prefix of (argparse.py
    `_parse_optional`: one is that option, several are ambiguous); else none."""
    if name in options:
        return [name]
    if spec.abbreviations and name.startswith("--"):
        return sorted(option for option in options if option.startswith(name))
    return []


def whole_options(
    spec: EngineSpec, argv: Sequence[str], options: frozenset[str]
) -> tuple[str, ...]:
    """argv with each abbreviation the parser expands written whole (`--tp 2` → `--tp-size
    2`): what ctl writes means the same to this release and to a later one that adds an
    option with the same prefix, and ctl's own reading of the options sees their names."""
    out: list[str] = []
    for index, token in enumerate(argv):
        if token == "--":
            return (*out, *argv[index:])
        name = normalized(spec, token)
        found = resolved(spec, name, options) if _is_option(token) else []
        if len(found) == 1 and found[0] != name:
            written = token.partition("=")[0]
            if spec.dotted_options:  # --compilation.mode 3: the name ends at the dot
                written = written.split(".", 1)[0].rstrip("+")
            out.append(found[0] + token[len(written) :])
        else:
            out.append(token)
    return tuple(out)


def check_options(
    spec: EngineSpec, version: str, argv: Sequence[str], options: frozenset[str]
) -> list[OptionProblem]:
    """Every token of `argv` that looks like an option the release's parser does not have,
    or that it reads as several (an ambiguous abbreviation)."""
    problems: list[OptionProblem] = []
    short = _short_version(version)
    rules = option_values(spec.name, version)
    value_index = -1  # the token that is the option before's value
    for index, token in enumerate(argv):
        if token == "--":
            break
        if index == value_index or not _is_option(token):
            continue
        name = normalized(spec, token)
        found = resolved(spec, name, options)
        if len(found) == 1:
            rule = rules.get(found[0])
            if rule is None or "." in token.partition("=")[0]:
                continue
            value_index, problem = _value_problem(spec, argv, index, rule)
            if problem is not None:
                where = index if value_index < 0 else value_index
                problems.append(
                    OptionProblem(where, token, f"{spec.label} {short}'s {name} {problem}")
                )
            continue
        if found:
            shown = ", ".join(found[:AMBIGUOUS_SHOWN])
            if len(found) > AMBIGUOUS_SHOWN:
                shown += f" and {len(found) - AMBIGUOUS_SHOWN} more"
            message = f"{spec.label} {short} reads {name} as any of {shown}: write one whole"
            problems.append(OptionProblem(index, token, message))
            continue
        message = f"{spec.label} {short} has no {name}"
        if name in spec.replacements:
            message += f": {spec.replacements[name]}"
        else:
            longer = sorted(o for o in options if o.startswith(name) and name.startswith("--"))
            if longer:  # an engine that takes names only whole
                message += f": write the option whole ({', '.join(longer[:3])})"
            else:
                near = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.8)
                if near:
                    message += f" (did you mean {near[0]}?)"
        problems.append(OptionProblem(index, token, message))
    return problems


def _value_problem(
    spec: EngineSpec, argv: Sequence[str], index: int, rule: ValueRule
) -> tuple[int, str | None]:
    """(the index of the option's value, -1 when written `--opt=value` or missing; why the
    parser refuses it, if it does). argparse takes `--opt=value`, or the next token unless
    it is an option; llama.cpp's parser takes the next token, whatever it is."""
    token = argv[index]
    if spec.argparse and "=" in token:
        return -1, rule.problem(token.partition("=")[2])
    following = index + 1
    if following >= len(argv) or (spec.argparse and _is_option(argv[following])):
        return -1, "needs a value"
    return following, rule.problem(argv[following])


AMBIGUOUS_SHOWN = 8  # candidates an ambiguous abbreviation's refusal names


def _short_version(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 and parts[2] == "0" else version
