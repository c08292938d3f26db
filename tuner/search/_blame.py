"""What a set of finished trials shows: which values ran, and where each failed trial puts its blame.

The sampler learns P(runs | flags) from it (tuner/search/_tpe.py, `RunOdds`), and a study's lessons are the
suspects it blames (tuner/search/_lessons.py), which `tuner show` lists and a study's knowledge keeps for later
studies (tuner/search/_knowledge.py): one set of rules for all, so a lesson shown or carried over says what the
sampler itself concluded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial

from .._failures import FailureKind

# The share of a failure's blame that goes to ordered flags (numbers: sizes, fractions, limits) when unordered
# choices (backends, dtypes, switches) are suspects too. Running out of memory is what a larger size or
# fraction does; NaN, garbage and a failed capture are what a kernel does.
_ORDERED_SHARE = {FailureKind.OOM: 0.75, FailureKind.NAN: 0.25, FailureKind.GARBAGE: 0.25,
                  FailureKind.GRAPH_CAPTURE_FAILED: 0.25, FailureKind.WRONG_ANSWER: 0.25,
                  FailureKind.INCONSISTENT_LOGPROBS: 0.25}
UP, DOWN, AT = 1, -1, 0  # a blame on an ordered flag covers its value and those above, below, or it alone


# Each flag, with the value that turns CUDA graph capture off (SGLang's, then vLLM's).
_GRAPHS_OFF = {"disable-cuda-graph": True, "disable-decode-cuda-graph": True, "cuda-graph-backend-decode": "disabled",
               "enforce-eager": True}


def captures_graphs(params: Mapping[str, Any]) -> bool:
    """Whether a configuration captures CUDA graphs: no flag that turns capture off is set to do so."""
    return not any(params.get(flag) == value for flag, value in _GRAPHS_OFF.items())


# A failure that names its fix: SGLang's "Not enough memory. Please try to increase --mem-fraction-static."
# (model_runner.py, no memory left for the KV cache once the weights are loaded: a model split over too few
# GPUs at a fraction too small for it), vLLM's "No available memory for the cache blocks. Try increasing
# `gpu_memory_utilization`" and "... or decreasing `max_model_len`" (v1/core/kv_cache_utils.py). Blamed by
# the rules for running out of memory, the first pointed at the larger fractions, the ones that would run.
_FIX = re.compile(r"\b(increas|decreas)(?:e|ing) (?:--|`)([a-z0-9][a-z0-9_-]*)")


def _named_fixes(trial: FrozenTrial) -> list[tuple[str, int]]:
    """The flags the failure's message asks to change, each with the side its failed value is on: DOWN for
    one to increase (it and smaller values are to blame), UP for one to decrease."""
    return [(flag.replace("_", "-"), DOWN if verb == "increas" else UP)
            for verb, flag in _FIX.findall(str(trial.user_attrs.get("failure_message", "")))]


@dataclass(frozen=True)
class Blame:
    """A failed trial's blame on one suspect, and its share of the trial's blame (a trial's shares add up to 1).
    A choice alone, an ordered value with the side of it that is suspect, or a pair of the two: the choice
    together with the ordered flag beyond every value it ran with."""

    weight: float
    choice: tuple[str, Any] | None = None  # (flag, choice_key(value)) of an unordered flag
    ordered: tuple[str, float, int] | None = None  # (flag, value, side) of an ordered one
    shared: bool = False  # nothing in the trial was unproven: shared by all its values, none singled out


@dataclass
class Shown:
    """What a set of trials shows to run, and the blame each failed one puts on what did not (the rules are
    RunOdds's, tuner/search/_tpe.py)."""

    failed: list[FrozenTrial]
    base: float  # the overall run rate, drawn towards 1/2
    runs: dict[tuple[str, Any], int]  # by choice: the trials that ran with it
    ran_values: dict[str, list[float]]  # by ordered flag: its values in the trials that ran
    ran_with: dict[tuple[tuple[str, Any], str], list[float]]  # by (choice, ordered flag): its values with the choice

    @classmethod
    def of(cls, trials: Sequence[FrozenTrial]) -> Shown:
        """Trials refused for breaking a declared constraint are not failures of any choice."""
        counted = [t for t in trials if t.user_attrs.get("failure_kind") != FailureKind.INVALID_CONFIG]
        ran = [t for t in counted if violation(t) <= 0]
        failed = [t for t in counted if violation(t) > 0]
        runs: dict[tuple[str, Any], int] = {}
        ran_values: dict[str, list[float]] = {}
        ran_with: dict[tuple[tuple[str, Any], str], list[float]] = {}
        for t in ran:
            choices, values = _choices(t), _ordered(t)
            for choice in choices:
                runs[choice] = runs.get(choice, 0) + 1
            for name, value in values.items():
                ran_values.setdefault(name, []).append(value)
                for choice in choices:
                    ran_with.setdefault((choice, name), []).append(value)
        return cls(failed, (len(ran) + 1) / (len(counted) + 2), runs, ran_values, ran_with)

    def blames(self, t: FrozenTrial) -> list[Blame]:
        """Where a failed trial puts its blame (RunOdds's docstring has the rules)."""
        choices, values = _choices(t), _ordered(t)
        weight = 1.0  # of the blame, what the rules below share out
        out = []
        if fixes := [(name, side) for name, side in _named_fixes(t) if name in values]:
            # Half on the values the message calls too small (or too large) and those beyond them; half as
            # for any other failure, over the rest (the split may need more GPUs than a fraction makes up for).
            weight = 0.5
            out += [Blame(weight / len(fixes), ordered=(name, values.pop(name), side)) for name, side in fixes]
        suspects = [c for c in choices if c not in self.runs]
        ordered_suspects = [(name, value, side) for name, value in values.items()
                            if (side := _unproven_side(value, self.ran_values.get(name, ()))) is not None]
        shared = False
        if not suspects and not ordered_suspects:  # an interaction of flags that each ran elsewhere
            # A choice that ran, but never with a value this far (an FP8 KV cache that ran at batch 64 and
            # gives NaN at 512, where the default dtype runs): the pair is to blame, not either alone.
            pairs = [(c, name, value, side) for c in choices for name, value in values.items()
                     if (side := _unproven_side(value, self.ran_with.get((c, name), ()))) is not None]
            if pairs:
                return out + [Blame(weight / len(pairs), choice=c, ordered=(name, value, side))
                              for c, name, value, side in pairs]
            suspects, ordered_suspects, shared = choices, [(name, value, AT) for name, value in values.items()], True
        share = _ORDERED_SHARE.get(t.user_attrs.get("failure_kind"), 0.5) if suspects else 1.0
        if not ordered_suspects:
            share = 0.0
        out += [Blame(weight * (1.0 - share) / len(suspects), choice=c, shared=shared) for c in suspects]
        out += [Blame(weight * share / len(ordered_suspects), ordered=(name, value, side), shared=shared)
                for name, value, side in ordered_suspects]
        return out


def _unproven_side(value: float, ran: Sequence[float]) -> int | None:
    """Where a failed value lies beyond every value that ran, if it does. Never run at all: above (larger
    sizes and fractions are what run out of memory and meet untested batch shapes)."""
    above = any(r >= value for r in ran)
    below = any(r <= value for r in ran)
    if not above:
        return UP
    if not below:
        return DOWN
    return None


def is_ordered(dist: BaseDistribution) -> bool:
    """A flag of numbers (a size, a fraction, a limit), where a failure speaks of a range of values."""
    if isinstance(dist, (optuna.distributions.IntDistribution, optuna.distributions.FloatDistribution)):
        return True
    return isinstance(dist, optuna.distributions.CategoricalDistribution) and all(map(is_number, dist.choices))


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(trial: FrozenTrial) -> dict[str, float]:
    return {name: float(value) for name, value in trial.params.items()
            if (dist := trial.distributions.get(name)) is not None and is_ordered(dist)}


def _choices(trial: FrozenTrial) -> list[tuple[str, Any]]:
    """The trial's unordered choices."""
    return [(name, choice_key(value)) for name, value in trial.params.items()
            if isinstance(dist := trial.distributions.get(name), optuna.distributions.CategoricalDistribution)
            and not is_ordered(dist)]


def choice_key(value: Any) -> Any:
    """A hashable stand-in for a choice (choices are str, int, float, bool or None)."""
    return (type(value).__name__, value)


def violation(trial: FrozenTrial) -> float:
    """How far the trial breaks its constraints (the worker's FEASIBILITY one): above 0 where its server failed."""
    return sum(v for v in trial.constraints.values() if v > 0)
