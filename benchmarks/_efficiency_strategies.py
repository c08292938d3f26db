"""The strategies of benchmarks/search_efficiency.py: the tuner's own study on the simulator, the ask/tell
anchors (SMAC, Nevergrad) and the tiered grid."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import _efficiency_problems  # noqa: F401 (first: it sets OMP_NUM_THREADS and puts the repository on sys.path)

import optuna  # noqa: E402

import _nevergrad_anchor  # noqa: E402
import _smac_anchor  # noqa: E402
from tuner._failures import FailureRecord  # noqa: E402
from tuner.trial._probe import ProbeResult  # noqa: E402
from tuner.spec._space import ServerConfig, Space  # noqa: E402
from tuner.search._study import _TPE, _initialise, _pruner, make_sampler  # noqa: E402
from tuner.trial._trial import TrialContext, TrialResult  # noqa: E402
from tuner.search._warm import WarmStart  # noqa: E402
from tuner.search._worker import Worker  # noqa: E402
from tuner.engines import get_engine  # noqa: E402

from _efficiency_problems import Measurement, Problem  # noqa: E402


# -- the strategies ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TrialRecord:
    number: int
    outcome: str  # "none" (measured fine), a failure kind, or "reused"
    restarted: bool  # a server was launched
    observed: float | None  # what the strategy saw (noisy); None when infeasible
    true: float | None  # noiseless value of the same configuration
    gpu_s: float = 0.0  # GPU-seconds the trial cost (0 when it launched nothing)
    flags: Mapping[str, Any] | None = None  # the configuration (whenever `true` is set): names a better optimum


def noise_seed(seed: int, number: int) -> int:
    return (seed * 1_000_003 + number * 7919 + 17) % (2**32) or 1


@dataclasses.dataclass
class SimulatedWorker(Worker):
    """The tuner's worker with launch + gate + probe replaced by predict(); everything else is Worker's own."""

    problem: Problem | None = None
    seed: int = 0
    launched: dict[int, tuple[Measurement, ServerConfig]] = dataclasses.field(default_factory=dict)

    def _run(self, trial: optuna.Trial, config: ServerConfig) -> TrialResult:
        m = self.problem.measure(config, noise_seed(self.seed, trial.number))
        self.launched[trial.number] = (m, config)
        result = TrialResult(trial.number, config)
        if m.failure is not None:
            result.failure = FailureRecord(m.failure, m.message, "", "simulated", m.attrs)
        else:
            result.probe = ProbeResult(0.0, (m.level,))
        return result


def run_tuner(problem: Problem, sampler_name: str, seed: int, trials: int) -> list[TrialRecord]:
    """One study as `python -m tuner run --sampler NAME --seed SEED --trials N` runs it, minus the server."""
    return run_study(problem, sampler_name, seed, trials)[1]


def run_study(problem: Problem, sampler_name: str, seed: int, trials: int, warm: WarmStart | None = None,
              stop: Callable[[list[TrialRecord]], bool] | None = None) -> tuple[optuna.Study, list[TrialRecord]]:
    """run_tuner, and the study: `warm` as `run --learn-from` starts it (tuner/search/_warm.py), `stop` asked after each
    trial with the records so far."""
    spec = problem.spec
    if sampler_name == "random-valid":
        # The tuner's TPE kept in its random startup for good, with no say of its own: every flag drawn at
        # random, a draw that breaks a constraint or repeats a measured configuration drawn again.
        sampler = _TPE(seed=seed, space=spec.space, multivariate=True, constant_liar=True, n_startup_trials=10**9,
                       local_startup=False, risk_aversion=0.0)
    else:
        sampler = make_sampler(sampler_name, seed, spec, prior=warm.prior if warm else None)
    study = optuna.create_study(sampler=sampler, pruner=_pruner(spec),
                                directions=spec.objective.directions)
    _initialise(study, spec, sampler_name, first=warm.first if warm else ())  # baseline, warm.first, try-first
    ends: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="search_efficiency-") as tmp:
        ctx = TrialContext(spec, get_engine(spec.engine), ("simulated",))
        worker = SimulatedWorker(spec, ctx, Path(tmp), sampler_name, problem=problem, seed=seed,
                                 on_trial_end=lambda trial, attrs: ends.__setitem__(trial.number, dict(attrs)))
        callbacks = [lambda study, _: stop(_records(problem, worker, ends)) and study.stop()] if stop else []
        study.optimize(worker, n_trials=trials, callbacks=callbacks)
    return study, _records(problem, worker, ends)


def _records(problem: Problem, worker: SimulatedWorker, ends: Mapping[int, Mapping[str, Any]]) -> list[TrialRecord]:
    records = []
    for number in sorted(ends):
        attrs = ends[number]
        source = attrs.get("reused_from", number)
        gpu_s, flags = 0.0, None
        if source in worker.launched:
            m, config = worker.launched[source]
            observed, true, flags = problem.value(m), problem.true_value(config), config.flags
            if number in worker.launched:
                gpu_s = problem.gpu_seconds(config, m)
        else:
            observed = true = None  # invalid_config, or a twin of one
        outcome = "reused" if "reused_from" in attrs else attrs.get("failure_kind", "none")
        records.append(TrialRecord(number, outcome, number in worker.launched, observed, true, gpu_s, flags))
    return records


def complete(space: Space, values: Mapping[str, Any], fallback: Mapping[str, Any]) -> dict[str, Any]:
    """A full point: inactive parameters dropped, newly active ones taken from `fallback`, else their first value."""
    out: dict[str, Any] = {}
    for name in space.order:
        p = space.params[name]
        if not p.sampled or not space.active(p, out):
            continue
        if name in values:
            out[name] = values[name]
        elif name in fallback:
            out[name] = fallback[name]
        else:
            out[name] = p.grid()[0]
    return out


def flag_values(space: Space) -> dict[str, list[Any]]:
    """The values a person would list for each flag in SGLang's auto_benchmark config."""
    out = {}
    for name in space.order:
        p = space.params[name]
        if not p.sampled:
            continue
        grid = p.grid()
        if p.type in ("int", "float") and len(grid) > 3:
            grid = [grid[0], grid[len(grid) // 2], grid[-1]]
        out[name] = grid
    return out


class TieredGrid:
    """SGLang auto_benchmark's candidate shapes (one flag at a time, then a 3-flag factorial), made adaptive."""

    def __init__(self, problem: Problem, seed: int, trials: int) -> None:
        self.problem, self.seed, self.trials = problem, seed, trials
        self.space = problem.space
        self.values = flag_values(self.space)
        self.seen: set[str] = set()
        self.observed: dict[str, float | None] = {}  # by configuration key
        self.records: list[TrialRecord] = []
        self.best: tuple[float, dict[str, Any]] | None = None  # (observed, point)

    def run(self) -> list[TrialRecord]:
        base = dict(self.space.baseline or complete(self.space, {}, {}))
        self.try_point(base)
        while len(self.records) < self.trials:
            start = dict(self.best[1]) if self.best else base
            before = len(self.records)
            gains = self.one_at_a_time(start)
            self.factorial(start, gains)
            if len(self.records) == before:
                break  # every candidate around the best was tried already
        return self.records

    def one_at_a_time(self, start: dict[str, Any]) -> dict[str, list[tuple[float, Any]]]:
        """Tier 1: each flag alone over its values; returns, per flag, (observed, value) of what ran."""
        gains: dict[str, list[tuple[float, Any]]] = {}
        for name, choices in self.values.items():
            for value in choices:
                if value == start.get(name) or not self.space.active(self.space.params[name], start):
                    continue
                observed = self.try_point(complete(self.space, {**start, name: value}, start))
                if observed is not None:
                    gains.setdefault(name, []).append((observed, value))
        return gains

    def factorial(self, start: dict[str, Any], gains: dict[str, list[tuple[float, Any]]]) -> None:
        """Tier 2: every flag at its best value; the full product of the 3 most helpful flags' 2 best values."""
        start_value = self.observed_of(start)
        sign = 1 if self.problem.maximize else -1
        best_values = {name: max(runs, key=lambda r: sign * r[0]) for name, runs in gains.items()}
        helpful = [n for n, (v, _) in best_values.items() if start_value is None or sign * (v - start_value) > 0]
        helpful.sort(key=lambda n: -sign * best_values[n][0])
        combined = {**start, **{n: best_values[n][1] for n in helpful}}
        self.try_point(complete(self.space, combined, start))
        top = helpful[:3]
        options = []
        for name in top:
            ranked = sorted(gains[name], key=lambda r: -sign * r[0])
            options.append([value for _, value in ranked[:2]] + ([start[name]] if len(ranked) < 2 else []))
        for combo in _product(options):
            point = {**combined, **dict(zip(top, combo))}
            self.try_point(complete(self.space, point, start))

    def observed_of(self, point: Mapping[str, Any]) -> float | None:
        return self.observed.get(self.space.config(point).key())

    def try_point(self, point: dict[str, Any]) -> float | None:
        """Run one candidate (if new, valid and within the budget); returns what was observed."""
        if len(self.records) >= self.trials or self.space.violations(point):
            return None  # a person leaves out a combination the space declares impossible: no trial
        config = self.space.config(point)
        key = config.key()
        if key in self.seen:
            return self.observed.get(key)
        self.seen.add(key)
        number = len(self.records)
        m = self.problem.measure(config, noise_seed(self.seed, number))
        observed = self.problem.value(m)
        self.observed[key] = observed
        outcome = m.failure.value if m.failure else "none"
        self.records.append(TrialRecord(number, outcome, True, observed, self.problem.true_value(config),
                                        self.problem.gpu_seconds(config, m), config.flags))
        if observed is not None and (self.best is None or self.problem.better(observed, self.best[0])):
            self.best = (observed, dict(point))
        return observed


def run_ask_tell(problem: Problem, seed: int, trials: int, anchor: Callable[..., None]) -> list[TrialRecord]:
    """An outside optimiser (SMAC, Nevergrad) proposes; refusals and repeats are free, as in the tuner;
    everything else is one server start."""
    records: list[TrialRecord] = []
    observed_by_key: dict[str, float | None] = {}

    def measure(number: int, values: dict[str, Any]) -> float | None:
        if problem.space.violations(values):
            records.append(TrialRecord(number, "invalid_config", False, None, None))
            return None
        config = problem.space.config(values)
        key, true = config.key(), problem.true_value(config)
        if key in observed_by_key:
            records.append(TrialRecord(number, "reused", False, observed_by_key[key], true, flags=config.flags))
            return observed_by_key[key]
        m = problem.measure(config, noise_seed(seed, number))
        observed_by_key[key] = observed = problem.value(m)
        records.append(TrialRecord(number, m.failure.value if m.failure else "none", True, observed, true,
                                   problem.gpu_seconds(config, m), config.flags))
        return observed

    anchor(problem.space, seed, trials, problem.maximize, measure)
    return records


def _product(options: Sequence[Sequence[Any]]) -> Iterable[tuple[Any, ...]]:
    if not options:
        return [()]
    import itertools
    return itertools.product(*options)


def run_strategy(task: tuple[str, str, int, int, float]) -> tuple[str, str, int, list[TrialRecord], float]:
    name, strategy, seed, trials, intermittent = task
    problem = _problem(name, intermittent)
    t0 = time.monotonic()
    if strategy == "grid":
        records = TieredGrid(problem, seed, trials).run()
    elif strategy == "smac":
        records = run_ask_tell(problem, seed, trials, _smac_anchor.run_smac)
    elif strategy == "nevergrad":
        records = run_ask_tell(problem, seed, trials, _nevergrad_anchor.run_nevergrad)
    else:
        records = run_tuner(problem, strategy, seed, trials)
    return name, strategy, seed, records, time.monotonic() - t0


@functools.cache
def _problem(name: str, intermittent: float = 0.0) -> Problem:
    return Problem(name, intermittent)
