"""SGLang's command line for one version: an `argparse` parser built from `_tables`, and `--config`.

The parser is rebuilt from the data file of SGLang's own parser (`_tables`): the same option strings, dests,
action classes (argparse's own, and stand-ins of SGLang's custom ones under SGLang's class names, which its
config merger quotes), type converters under SGLang's function names (argparse quotes them in errors),
choices, defaults, nargs, metavars, help texts and parser settings (prog, allow_abbrev, prefix_chars), so
argparse itself produces every error message and exit status (2 for an unknown flag, a bad choice or an
ambiguous prefix) and `--help` exactly as the real launcher would print them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any, Sequence

import yaml

from ._tables import FlagSpec, parser_settings, server_args_fields, table


def _warn_deprecated(message: str) -> None:
    # SGLang logs these through `logger.warning` before logging is configured, so they land on stderr bare,
    # in the bold-yellow escape codes of `print_deprecated_warning`.
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr, flush=True)


# -- SGLang's custom actions (sglang/srt/arg_groups/argparse_actions.py), same names and behaviour ------------

class LoRAPathAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        lora_paths = []
        if values:
            assert isinstance(values, list), "Expected a list of LoRA paths."
            for lora_path in values:
                lora_path = lora_path.strip()
                if lora_path.startswith("{") and lora_path.endswith("}"):
                    obj = json.loads(lora_path)
                    assert "lora_path" in obj and "lora_name" in obj, (
                        f"{lora_path!r} looks like a JSON str, but it does not contain 'lora_name' and "
                        "'lora_path' keys.")
                    lora_paths.append(obj)
                else:
                    lora_paths.append(lora_path)
        setattr(namespace, self.dest, lora_paths)


class DeprecatedAction(argparse.Action):
    """A retired flag with no automatic translation: stop (with `error_message`) or warn."""

    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        if "error_message" in kwargs:  # 0.5.23's class has it; 0.5.17's (arg_groups/argparse_actions.py) not
            self.error_message = kwargs.pop("error_message")
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(self, "error_message", None) is not None:
            parser.error(self.error_message)
        _warn_deprecated(f"The command line argument '{option_string}' is deprecated and will be removed in "
                         "future versions.")


class DeprecatedStoreTrueAction(argparse.Action):
    """A deprecated flag that still stores True and warns (named as in SGLang: the config parser quotes it)."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    """An old boolean replaced by one value of a valued flag: stores `const_value` and warns."""

    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, self.const_value)


class DeprecatedAliasStoreAction(argparse.Action):
    """An old valued flag renamed: keeps the value, warns."""

    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, values)


_CUSTOM_ACTIONS: dict[str, type[argparse.Action]] = {
    cls.__name__: cls for cls in (LoRAPathAction, DeprecatedAction, DeprecatedStoreTrueAction,
                                  DeprecatedStoreConstAction, DeprecatedAliasStoreAction)}
_BUILTIN_ACTIONS = {"store", "store_const", "store_true", "store_false", "append", "append_const", "count",
                    "extend", "version"}


# -- SGLang's type converters, same names (argparse's "invalid <name> value" quotes them) ---------------------

def human_readable_int(value: str) -> int:
    """0.5.23's parser for token counts: plain integers, SI (1k, 1M) or IEC (1Ki, 1Mi) suffixes."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'.")
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive.") from None


def nullable_str(val: str):
    if not val or val == "None":
        return None
    return val


def json_list_type(value):
    # SGLang uses orjson.loads (a json.JSONDecodeError subclass on failure); the stdlib parses the same JSON.
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


_CUDA_GRAPH_PHASES = ("decode", "prefill")
_CUDA_GRAPH_PHASE_KEYS = {
    "decode": ("backend", "max_bs", "bs"),
    "prefill": ("backend", "max_bs", "bs", "max_context_size", "full_prefill_max_req",
                "full_prefill_prefix_chunk_tokens", "max_seq_len"),
}


def parse_cuda_graph_config_arg(raw: str) -> dict[str, dict[str, Any]]:
    """0.5.23's --cuda-graph-config: a JSON object of phase -> settings (model_executor/cuda_graph_config.py)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
    result: dict[str, dict[str, Any]] = {}
    for phase, phase_settings in parsed.items():
        phase = str(phase)
        if phase not in _CUDA_GRAPH_PHASES:
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config: unknown phase '{phase}', expected one of {_CUDA_GRAPH_PHASES}")
        if not isinstance(phase_settings, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(phase_settings).__name__}")
        if "backend" in phase_settings:
            parse_cuda_graph_backend_arg(phase_settings["backend"])
        allowed = _CUDA_GRAPH_PHASE_KEYS[phase]
        result[phase] = {}
        for key, value in phase_settings.items():
            if key not in allowed:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {allowed}")
            result[phase][key] = value
    return result


_TYPES = {"str": str, "int": int, "float": float, "json": json.loads, "human_int": human_readable_int,
          "nullable_str": nullable_str, "json_list_type": json_list_type,
          "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg, "cuda_graph_backend": parse_cuda_graph_backend_arg,
          "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg}


def _add(container: Any, spec: FlagSpec, prefix_chars: str) -> argparse.Action:
    kwargs: dict[str, Any] = {"dest": spec.field, "default": spec.default, "required": spec.required}
    extra = dict(spec.extra)
    names = list(spec.names)
    if spec.kind in ("store_true", "store_false"):
        kwargs["action"] = spec.kind
    elif spec.kind == "BooleanOptionalAction":
        # argparse adds the --no- spellings itself.
        generated = {"--no-" + n[2:] for n in names if n.startswith("--")}
        names = [n for n in names if n not in generated]
        kwargs["action"] = argparse.BooleanOptionalAction
    elif spec.kind in _BUILTIN_ACTIONS or spec.kind in _CUSTOM_ACTIONS:
        kwargs["action"] = _CUSTOM_ACTIONS.get(spec.kind, spec.kind)
        if spec.kind in _CUSTOM_ACTIONS:
            kwargs.update(extra)  # new_flag, const_value, error_message
        if spec.kind not in ("store_const", "append_const", "count", "version"):
            kwargs["nargs"] = spec.nargs
        if spec.kind not in ("count", "version") and (spec.const is not None or spec.kind in _CUSTOM_ACTIONS):
            kwargs["const"] = spec.const
        if spec.type is not None:
            try:
                kwargs["type"] = _TYPES[spec.type]
            except KeyError:
                raise ValueError(f"flag {names[0]}: unknown type converter {spec.type!r}") from None
        if spec.choices is not None:
            kwargs["choices"] = list(spec.choices)
        kwargs["metavar"] = spec.metavar
    else:
        raise ValueError(f"flag {names[0]}: unknown action {spec.kind!r}")
    kwargs["help"] = spec.help
    action = container.add_argument(*names, **kwargs)
    # What argparse derives (BooleanOptionalAction's "(default: ...)" help suffix, a metavar) is already in
    # the data: set the recorded values, so nothing is derived twice.
    action.help = spec.help
    action.metavar = spec.metavar
    return action


def build_parser(version: str) -> argparse.ArgumentParser:
    settings = parser_settings(version)
    parser = argparse.ArgumentParser(
        prog=settings["prog"], usage=settings["usage"], description=settings["description"],
        epilog=settings["epilog"], prefix_chars=settings["prefix_chars"],
        fromfile_prefix_chars=settings["fromfile_prefix_chars"], conflict_handler=settings["conflict_handler"],
        add_help=settings["add_help"], allow_abbrev=settings["allow_abbrev"],
        exit_on_error=settings["exit_on_error"])
    if settings["mutually_exclusive_groups"]:
        raise ValueError(f"sglang {version}: mutually exclusive groups are not modelled")
    containers: dict[Any, Any] = {parser._positionals.title: parser, parser._optionals.title: parser, None: parser}
    for group in settings["groups"]:
        if group["title"] not in containers:
            containers[group["title"]] = parser.add_argument_group(group["title"], group["description"])
    for spec in table(version):
        if spec.kind == "help":
            continue  # add_help made it
        _add(containers[spec.group], spec, settings["prefix_chars"])
    return parser


def _dest_defaults(version: str) -> dict[str, Any]:
    # argparse's rule: the first action of a dest sets its default; SUPPRESS sets none.
    out: dict[str, Any] = {}
    for spec in table(version):
        if spec.kind != "help" and spec.default != argparse.SUPPRESS:
            out.setdefault(spec.field, spec.default)
    return out


def defaults(version: str) -> dict[str, Any]:
    """ServerArgs field -> default value, for every field this version's command line sets (field order)."""
    dest_defaults = _dest_defaults(version)
    return {field: dest_defaults[dest] for field, dest in server_args_fields(version) if dest in dest_defaults}


# -- --config ------------------------------------------------------------------------------------------------

def _config_keys(action: argparse.Action) -> set[str]:
    return {action.dest} | {o[2:].replace("-", "_") for o in action.option_strings if o.startswith("--")}


def merge_config(argv: list[str], parser: argparse.ArgumentParser, version: str) -> list[str]:
    """Expand `--config FILE` into flags placed before the CLI ones, so that the CLI wins (SGLang's rules)."""
    if "--config" not in argv:
        return argv
    indices = [i for i, arg in enumerate(argv) if arg == "--config"]
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    index = indices[0]
    if index == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = Path(argv[index + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ValueError(f"Config file not found: {path}")
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")

    store_true, unsupported = _config_rules(parser, version)
    config_args: list[str] = []
    for key, value in data.items():
        key_norm = str(key).replace("-", "_")
        if key_norm in unsupported:
            action = unsupported[key_norm]
            raise ValueError(f"Unsupported config option '{key_norm}' with action '{action.__class__.__name__}'")
        if isinstance(value, bool):
            if version == "0.5.6" or key_norm in store_true:
                # 0.5.6 never recognises its boolean actions (it looks for an `.action` attribute argparse
                # actions do not have), so every `true` is a bare flag and every `false` is dropped.
                if value:
                    config_args.append(f"--{key}")
            else:
                config_args.extend([f"--{key}", str(value).lower()])
        elif isinstance(value, list):
            if value:
                config_args.append(f"--{key}")
                config_args.extend(str(item) for item in value)
        elif isinstance(value, dict) and version != "0.5.6":
            config_args.extend([f"--{key}", json.dumps(value)])
        else:
            config_args.extend([f"--{key}", str(value)])
    return config_args + argv[:index] + argv[index + 2:]


def refused_config_keys(parser: argparse.ArgumentParser, version: str) -> frozenset[str]:
    """The keys (underscored) the version's --config merger refuses whatever their value."""
    return frozenset(_config_rules(parser, version)[1])


def _config_rules(parser: argparse.ArgumentParser, version: str) -> tuple[set[str], dict[str, argparse.Action]]:
    """(config keys that are store_true flags, config keys the merger refuses -> their action)."""
    store_true: set[str] = set()
    unsupported: dict[str, argparse.Action] = {}
    if version == "0.5.17":
        # 0.5.17 (sglang/srt/server_args_config_parser.py) keys both maps by dest: store_true dests become bare
        # flags, and a key equal to the dest of an action that is neither store_true nor store is refused.
        # So the current spelling of a renamed flag whose deprecated alias stores into it
        # (`cuda-graph-max-bs-decode`, dest of the alias --cuda-graph-max-bs) is refused in a config file.
        store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
        unsupported = {a.dest: a for a in parser._actions
                       if a.option_strings and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreAction))
                       and not {"--config", "--help", "-h"} & set(a.option_strings)}
    elif version != "0.5.6":
        # 0.5.23 knows the parser: store_true keys become bare flags; actions that are neither store_true
        # nor single-value (e.g. the deprecated store-true flags, nargs=0) are refused.
        supported = [a for a in parser._actions
                     if isinstance(a, argparse._StoreTrueAction) or isinstance(a, argparse._StoreAction)
                     or a.nargs is None]
        supported_keys = {k for a in supported for k in _config_keys(a)}
        store_true = {k for a in parser._actions if isinstance(a, argparse._StoreTrueAction) for k in _config_keys(a)}
        unsupported = {k: a for a in parser._actions
                       if a.option_strings and a not in supported and "--config" not in a.option_strings
                       and "-h" not in a.option_strings
                       for k in _config_keys(a) if k not in supported_keys}
    return store_true, unsupported


def parse_argv(argv: Sequence[str], version: str) -> dict[str, Any]:
    """Parse a launch_server command line into ServerArgs fields, as `ServerArgs.from_cli_args` reads the
    namespace (argparse exits on bad input)."""
    parser = build_parser(version)
    argv = merge_config(list(argv), parser, version)
    namespace = vars(parser.parse_args(argv))
    values = defaults(version)
    for field, dest in server_args_fields(version):
        if dest in namespace:
            values[field] = namespace[dest]
    return values
