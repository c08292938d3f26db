"""When to stop measuring a trial: the pruner the probe's progress reports feed while a level runs.

A trial is stopped only when it is behind the best by more than the noise, compared at equal work. Real
throughput curves are wave-shaped (a burst of prefill with little output, then fast decode, once per wave of
requests), so a figure taken at "the last report before this step" can fall on the other side of a wave
boundary. `benchmarks/pruner_replay.py` replays every real study recorded in docs/ through this rule.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..trial import PROGRESS_EVERY, RATE_STEPS

# How far below its final standing a trial can look part-way through a level. On the real curves of
# docs/gpu-sglang-0517 (10 completed trials, every pair, every report from 2% of the level's tokens on),
# a trial's standing at equal work was never below 0.70 of its standing at the end
# (`python benchmarks/pruner_replay.py` prints it as "curve floor").
CURVE_FLOOR = 0.70
# Run-to-run noise where the study has no repeats of its own: trial 6's configuration of that study measured
# 2,809-2,893 output tok/s over 9 runs on one server (docs/gpu-sglang-0517/bench.txt), a range of 3%.
DEFAULT_NOISE = 0.03
# A study's own noise counts once one configuration has this many measurements (confirm's repeats).
MIN_REPEATS = 3


class BehindTheBest(optuna.pruners.BasePruner):
    """Stops a trial whose standing at equal work is below `(1 - noise) * floor` of the best feasible
    trial's: a trial that ends within the noise of the best never falls that low on the measured curves.

    Standing at equal work: the time the best needed for the same share of the level's output tokens over the
    time this trial needed. The best's time is read at its first report at or after that share (elapsed time
    only grows with work, so this is the most the best can have needed): no interpolation across a wave.

    Steps are the probe's (tuner/trial/_probe.py): level index * 1000 + thousandths of the level's tokens; the
    first `warmup` thousandths of a level are not judged. Steps past RATE_STEPS are the rate search's
    (tuner/trial/_ratesearch.py), judged by `_rate_search`. The noise is the study's own where `confirm` has
    re-measured a configuration `MIN_REPEATS` times, else DEFAULT_NOISE."""

    def __init__(self, noise: float | None = None, floor: float = CURVE_FLOOR,
                 warmup: int = 2 * PROGRESS_EVERY) -> None:
        self.noise = noise
        self.floor = floor
        self.warmup = warmup

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is not None and step > RATE_STEPS:
            return self._rate_search(study, trial.intermediate_values[step])
        if step is None or step % 1000 < self.warmup:
            return False
        best = best_curve(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), step)
        if best is None:
            return False
        standing = standing_at(trial.intermediate_values, best.intermediate_values, step)
        return standing is not None and standing < self.cut(study)

    def cut(self, study: optuna.Study) -> float:
        """The standing below which a trial is stopped."""
        noise = self.noise if self.noise is not None else study_noise(study.user_attrs)
        return (1 - noise) * self.floor

    @staticmethod
    def _rate_search(study: optuna.Study, upper: float) -> bool:
        """max_rate_under_slo reports the lowest rate that missed the SLO so far: the trial can end no higher,
        so once that is at or below the best feasible trial's rate it cannot win (no noise margin: the
        bound is a measured miss, not an extrapolation)."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = max((t.value for t in finished if t.user_attrs.get("feasible") and t.value is not None), default=None)
        return best is not None and upper <= best


def best_curve(finished: list[FrozenTrial], step: int) -> FrozenTrial | None:
    """The feasible finished trial of the highest value whose curve covers `step`'s level to its end."""
    level_end = step // 1000 * 1000 + 1000
    with_curve = [t for t in finished if t.user_attrs.get("feasible") and t.value is not None
                  and any(s >= step for s in t.intermediate_values if s <= level_end)]
    return max(with_curve, key=lambda t: t.value, default=None)


def standing_at(curve: Mapping[int, float], best: Mapping[int, float], step: int) -> float | None:
    """The best's time for `step`'s share of the level's tokens over this curve's (1: level with it).

    A report (step s, throughput v) says the share s took s / v, in units of the level's tokens per throughput.
    The best's time is taken at its first report at or after `step`."""
    value = curve.get(step)
    level_end = step // 1000 * 1000 + 1000
    later = [s for s in best if step <= s <= level_end and best[s] > 0]
    if not value or not later:
        return None
    first = min(later)
    best_time = (first % 1000 or 1000) / best[first]
    return best_time / ((step % 1000) / value)


def study_noise(study_attrs: Mapping) -> float:
    """Run-to-run noise: the widest relative range, (max - min) / median, of a configuration re-measured at least
    MIN_REPEATS times by `confirm`; DEFAULT_NOISE where none was."""
    spreads = [(max(v) - min(v)) / statistics.median(v)
               for c in (study_attrs.get("confirmations") or {}).values()
               if len(v := [x for x in c.get("values", []) if x]) >= MIN_REPEATS and statistics.median(v) > 0]
    return max(spreads, default=DEFAULT_NOISE)
