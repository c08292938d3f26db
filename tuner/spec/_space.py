"""Stage 1 of a trial: the search space — what may be tried, and turning a sample into a server config.

A space file names the flags (and environment variables) to search, their types and ranges,
conditions between them, declarative constraints, and the known-good baseline. Nothing in it is
evaluated as code.
"""

from __future__ import annotations

import json
import math
import random
from decimal import Decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import SpaceError
from .._redact import redact_env, redact_flags
from ._schema import Section, check_type, did_you_mean

PARAM_TYPES = ("categorical", "int", "float", "bool", "list")
CONSTRAINT_KINDS = ("product", "divides", "at-most", "forbid")

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    env: bool = False
    choices: tuple[Scalar, ...] = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    when: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    # A list parameter is derived, not sampled: the values up to another parameter's value.
    up_to: str | None = None
    values: tuple[int, ...] = ()

    @property
    def sampled(self) -> bool:
        return self.type != "list"

    def tidy(self, value: Any) -> Any:
        """A float on a step grid, without the float noise of low + k * step (0.9000000000000001 -> 0.9)."""
        if self.type != "float" or not self.step or not isinstance(value, float):
            return value
        decimals = max(-Decimal(repr(x)).as_tuple().exponent for x in (self.step, self.low, 1))
        return round(value, decimals)

    def contains(self, value: Any) -> bool:
        if self.type == "categorical":
            return value in self.choices
        if self.type == "bool":
            return isinstance(value, bool)
        if self.type in ("int", "float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            if not (self.low - 1e-9 <= value <= self.high + 1e-9):
                return False
            if self.step:
                k = (value - self.low) / self.step
                return abs(k - round(k)) < 1e-6
            return self.type == "float" or float(value).is_integer()
        return True

    def grid(self, dense: int = 12) -> list[Scalar]:
        """Finite set of values, for satisfiability checks and exhaustive evaluation."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "bool":
            return [False, True]
        if self.step:
            n = int(round((self.high - self.low) / self.step))
            vals = [self.tidy(self.low + i * self.step) for i in range(n + 1)]
        elif self.type == "int" and self.high - self.low <= dense:
            vals = list(range(int(self.low), int(self.high) + 1))
        elif self.log:
            r = self.high / self.low
            vals = [self.low * r ** (i / (dense - 1)) for i in range(dense)]
        else:
            vals = [self.low + (self.high - self.low) * i / (dense - 1) for i in range(dense)]
        if self.type == "int":
            return sorted({int(round(v)) for v in vals})
        return [round(v, 10) for v in vals]


@dataclass(frozen=True)
class Constraint:
    kind: str
    operands: tuple[str | float, ...] = ()
    limit: str | float | None = None
    forbid: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "product":
            return f"{' x '.join(map(str, self.operands))} <= {self.limit}"
        if self.kind == "divides":
            return f"{self.operands[0]} divides {self.operands[1]}"
        if self.kind == "at-most":
            return f"{self.operands[0]} <= {self.operands[1]}"
        return "not (" + ", ".join(f"{k} in {list(v)}" for k, v in self.forbid.items()) + ")"


@dataclass(frozen=True)
class ServerConfig:
    """What one trial launches: flags (name without dashes prefix -> value) and environment."""

    flags: Mapping[str, Any]
    env: Mapping[str, str]

    def key(self) -> str:
        """Canonical identity: two samples that launch the same server share it. It is recorded, so secret
        values are masked: a token does not change what a configuration measures."""
        return json.dumps({"flags": redact_flags(dict(sorted(self.flags.items()))),
                           "env": redact_env(dict(sorted(self.env.items())))}, sort_keys=True, default=str)


class Space:
    """Parameters, constraints and baseline of one search."""

    def __init__(self, params: Sequence[Param], constraints: Sequence[Constraint],
                 fixed: Mapping[str, Any], fixed_env: Mapping[str, str], gpus: int | None,
                 baseline: Mapping[str, Any] | None) -> None:
        self.params = {p.name: p for p in params}
        self.order = _dependency_order(self.params)
        self.constraints = tuple(constraints)
        self.fixed = dict(fixed)
        self.fixed_env = dict(fixed_env)
        self.gpus = gpus
        self.baseline = dict(baseline) if baseline is not None else None
        for c in self.constraints:
            for name in [*c.operands, *c.forbid, c.limit]:
                if isinstance(name, str) and name != "gpus" and name not in self.params \
                        and name not in self.fixed and name not in _IMPLICIT_ONE:
                    raise SpaceError("constraints", f"'{name}' is neither a parameter nor a fixed flag",
                                     did_you_mean(name, [*self.params, *self.fixed])
                                     or "name a parameter under params or a flag under server.fixed")

    # -- sampling ---------------------------------------------------------------------------------
    def active(self, param: Param, values: Mapping[str, Any]) -> bool:
        for other, allowed in param.when.items():
            value = values.get(other, self.fixed.get(other))
            if value not in allowed:
                return False
        return True

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Ask an Optuna trial for a value of every active parameter, in dependency order."""
        values: dict[str, Any] = {}
        for name in self.order:
            p = self.params[name]
            if not p.sampled or not self.active(p, values):
                continue
            if p.type == "categorical":
                values[name] = trial.suggest_categorical(name, list(p.choices))
            elif p.type == "bool":
                values[name] = trial.suggest_categorical(name, [False, True])
            elif p.type == "int":
                values[name] = trial.suggest_int(name, low=int(p.low), high=int(p.high),
                                                 step=int(p.step or 1), log=p.log)
            else:
                values[name] = p.tidy(trial.suggest_float(name, low=p.low, high=p.high, step=p.step, log=p.log))
        return values

    def random_sample(self, rng: random.Random) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in self.order:
            p = self.params[name]
            if p.sampled and self.active(p, values):
                values[name] = rng.choice(p.grid())
        return values

    def grid_points(self, limit: int = 200_000) -> list[dict[str, Any]] | None:
        """Every point of the discretised space, or None if there are more than `limit`."""
        points: list[dict[str, Any]] = [{}]
        for name in self.order:
            p = self.params[name]
            if not p.sampled:
                continue
            grid = p.grid()
            nxt = []
            for pt in points:
                if self.active(p, pt):
                    nxt.extend({**pt, name: v} for v in grid)
                else:
                    nxt.append(pt)
            points = nxt
            if len(points) > limit:
                return None
        return points

    # -- constraints -------------------------------------------------------------------------------
    def violations(self, values: Mapping[str, Any]) -> list[str]:
        """The constraints a sample breaks, described for a person."""
        return [c.describe() for c in self.constraints if not self._holds(c, values)]

    def _operand(self, name: str | float, values: Mapping[str, Any]) -> Any:
        if not isinstance(name, str):
            return name
        if name == "gpus":
            return self.gpus
        if name in values:
            return values[name]
        if name in self.fixed:
            return self.fixed[name]
        return 1 if name in _IMPLICIT_ONE else None

    def _holds(self, c: Constraint, values: Mapping[str, Any]) -> bool:
        if c.kind == "forbid":
            return not all(self._operand(k, values) in allowed for k, allowed in c.forbid.items())
        nums = [self._operand(o, values) for o in c.operands]
        if c.kind == "product":
            limit = self._operand(c.limit, values)
            if limit is None:
                return True
            return math.prod(1 if n is None else n for n in nums) <= limit
        a, b = nums
        if a is None or b is None:
            return True
        if c.kind == "divides":
            return a != 0 and b % a == 0
        return a <= b

    def check_satisfiable(self) -> None:
        """Refuse, before launching anything, a space whose constraints exclude every point."""
        if not self.constraints:
            return
        points = self.grid_points()
        if points is None:
            rng = random.Random(0)
            points = (self.random_sample(rng) for _ in range(20_000))
        if not any(not self.violations(p) for p in points):
            raise SpaceError("constraints", "no configuration of the space satisfies them all "
                             f"({'; '.join(c.describe() for c in self.constraints)})",
                             "widen the parameter ranges or relax a constraint")

    # -- configs -----------------------------------------------------------------------------------
    def config(self, values: Mapping[str, Any]) -> ServerConfig:
        """The flags and environment a sample launches with (inactive parameters left out)."""
        flags = dict(self.fixed)
        env = dict(self.fixed_env)
        for name in self.order:
            p = self.params[name]
            if p.type == "list":
                if not self.active(p, values):
                    continue
                top = values.get(p.up_to, self.fixed.get(p.up_to))
                if top is None:
                    continue
                value: Any = [v for v in p.values if v <= top]
            elif name in values:
                value = p.tidy(values[name])
            else:
                continue
            if p.env:
                if value is not None:
                    env[name] = _env_text(value)
            else:
                flags[name] = value
        return ServerConfig(flags, env)

    def check_baseline(self) -> None:
        if self.baseline is not None:
            self.check_point(self.baseline, "baseline")

    def check_point(self, point: Mapping[str, Any], path: str) -> None:
        """Refuse a configuration (the baseline, one to try first) that lies outside the space."""
        for name in point:
            if name not in self.params:
                raise SpaceError(f"{path}.{name}", "is not a parameter of the space",
                                 did_you_mean(name, self.params) or f"list only parameters under {path}")
        for name in self.order:
            p = self.params[name]
            if not p.sampled:
                continue
            active = self.active(p, point)
            if active and name not in point:
                raise SpaceError(f"{path}.{name}", "is missing", f"give the value of '{name}'")
            if not active and name in point:
                raise SpaceError(f"{path}.{name}", "is set but the parameter is inactive here "
                                 "(its 'when' does not hold)", f"remove '{name}' from {path}")
            if active and not p.contains(point[name]):
                raise SpaceError(f"{path}.{name}", f"{point[name]!r} is outside the space",
                                 f"use a value allowed by params.{name}")
        broken = self.violations(point)
        if broken:
            raise SpaceError(path, f"breaks the constraint {broken[0]}", f"fix the values under {path}")


# Parallel sizes default to 1 when a configuration does not set them.
_IMPLICIT_ONE = frozenset({"tp-size", "dp-size", "pp-size", "ep-size", "attn-dp-size",
                           "tensor-parallel-size", "data-parallel-size", "pipeline-parallel-size"})


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _dependency_order(params: Mapping[str, Param]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise SpaceError(f"params.{name}.when", f"conditions form a cycle ({' -> '.join(chain + [name])})",
                             "make the conditions depend one way only")
        state[name] = 1
        p = params[name]
        deps = list(p.when) + ([p.up_to] if p.up_to else [])
        for dep in deps:
            if dep in params:
                visit(dep, chain + [name])
        state[name] = 2
        order.append(name)

    for name in params:
        visit(name, [])
    return order


# -- parsing ----------------------------------------------------------------------------------------
def parse_params(section: Section, fixed: Mapping[str, Any]) -> list[Param]:
    params = []
    for name, raw in section.data.items():
        path = section.child(str(name))
        if not isinstance(name, str) or not name or name.startswith("-"):
            raise SpaceError(path, "a parameter name must be a flag name without leading dashes "
                             "or an environment variable name", "write e.g. 'mem-fraction-static:'")
        params.append(_parse_param(name, Section(raw, path)))
    section.done(allowed=section.data.keys())
    names = {p.name for p in params}
    for p in params:
        for dep in p.when:
            if dep not in names and dep not in fixed:
                raise SpaceError(f"{section.child(p.name)}.when.{dep}", "names no parameter or fixed flag",
                                 did_you_mean(dep, names) or "name a parameter declared under params")
        if p.up_to and p.up_to not in names and p.up_to not in fixed:
            raise SpaceError(f"{section.child(p.name)}.up-to", f"'{p.up_to}' names no parameter",
                             did_you_mean(p.up_to, names) or "name an int parameter")
    return params


def _parse_param(name: str, s: Section) -> Param:
    ptype = s.get("type", str)
    if ptype not in PARAM_TYPES:
        raise SpaceError(s.child("type"), f"unknown type '{ptype}'",
                         did_you_mean(ptype, PARAM_TYPES) or f"use one of {', '.join(PARAM_TYPES)}")
    env = s.get("env", bool, name.isupper())
    when = _parse_when(s)
    kwargs: dict[str, Any] = {}
    if ptype == "categorical":
        choices = s.get("choices", list)
        if not choices:
            raise SpaceError(s.child("choices"), "is empty", "list at least one choice")
        for i, c in enumerate(choices):
            check_type(c, (str, int, float, bool, type(None)), f"{s.child('choices')}[{i}]")
        if len(set(map(repr, choices))) != len(choices):
            raise SpaceError(s.child("choices"), "lists a choice twice", "list each choice once")
        kwargs["choices"] = tuple(choices)
    elif ptype in ("int", "float"):
        num = int if ptype == "int" else float
        low, high = s.get("low", num), s.get("high", num)
        step = s.get("step", num, None)
        log = s.get("log", bool, False)
        if low > high:
            raise SpaceError(s.path, f"low ({low}) is greater than high ({high})", "swap them")
        if step is not None and step <= 0:
            raise SpaceError(s.child("step"), "must be positive", "give a step > 0")
        if log and low <= 0:
            raise SpaceError(s.child("low"), "must be positive for a log scale", "raise low above 0")
        if log and step is not None:
            raise SpaceError(s.path, "log and step cannot be combined", "drop one of them")
        kwargs.update(low=low, high=high, step=step, log=log)
    elif ptype == "list":
        kwargs["up_to"] = s.get("up-to", str)
        values = s.get("values", list)
        for i, v in enumerate(values):
            check_type(v, int, f"{s.child('values')}[{i}]")
        if not values:
            raise SpaceError(s.child("values"), "is empty", "list the candidate values")
        kwargs["values"] = tuple(sorted(values))
    s.done(allowed=["help"])
    return Param(name=name, type=ptype, env=env, when=when, **kwargs)


def _parse_when(s: Section) -> dict[str, tuple[Scalar, ...]]:
    raw = s.get("when", dict, {})
    out = {}
    for dep, allowed in raw.items():
        out[str(dep)] = tuple(allowed) if isinstance(allowed, list) else (allowed,)
    return out


def parse_constraints(raw: list, path: str) -> list[Constraint]:
    out = []
    for i, item in enumerate(raw):
        s = Section(item, f"{path}[{i}]")
        kinds = [k for k in CONSTRAINT_KINDS if k in s.data]
        if len(kinds) != 1:
            unknown = [k for k in s.data if k not in CONSTRAINT_KINDS and k not in ("max", "help")]
            hint = did_you_mean(str(unknown[0]), CONSTRAINT_KINDS) if unknown else ""
            raise SpaceError(s.path, "must have exactly one of " + ", ".join(CONSTRAINT_KINDS),
                             hint or "e.g. '- product: [tp-size, dp-size]\\n  max: gpus'")
        kind = kinds[0]
        if kind == "forbid":
            forbid = Section(s.get("forbid", dict), s.child("forbid"))
            mapping = {str(k): tuple(v) if isinstance(v, list) else (v,) for k, v in forbid.data.items()}
            if not mapping:
                raise SpaceError(s.child("forbid"), "is empty", "name the flag values that may not occur together")
            out.append(Constraint(kind, forbid=mapping))
        else:
            operands = s.get(kind, list)
            for j, o in enumerate(operands):
                check_type(o, (str, int, float), f"{s.child(kind)}[{j}]")
            if kind == "product":
                limit = s.get("max", (str, int, float))
                if not operands:
                    raise SpaceError(s.child(kind), "is empty", "list the sizes to multiply")
                out.append(Constraint(kind, tuple(operands), limit))
            else:
                if len(operands) != 2:
                    raise SpaceError(s.child(kind), "takes exactly two operands", f"write '{kind}: [a, b]'")
                out.append(Constraint(kind, tuple(operands)))
        s.done(allowed=["help"])
    return out
