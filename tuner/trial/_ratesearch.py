"""The `max_rate_under_slo` objective: within one trial, on the running server, the highest request rate
whose SLO attainment meets the target.

It starts at the request rate the closed-loop level measured (the server's throughput at that concurrency,
near its capacity), brackets the answer by factors of `GROWTH` (up while rates pass, down while they fail),
then bisects (geometric midpoint) until the lowest failing rate is within `precision` of the highest
passing one. Every tested rate sends requests for `seconds-per-rate` seconds (at least `MIN_REQUESTS`),
open-loop, and ends early once its verdict is certain (tuner/trial/_probe.py, SloVerdict). A rate the client
cannot keep is a ceiling of what can be measured, not a fault of the server. The search stops at the per-trial
budget; none passing down to `FLOOR` of the start means the SLO is met at no rate.

`Bracket` is the decision alone (which rate next, when to stop); `search_rate` runs it with a `Measure` of
one rate that the probe provides (tuner/trial/_probe.py, on its live connection to the server).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._failures import FailureKind, ProbeStopped, TrialFailure
from ..spec import RateSearchSpec

GROWTH = 1.5
FLOOR = 1 / 64  # of the starting rate: below it the server is all but idle, and a miss is not about load
MIN_REQUESTS = 20
# Pruner steps of the rate search start here (below: the closed-loop levels' steps, tuner/search/_pruner.py).
RATE_STEPS = 1_000_000


@dataclass(frozen=True)
class RateStep:
    rate: float
    passed: bool
    seconds: float
    figures: Mapping[str, float]  # attainment (overall and per SLO), percentiles, goodput
    note: str = ""  # "verdict early", "cut", "client too slow"

    @property
    def attainment(self) -> float:
        return self.figures.get("slo_attainment", 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"rate": round(self.rate, 4), "passed": self.passed, "seconds": round(self.seconds, 3),
                **({"note": self.note} if self.note else {}),
                **{k: round(v, 4) for k, v in self.figures.items()}}


@dataclass
class Bracket:
    start: float
    precision: float
    low: float | None = None  # highest passing rate
    high: float | None = None  # lowest failing rate (or the client's limit)
    tested: list[float] = field(default_factory=list)

    def record(self, rate: float, passed: bool) -> None:
        self.tested.append(rate)
        if passed:
            self.low = max(self.low or 0.0, rate)
        else:
            self.high = min(self.high or math.inf, rate)

    def next_rate(self) -> float | None:
        """The next rate to test, or None when done (precision reached, or nothing passes)."""
        if not self.tested:
            return self.start
        if self.low is not None and self.high is not None:
            if self.high <= self.low * (1 + self.precision):
                return None
            return math.sqrt(self.low * self.high)
        if self.high is None:
            return self.low * GROWTH
        rate = self.high / GROWTH
        return rate if rate >= self.start * FLOOR else None


@dataclass(frozen=True)
class RateSearchResult:
    spec: RateSearchSpec
    start: float
    rate: float | None  # the highest rate that met the target; None: none did
    upper: float | None  # the lowest that did not
    steps: tuple[RateStep, ...]
    seconds: float
    stopped: str  # why the search ended: precision, budget or floor (and whether the client capped it)

    @property
    def closest(self) -> RateStep | None:
        """The tested rate whose attainment came nearest the target (for a configuration that met it nowhere)."""
        return max(self.steps, key=lambda s: (s.attainment, -s.rate), default=None)

    def as_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "upper": self.upper, "start": round(self.start, 4), "stopped": self.stopped,
                "seconds": round(self.seconds, 3), "slo_ms": dict(self.spec.slo_ms),
                "attainment_target": self.spec.attainment, "steps": [s.as_dict() for s in self.steps]}

    def table(self) -> str:
        """One line per tested rate, for notes and failure evidence."""
        return "\n".join(f"rate {s.rate:8.3f}/s  attainment {s.attainment:6.1%}  "
                         f"p99 TTFT {s.figures.get('p99_ttft_ms', 0):8.0f} ms  "
                         f"{'met' if s.passed else 'missed'}{'  (' + s.note + ')' if s.note else ''}"
                         for s in self.steps)


def slo_text(slo_ms: Mapping[str, float]) -> str:
    return " ".join(f"{name}<={limit:g}ms" for name, limit in slo_ms.items())


# (rate, index of the tested rate, deadline on the perf_counter clock) -> the measured step
Measure = Callable[[float, int, float], Awaitable[RateStep]]


async def search_rate(search: RateSearchSpec, start: float, report: Callable[[int, float], bool] | None,
                      measure: Measure) -> RateSearchResult:
    """The highest rate that meets the SLO, on this server, without a restart."""
    t0 = time.perf_counter()
    deadline = t0 + search.budget
    bracket = Bracket(max(start, 1e-3), search.precision)
    steps: list[RateStep] = []
    stopped = ""
    while (rate := bracket.next_rate()) is not None:
        if deadline - time.perf_counter() < search.seconds_per_rate:
            stopped = "budget"
            break
        try:
            step = await measure(rate, len(steps), deadline)
        except TrialFailure as failure:
            if failure.kind is not FailureKind.CLIENT_TOO_SLOW:
                raise
            # Past what this client can send: an upper bound of what can be measured here, not a miss of the
            # server's; the search goes on below it (and says so in `stopped`).
            step = RateStep(rate, False, 0.0, {}, "client too slow")
        steps.append(step)
        if step.note == "verdict early":
            # The requests abandoned at the verdict may still be queued in the server (one notices a client
            # gone only when it writes to it): give it as long to drain as the step ran, so that the next
            # rate starts on an idle server. A backlog built at rate r over that time drains within it for
            # r < 2x capacity, which is where the bracket and bisection test.
            await asyncio.sleep(min(step.seconds, max(0.0, deadline - time.perf_counter())))
        bracket.record(rate, step.passed)
        # The pruner hears the lowest failing rate: no configuration can end above it, so once it is at or
        # below the best trial's rate this one cannot win (tuner/search/_pruner.py).
        if report is not None and report(RATE_STEPS + len(steps), bracket.high or math.inf):
            raise ProbeStopped()
    stopped = stopped or ("precision" if bracket.low is not None else "floor")
    if any(s.note == "client too slow" and s.rate == bracket.high for s in steps):
        stopped += ", capped by the client"
    result = RateSearchResult(search, start, bracket.low, bracket.high, tuple(steps), time.perf_counter() - t0,
                              stopped)
    if result.rate is None and steps and all(s.note == "client too slow" for s in steps):
        raise TrialFailure(FailureKind.CLIENT_TOO_SLOW, f"the probe could send none of the {len(steps)} rates tested "
                           f"(down to {min(s.rate for s in steps):.3g}/s) on time; the client, not the server, is "
                           "the limit", result.table(), "probe", {"rate_search": result.as_dict()})
    if result.rate is None:
        closest = result.closest
        raise TrialFailure(FailureKind.SLO_UNREACHABLE,
                           f"no tested rate met {slo_text(search.slo_ms)} for {search.attainment:.1%} of requests "
                           + (f"(closest: {closest.attainment:.1%} at {closest.rate:.3g}/s, "
                              f"{len(steps)} rates tested, search ended: {stopped})" if closest else
                              "(no rate fit in objective.search-budget)"),
                           result.table(), "probe", {"rate_search": result.as_dict()})
    return result
