"""Reading a finished study back: which trials may be exported, and the best of them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .._errors import NoEligibleTrialError
from .._failures import measured
from ..search import CONTEXT_ATTR, reference_gap
from ..spec import parse_spec
from ..trial import CUT_LEVEL_ATTR, TIME_BUDGET_ATTR, cut_message
from ._certainty import SURE, Comparison

CONFIRMED_ATTR = "confirmed_winner"
CONFIRMATIONS_ATTR = "confirmations"
# Each other qualified candidate's confirmation holds, under this key, how it compares with the winner.
VERSUS_ATTR = "versus_winner"
# The figures an export header and the winner's line report, measured per run and confirmed as medians.
FIGURES = ("output_throughput", "total_throughput", "p99_ttft_ms", "p99_itl_ms")


@dataclass(frozen=True)
class Rival:
    """Another confirmed candidate, and how sure confirm is that the winner beats it."""
    number: int
    median: float
    runs: int
    versus: Comparison


@dataclass(frozen=True)
class Winner:
    """The trial every screen names as the winner, with the figures to report: the medians of its
    re-measurements when `confirm` crowned it, else its one measurement."""
    trial: FrozenTrial
    confirmed: bool
    figures: dict[str, float]
    runs: tuple[float, ...] = ()  # the objective's value per re-measurement
    spread: float = 0.0  # (max - min) / median of the runs
    rivals: tuple[Rival, ...] = ()  # the other qualified candidates of the confirmation, closest first

    @property
    def within_noise(self) -> tuple[Rival, ...]:
        """The rivals the winner is not reliably better than."""
        return tuple(r for r in self.rivals if r.versus.within_noise)

    def describe(self, metric: str) -> str:
        value = self.figures.get(metric)
        shown = f"{metric} {value:,.1f}" if value is not None else metric
        if self.confirmed:
            return (f"trial {self.trial.number}, confirmed: median {shown} over {len(self.runs)} fresh servers "
                    f"(spread {self.spread:.1%})")
        return f"trial {self.trial.number}, not confirmed: {shown} from one run (python -m tuner confirm re-measures)"


UNITS = {"output_throughput": "tok/s", "total_throughput": "tok/s", "input_throughput": "tok/s",
         "request_throughput": "req/s"}


def versus_baseline(study: optuna.Study, best: Winner, metric: str) -> str | None:
    """How much the winner beats the baseline, e.g. `+11% over the baseline (trial 0): 1,817 -> 2,023 tok/s`;
    None without a qualified baseline, or when the winner is the baseline."""
    base = next((t for t in eligible(study) if t.user_attrs.get("baseline")), None)
    if base is None or base.number == best.trial.number or not base.user_attrs.get(metric):
        return None
    before = float((study.user_attrs.get(CONFIRMATIONS_ATTR, {}).get(str(base.number)) or {}).get("median")
                   or base.user_attrs[metric])
    after = best.figures.get(metric)
    if after is None:
        return None
    unit = UNITS.get(metric, "ms" if metric.endswith("_ms") else "")
    return (f"{(after - before) / before:+.0%} over the baseline (trial {base.number}): "
            f"{before:,.0f} -> {after:,.0f} {unit}".rstrip())


def objective_metric(study: optuna.Study) -> str:
    """The name of the study's (first) objective, as `run` recorded it."""
    return (study.metric_names or ["output_throughput"])[0]


def winner(study: optuna.Study, number: int | None = None) -> Winner:
    """The trial to deploy (`number` picks another eligible one), confirmed or not."""
    trial = best_trial(study, number)
    confirmation = study.user_attrs.get(CONFIRMATIONS_ATTR, {}).get(str(trial.number)) or {}
    first_run = {k: float(trial.user_attrs[k]) for k in FIGURES if isinstance(trial.user_attrs.get(k), (int, float))}
    if study.user_attrs.get(CONFIRMED_ATTR) != trial.number or not confirmation.get("values"):
        return Winner(trial, False, first_run)
    runs = tuple(confirmation["values"])
    median = confirmation["median"]
    figures: dict[str, Any] = {**first_run, **confirmation.get("figures", {})}
    if len(study.directions) == 1:
        figures[objective_metric(study)] = median
    rivals = sorted((Rival(int(n), float(c["median"]), len(c["values"]), Comparison.from_attr(c[VERSUS_ATTR]))
                     for n, c in study.user_attrs[CONFIRMATIONS_ATTR].items() if c and c.get(VERSUS_ATTR)),
                    key=lambda r: r.versus.lead)
    return Winner(trial, True, figures, runs, (max(runs) - min(runs)) / median if median else 0.0, tuple(rivals))


def certainty_lines(study: optuna.Study, best: Winner, where: str = "") -> list[str]:
    """What every screen that names a confirmed winner says under it: how sure confirm is that it beats the
    runner-up (and any other candidate it is within the noise of) and, when it is not sure, the command that
    re-measures them with more repeats. `where`: the --storage and --study that name this study, shell-quoted, as
    _which_study.target_args gives them for every suggested command ("" where a plain command finds it)."""
    if not best.confirmed or not best.rivals:
        return []
    n = best.trial.number
    runner_up = best.rivals[0]
    shown = [runner_up, *(r for r in best.within_noise if r is not runner_up)]
    lines = [f"vs trial {r.number} (median {r.median:,.1f}): ahead by {r.versus.lead:+.1%} "
             f"(80% interval {r.versus.low:+.1%} to {r.versus.high:+.1%}), P(trial {n} better) "
             f"{r.versus.p_better:.2f} by a bootstrap over {len(best.runs)} and {r.runs} runs" for r in shown]
    tied = best.within_noise
    if tied:
        others = " and ".join(f"trial {r.number}" for r in tied)
        lines += [f"within the noise: trial {n} is not reliably better than {others} (P < {SURE}); either will do, "
                  "or tell them apart with more repeats:",
                  f"  {more_repeats_command(study, best, tied, where)}"]
    return lines


def more_repeats_command(study: optuna.Study, best: Winner, tied: tuple[Rival, ...], where: str = "") -> str:
    """`confirm` re-measuring the winner and the tied rivals with twice the repeats (at least 6: the interval
    narrows as 1/sqrt(runs)), then `where` (--storage, --study). --top is the smallest that takes them all, as
    confirm ranks by first runs."""
    wanted = {best.trial.number, *(r.number for r in tied)}
    ranked = [t.number for t in distinct_ranked(study)]
    top = max((ranked.index(k) + 1 for k in wanted if k in ranked), default=len(wanted))
    argv = ["python", "-m", "tuner", "confirm", "--top", str(top), "--repeats", str(max(6, 2 * len(best.runs)))]
    return " ".join([shlex.join(argv), *([where] if where else [])])


def distinct_ranked(study: optuna.Study) -> list[FrozenTrial]:
    """The eligible trials best first by their one measurement, one per configuration: the order in which
    `confirm --top K` takes them (a reused trial repeats the value of the one it copied)."""
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    seen: set[str] = set()
    out = []
    for t in sorted(eligible(study), key=lambda t: t.value, reverse=maximize):
        key = t.user_attrs.get("config_key", str(t.number))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def eligible(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials that passed every gate and every SLO, and whose figure is a measurement: the only ones
    that may be deployed."""
    requests = _workload(study).get("requests")
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if (t.user_attrs.get("feasible") is True and all(v <= 0 for v in t.constraints.values())
                and measured(t.user_attrs, requests)):
            out.append(t)
    return out


def is_measurement(trial: FrozenTrial, study: optuna.Study) -> bool:
    """Whether the trial's objective figure measures its configuration: not a probe cut at its time budget before
    enough requests finished, whether recorded as probe_cut or, before that kind, as a COMPLETE trial."""
    return measured(trial.user_attrs, _workload(study).get("requests"))


def cut_note(trial: FrozenTrial, study: optuna.Study) -> str | None:
    """For a trial whose probe was cut short: what its objective level measured and the probe.time-budget that
    would fit, from what it recorded (the study's workload and space where it predates probe_cut)."""
    if is_measurement(trial, study):
        return None
    attrs = trial.user_attrs
    work = _workload(study)
    requests, output_len = work.get("requests"), work.get("output_len")
    budget = attrs.get(TIME_BUDGET_ATTR)
    if budget is None:
        try:
            budget = parse_spec(study.user_attrs["space_source"], "<stored space>", recorded=True).probe.time_budget
        except Exception:  # an old or missing space: the message goes without the budget
            budget = None
    expected = requests * output_len if isinstance(requests, int) and isinstance(output_len, int) else None
    return cut_message(attrs.get(CUT_LEVEL_ATTR) or attrs, budget, requests, expected)


def _workload(study: optuna.Study) -> Mapping[str, Any]:
    """The probe's workload as the study's context recorded it (requests per level, output length)."""
    context = study.user_attrs.get(CONTEXT_ATTR)
    work = context.get("workload") if isinstance(context, Mapping) else None
    return work if isinstance(work, Mapping) else {}


def best_trial(study: optuna.Study, number: int | None = None) -> FrozenTrial:
    trials = eligible(study)
    if not trials:
        raise NoEligibleTrialError(f"study {study.study_name!r} has no trial that passed every gate",
                                   "run more trials or widen the space")
    if number is not None:
        match = [t for t in trials if t.number == number]
        if not match:
            raise NoEligibleTrialError(f"trial {number} is not exportable (not COMPLETE, or it failed a gate or SLO)",
                                       f"choose one of: {', '.join(str(t.number) for t in trials[:20])}")
        return match[0]
    confirmed = study.user_attrs.get(CONFIRMED_ATTR)
    if confirmed is not None:
        match = [t for t in trials if t.number == confirmed]
        if match:
            return match[0]
    if len(study.directions) > 1:
        return _pareto_pick(study, trials)
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
    return max(trials, key=lambda t: sign * t.value)


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    trials = eligible(study)
    signs = [1 if d == optuna.study.StudyDirection.MAXIMIZE else -1 for d in study.directions]

    def dominates(a: FrozenTrial, b: FrozenTrial) -> bool:
        pa = [s * v for s, v in zip(signs, a.values)]
        pb = [s * v for s, v in zip(signs, b.values)]
        return all(x >= y for x, y in zip(pa, pb)) and any(x > y for x, y in zip(pa, pb))

    return [t for t in trials if not any(dominates(o, t) for o in trials)]


def _pareto_pick(study: optuna.Study, trials: list[FrozenTrial]) -> FrozenTrial:
    """Stated rule: on the Pareto front, the trial with the best first objective."""
    front = pareto_front(study)
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1
    return max(front, key=lambda t: sign * t.values[0])


def gate_lines(attrs: Mapping[str, Any]) -> list[str]:
    """What the gate did not judge as shipped: a tolerance the space loosened, a check the baseline cannot feed."""
    lines = []
    loosened = attrs.get("gate_loosened") or {}
    if loosened:
        lines.append("gate loosened by the space: " + ", ".join(f"{k} {v}" for k, v in loosened.items() if k != "why")
                     + f" (why: {loosened.get('why')})")
    gap = reference_gap(attrs)
    if gap:
        lines.append(gap)
    return lines
