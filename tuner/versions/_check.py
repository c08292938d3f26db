"""Validate a space against the flags of the server that will really be launched, before any GPU time.

The server command's `--help` is the truth: it lists every flag and its choices for that version.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from .._errors import FlagCheckError, UsageError
from ..engines import RENAMES
from ..flags import build_parser
from ..spec import Spec, did_you_mean

_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)(?:[ =](\{[^}]*\}))?")


@dataclass(frozen=True)
class HelpFlags:
    flags: Mapping[str, tuple[str, ...] | None]  # flag -> choices (None when free-form)
    deprecated: frozenset[str] = frozenset()


@dataclass
class CheckReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    flags_checked: int = 0
    hint: str | None = None  # what to do about the errors as a whole (e.g. another simulator profile)


def parse_help(text: str) -> HelpFlags:
    flags: dict[str, tuple[str, ...] | None] = {}
    deprecated: set[str] = set()
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        found = _OPTION.findall(line) if stripped.startswith("-") or stripped.startswith("[") \
            or stripped.startswith("usage") else []
        if stripped.startswith("-"):
            current = [name[2:] for name, _ in found]
        for name, choices in found:
            key = name[2:]
            parsed = tuple(c.strip() for c in choices[1:-1].split(",")) if choices else None
            if flags.get(key) is None:
                flags[key] = parsed
        if "deprecated" in line.lower():
            deprecated.update(current)
    return HelpFlags(flags, frozenset(deprecated))


def server_help(command: Sequence[str], env: Mapping[str, str], timeout: float = 300.0) -> str:
    try:
        done = subprocess.run([*command, "--help"], capture_output=True, text=True, env=dict(env),
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UsageError(f"server command not found: {command[0]}",
                         "fix server.command in the space file (or --server-python), or install the engine") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"'{' '.join(command)} --help' did not finish in {timeout:g} s",
                         "check that the server command starts") from None
    if done.returncode != 0 or "--" not in done.stdout:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        missing = _MISSING_MODULE.search(last)
        if missing:
            # `python -m sglang.launch_server` where that Python has no SGLang: the engine is not installed.
            found = shutil.which(command[0], path=env.get("PATH"))
            where = f" ({found})" if found and found != command[0] else ""
            raise UsageError(f"the server command '{' '.join(command)}' cannot start: {command[0]}{where} has no "
                             f"module {missing.group(1)}",
                             "install the engine for that Python (pip install -e '.[gpu]' for SGLang) or pass "
                             "--server-python with the Python that has it")
        raise UsageError(f"'{' '.join(command)} --help' failed (exit {done.returncode}): {last}",
                         "check server.command and the environment it runs in")
    return done.stdout


_MISSING_MODULE = re.compile(r"No module named '?([\w.]+)'?")


@lru_cache(maxsize=None)
def version_help(version: str) -> HelpFlags:
    """The flags of an SGLang version the tuner ships a table of, as that version's --help lists them."""
    return parse_help(build_parser(version).format_help())


def check_flags(spec: Spec, help_flags: HelpFlags) -> CheckReport:
    """Every flag the space can pass, and every choice it can give, checked against the server's --help."""
    report = CheckReport()
    known = help_flags.flags
    wanted: dict[str, list[object]] = {}
    for name, value in spec.server.fixed.items():
        wanted.setdefault(name, []).append(value)
    for p in spec.space.params.values():
        if p.env:
            continue
        values: list[object] = list(p.choices) if p.type == "categorical" else []
        wanted.setdefault(p.name, []).extend(values)
    for name, values in wanted.items():
        report.flags_checked += 1
        if name not in known:
            report.errors.append(_unknown(name, known))
            continue
        if name in help_flags.deprecated:
            alt = RENAMES.get(name)
            report.warnings.append(f"--{name} is deprecated in this version" + (f"; write --{alt[0]}" if alt else ""))
        choices = known[name]
        if choices:
            for value in values:
                if value is None or isinstance(value, bool):
                    continue
                if str(value) not in choices:
                    hint = did_you_mean(str(value), choices)
                    report.errors.append(f"--{name} {value}: invalid choice for this server "
                                         f"(choose from {', '.join(choices)})" + (f"; {hint}" if hint else ""))
    return report


def _unknown(name: str, known: Mapping[str, object]) -> str:
    prefixed = sorted(k for k in known if k.startswith(name))
    for alt in RENAMES.get(name, ()):
        if alt.startswith("env "):
            return f"--{name} does not exist in this version; set {alt[4:]} instead"
        if alt in known:
            if prefixed:
                return (f"--{name} is ambiguous in this version (matches {', '.join('--' + p for p in prefixed)}); "
                        f"write --{alt} instead")
            return f"--{name} is not accepted by this version (renamed); write --{alt} instead"
    if len(prefixed) == 1:  # argparse would take the abbreviation, but a space should say what it means
        return f"--{name} is not a flag of this server; did you mean --{prefixed[0]}?"
    if prefixed:
        return f"--{name} is ambiguous in this version (matches {', '.join('--' + p for p in prefixed)})"
    hint = did_you_mean(name, known)
    return f"--{name} is not a flag of this server" + (f"; {hint}" if hint else "")


def raise_on_errors(report: CheckReport) -> None:
    if report.errors:
        first = report.errors[0]
        more = f" (and {len(report.errors) - 1} more: run 'python -m tuner check')" if len(report.errors) > 1 else ""
        raise FlagCheckError(first + more + (f"; {report.hint}" if report.hint else ""))


def versions_taking(spec: Spec) -> list[str]:
    """The SGLang versions the tuner has flag tables of that take every flag and choice of the space."""
    from ..engines import versions

    return [v for v in versions() if not check_flags(spec, version_help(v)).errors]
