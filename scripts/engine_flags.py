"""The options each engine's own argument parser accepts, read from its released source.

For every engine spec (cli/engines/specs.py) at its pinned version this downloads the
release with pip (`pip download --no-deps`: vLLM's and SGLang's wheels, llama.cpp from
llama-cpp-python's source distribution, which vendors it), reads the parser-building code
statically — nothing of the engine is imported or run — and writes the options as data:
cli/engines/engine_flags/ENGINE-VERSION.json, with the version, the file read and its
sha256, and the command that made it. `ctl catalog check`, every catalog load and the
stand-in engines (tests/fakes/engine.py) read those files.

    python scripts/engine_flags.py            # regenerate every file
    python scripts/engine_flags.py --check    # regenerate in memory, compare; 1 on a difference

How each parser is read:

- vLLM (`vllm serve`): every `add_argument` call in `EngineArgs.add_cli_args`,
  `AsyncEngineArgs.add_cli_args` (vllm/engine/arg_utils.py) and `make_arg_parser`
  (vllm/entrypoints/common/cli_args.py), plus one `--field-name` per field of
  `FrontendArgs` and its bases, which `add_cli_args` there turns into flags. A flag whose
  kwargs come from `get_kwargs(Config)["field"]` for a `bool` field, or whose action is
  `BooleanOptionalAction`, also gets `--no-NAME`, and `--enable-X` / `--disable-X` each
  other (vLLM's `EnableDisableAction`, vllm/utils/argparse_utils.py).
- SGLang (`python -m sglang.launch_server`): every field declared `A[T, "help"]` or
  `A[T, Arg(...)]` in the namespace classes `ServerArgs` collects (_INPUT_NAMESPACES in
  sglang/srt/server_args.py, declared in sglang/srt/arg_groups/fields/), as
  `add_cli_args_from_dataclass` registers them (`cli_name`, `aliases`, `no_cli`,
  `BooleanOptionalAction`), and the `add_argument` calls of `ServerArgs.add_cli_args`.
- llama.cpp (`llama-server`): every `add_opt(common_arg({...}, ...))` of
  vendor/llama.cpp/common/arg.cpp whose `set_examples` names LLAMA_EXAMPLE_SERVER or
  LLAMA_EXAMPLE_COMMON (or that sets none: common) and whose `set_excludes` does not name
  the server, as `common_params_parser_init`'s `add_opt` filters them; `set_preset_only`
  options are not command-line options.

Each option's value, where the parser checks it, goes in "values" (one line an option):
{"type": "int"|"float"} as argparse's type= reads it, {"choices": [...]} (after that
type), {"none": true} when vLLM's optional_type also takes "" and "None"; llama.cpp's
{"type": "c-int"|"c-float"|"c-unsigned"} (std::stoi/stof/stoul) and "words" it takes
before converting (`-ngl auto`). vLLM: `_compute_kwargs`'s order (vllm/engine/arg_utils.py)
on the field's annotation, aliases resolved (RunnerOption = Literal["auto", RunnerType]),
no check for a field whose kwargs the code changes (`x_kwargs["f"]["type"] = ...`), a size
(`human_readable_int`), JSON, a list or a class; SGLang: `add_cli_args_from_dataclass`
(sglang/srt/arg_groups/arg_utils.py), none with an action, a type_parser or nargs;
llama.cpp: an `int` handler, or a string handler whose only reading of its value is one
std::sto* of it. What is not there is passed unchecked.

For vLLM, "pooling_only_architectures": the architectures its model registry
(vllm/model_executor/models/registry.py) serves only as pooling models, which ctl refuses
to route as chat (`read_vllm_pooling_only`).

Downloads are kept in --cache (default /var/cache/modelfleet-engines) and pip's own
cache; a cached file is used only when its sha256 is the one the data file records.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.engines.flags import DATA_DIR, data_file_name, versions_with_data  # noqa: E402
from cli.engines.specs import ENGINE_SPECS, EngineSpec  # noqa: E402

DEFAULT_CACHE = Path("/var/cache/modelfleet-engines")
COMMAND = "python scripts/engine_flags.py"

# How the parser reads one option's value, for the options whose value ctl can check:
# {"type": "int"} and the like, "choices", "words" (more values it takes), "none" (it takes
# "" and "None" too). The checks are cli/engines/flags.py's.
ValueSpec = dict[str, object]
Reader = Callable[[Callable[[str], str]], tuple[set[str], dict[str, ValueSpec], list[str]]]

# --------------------------------------------------------------------------- annotations

BUILTIN_HINTS = {"int", "float", "str", "bool", "None", "dict", "list", "tuple", "set", "Literal"}


def _aliases(sources: Iterable[str]) -> dict[str, ast.expr]:
    """Module-level `Name = Literal[...]` and `Name: TypeAlias = ...`, by name."""
    found: dict[str, ast.expr] = {}
    for text in sources:
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name):
                found.setdefault(target.id, value)
    return found


def _members(node: ast.expr, aliases: dict[str, ast.expr], depth: int = 0) -> list[ast.expr]:
    """A type annotation's union members, aliases and Annotated/Optional unwrapped."""
    if depth > 20:
        return [node]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _members(ast.parse(node.value, mode="eval").body, aliases, depth + 1)
        except SyntaxError:
            return [node]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _members(node.left, aliases, depth + 1) + _members(node.right, aliases, depth + 1)
    if isinstance(node, ast.Name) and node.id in aliases and node.id not in BUILTIN_HINTS:
        return _members(aliases[node.id], aliases, depth + 1)
    if isinstance(node, ast.Subscript):
        base = ast.unparse(node.value).split(".")[-1]
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in ("Annotated", "A"):
            return _members(elements[0], aliases, depth + 1)
        if base == "Optional":
            return [*_members(elements[0], aliases, depth + 1), ast.Constant(None)]
        if base == "Union":
            return [m for e in elements for m in _members(e, aliases, depth + 1)]
    return [node]


def _hint_name(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value).split(".")[-1]
    return ast.unparse(node).split(".")[-1]


def _literal_values(node: ast.expr, aliases: dict[str, ast.expr]) -> list[object] | None:
    """The values of `Literal[...]`, nested Literals (and their aliases) flattened."""
    values: list[object] = []
    for member in _members(node, aliases):
        if not (isinstance(member, ast.Subscript) and _hint_name(member) == "Literal"):
            return None
        elements = member.slice.elts if isinstance(member.slice, ast.Tuple) else [member.slice]
        for element in elements:
            if isinstance(element, ast.Constant):
                values.append(element.value)
                continue
            inner = _literal_values(element, aliases)
            if inner is None:
                return None
            values += inner
    return values


def _value_of_type(values: list[object]) -> ValueSpec | None:
    """argparse's check of `choices` with the choices' own type."""
    kinds = {type(value) for value in values}
    if kinds == {str}:
        return {"choices": sorted(cast(list[str], values))}
    if kinds == {int}:
        return {"type": "int", "choices": sorted(cast(list[int], values))}
    return None


# --------------------------------------------------------------------------- vLLM


def _union_members(node: ast.expr | None) -> set[str]:
    """The names of a type annotation's union members: `bool | None` → {bool, None}."""
    if node is None:
        return set()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) | _union_members(node.right)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _union_members(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return {node.value}
    if isinstance(node, ast.Constant) and node.value is None:
        return {"None"}
    if isinstance(node, ast.Subscript):
        base = ast.unparse(node.value).split(".")[-1]
        if base == "Optional":
            return _union_members(node.slice) | {"None"}
        if base == "Union":
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return set().union(*(_union_members(e) for e in elements))
        if base == "Annotated":
            first = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
            return _union_members(first)
        return {base}
    return {ast.unparse(node).split(".")[-1]}


def _is_boolean_optional(annotation: ast.expr | None) -> bool:
    """vLLM's get_kwargs: a bool field becomes BooleanOptionalAction, except bool | str | None
    (an optional-valued flag)."""
    members = _union_members(annotation)
    return "bool" in members and members != {"bool", "str", "None"}


@dataclass
class _Class:
    fields: dict[str, ast.expr]  # field → annotation, in order
    bases: list[str]


def _classes(sources: Iterable[str]) -> dict[str, _Class]:
    found: dict[str, _Class] = {}
    for text in sources:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                fields = {
                    item.target.id: item.annotation
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
                bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
                found.setdefault(node.name, _Class(fields, bases))
    return found


def _all_fields(classes: dict[str, _Class], name: str) -> dict[str, ast.expr]:
    cls = classes.get(name)
    if cls is None:
        return {}
    merged: dict[str, ast.expr] = {}
    for base in cls.bases:
        merged |= _all_fields(classes, base)
    return merged | cls.fields


def _negatives(option: str, enable_disable: bool) -> set[str]:
    """argparse's BooleanOptionalAction (and vLLM's EnableDisableAction) adds these."""
    if not option.startswith("--"):
        return set()
    found = {"--no-" + option[2:]}
    if enable_disable:
        for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            if option.startswith(prefix):
                found.add(inverse + option.removeprefix(prefix))
    return found


def _add_argument_calls(function: ast.AST) -> Iterable[ast.Call]:
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            yield node


def _functions(tree: ast.AST, names: set[str], owner: str | None = None) -> list[ast.AST]:
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and owner is not None and node.name != owner:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            found.append(node)
    return found


def _literal_flags(call: ast.Call) -> list[str]:
    return [
        arg.value
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] == "-"
    ]


def _kwargs_sources(function: ast.AST) -> dict[str, tuple[str, str | None]]:
    """`model_kwargs = get_kwargs(ModelConfig)` → {model_kwargs: (ModelConfig, None)};
    `x = get_kwargs(VllmConfig)["logging_config"]` → {x: (VllmConfig, logging_config)}."""
    found: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(function):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Name):
            continue
        field: str | None = None
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            field = str(value.slice.value)
            value = value.value
        if (
            isinstance(value, ast.Call)
            and ast.unparse(value.func).endswith("get_kwargs")
            and value.args
        ):
            found[target.id] = (ast.unparse(value.args[0]).split(".")[-1], field)
    return found


def _is_boolean_call(
    call: ast.Call,
    sources: dict[str, tuple[str, str | None]],
    classes: dict[str, _Class],
) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "action" and ast.unparse(keyword.value).endswith("BooleanOptionalAction"):
            return True
    spread = _kwargs_field(call, sources)  # **kwargs, or **{**kwargs, "default": None}
    if spread is None:
        return False
    cls, field = spread
    return _is_boolean_optional(_all_fields(classes, cls).get(field))


VLLM_FILES = (
    "vllm/engine/arg_utils.py",
    "vllm/entrypoints/common/cli_args.py",
)


# vllm/engine/arg_utils.py _compute_kwargs: int fields that take 1K, 2M, ... (and auto).
VLLM_HUMAN_READABLE = {
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_scheduled_tokens",
    "kv_cache_memory_bytes",
    "safetensors_prefetch_block_size",
    "max_num_queued_tokens",
}


def _vllm_field_value(
    field: str, annotation: ast.expr | None, aliases: dict[str, ast.expr]
) -> ValueSpec | None:
    """The value check of vLLM's _compute_kwargs (vllm/engine/arg_utils.py) for a config
    field, in its order; None where it makes no check ctl repeats (a JSON or dataclass
    value, a list, a flag, a human-readable size, a type of another module)."""
    if annotation is None:
        return None
    members = _members(annotation, aliases)
    names = [_hint_name(member) for member in members]
    if set(names) - BUILTIN_HINTS or set(names) == {"bool", "str", "None"} or "bool" in names:
        return None
    spec: ValueSpec | None = None
    if "Literal" in names:
        literal = [m for m in members if _hint_name(m) == "Literal"]
        values = _literal_values(literal[0], aliases) if len(literal) == 1 else None
        if values is None or "str" in names:  # with str: a metavar, not choices
            return None
        spec = _value_of_type(values)
    elif {"tuple", "list", "set"} & set(names):
        return None
    elif "int" in names:
        spec = None if field in VLLM_HUMAN_READABLE else {"type": "int"}
    elif "float" in names:
        spec = {"type": "float"}
    if spec is not None and "None" in names:  # optional_type: "" and "None" are None
        spec["none"] = True
    return spec


def _explicit_value(call: ast.Call) -> tuple[bool, ValueSpec | None]:
    """(whether the call itself says how its value is read, and the check if so)."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    for keyword in call.keywords:  # **{**kwargs, "type": ...}
        if keyword.arg is None and isinstance(keyword.value, ast.Dict):
            for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keywords[key.value] = value
    if not {"type", "choices", "nargs", "action", "const"} & set(keywords):
        return False, None
    if {"nargs", "action", "const"} & set(keywords):
        return True, None
    spec: ValueSpec = {}
    if "type" in keywords:
        type_name = ast.unparse(keywords["type"])
        if type_name not in ("int", "float", "str"):
            return True, None
        if type_name != "str":
            spec["type"] = type_name
    if "choices" in keywords:
        try:
            choices = ast.literal_eval(keywords["choices"])
        except ValueError:
            return True, None
        found = _value_of_type(list(choices))
        if found is None or found.get("type", spec.get("type")) != spec.get("type"):
            return True, None
        spec["choices"] = found["choices"]
    return True, spec or None


def _kwargs_field(
    call: ast.Call, sources: dict[str, tuple[str, str | None]]
) -> tuple[str, str] | None:
    """(class, field) of the `**x_kwargs["field"]` the call spreads, if it does."""
    for keyword in call.keywords:
        if keyword.arg is not None:
            continue
        value = keyword.value
        if isinstance(value, ast.Dict):
            value = next(
                (v for k, v in zip(value.keys, value.values, strict=True) if k is None), value
            )
        field: str | None = None
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            field = str(value.slice.value)
            value = value.value
        if isinstance(value, ast.Name) and value.id in sources:
            cls, chosen = sources[value.id]
            field = chosen or field
            if field is not None:
                return cls, field
    return None


def _customized_fields(tree: ast.AST) -> set[str]:
    """The fields whose argparse kwargs the code changes (`kwargs["field"]["type"] = ...`,
    as FrontendArgs' `_customize_cli_kwargs` and EngineArgs.add_cli_args do)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                # x_kwargs["field"]["type"] = ...: the field is the inner subscript
                part: ast.expr = target
                while isinstance(part, ast.Subscript):
                    inner = part.value
                    if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant):
                        found.add(str(inner.slice.value))
                    part = inner
    return found


def read_vllm(
    read: Callable[[str], str],
) -> tuple[set[str], dict[str, ValueSpec], list[str]]:
    config_files = [name for name in _listing if name.startswith("vllm/config/")]
    texts = {name: read(name) for name in (*VLLM_FILES, *config_files)}
    classes = _classes(texts.values())
    aliases = _aliases(texts.values())
    values: dict[str, ValueSpec] = {}
    options: set[str] = set()
    arg_utils = ast.parse(texts["vllm/engine/arg_utils.py"])
    cli_args = ast.parse(texts["vllm/entrypoints/common/cli_args.py"])
    functions = [
        *_functions(arg_utils, {"add_cli_args"}, owner="EngineArgs"),
        *_functions(arg_utils, {"add_cli_args"}, owner="AsyncEngineArgs"),
        *_functions(cli_args, {"make_arg_parser"}),
    ]
    for function in functions:
        sources = _kwargs_sources(function)
        customized = _customized_fields(function)
        for call in _add_argument_calls(function):
            flags = _literal_flags(call)
            options.update(flags)
            if _is_boolean_call(call, sources, classes):
                for flag in flags:
                    options.update(_negatives(flag, enable_disable=True))
            explicit, spec = _explicit_value(call)
            source = None if explicit else _kwargs_field(call, sources)
            if source is not None and source[1] in customized:
                source = None  # `x_kwargs["field"]["type"] = ...` before the call
            if source is not None:
                cls, field = source
                spec = _vllm_field_value(field, _all_fields(classes, cls).get(field), aliases)
            if spec is not None:
                values.update(dict.fromkeys(flags, spec))
    # FrontendArgs.add_cli_args: `--{field}` for every field of the class and its bases.
    customized = _customized_fields(cli_args)
    for name, annotation in _all_fields(classes, "FrontendArgs").items():
        flag = "--" + name.replace("_", "-")
        options.add(flag)
        if _is_boolean_optional(annotation):
            options.update(_negatives(flag, enable_disable=True))
        spec = None if name in customized else _vllm_field_value(name, annotation, aliases)
        if spec is not None:
            values[flag] = spec
    options.update({"-h", "--help"})
    return options, values, [*VLLM_FILES, "vllm/config/*.py"]


VLLM_REGISTRY = "vllm/model_executor/models/registry.py"
# vllm/model_executor/models/registry.py: the dicts of architectures vLLM runs only as a
# pooling model, and those it also generates with.
VLLM_POOLING_TABLES = (
    "_EMBEDDING_MODELS",
    "_LATE_INTERACTION_MODELS",
    "_REWARD_MODELS",
    "_TOKEN_CLASSIFICATION_MODELS",
    "_SEQUENCE_CLASSIFICATION_MODELS",
)
VLLM_GENERATING_TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")


def _registry_tables(text: str) -> dict[str, dict[str, str]]:
    """Each module-level `_X_MODELS = {"Arch": ("module", "Class"), **_Y, ...}`: arch → class."""
    tables: dict[str, dict[str, str]] = {}

    def entries(node: ast.Dict) -> dict[str, str]:
        found: dict[str, str] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None and isinstance(value, ast.Dict):
                found |= entries(value)
            elif key is None and isinstance(value, ast.Name):
                found |= tables.get(value.id, {})
            elif (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and isinstance(value, ast.Tuple)
                and len(value.elts) >= 2
                and isinstance(value.elts[1], ast.Constant)
            ):
                found[key.value] = str(value.elts[1].value)
        return found

    for node in ast.parse(text).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Dict)
        ):
            tables[node.targets[0].id] = entries(node.value)
    return tables


def read_vllm_pooling_only(read: Callable[[str], str]) -> list[str]:
    """The architectures vLLM serves only as pooling models (`--runner auto` resolves to
    pooling, no chat routes): in its pooling tables, in neither generating table, and
    loaded by a class no generating architecture uses (`LlamaModel`, loaded as
    LlamaForCausalLM, is left out)."""
    tables = _registry_tables(read(VLLM_REGISTRY))
    missing = [n for n in (*VLLM_POOLING_TABLES, *VLLM_GENERATING_TABLES) if not tables.get(n)]
    if missing:
        raise SystemExit(f"{VLLM_REGISTRY}: no {', '.join(missing)}; the reader is stale")
    pooling = {a: c for n in VLLM_POOLING_TABLES for a, c in tables[n].items()}
    generating = {a: c for n in VLLM_GENERATING_TABLES for a, c in tables[n].items()}
    classes = set(generating.values())
    return sorted(a for a, c in pooling.items() if a not in generating and c not in classes)


# --------------------------------------------------------------------------- SGLang

SGLANG_SERVER_ARGS = "sglang/srt/server_args.py"
SGLANG_FIELDS = "sglang/srt/arg_groups/fields/"


def _input_namespaces(tree: ast.AST) -> list[str]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)
            and isinstance(node.value, ast.List)
        ):
            return [ast.unparse(element) for element in node.value.elts]
    raise SystemExit(f"{SGLANG_SERVER_ARGS}: no _INPUT_NAMESPACES list")


def _sglang_field_flags(name: str, annotation: ast.expr) -> set[str]:
    """What add_cli_args_from_dataclass registers for `name: A[T, meta...]`."""
    if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "A"):
        return set()
    parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    meta: ast.expr | None = None
    for part in parts[1:]:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            meta = part
            break
        if isinstance(part, ast.Call) and ast.unparse(part.func) == "Arg":
            meta = part
            break
    if meta is None:
        return set()  # no Arg: skipped, registered by hand if at all
    cli_name = "--" + name.replace("_", "-")
    aliases: list[str] = []
    boolean = False
    if isinstance(meta, ast.Call):
        keywords = {k.arg: k.value for k in meta.keywords if k.arg is not None}
        if ast.literal_eval(keywords["no_cli"]) if "no_cli" in keywords else False:
            return set()
        if "cli_name" in keywords:
            cli_name = str(ast.literal_eval(keywords["cli_name"]))
        if "aliases" in keywords:
            aliases = [str(a) for a in ast.literal_eval(keywords["aliases"])]
        action = keywords.get("action")
        boolean = action is not None and ast.unparse(action).endswith("BooleanOptionalAction")
    names = {cli_name, *aliases}
    if boolean:
        names |= {n for name_ in list(names) for n in _negatives(name_, enable_disable=False)}
    return names


def _sglang_field_value(annotation: ast.expr, aliases: dict[str, ast.expr]) -> ValueSpec | None:
    """The value check add_cli_args_from_dataclass (sglang/srt/arg_groups/arg_utils.py)
    gives `A[T, Arg(...)]`: a Literal's (or Arg's) choices, int or float; None for an
    action, a type_parser, nargs, a list, a flag, or a union it reads as str."""
    if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "A"):
        return None
    parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    if not parts:
        return None
    meta = next((p for p in parts[1:] if isinstance(p, ast.Call)), None)
    keywords = {} if meta is None else {k.arg: k.value for k in meta.keywords if k.arg}
    if {"action", "type_parser", "nargs", "const"} & set(keywords):
        return None
    choices: list[object] | None = None
    if "choices" in keywords:
        try:
            choices = list(ast.literal_eval(keywords["choices"]))
        except ValueError:
            return None
    members = [m for m in _members(parts[0], aliases) if _hint_name(m) != "None"]
    if len(members) != 1:  # _unwrap_optional takes only X | None
        return None
    inner, name = members[0], _hint_name(members[0])
    if name == "Literal":
        literal = _literal_values(inner, aliases)
        if literal is None or not literal:
            return None
        kind = type(literal[0])
        if kind not in (str, int):
            return None
        spec = _value_of_type(choices if choices is not None else literal)
        if spec is not None and kind is int:
            spec["type"] = "int"
        return spec
    if name in ("int", "float", "str"):
        spec = {} if name == "str" else {"type": name}
        if choices is not None:
            typed = _value_of_type(choices)
            if typed is None or typed.get("type") != spec.get("type"):
                return None
            spec["choices"] = typed["choices"]
        return spec or None
    return None


def read_sglang(
    read: Callable[[str], str],
) -> tuple[set[str], dict[str, ValueSpec], list[str]]:
    server_args = ast.parse(read(SGLANG_SERVER_ARGS))
    wanted = set(_input_namespaces(server_args))
    field_files = sorted(n for n in _listing if n.startswith(SGLANG_FIELDS) and n.endswith(".py"))
    texts = [read(file) for file in field_files]
    aliases = _aliases(texts)
    classes: dict[str, ast.ClassDef] = {}
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name in wanted:
                classes[node.name] = node
    missing = wanted - set(classes)
    if missing:
        raise SystemExit(f"SGLang: namespace classes not found: {sorted(missing)}")
    options: set[str] = set()
    values: dict[str, ValueSpec] = {}
    for cls in classes.values():
        for item in cls.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names = _sglang_field_flags(item.target.id, item.annotation)
                options |= names
                spec = _sglang_field_value(item.annotation, aliases) if names else None
                if spec is not None:
                    values.update(dict.fromkeys(names, spec))
    for function in _functions(server_args, {"add_cli_args"}, owner="ServerArgs"):
        for call in _add_argument_calls(function):
            flags = _literal_flags(call)
            options.update(flags)
            explicit, spec = _explicit_value(call)
            if explicit and spec is not None:
                values.update(dict.fromkeys(flags, spec))
            for keyword in call.keywords:
                if keyword.arg == "action" and ast.unparse(keyword.value).endswith(
                    "BooleanOptionalAction"
                ):
                    options.update(n for f in flags for n in _negatives(f, enable_disable=False))
    options.update({"-h", "--help"})
    return options, values, [SGLANG_SERVER_ARGS, SGLANG_FIELDS + "*.py"]


# --------------------------------------------------------------------------- llama.cpp

LLAMA_ARG_CPP = "vendor/llama.cpp/common/arg.cpp"


def _strip_cpp(text: str) -> str:
    """C++ with comments blanked, string literals kept."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
            continue
        if text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = len(text) if end < 0 else end + 2
            continue
        if char in "\"'":
            end = index + 1
            while end < len(text) and text[end] != char:
                end += 2 if text[end] == "\\" else 1
            out.append(text[index : end + 1])
            index = end + 1
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _balanced(text: str, start: int) -> int:
    """The index just past the bracket closing the one at `start`, skipping strings."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[start]]]
    index = start + 1
    while stack:
        char = text[index]
        if char in "\"'":
            end = index + 1
            while text[end] != char:
                end += 2 if text[end] == "\\" else 1
            index = end + 1
            continue
        if char in pairs:
            stack.append(pairs[char])
        elif char == stack[-1]:
            stack.pop()
        index += 1
    return index


STRING_LIST = re.compile(r'\{\s*("(?:[^"\\]|\\.)*"\s*(?:,\s*"(?:[^"\\]|\\.)*"\s*)*)\}')


# std::stoi / std::stof / std::stoul, as common_params_parse_ex calls them on a value.
LLAMA_CONVERSIONS = {"stoi": "c-int", "stof": "c-float", "stoul": "c-unsigned"}


def _llama_value(constructor: str) -> ValueSpec | None:
    """How the option's handler reads its value: an `int value` handler gets std::stoi
    (common_params_parse_ex); a string handler whose only reading of the value is one
    std::stoi/stof/stoul of it, after comparing it with words (`-ngl auto`), gets that."""
    handler = re.search(r"\[\]\s*\(\s*common_params\s*&\s*\w+\s*,\s*([^)]*)\)", constructor)
    if handler is None:
        return None
    parameter = " ".join(handler.group(1).replace("&", " & ").split())
    if re.fullmatch(r"int \w+", parameter):
        return {"type": "c-int"}
    string = re.fullmatch(r"const std::string & (\w+)", parameter)
    if string is None:
        return None
    body = constructor[handler.end() :]
    value = string.group(1)
    conversions = re.findall(rf"std::(sto\w+)\(\s*{value}\s*\)", body)
    words = re.findall(rf'\b{value}\s*==\s*"((?:[^"\\]|\\.)*)"', body)
    uses = len(re.findall(rf"\b{value}\b", body))
    if len(conversions) != 1 or conversions[0] not in LLAMA_CONVERSIONS:
        return None
    if uses != 1 + len(words):  # the value is read some other way too
        return None
    spec: ValueSpec = {"type": LLAMA_CONVERSIONS[conversions[0]]}
    if words:
        spec["words"] = sorted(set(words))
    return spec


def read_llama(
    read: Callable[[str], str],
) -> tuple[set[str], dict[str, ValueSpec], list[str]]:
    text = _strip_cpp(read(LLAMA_ARG_CPP))
    options: set[str] = set()
    values: dict[str, ValueSpec] = {}
    count = 0
    for match in re.finditer(r"\badd_opt\s*\(\s*common_arg\s*\(", text):
        open_paren = text.index("(", match.start())
        end = _balanced(text, open_paren)
        call = text[open_paren:end]
        inner_start = call.index("common_arg") + len("common_arg")
        inner_end = _balanced(call, call.index("(", inner_start))
        constructor, chain = call[inner_start:inner_end], call[inner_end:]
        lists = []
        position = 1
        while True:  # the leading {"-x", "--xx"} lists: args, then args_neg
            rest = constructor[position:]
            found = STRING_LIST.match(rest.lstrip())
            if not found:
                break
            lists.append(re.findall(r'"((?:[^"\\]|\\.)*)"', found.group(1)))
            position += len(rest) - len(rest.lstrip()) + found.end()
            position += len(constructor[position:]) - len(constructor[position:].lstrip(" \n,"))
        if not lists:
            raise SystemExit(f"{LLAMA_ARG_CPP}: cannot read the options of: {call[:120]!r}")
        count += 1
        if "set_preset_only" in chain:
            continue
        examples = re.search(r"set_examples\s*\(\s*\{([^}]*)\}", chain)
        excludes = re.search(r"set_excludes\s*\(\s*\{([^}]*)\}", chain)
        named = set(re.findall(r"LLAMA_EXAMPLE_\w+", examples.group(1))) if examples else set()
        excluded = set(re.findall(r"LLAMA_EXAMPLE_\w+", excludes.group(1))) if excludes else set()
        applies = not named or bool(named & {"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"})
        if applies and "LLAMA_EXAMPLE_SERVER" not in excluded:
            for names in lists[:2]:
                options.update(n for n in names if n.startswith("-"))
            spec = _llama_value(constructor)
            if spec is not None:
                values.update((n, spec) for n in lists[0] if n.startswith("-"))
    if count < 100:
        raise SystemExit(f"{LLAMA_ARG_CPP}: only {count} options found; the reader is stale")
    return options, values, [LLAMA_ARG_CPP]


READERS: dict[str, Reader] = {"vllm": read_vllm, "sglang": read_sglang, "llama.cpp": read_llama}

# --------------------------------------------------------------------------- packages

_listing: list[str] = []  # the names in the package being read (set by open_package)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(spec: EngineSpec, version: str, cache: Path, known_sha: str | None) -> Path:
    """The release, from the cache when its hash is the one recorded, else pip."""
    requirement = f"{spec.package}=={version}"
    stem = spec.package.replace("-", "_")
    cache.mkdir(parents=True, exist_ok=True)
    for candidate in sorted(cache.glob(f"{stem}-{version}*")):
        if known_sha is not None and sha256(candidate) == known_sha:
            return candidate
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(cache)]
    if spec.package_kind == "sdist":
        command += ["--no-binary", ":all:"]
    else:
        command += ["--only-binary", ":all:"]
    subprocess.run([*command, requirement], check=True)
    suffix = ".tar.gz" if spec.package_kind == "sdist" else ".whl"
    found = sorted(cache.glob(f"{stem}-{version}*{suffix}"))
    if not found:
        raise SystemExit(f"pip download {requirement}: nothing in {cache}")
    return found[-1]


def open_package(path: Path) -> Callable[[str], str]:
    """A reader of the package's files by path (an sdist's top folder left out)."""
    global _listing  # noqa: PLW0603
    if path.name.endswith(".whl"):
        archive = zipfile.ZipFile(path)
        _listing = archive.namelist()
        return lambda name: archive.read(name).decode("utf-8")
    data = path.read_bytes()
    tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")  # noqa: SIM115 (read until the end)
    members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
    _listing = list(members)

    def read(name: str) -> str:
        handle = tar.extractfile(members[name])
        if handle is None:
            raise SystemExit(f"{path.name}: {name} is not a file")
        return handle.read().decode("utf-8")

    return read


def generate(
    spec: EngineSpec, version: str, cache: Path, known_sha: str | None
) -> dict[str, object]:
    package = download(spec, version, cache, known_sha)
    read = open_package(package)
    options, values, files = READERS[spec.name](read)
    pooling: dict[str, object] = {}
    if spec.name == "vllm":
        pooling = {"pooling_only_architectures": read_vllm_pooling_only(read)}
        files = [*files, VLLM_REGISTRY]
    return {
        "engine": spec.name,
        "version": version,
        "program": " ".join(spec.command),
        "package": f"{spec.package}=={version}",
        "file": package.name,
        "sha256": sha256(package),
        "read": files,
        "command": COMMAND,
        "options": sorted(options),
        **pooling,
        "values": {option: values[option] for option in sorted(values)},
    }


def render(data: dict[str, object]) -> str:
    """JSON, one option's value check a line."""
    text = json.dumps({k: v for k, v in data.items() if k != "values"}, indent=1)
    values = cast(dict[str, object], data.get("values", {}))
    lines = [f"  {json.dumps(option)}: {json.dumps(spec)}" for option, spec in values.items()]
    return text[:-2] + ',\n "values": {\n' + ",\n".join(lines) + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="compare every data file, write nothing"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--engine", action="append", choices=sorted(ENGINE_SPECS))
    parser.add_argument("--version", help="another release than the pinned one (with one --engine)")
    args = parser.parse_args(argv)
    engines = args.engine or list(ENGINE_SPECS)
    if args.version is not None and len(engines) != 1:
        parser.error("--version needs exactly one --engine")
    jobs: list[tuple[str, str]] = []
    for name in engines:
        if args.check:  # every release that has data, the pinned one first
            pinned = ENGINE_SPECS[name].pinned_version
            others = [v for v in versions_with_data(name) if v != pinned]
            jobs += [(name, v) for v in [args.version or pinned, *others]]
        else:
            jobs.append((name, args.version or ENGINE_SPECS[name].pinned_version))
    failed = False
    for name, version in dict.fromkeys(jobs):
        spec = ENGINE_SPECS[name]
        target = DATA_DIR / data_file_name(name, version)
        old = json.loads(target.read_text()) if target.exists() else None
        started = time.monotonic()
        known = None if old is None else str(old.get("sha256"))
        new = generate(spec, version, args.cache, known)
        seconds = time.monotonic() - started
        shown = target.relative_to(ROOT)
        options = cast(list[str], new["options"])
        if not args.check:
            target.write_text(render(new), encoding="utf-8")
            print(f"{shown}: {len(options)} options ({seconds:.1f} s)")
            continue
        if old == new:
            print(f"{shown}: up to date ({seconds:.1f} s)")
            continue
        failed = True
        if old is None:
            print(f"{shown}: missing; run {COMMAND}")
            continue
        before, after = set(cast(list[str], old.get("options", []))), set(options)
        print(f"{shown}: stale; run {COMMAND}")
        for option in sorted(after - before):
            print(f"  {spec.label} {version} accepts {option}, the file does not list it")
        for option in sorted(before - after):
            print(f"  {spec.label} {version} has no {option}, the file lists it")
        for key in sorted(set(old) | set(new)):
            if key != "options" and old.get(key) != new.get(key):
                print(f"  {key}: {old.get(key)!r} in the file, {new.get(key)!r} from the release")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
