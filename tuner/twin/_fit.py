"""Fitted figures: what each holds, how a profile takes one, and the small numeric tools the fits share."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from ..sim import Knobs, Profile

SECTIONS = ("hardware", "model", "startup", "performance", "memory")


@dataclass(frozen=True)
class Fitted:
    section: str
    key: str
    value: float
    base: float | None
    source: str  # what was read, e.g. "eager decode steps at batch 128"
    trials: tuple[int, ...]
    n: int  # data points
    residual: str  # how far the fitted figure leaves them

    def comment(self) -> str:
        return f"fitted: {self.source} of trials {spans(self.trials)} (n={self.n}, {self.residual})"


@dataclass(frozen=True)
class Kept:
    """A figure the fit could not make from these trials: the base's value stays."""
    section: str
    key: str
    why: str


def spans(numbers: Iterable[int]) -> str:
    """(0, 1, 2, 5, 7, 8) -> '0-2, 5, 7, 8': runs of 3 or more as ranges."""
    out, run = [], []
    for n in sorted(set(numbers)):
        if run and n != run[-1] + 1:
            out.append(_run(run))
            run = []
        run.append(n)
    if run:
        out.append(_run(run))
    return ", ".join(out)


def _run(run: list[int]) -> str:
    return f"{run[0]}-{run[-1]}" if len(run) >= 3 else ", ".join(map(str, run))


def tidy(value: float) -> float:
    """Four significant figures: what a profile holds, so that a refit reproduces it exactly."""
    return float(f"{value:.4g}")


def with_value(profile: Profile, section: str, key: str, value: float) -> Profile:
    part = getattr(profile, section)
    return replace(profile, **{section: replace(part, **{key: value})})


def reference(profile: Profile, knobs: Knobs, prefill: bool = False) -> bool:
    """Runs the profile's reference attention kernels (speed 1.0, batched): the speed figures are theirs."""
    backend = knobs.prefill_backend if prefill else knobs.decode_backend
    perf = profile.performance
    return perf.attention_backends.get(backend, 1.0) == 1.0 and not perf.attention_seq_us.get(backend)


def solve(fn: Callable[[float], float], target: float, lo: float, hi: float) -> float | None:
    """x in [lo, hi] with fn(x) == target for a monotone fn; None when the target lies outside."""
    f_lo, f_hi = fn(lo) - target, fn(hi) - target
    if f_lo == 0:
        return lo
    if f_lo * f_hi > 0:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        f_mid = fn(mid) - target
        if (f_mid > 0) == (f_lo > 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return (lo + hi) / 2


def golden(fn: Callable[[float], float], lo: float, hi: float) -> float:
    """The x in [lo, hi] that minimises a unimodal fn."""
    ratio = (5 ** 0.5 - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    for _ in range(80):
        if fn(c) < fn(d):
            b = d
        else:
            a = c
        c, d = b - ratio * (b - a), a + ratio * (b - a)
    return (a + b) / 2


def line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def median_error(model: Sequence[float], real: Sequence[float]) -> str:
    errors = [abs(m - r) / r for m, r in zip(model, real) if r]
    return f"median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}" if errors else "no error"
