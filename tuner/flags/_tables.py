"""The command-line flags of each SGLang version the tuner knows, as data read from SGLang's own parser.

`sglang-<version>.json` (beside this module) is the complete table of the parser `python -m sglang.launch_server`
builds (0.5.23: 531 flags; 0.5.17: 475; 0.5.6: 288), written by scripts/gen_sim_flags.py from the real package
installed without its GPU stack by scripts/setup_sglang_ref.sh:

    bash scripts/setup_sglang_ref.sh && .venv-sglang/bin/python scripts/gen_sim_flags.py
    SGLANG_VERSION=0.5.17 bash scripts/setup_sglang_ref.sh && .venv-sglang0517/bin/python scripts/gen_sim_flags.py
    SGLANG_VERSION=0.5.6 bash scripts/setup_sglang_ref.sh && .venv-sglang056/bin/python scripts/gen_sim_flags.py

tests/contract/test_flags_contract.py checks the data and the parser `_parser.py` builds from it against the
real parser. Every flag is accepted with SGLang's names, aliases, choices, defaults, types, nargs and
abbreviation rules; the ones the simulator's physics does not model land in the parsed values and change nothing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

VERSIONS = ("0.5.6", "0.5.17", "0.5.23")


@dataclass(frozen=True)
class Opaque:
    """A default the data file could only record by its repr (see scripts/gen_sim_flags.py)."""
    text: str
    type_name: str

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]  # option strings as SGLang registers them (first one names the dest)
    field: str  # the dest: the ServerArgs field the value lands in
    kind: str = "store"  # argparse action name (store, store_true, help, ...) or SGLang's action class name
    type: str | None = "str"  # str | int | float | json | human_int | nullable_str | json_list_type | ...
    default: Any = None
    choices: tuple[Any, ...] | None = None
    nargs: Any = None
    help: str | None = ""
    required: bool = False
    new_flag: str | None = None  # what a deprecated flag's warning points to
    set_dest: bool = False  # dest differs from argparse's own rule (first long option, dashes to underscores)
    const: Any = None
    metavar: Any = None
    group: str | None = None
    choices_unordered: bool = False  # SGLang passes a set: its order changes with PYTHONHASHSEED
    extra: tuple[tuple[str, Any], ...] = ()  # attributes SGLang's action class adds (const_value, ...)


def decode(value: Any) -> Any:
    """The inverse of gen_sim_flags.encode. argparse tests SUPPRESS by identity, so the string becomes it."""
    if value == argparse.SUPPRESS:
        return argparse.SUPPRESS
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(decode(v) for v in value["__tuple__"])
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        if set(value) == {"__repr__", "__type__"}:
            return Opaque(value["__repr__"], value["__type__"])
        return {k: decode(v) for k, v in value.items()}
    return value


def _derived_dest(names: tuple[str, ...], prefix_chars: str) -> str:
    long = [n for n in names if len(n) > 1 and n[1] in prefix_chars]
    return (long or list(names))[0].lstrip(prefix_chars).replace("-", "_")


@lru_cache(maxsize=None)
def _data(version: str) -> dict[str, Any]:
    if version not in VERSIONS:
        raise ValueError(f"unsupported sglang_version {version!r}; the simulator emulates "
                         f"{', '.join(sorted(VERSIONS))}")
    text = resources.files(__package__).joinpath(f"sglang-{version}.json").read_text()
    data = json.loads(text)
    if data.get("sglang_version") != version:
        raise ValueError(f"sglang-{version}.json holds sglang {data.get('sglang_version')!r}")
    return data


def _spec(action: dict[str, Any], prefix_chars: str) -> FlagSpec:
    names = tuple(action["option_strings"])
    extra = decode(action.get("extra") or {})
    choices = action.get("choices")
    return FlagSpec(
        names=names, field=action["dest"], kind=action["action"], type=action.get("type"),
        default=decode(action.get("default")), choices=None if choices is None else tuple(decode(choices)),
        nargs=action.get("nargs"), help=decode(action.get("help")), required=bool(action.get("required")),
        new_flag=extra.get("new_flag"), set_dest=action["dest"] != _derived_dest(names, prefix_chars),
        const=decode(action.get("const")), metavar=decode(action.get("metavar")), group=action.get("group"),
        choices_unordered=bool(action.get("choices_unordered")), extra=tuple(sorted(extra.items())))


@lru_cache(maxsize=None)
def table(version: str) -> tuple[FlagSpec, ...]:
    """Every action of the version's parser, in parser order (the help action included)."""
    data = _data(version)
    prefix_chars = data["parser"]["prefix_chars"]
    return tuple(_spec(a, prefix_chars) for a in data["actions"])


def parser_settings(version: str) -> dict[str, Any]:
    """The ArgumentParser's own settings: prog, usage, allow_abbrev, prefix_chars, groups, ..."""
    return dict(_data(version)["parser"])


def python_version(version: str) -> str:
    """The Python minor version the table was generated under (argparse's messages vary by Python)."""
    return str(_data(version)["python"])


@lru_cache(maxsize=None)
def server_args_fields(version: str) -> tuple[tuple[str, str], ...]:
    """(ServerArgs field, parser dest it is read from) in field order, for the fields the CLI sets: 0.5.6's
    from_cli_args reads tp_size from tensor_parallel_size (and pp/dp/ep likewise); 0.5.23's names agree."""
    return tuple((f["field"], f["dest"]) for f in _data(version)["server_args_fields"] if f["dest"] is not None)
