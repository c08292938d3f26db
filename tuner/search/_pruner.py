"""When to stop measuring a trial: the pruner the probe's progress reports feed while a level runs."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..trial import PROGRESS_EVERY, RATE_STEPS


class BehindTheBest(optuna.pruners.BasePruner):
    """Stops a trial whose throughput so far is below the best feasible trial's at the same point of the
    level by more than noise: to catch up it would have to run `1 + noise` times as fast as the best for
    the rest of the level. One finished trial (the baseline) is enough to judge by. Otherwise the median
    rule decides, once `n_startup_trials` trials have finished.

    Steps are the probe's (tuner/trial/_probe.py): level index * 1000 + thousandths of the level's tokens; the
    first `warmup` thousandths of a level, dominated by prefill, are not judged. Steps past RATE_STEPS are
    the rate search's (tuner/trial/_ratesearch.py), judged by `_rate_search`."""

    def __init__(self, noise: float = 0.5, warmup: int = 2 * PROGRESS_EVERY, n_startup_trials: int = 5) -> None:
        self.noise = noise
        self.warmup = warmup
        self.median = optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=0)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is not None and step > RATE_STEPS:
            return self._rate_search(study, trial.intermediate_values[step])
        if step is None or step % 1000 < self.warmup:
            return False
        value = trial.intermediate_values[step]
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = max((v for t in finished if t.user_attrs.get("feasible") and (v := _at(t, step)) is not None),
                   default=None)
        if best is not None and value * (1 + self.noise) < best:
            return True
        return self.median.prune(study, trial)

    @staticmethod
    def _rate_search(study: optuna.Study, upper: float) -> bool:
        """max_rate_under_slo reports the lowest rate that missed the SLO so far: the trial can end no higher,
        so once that is at or below the best feasible trial's rate it cannot win (no noise margin: the
        bound is a measured miss, not an extrapolation)."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = max((t.value for t in finished if t.user_attrs.get("feasible") and t.value is not None), default=None)
        return best is not None and upper <= best


def _at(trial: FrozenTrial, step: int) -> float | None:
    """The trial's figure at `step`, or at the last step it reported before it in the same level (a fast
    level can pass several steps between two reports)."""
    if step in trial.intermediate_values:
        return trial.intermediate_values[step]
    level = step // 1000 * 1000
    earlier = [s for s in trial.intermediate_values if level <= s < step]
    return trial.intermediate_values[max(earlier)] if earlier else None
