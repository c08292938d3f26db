"""SGLang's command line for one emulated version: an `argparse` parser built from `_flags`, and `--config`.

argparse itself produces every error message and exit status (2 for an unknown flag, a bad choice or an
ambiguous prefix), so a tuner sees exactly what the real launcher would print.
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

from ._flags import PROGS, FlagSpec, table


def _warn_deprecated(message: str) -> None:
    # SGLang logs these through `logger.warning` before logging is configured, so they land on stderr bare,
    # in the bold-yellow escape codes of `print_deprecated_warning`.
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr, flush=True)


class DeprecatedStoreTrueAction(argparse.Action):
    """A deprecated flag that still stores True and warns (named as in SGLang: the config parser quotes it)."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, True)


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


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


_TYPES = {"str": str, "int": int, "float": float, "human_int": human_readable_int,
          "cuda_graph_backend": parse_cuda_graph_backend_arg}


def _dest(spec: FlagSpec) -> str:
    if spec.set_dest:
        return spec.field
    return spec.names[0].lstrip("-").replace("-", "_")  # argparse's own rule: first long option


def build_parser(version: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGS.get(version))
    for spec in table(version):
        kwargs: dict[str, Any] = {"help": spec.help}
        if spec.set_dest:
            kwargs["dest"] = spec.field
        if spec.kind == "store_true":
            kwargs.update(action="store_true", default=spec.default)
        elif spec.kind == "deprecated_store_true":
            kwargs.update(action=DeprecatedStoreTrueAction, new_flag=spec.new_flag, default=spec.default)
        else:
            kwargs["type"] = _TYPES[spec.type]
            if spec.default is not None:
                kwargs["default"] = spec.default
            if spec.choices is not None:
                kwargs["choices"] = list(spec.choices)
            if spec.nargs:
                kwargs["nargs"] = spec.nargs
            if spec.required:
                kwargs["required"] = True
        parser.add_argument(*spec.names, **kwargs)
    return parser


def defaults(version: str) -> dict[str, Any]:
    """ServerArgs field -> default value for the flags this version has."""
    out: dict[str, Any] = {}
    for spec in table(version):
        if spec.field == "config":
            continue
        out[spec.field] = spec.default
    return out


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

    store_true: set[str] = set()
    unsupported: dict[str, argparse.Action] = {}
    if version != "0.5.6":
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


def parse_argv(argv: Sequence[str], version: str) -> dict[str, Any]:
    """Parse a launch_server command line into ServerArgs fields (argparse exits on bad input)."""
    parser = build_parser(version)
    argv = merge_config(list(argv), parser, version)
    namespace = parser.parse_args(argv)
    values = defaults(version)
    for spec in table(version):
        if spec.field == "config":
            continue
        values[spec.field] = getattr(namespace, _dest(spec))
    return values
