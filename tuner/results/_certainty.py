"""How sure `confirm` is that its winner beats another candidate: a bootstrap over their re-measurements.

Each resample draws every candidate's runs again with replacement and compares the two medians (confirm ranks
by the median, so the bootstrap compares what confirm compares). The seed is fixed: the same runs always give
the same verdict on every screen.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Below this probability of being better, the winner is "within the noise" of the other. One wrong call in ten
# is affordable: when the call is close, being wrong costs only the small gap between two medians, and a
# stricter bar (0.95) would send more pairs back for GPU time over gaps too small to matter. With 3 runs each,
# runs that do not overlap give 1; [1000, 1020, 1030] against [990, 1005, 1010] gives about 0.8.
SURE = 0.9
# The interval shown beside it runs from the 10th to the 90th percentile of the resampled lead, so that it
# excludes 0 when P(better) >= SURE (resamples with equal medians blur the edge): one rule, two views.
INTERVAL = (0.10, 0.90)
RESAMPLES = 10_000
SEED = 0


@dataclass(frozen=True)
class Comparison:
    """The winner against one other candidate, as stored with that candidate's confirmation."""
    p_better: float  # share of resamples in which the winner's median is better (a tie counts half)
    lead: float  # the winner's median ahead of the other's, relative to the other's (positive: better)
    low: float  # INTERVAL of the resampled lead
    high: float

    @property
    def within_noise(self) -> bool:
        return self.p_better < SURE

    def to_attr(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_attr(cls, data: dict) -> Comparison:
        return cls(float(data["p_better"]), float(data["lead"]), float(data["low"]), float(data["high"]))


def compare(winner: Sequence[float], other: Sequence[float], maximize: bool = True,
            resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """Bootstrap the two medians' difference. Needs at least one run each. With few runs the bootstrap can
    only reshuffle what it saw: three runs of each that do not overlap at all give P = 1."""
    if not winner or not other:
        raise ValueError("compare needs at least one run of each candidate")
    sign = 1.0 if maximize else -1.0
    rng = random.Random(seed)
    base = abs(statistics.median(other)) or 1.0  # a relative lead; 1.0 only guards a median of exactly 0

    def lead(a: Sequence[float], b: Sequence[float]) -> float:
        return sign * (statistics.median(a) - statistics.median(b)) / base

    leads = sorted(lead(rng.choices(winner, k=len(winner)), rng.choices(other, k=len(other)))
                   for _ in range(resamples))
    better = sum(1.0 if x > 0 else 0.5 if x == 0 else 0.0 for x in leads) / resamples

    def percentile(q: float) -> float:
        return leads[min(len(leads) - 1, int(q * len(leads)))]

    return Comparison(better, lead(winner, other), percentile(INTERVAL[0]), percentile(INTERVAL[1]))
