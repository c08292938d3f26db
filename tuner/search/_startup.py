"""How long a configuration's start-up is expected to take, from what the study knows: the readiness its own
interrupted attempts spent, and the start-ups of the most similar configurations.

Used before a trial launches its server (tuner/search/_worker.py): a configuration whose start-up cannot
finish is judged without a restart, and one that does not fit in what is left of `run --timeout` waits for
the next run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from .._failures import FailureKind

# How many parameters may differ for a configuration to count as similar. One flag (torch.compile, CUDA graphs)
# can decide a start-up, so a neighbour one or two flags away says much; one that differs in half the flags says
# little (the real study's trial 0 started in 281 s with cold JIT caches, three flags from a torch.compile
# configuration). Only the nearest count: a nearer neighbour knows more than many farther ones.
SIMILAR_WITHIN = 2


@dataclass(frozen=True)
class Known:
    """A finished trial's start-up: how long its readiness took, or, where it timed out, at least the limit."""

    number: int
    seconds: float
    timed_out: bool
    first: bool = False  # its run's first server: it paid the one-off compiles (JIT, kernels) of a fresh machine


@dataclass(frozen=True)
class Startup:
    """What is known of one configuration's start-up."""

    spent: float  # the longest readiness of its interrupted attempts: a lower bound (0.0: none)
    longest: int  # the trial that spent it (-1: none)
    attempts: tuple[int, ...]  # its trials that were interrupted in readiness
    similar: tuple[Known, ...]  # the most similar configurations with a known start-up

    @property
    def similar_seconds(self) -> float | None:
        return statistics.median(k.seconds for k in self.similar) if self.similar else None

    @property
    def seconds(self) -> float | None:
        """The estimate: the longer of its own lower bound and its neighbours' median; None: nothing known.
        The maximum, not a blend: an attempt cut off after 411 s says nothing of how much longer it needed."""
        known = [s for s in (self.spent if self.attempts else None, self.similar_seconds) if s is not None]
        return max(known) if known else None

    def warm(self) -> Startup:
        """The same without the neighbours that were their run's first server: what a start on a machine that
        has compiled its kernels once is expected to take. On the lent GPU a run's first start took 3x the
        later ones of similar configurations (281 s vs ~85 s; 130 s vs 40 s), all of it in first-use compiles."""
        return Startup(self.spent, self.longest, self.attempts, tuple(k for k in self.similar if not k.first))

    def basis(self) -> str:
        """The estimate's source, in a few words: "like trial 8's"."""
        if self.attempts and (self.similar_seconds is None or self.spent >= self.similar_seconds):
            return f"at least trial {self.longest}'s, cut short in readiness"
        if len(self.similar) == 1:
            return f"like trial {self.similar[0].number}'s"
        return f"the median of trials {_numbers(k.number for k in self.similar)}"

    def evidence(self) -> str:
        """Every piece of evidence, for a judged trial's message."""
        said = []
        if self.attempts:
            times = {1: "once", 2: "twice"}.get(len(self.attempts), f"{len(self.attempts)} times")
            said.append(f"interrupted {times} in readiness (longest {self.spent:.0f} s, trial {self.longest})")
        timed_out = [k for k in self.similar if k.timed_out]
        if timed_out and len(timed_out) == len(self.similar):
            many = len(timed_out) > 1
            said.append(f"trial{'s' * many} {_numbers(k.number for k in timed_out)}, "
                        f"{'similar configurations' if many else 'a similar configuration'}, timed out at start-up "
                        f"({max(k.seconds for k in timed_out):.0f} s)")
        elif len(self.similar) == 1:
            said.append(f"trial {self.similar[0].number}, a similar configuration, started in "
                        f"{self.similar[0].seconds:.0f} s")
        elif self.similar:
            said.append(f"similar configurations (trials {_numbers(k.number for k in self.similar)}) took a median "
                        f"{self.similar_seconds:.0f} s to start" + (f", {len(timed_out)} of them timed out"
                                                                    if timed_out else ""))
        return ", and ".join(said)


def estimate(trials: Iterable[FrozenTrial], number: int, params: Mapping[str, Any], key: str,
             startup_timeout: float) -> Startup:
    """What the study's `trials` tell of the start-up of trial `number`, configuration `params` (`key`: its
    config_key). `startup_timeout`: what a start that timed out counts as, at least."""
    spent, longest, attempts = 0.0, -1, []
    known: list[tuple[int, Known]] = []
    for t in trials:
        attrs = t.user_attrs
        if t.number == number or attrs.get("reused_from") is not None or attrs.get("judged"):
            continue  # a reuse or a judgement repeats another trial's evidence; it adds none
        readiness = (attrs.get("stage_seconds") or {}).get("readiness")
        kind = attrs.get("failure_kind")
        if t.state == TrialState.FAIL:
            if (kind == FailureKind.INTERRUPTED.value and attrs.get("failure_stage") == "readiness"
                    and attrs.get("config_key") == key and readiness is not None):
                attempts.append(t.number)
                if readiness >= spent:
                    spent, longest = float(readiness), t.number
            continue
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED) or readiness is None:
            continue
        if kind == FailureKind.STARTUP_TIMEOUT.value:
            seen = Known(t.number, max(float(readiness), startup_timeout), True, bool(attrs.get("first_start")))
        elif attrs.get("failure_stage") == "readiness":
            continue  # crashed at start: how long it took says nothing of how long a start takes
        else:
            seen = Known(t.number, float(readiness), False, bool(attrs.get("first_start")))
        d = distance(params, t.params)
        if d <= SIMILAR_WITHIN:
            known.append((d, seen))
    nearest = min((d for d, _ in known), default=None)
    similar = tuple(k for d, k in known if d == nearest)
    return Startup(spent, longest, tuple(attempts), similar)


def distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """How many parameters differ (one missing on one side counts: a conditional flag that is off)."""
    return sum(1 for name in a.keys() | b.keys() if name not in a or name not in b or not _same(a[name], b[name]))


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        try:
            return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return x == y


def _numbers(numbers: Iterable[int]) -> str:
    ns = [str(n) for n in sorted(numbers)]
    return ns[0] if len(ns) == 1 else f"{', '.join(ns[:-1])} and {ns[-1]}"
