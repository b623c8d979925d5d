"""Which options each engine release's own parser accepts, and the check of a command line.

The data, cli/engines/engine_flags/ENGINE-VERSION.json, is made by scripts/engine_flags.py
from the released package (never typed by hand); `--check` there keeps it honest. Reading
a file is the only I/O here.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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
def accepted_options(engine: str, version: str) -> frozenset[str] | None:
    """The options of that release's parser; None when no data file covers it."""
    path = DATA_DIR / data_file_name(engine, version)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return frozenset(str(option) for option in data["options"])


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
    if spec.underscores_are_dashes and name.startswith("--"):
        # vLLM's JSON arguments: --compilation-config.level 3, --x.list+ v
        name = name.split(".", 1)[0].rstrip("+")
    if spec.underscores_are_dashes and name.startswith("-O"):
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
            if spec.underscores_are_dashes:  # --compilation.mode 3: the name ends at the dot
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
    for index, token in enumerate(argv):
        if token == "--":
            break
        if not _is_option(token):
            continue
        name = normalized(spec, token)
        found = resolved(spec, name, options)
        if len(found) == 1:
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


AMBIGUOUS_SHOWN = 8  # candidates an ambiguous abbreviation's refusal names


def _short_version(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 and parts[2] == "0" else version
