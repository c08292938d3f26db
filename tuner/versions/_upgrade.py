"""`tuner space upgrade --to VERSION SPACE`: the space rewritten in another SGLang version's flags.

What each version takes comes from its parser's table (tuner/engines/_sglang_versions.py); a flag the target
lacks, or calls deprecated, is renamed where RENAMES names a flag the target has, a fixed deprecated flag is
respelled as `export` respells it (the engine's `respell`), and a flag that became an environment variable
moves to server.env. The rest (a removed flag, a choice the target lacks) is named, and nothing is written.
The result must load and pass the target's flags, or it is not written either.

The text itself is rewritten by tuner/spec/_space_text.py (comments kept where only names change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import SpaceError, UsageError
from .._files import write_atomically
from ..engines import NOTES, RENAMES, Flag, flags, get_engine, listed, release, versions
from ..spec import Spec, load_spec, parse_spec, rewrite
from ._check import check_flags, version_help, versions_taking


@dataclass
class Plan:
    """What the rewrite does to one space."""

    renames: dict[str, str] = field(default_factory=dict)  # flag -> new name, wherever it stands
    fixed: dict[str, Any] | None = None  # server.fixed anew, where a fixed flag is respelled or moved
    env: dict[str, str] = field(default_factory=dict)  # server.env entries added
    changes: list[str] = field(default_factory=list)  # what was done, one line each
    notes: list[str] = field(default_factory=list)  # what differs after it
    manual: list[str] = field(default_factory=list)  # what cannot be done automatically


@dataclass(frozen=True)
class Upgraded:
    text: str
    source: str
    target: str
    changes: tuple[str, ...]
    notes: tuple[str, ...]


def upgrade_space(path: Path, to: str, source: str | None = None, shown_as: str | None = None) -> Upgraded:
    """The space at `path` rewritten for SGLang `to`; UsageError naming whatever cannot be rewritten."""
    known = versions()
    if to not in known:
        raise UsageError(f"--to {to}: the tuner has the flags of SGLang {listed(known)} only",
                         f"pass --to {known[-1]}, say")
    text = _read(path)
    spec = load_spec(path)
    if spec.engine != "sglang":
        raise UsageError(f"{path} is a space for {spec.engine}", "space upgrade rewrites SGLang spaces only")
    source = _source_version(spec, path, to, source)
    if source == to:
        return Upgraded(text, source, to, (), (f"{path} is written for SGLang {to} already: nothing to change",))
    plan = _plan(spec, source, to)
    if plan.manual:
        raise UsageError(f"{path} cannot be rewritten for SGLang {to} automatically: {'; '.join(plan.manual)}",
                         "change those in the space by hand, then run this again")
    header = [f"Rewritten for SGLang {to} from the SGLang {source} space by "
              f"`python -m tuner space upgrade --to {to} {shown_as or path}`.", *plan.notes]
    new_text = rewrite(text, plan.renames, plan.fixed, plan.env, to, header)
    _check_result(new_text, path, to)
    return Upgraded(new_text, source, to, tuple(plan.changes), tuple(plan.notes))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise SpaceError("", f"space file {path} does not exist", "pass an existing space file") from None
    except OSError as exc:
        raise SpaceError("", f"cannot read space file {path}: {exc.strerror}", "check the path") from None


def _source_version(spec: Spec, path: Path, to: str, asked: str | None) -> str:
    """--from, else the space's sglang-version, else the one other version whose flags take all of it."""
    known = versions()
    source = asked or spec.sglang_version
    if source is None:
        fits = versions_taking(spec)
        others = [v for v in fits if v != to]
        if len(others) == 1:
            return others[0]
        if fits == [to]:
            return to
        raise UsageError(f"cannot tell which SGLang version {path} is written for (the flags of "
                         f"{listed(known)} take {'all of it' if others else 'none of it whole'})",
                         f"add sglang-version: \"X\" to it, or pass --from X ({' or '.join(known)})")
    if source not in known:
        raise UsageError(f"{path} is written for SGLang {source}, and the tuner has the flags of "
                         f"{listed(known)} only", "pass --from with one of those, or rename the flags by hand")
    errors = check_flags(spec, version_help(source)).errors
    if errors:
        raise UsageError(f"{path} does not pass SGLang {source}'s own flags: {errors[0]}",
                         "fix that first, or pass --from with the version it is written for")
    return source


def _plan(spec: Spec, source: str, to: str) -> Plan:
    plan = Plan()
    have, want = flags(source), flags(to)
    searched = {name for name, p in spec.space.params.items() if not p.env}
    fixed = dict(spec.server.fixed)
    for name in sorted(searched | set(fixed)):
        where = f"params.{name}" if name in searched else f"server.fixed.{name}"
        kept = want.get(name)
        if kept is not None and not kept.deprecated:
            continue
        new = next((alt for alt in RENAMES.get(name, ()) if alt in want and not want[alt].deprecated), None)
        env = next((alt[4:] for alt in RENAMES.get(name, ()) if alt.startswith("env ")), None)
        why = f"SGLang {to} calls --{name} deprecated" if kept is not None else f"SGLang {to} has no --{name}"
        if new is not None:
            plan.renames[name] = new
            plan.changes.append(f"{where}: --{name} -> --{new} ({why})")
            if (name, new) in NOTES:
                plan.notes.append(f"--{new} for --{name}: {NOTES[name, new]}")
        elif name in fixed and kept is not None and _respell(fixed, name, searched, plan, to):
            continue
        elif name in fixed and env is not None:
            var, _, value = env.partition("=")
            if fixed.pop(name):
                plan.env[var] = value
            plan.fixed = fixed
            plan.changes.append(f"{where}: --{name} -> server.env {var}={value} (SGLang {to} has no --{name})")
        elif kept is not None:
            spelled = f"; its help says: {kept.new_spelling}" if kept.new_spelling else ""
            plan.notes.append(f"--{name} is deprecated in SGLang {to}, which still takes it{spelled}")
        elif env is not None:
            plan.manual.append(f"{where}: SGLang {to} has no --{name}, the environment variable {env.partition('=')[0]} "
                               f"took over: search that instead ({env.partition('=')[0]}: {{type: categorical, "
                               f"choices: [\"0\", \"1\"]}})")
        else:
            since = (f"removed after {source}" if release(to) > release(source) else f"added after {to}") \
                if name in have else "nor of the space's version"
            plan.manual.append(f"{where}: SGLang {to} has no --{name} ({since}): drop it or write it another way")
    plan.manual += _bad_choices(spec, plan, want, to)
    return plan


def _bad_choices(spec: Spec, plan: Plan, want: Mapping[str, Flag], to: str) -> list[str]:
    """Values of the space that the target's flag (under its new name) does not take as a choice."""
    out = []
    values = {name: (f"params.{name}.choices", list(p.choices)) for name, p in spec.space.params.items()
              if p.type == "categorical" and not p.env}
    values.update({name: (f"server.fixed.{name}", [v]) for name, v in spec.server.fixed.items()})
    for name, (where, given) in sorted(values.items()):
        flag = want.get(plan.renames.get(name, name))
        if flag is None or not flag.choices:
            continue
        bad = [str(v) for v in given if v is not None and not isinstance(v, bool) and str(v) not in flag.choices]
        if bad:
            out.append(f"{where}: {', '.join(bad)} {'is not a choice' if len(bad) == 1 else 'are not choices'} of "
                       f"--{flag.name} in SGLang {to} (it takes {', '.join(flag.choices)})")
    return out


def _respell(fixed: dict[str, Any], name: str, searched: set[str], plan: Plan, to: str) -> bool:
    """A fixed deprecated flag in the spelling `export` writes for --config (the engine's respell), where that
    spelling involves no searched parameter."""
    respelled, stays = get_engine("sglang").respell(fixed, frozenset({name}))
    touched = {k for k in set(respelled) ^ set(fixed)} | {k for k in respelled if respelled[k] != fixed.get(k)}
    if stays or touched & searched:
        return False
    fixed.clear()
    fixed.update(respelled)
    plan.fixed = fixed
    new = ", ".join(f"{k}: {v}" for k, v in respelled.items() if k in touched)
    plan.changes.append(f"server.fixed.{name}: -> {new} (deprecated in SGLang {to}; as `export` writes it)")
    return True


def _check_result(text: str, path: Path, to: str) -> None:
    try:
        spec = parse_spec(text, f"{path} rewritten")
    except SpaceError as exc:
        raise UsageError(f"{path} rewritten for SGLang {to} does not load ({exc})",
                         "change it by hand where the message says") from None
    errors = check_flags(spec, version_help(to)).errors
    if errors:
        raise UsageError(f"{path} cannot be rewritten for SGLang {to} automatically: {'; '.join(errors)}",
                         "change those in the space by hand, then run this again")


def upgrade_command(space: str, to: str, source: str | None, out: str | None) -> None:
    """The command line's `space upgrade`: the rewritten space on stdout or in --out, what changed on stderr."""
    import sys

    upgraded = upgrade_space(Path(space), to, source, shown_as=space)
    if out is None:
        sys.stdout.write(upgraded.text)
    else:
        write_atomically(Path(out), upgraded.text)
    for line in upgraded.changes:
        print(f"changed: {line}", file=sys.stderr)
    for line in upgraded.notes:
        print(f"note: {line}", file=sys.stderr)
    if out is not None:
        print(f"wrote {out}: {space} for SGLang {upgraded.target}", file=sys.stderr)
