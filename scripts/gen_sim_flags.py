"""Write SGLang's own command-line table to tuner/flags/sglang-<version>.json, read by the engines and the
simulator.

Run it with the reference environment's interpreter (scripts/setup_sglang_ref.sh makes it):

    .venv-sglang/bin/python scripts/gen_sim_flags.py             # 0.5.23 -> tuner/flags/sglang-0.5.23.json
    .venv-sglang056/bin/python scripts/gen_sim_flags.py          # 0.5.6  -> tuner/flags/sglang-0.5.6.json
    .venv-sglang/bin/python scripts/gen_sim_flags.py --stdout    # print instead of writing
    .venv-sglang/bin/python scripts/gen_sim_flags.py --check     # exit 1 when the data file is stale

The parser is the one `python -m sglang.launch_server` parses with: `prepare_server_args` is called with
`argparse.ArgumentParser.parse_args` intercepted, so whatever that function builds (0.5.23:
`ArgumentParser(prog="sglang serve")` + `ServerArgs.add_cli_args`; 0.5.6: `ArgumentParser()`, whose prog comes
from `sys.argv[0]`, set here to launch_server.py's path as `python -m` sets it) is what is recorded. SGLANG_*
environment variables are removed first (0.5.23 adds a choice under SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE).

Output: every action in parser order, keys sorted, `json.dumps(indent=1, sort_keys=True)`. Per action:
  option_strings, dest, action (argparse's registry name for built-in actions: store, store_true, store_false,
  store_const, append, count, help, ...; the class name otherwise: BooleanOptionalAction,
  DeprecatedStoreTrueAction, LoRAPathAction, ...), action_module (custom classes only), type (null; str, int,
  float for the builtins; "json" for json.loads; "human_int" for SGLang's human_readable_int; any other
  callable by its __name__, e.g. nullable_str, json_list_type, parse_cuda_graph_backend_arg), type_module
  (non-builtin types only), choices (a list; a set or frozenset is written sorted, with choices_unordered: true,
  since its iteration order changes with PYTHONHASHSEED), default, const, nargs, required, metavar, help (the
  action's final help text, e.g. with BooleanOptionalAction's " (default: %(default)s)" already appended),
  group (the argument group's title), extra (instance attributes an action class adds: new_flag,
  const_value, error_message for SGLang's deprecated actions).
Values that JSON cannot hold (default, const, extra, choices) are written as {"__tuple__": [...]} for a tuple,
{"__float__": "inf" | "-inf" | "nan"} for a non-finite float, and {"__repr__": repr(v), "__type__":
"module.QualName"} for anything else (an Enum, an object); argparse.SUPPRESS is the string "==SUPPRESS==".
Parser-level: prog, usage, description, epilog, allow_abbrev, prefix_chars, fromfile_prefix_chars,
argument_default, conflict_handler, add_help, exit_on_error, formatter_class, groups, mutually exclusive
groups. server_args_fields: ServerArgs' fields in order, each with the dest from_cli_args reads it from (null:
no CLI source). Also sglang_version and the Python minor version (argparse's messages differ between Pythons).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FLAGS_DIR = REPO / "tuner" / "flags"

_BUILTIN_ACTIONS = {
    argparse._StoreAction: "store", argparse._StoreConstAction: "store_const",
    argparse._StoreTrueAction: "store_true", argparse._StoreFalseAction: "store_false",
    argparse._AppendAction: "append", argparse._AppendConstAction: "append_const",
    argparse._CountAction: "count", argparse._HelpAction: "help", argparse._VersionAction: "version",
    argparse._ExtendAction: "extend",
}
_STANDARD_ATTRS = {"option_strings", "dest", "nargs", "const", "default", "type", "choices", "required", "help",
                   "metavar", "container", "deprecated"}
_TYPE_NAMES = {"human_readable_int": "human_int"}


def encode(value: Any) -> Any:
    """A JSON value for `value` (see the module docstring for the non-JSON forms)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: encode(v) for k, v in value.items()}
    return {"__repr__": repr(value), "__type__": f"{type(value).__module__}.{type(value).__qualname__}"}


def type_name(converter: Any) -> tuple[str | None, str | None]:
    """(name, module) of an action's type: builtins by name, json.loads as "json", others by __name__."""
    if converter is None:
        return None, None
    if converter in (str, int, float, bool):
        return converter.__name__, None
    module = getattr(converter, "__module__", None)
    name = getattr(converter, "__name__", None) or type(converter).__name__
    if module == "json" and name == "loads":
        return "json", None
    return _TYPE_NAMES.get(name, name), module


def action_kind(action: argparse.Action) -> tuple[str, str | None]:
    cls = type(action)
    if cls in _BUILTIN_ACTIONS:
        return _BUILTIN_ACTIONS[cls], None
    if cls is argparse.BooleanOptionalAction:
        return "BooleanOptionalAction", None
    return cls.__name__, cls.__module__


def dump_action(action: argparse.Action, group: str | None) -> dict[str, Any]:
    kind, kind_module = action_kind(action)
    tname, tmodule = type_name(action.type)
    choices = action.choices
    unordered = isinstance(choices, (set, frozenset))
    if unordered:
        choices = sorted(choices, key=lambda c: (type(c).__name__, c))
    elif choices is not None:
        choices = list(choices)
    extra = {k: encode(v) for k, v in sorted(vars(action).items()) if k not in _STANDARD_ATTRS}
    out: dict[str, Any] = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "type": tname,
        "choices": None if choices is None else [encode(c) for c in choices],
        "default": encode(action.default),
        "const": encode(action.const),
        "nargs": action.nargs,
        "required": bool(action.required),
        "metavar": encode(action.metavar),
        "help": action.help,
        "group": group,
        "extra": extra,
    }
    if kind_module:
        out["action_module"] = kind_module
    if tmodule:
        out["type_module"] = tmodule
    if unordered:
        out["choices_unordered"] = True
    return out


def dump_parser(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The parser's settings and every action, in parser order (works on any argparse parser)."""
    group_of: dict[int, str] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            group_of[id(action)] = group.title
    settings = {
        "prog": parser.prog, "usage": parser.usage, "description": parser.description, "epilog": parser.epilog,
        "allow_abbrev": parser.allow_abbrev, "prefix_chars": parser.prefix_chars,
        "fromfile_prefix_chars": parser.fromfile_prefix_chars, "argument_default": encode(parser.argument_default),
        "conflict_handler": parser.conflict_handler, "add_help": parser.add_help,
        "exit_on_error": getattr(parser, "exit_on_error", True),
        "formatter_class": f"{parser.formatter_class.__module__}.{parser.formatter_class.__qualname__}",
        "groups": [{"title": g.title, "description": g.description} for g in parser._action_groups],
        "mutually_exclusive_groups": [{"required": g.required, "dests": [a.dest for a in g._group_actions]}
                                      for g in parser._mutually_exclusive_groups],
    }
    return {"parser": settings,
            "actions": [dump_action(a, group_of.get(id(a))) for a in parser._actions]}


class _Captured(Exception):
    pass


def launch_server_parser() -> argparse.ArgumentParser:
    """The parser `python -m sglang.launch_server` parses sys.argv with, built by SGLang's own code."""
    for key in [k for k in os.environ if k.startswith("SGLANG_")]:
        del os.environ[key]
    spec = importlib.util.find_spec("sglang.launch_server")
    if spec is None or spec.origin is None:
        raise SystemExit("gen_sim_flags: error: sglang is not installed in this interpreter "
                         "(run it with .venv-sglang/bin/python; scripts/setup_sglang_ref.sh makes it)")
    sys.argv = [spec.origin]  # what `python -m sglang.launch_server` sets; an unnamed parser takes its prog
    from sglang.srt.server_args import prepare_server_args

    captured: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        captured.append(self)
        raise _Captured

    argparse.ArgumentParser.parse_args = intercept
    try:
        prepare_server_args(["--model-path", "unused"])
    except _Captured:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original
    if not captured:
        raise SystemExit("gen_sim_flags: error: prepare_server_args parsed nothing")
    return captured[-1]


def field_sources(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """ServerArgs' fields in declaration order, each with the parser dest `ServerArgs.from_cli_args` fills it
    from (0.5.6 renames four: tp_size <- tensor_parallel_size, pp_size, dp_size, ep_size likewise), or null.

    from_cli_args is called on a namespace whose every value names its dest, with __post_init__ (0.5.6's
    resolution: GPU probing and more) replaced by one that stops and hands the record back.
    """
    from sglang.srt.server_args import ServerArgs

    marker = "\x00dest:"
    namespace = argparse.Namespace(**{a.dest: marker + a.dest for a in parser._actions
                                      if a.dest != argparse.SUPPRESS})
    had = "__post_init__" in ServerArgs.__dict__
    original = ServerArgs.__dict__.get("__post_init__")

    def stop(self):
        raise _Captured(self)

    ServerArgs.__post_init__ = stop
    try:
        record = ServerArgs.from_cli_args(namespace)
    except _Captured as captured:
        record = captured.args[0]
    finally:
        if had:
            ServerArgs.__post_init__ = original
        else:
            del ServerArgs.__post_init__
    try:
        import msgspec
        is_struct = isinstance(ServerArgs, type) and issubclass(ServerArgs, msgspec.Struct)
    except ImportError:
        is_struct = False
    if is_struct:
        names = [f.name for f in msgspec.structs.fields(ServerArgs)]
    else:
        import dataclasses
        names = [f.name for f in dataclasses.fields(ServerArgs)]
    out = []
    for name in names:
        value = getattr(record, name, None)
        source = value[len(marker):] if isinstance(value, str) and value.startswith(marker) else None
        out.append({"field": name, "dest": source})
    return out


def generate() -> tuple[str, str]:
    """(version, JSON text) for the installed SGLang."""
    parser = launch_server_parser()
    version = importlib.metadata.version("sglang")
    data = dump_parser(parser)
    data["server_args_fields"] = field_sources(parser)
    data["sglang_version"] = version
    data["python"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    data["generated_by"] = "scripts/gen_sim_flags.py (run with the interpreter of scripts/setup_sglang_ref.sh)"
    return version, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--stdout", action="store_true", help="print the table instead of writing it")
    mode.add_argument("--check", action="store_true", help="exit 1 when the data file differs from a fresh dump")
    ap.add_argument("--out", type=Path, help="where to write (default: tuner/flags/sglang-<version>.json)")
    args = ap.parse_args(argv)
    version, text = generate()
    out = args.out or FLAGS_DIR / f"sglang-{version}.json"
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        have = out.read_text() if out.exists() else None
        if have != text:
            print(f"gen_sim_flags: {out} is stale for sglang {version}; regenerate it with "
                  f"{sys.executable} scripts/gen_sim_flags.py", file=sys.stderr)
            return 1
        print(f"gen_sim_flags: {out} is up to date", file=sys.stderr)
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    count = text.count('"option_strings"')
    print(f"gen_sim_flags: wrote {out} ({count} actions, sglang {version})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
