"""The tuner's TPE: Optuna's TPESampler, taught what a launch configuration costs.

Six changes, each because plain TPE wasted server restarts on the shipped or generated spaces
(benchmarks/search_efficiency.py has the figures):

1. **Proposals are weighed by the chance that the server runs at all.** Plain TPE, even with the
   feasibility constraint, ranks a crashed trial among the merely slower ones, and its prior favours choices
   tried little: a backend that produced NaN every time looks *better* than the working one tried often, and
   keeps being proposed (28% of the GLM-5 space's trials after the tenth crashed). Here the acquisition
   log l(x)/g(x) gets RISK_AVERSION * log P(runs | x) added, with P(runs | x) from `RunOdds`: per choice of
   an unordered flag, per range of an ordered one and, for a failure no single flag explains, per range
   that a choice never ran with; from the trials that ran and the failures that blame them by kind (the idea
   of c-TPE, Watanabe and Hutter, IJCAI 2023, with a model that learns "this backend crashes" from two or
   three trials, and "batch 96 ran out of memory" as a statement about 96 and above; a multivariate Parzen
   estimate of feasibility, tried first, could not). A failed CUDA graph capture (or a start that hung
   capturing) speaks only of configurations that capture graphs (`GraphAwareOdds`), and a failure whose
   message names its fix ("increase --mem-fraction-static") blames the side of the value that the fix moves
   away from.
2. **Nothing is proposed that is known in advance to be a wasted trial**: a candidate that breaks a constraint
   the space declares, or repeats a configuration already measured (or running), is dropped from TPE's
   candidates (a third of plain TPE's trials on the 70B space were such). If every candidate is one, a
   repeat is preferred (the worker reuses its measurement, with no restart), else TPE's own choice stands and
   the worker records it without a restart. A flag that is active only in some trials (a graph size, with
   graphs on) is drawn after the joint sample, on its own: a draw that breaks a constraint with the flags
   chosen already is drawn again, then at random, then a repeat is preferred as above (a quarter of the trials
   on the generated training landscapes were graph sizes above the batch limit).
3. **Startup explores around the best configuration so far, not only at random.** Random launch flags mostly
   crash on exotic hardware (four in five on the GLM-5 space), while one or two flags changed from a
   configuration that works usually run and often tell more. Every other startup trial still draws every
   flag at random (a TP x DP split far from the baseline is found that way), and startup proposals too are
   kept with the chance that they run.
4. **No GPU is left idle that another replica could use** (`Replicas`): a configuration whose tensor x
   pipeline layout leaves GPUs free gets as many data-parallel replicas as fit. For a server's throughput
   (and its latency under load) more copies of the same server are never worse, and a run that tried
   TP 4 x DP 1 on eight GPUs spent a restart to learn what TP 4 x DP 2 would have told it, better.
5. **A batch limit below the load counts against a proposal** (`BatchLimit`): with a throughput objective
   measured at concurrency C, a configuration that admits M < C requests at once (SGLang's
   max-running-requests, vLLM's max-num-seqs, per replica) serves at most M of them; the log of M / C is
   added to the acquisition, as the chance to run is. Not a rule: results that say otherwise can outweigh it.
6. **No CUDA graph is captured that the load leaves unused** (`GraphCover`): a decode batch larger than the
   largest graph runs without graphs, so with a throughput objective measured at concurrency C a graph size
   below the batch each replica runs (C / replicas, at most the batch limit) is raised to the smallest listed
   size that covers it. Left below, graphs looked useless to TPE and the search kept them off.

What earlier studies found (tuner/search/_warm.py, `prior`) enters the same two places: the values their failures blame
lower P(runs | x) until a trial of this study runs them, and their best configurations join the density of good
configurations as weighted observations ("ghosts"). Without a prior the sampler is exactly the one above.

Built on TPESampler internals of Optuna 5.0.0 (pinned in pyproject.toml; tests/search/test_tpe.py fails when they
change): `_sample` is TPESampler's own with the additions marked. Its densities are built from the trials whose
server ran; whether a server runs is the run odds' to say alone (Optuna would rank failed trials among the
slowest as well, and a wrongly blamed flag value was then shunned twice over).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers._tpe.sampler import _split_trials, default_gamma
from optuna.trial import FrozenTrial, TrialState

from .._failures import failed_capturing
from ..spec import Space
from ._blame import AT, DOWN, UP, Shown, captures_graphs, choice_key, is_number, is_ordered, violation

if TYPE_CHECKING:
    from ._warm import Prior
    from ..engines import Engine

_TAKEN = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
_TRIES = 32  # redraws of a startup proposal before giving up on a fresh, allowed one
_TPE_TRIES = 4  # TPE's draws of a flag outside the joint sample before drawing it at random instead
# P(runs) enters the acquisition to this power: a failed restart costs about as much as a slow one and
# teaches less, so a likely crash must look worse than a likely small gain (1 halved the crashes of plain
# TPE on the GLM-5 space, 2 halved them again; 3 bought no more; on the generated landscapes 1.5 and 1 reached
# 98% no more often than 2, with more crashes: README, benchmark section).
RISK_AVERSION = 2.0


class CrashAwareTPE(optuna.samplers.TPESampler):
    """TPESampler for launch flags: weighs proposals by P(the server runs) and by the share of the load they
    admit, skips forbidden and repeated configurations, fills idle GPUs with replicas, and spends half of its
    startup trials near the best configuration so far."""

    def __init__(self, *, space: Space | None = None, engine: Engine | None = None, load: int | None = None,
                 local_startup: bool = True, risk_aversion: float = RISK_AVERSION, prior: Prior | None = None,
                 **kwargs: Any) -> None:
        """`load`: the concurrency at which a throughput objective is measured (None for any other objective);
        `prior`: what earlier studies tell this one (tuner/search/_warm.py)."""
        super().__init__(**kwargs)
        self._prior = prior
        self._space = space
        self._replicas = Replicas.of(space, engine)
        self._graph_cover = GraphCover.of(space, engine, load)
        self._batch_limit = BatchLimit.of(engine, load)
        self._local_startup = local_startup
        self._risk_aversion = risk_aversion

    # -- startup -------------------------------------------------------------------------------------------
    def _sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                         search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space or self._finished(study) >= self._n_startup_trials:
            return super()._sample_relative(study, trial, search_space)
        # Startup: TPE would draw every flag at random, one by one, with no say over the whole.
        taken = self._taken(study, trial)
        odds = self._run_odds(study)
        # Every other startup trial explores around the best so far; all of them when earlier studies' good
        # configurations started this one (benchmarks/transfer.py, docs/learning.md).
        warm = self._prior is not None and self._prior.around
        center = self._incumbent(study) if self._local_startup and (warm or self._finished(study) % 2 == 1) else None
        rng = self._rng.rng
        likeliest: tuple[float, dict[str, Any]] | None = None
        for _ in range(_TRIES):
            proposal = self._around(study, trial, search_space, center) if center else \
                self._anywhere(study, trial, search_space)
            proposal = self._complete(proposal)
            # Kept with the chance that it runs (to the power risk_aversion): a choice that failed before
            # is drawn less, not never.
            keep = np.exp(self._risk_aversion * odds.log_run(proposal, search_space) + self._log_share(proposal))
            if self._allowed({}, proposal, taken):
                if rng.random_sample() < keep:
                    return proposal
                if likeliest is None or keep > likeliest[0]:
                    likeliest = (keep, proposal)
        # None kept: TPE then draws every flag at random, with no say of the odds. Told by earlier studies which
        # values fail (they make most draws unlikely to run), the likeliest of the draws is the better guess.
        return likeliest[1] if likeliest is not None and self._prior is not None and self._prior.lessons else {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        """A flag outside the joint sample (one that is active only in some trials)."""
        known, taken = self._get_params(trial, study), self._taken(study, trial)
        if self._finished(study) >= self._n_startup_trials:
            # TPE's density of this flag alone may favour only values that break a constraint with the flags
            # of the joint sample (a graph size above its batch limit): such a trial is wasted (addition 2).
            for _ in range(_TPE_TRIES):
                value = self._covered(known, param_name,
                                      super().sample_independent(study, trial, param_name, param_distribution))
                if self._allowed(known, {param_name: value}, taken):
                    return value
        drawn = []
        for _ in range(_TRIES):
            value = self._covered(known, param_name,
                                  self._random_sampler.sample_independent(study, trial, param_name, param_distribution))
            if self._allowed(known, {param_name: value}, taken):
                return value
            drawn.append(value)
        # Every value drawn breaks a constraint or repeats a measured configuration. A repeat is reused: no
        # restart, and a measurement TPE can use. A broken constraint is a trial with nothing to show.
        return next((v for v in drawn if self._allowed(known, {param_name: v}, ())), value)

    def _covered(self, known: Mapping[str, Any], name: str, value: Any) -> Any:
        """A graph size drawn on its own (it is active only with graphs on), raised to cover the load."""
        if self._graph_cover is None or name != self._graph_cover.flag:
            return value
        return self._graph_cover.cover({**known, name: value})[name]

    def _complete(self, proposal: Mapping[str, Any]) -> dict[str, Any]:
        """A proposal with idle GPUs filled by replicas, then its graph size raised to cover the load."""
        proposal = self._replicas.fill(proposal) if self._replicas is not None else dict(proposal)
        return self._graph_cover.cover(proposal) if self._graph_cover is not None else proposal

    def _completed_flags(self, search_space: Mapping[str, BaseDistribution]) -> list[str]:
        return [flag for rule in (self._replicas, self._graph_cover) if rule is not None
                and (flag := rule.flag) in search_space]

    def _finished(self, study: optuna.Study) -> int:
        return len(study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED),
                                     use_cache=True))

    def _incumbent(self, study: optuna.Study) -> FrozenTrial | None:
        """The best trial that ran (the baseline, at first); with two objectives, best by the first."""
        ran = [t for t in study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True)
               if violation(t) <= 0 and t.values]
        if not ran:
            return None
        sign = 1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1.0
        return max(ran, key=lambda t: sign * t.values[0])

    def _anywhere(self, study: optuna.Study, trial: FrozenTrial,
                  search_space: Mapping[str, BaseDistribution]) -> dict[str, Any]:
        return {name: self._random_sampler.sample_independent(study, trial, name, dist)
                for name, dist in search_space.items()}

    def _around(self, study: optuna.Study, trial: FrozenTrial, search_space: Mapping[str, BaseDistribution],
                center: FrozenTrial) -> dict[str, Any]:
        """The center's values with one or two flags drawn anew."""
        proposal = {name: center.params[name] for name in search_space if name in center.params}
        names = sorted(proposal)
        rng = self._rng.rng
        for name in rng.choice(names, size=min(len(names), 1 + rng.randint(2)), replace=False):
            for _ in range(8):
                value = self._random_sampler.sample_independent(study, trial, name, search_space[name])
                if value != proposal[name]:
                    proposal[name] = value
                    break
        for name, dist in search_space.items():  # a flag the center lacks (not active there)
            proposal.setdefault(name, self._random_sampler.sample_independent(study, trial, name, dist))
        return proposal

    # -- after startup: TPESampler._sample with the two additions ----------------------------------------------
    def _sample(self, study: optuna.Study, trial: FrozenTrial,
                search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self._constant_liar:
            states = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING]
        else:
            states = [TrialState.COMPLETE, TrialState.PRUNED]
        trials = study._get_trials(deepcopy=False, states=states, use_cache=not self._constant_liar)
        if self._constant_liar:
            trials = [t for t in trials if trial.number != t.number]
        if self._gamma is None:
            self._gamma = default_gamma
        # Addition 0: TPE's densities model how fast a configuration is, among those that ran; whether it
        # runs is RunOdds' to say. Optuna puts failed trials among the worst, so a flag value blamed wrongly
        # (a DP split that crashed with a backend that never runs) was shunned twice over: on the generated
        # training landscapes this cut the median restarts to 98% on 6 of 10 (benchmarks/search_efficiency.py).
        ran = [t for t in trials if t.state == TrialState.RUNNING or violation(t) <= 0]
        if sum(t.state != TrialState.RUNNING for t in ran) >= 2:
            trials = ran
        n = sum(t.state != TrialState.RUNNING for t in trials)
        below_trials, above_trials = _split_trials(study, trials, self._gamma(n))
        mpe_below = self._build_parzen_estimator(study, search_space, below_trials, handle_below=True)
        mpe_above = self._build_parzen_estimator(study, search_space, above_trials, handle_below=False)
        samples_below = mpe_below.sample(self._rng.rng, self._n_ei_candidates)
        external = _external(samples_below, search_space)
        # Addition 3: idle GPUs filled with replicas, before the candidates are ranked.
        external = [self._complete(params) for params in external]
        for flag in self._completed_flags(search_space):
            dist = search_space[flag]
            samples_below[flag] = np.array([dist.to_internal_repr(p[flag]) for p in external], dtype=float)
        acq_func_vals = self._compute_acquisition_func(samples_below, mpe_below, mpe_above)
        # Addition 1: how likely each candidate is to start and answer correctly.
        odds = self._run_odds(study)
        log_run = np.array([odds.log_run(params, search_space) for params in external])
        acq_func_vals = acq_func_vals + self._risk_aversion * log_run
        # Addition 4: a batch limit below the load caps the throughput at the limit's share of it.
        acq_func_vals = acq_func_vals + np.array([self._log_share(params) for params in external])
        # Addition 2: candidates that are known wastes lose to every other.
        taken = self._taken(study, trial)
        known = self._get_params(trial, study)  # this trial's flags chosen so far, and its relative sample
        allowed = np.array([self._allowed(known, params, taken) for params in external])
        if not allowed.any():  # a repeat is reused with no restart; a broken constraint shows nothing
            allowed = np.array([self._allowed(known, params, ()) for params in external])
        if allowed.any():
            acq_func_vals = np.where(allowed, acq_func_vals, -np.inf)
        best = int(np.argmax(acq_func_vals))
        return external[best]

    def _log_share(self, params: Mapping[str, Any]) -> float:
        return self._batch_limit.log_share(params) if self._batch_limit is not None else 0.0

    def _run_odds(self, study: optuna.Study) -> GraphAwareOdds:
        finished = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED),
                                     use_cache=True)
        odds = GraphAwareOdds.learn(finished)
        # Warm start: failures of earlier studies that no trial of this one has contradicted (tuner/search/_warm.py).
        told = self._prior is not None and (self._prior.lessons or self._prior.ran)
        return self._prior.odds(odds, finished) if told else odds

    def _build_parzen_estimator(self, study: optuna.Study, search_space: dict[str, BaseDistribution],
                                trials: list[FrozenTrial], handle_below: bool) -> Any:
        """TPESampler's own, with the good configurations of earlier studies (warm start) added to the density of
        good configurations, each at its ghost weight beside the study's own trials' weights."""
        ghosts = self._ghosts(search_space) if handle_below and not study._is_multi_objective() else []
        if not ghosts:
            return super()._build_parzen_estimator(study, search_space, trials, handle_below)
        observations = self._get_internal_repr(trials, search_space, study)
        own = len(next(iter(observations.values()))) if observations else 0
        weights = self._parzen_estimator_parameters.weights(own)[:own] if own else np.array([])
        for name in search_space:
            observations[name] = np.append(observations[name], [g[0][name] for g in ghosts])
        weights = np.append(np.asarray(weights, dtype=float), [g[1] for g in ghosts])
        return self._parzen_estimator_cls(observations, search_space, self._parzen_estimator_parameters, weights)

    def _ghosts(self, search_space: Mapping[str, BaseDistribution]) -> list[tuple[dict[str, float], float]]:
        """The prior's ghosts that set every flag of the search space to a value it holds, in internal form."""
        out = []
        for ghost in self._prior.ghosts if self._prior is not None else ():
            try:
                internal = {name: dist.to_internal_repr(ghost.params[name]) for name, dist in search_space.items()}
            except (KeyError, ValueError):
                continue
            if all(dist._contains(internal[name]) for name, dist in search_space.items()):
                out.append((internal, ghost.weight))
        return out

    # -- known wastes ------------------------------------------------------------------------------------------
    def _taken(self, study: optuna.Study, trial: FrozenTrial) -> list[dict[str, Any]]:
        """Parameters of every other trial that finished or is running (its planned ones, with constant liar)."""
        return [self._get_params(t, study) for t in study._get_trials(deepcopy=False, states=_TAKEN,
                                                                       use_cache=False)
                if t.number != trial.number]

    def _allowed(self, known: Mapping[str, Any], proposal: Mapping[str, Any],
                 taken: Sequence[Mapping[str, Any]]) -> bool:
        values = {**known, **proposal}
        if self._space is not None and self._space.violations(values):
            return False
        # Flags not chosen yet (inactive ones, or drawn later in this trial) cannot tell two trials apart.
        return not any(all(other.get(k, _MISSING) == v for k, v in values.items()) for other in taken)


_MISSING = object()


@dataclass(frozen=True)
class Replicas:
    """Raises a configuration's data-parallel replica count to the most that fit the space's GPUs and its
    constraints: GPUs a tensor x pipeline layout leaves free would otherwise sit idle."""

    flag: str  # the replica count's parameter (SGLang's dp-size, vLLM's data-parallel-size)
    counts: tuple[int, ...]  # its values, ascending
    space: Space
    gpus_needed: Callable[[Mapping[str, Any]], int]

    @classmethod
    def of(cls, space: Space | None, engine: Engine | None) -> Replicas | None:
        """None where there is nothing to fill: no GPU count, or no unconditional replica count to search."""
        if space is None or engine is None or space.gpus is None or engine.replica_flag is None:
            return None
        param = space.params.get(engine.replica_flag)
        if param is None or param.when or param.type not in ("categorical", "int"):
            return None
        counts = param.grid()
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
            return None
        return cls(param.name, tuple(sorted(counts)), space, engine.gpus_needed)

    def fill(self, values: Mapping[str, Any]) -> dict[str, Any]:
        current = values.get(self.flag)
        if not isinstance(current, int):
            return dict(values)
        one = self.gpus_needed(self.space.config({**values, self.flag: 1}).flags)
        filled = dict(values)
        for n in self.counts:
            if n <= current:
                continue
            if one * n > self.space.gpus:
                break
            more = {**values, self.flag: n}
            # `--dp-size N --enable-dp-attention` (SGLang) puts the dp ranks on the tensor-parallel GPUs.
            if self.gpus_needed(self.space.config(more).flags) != one * n:
                break
            if not self.space.violations(more):
                filled = more
        return filled


@dataclass(frozen=True)
class GraphCover:
    """Raises a configuration's largest CUDA graph batch to the decode batch that the load brings: a server runs
    a decode batch larger than its largest captured graph without graphs (SGLang's CudaGraphRunner.can_run), so
    under the probe's C concurrent requests, C / replicas per replica and at most the batch limit, a smaller
    graph size is never used. Such a restart measures the server as if graphs were off, while it pays for their
    capture: on the generated landscapes, graphs at a size below the load made graphs look useless, and runs
    settled with graphs off where the optimum has them on (in 63 of the 112 runs on the training range that
    missed 98%). Raised, the median restarts to 98% there fell from 21.75 to 15.75 (README, benchmarks)."""

    flag: str  # the largest graph batch (SGLang's cuda-graph-max-bs-decode, or cuda-graph-max-bs before 0.5.17)
    sizes: tuple[int, ...]  # its values, ascending
    limit_flag: str | None
    replica_flag: str | None
    load: int
    space: Space

    @classmethod
    def of(cls, space: Space | None, engine: Engine | None, load: int | None) -> GraphCover | None:
        if space is None or engine is None or not load:
            return None
        param = next((space.params[f] for f in engine.graph_batch_flags if f in space.params), None)
        if param is None or param.type not in ("categorical", "int"):
            return None
        sizes = param.grid()
        if not all(is_number(n) for n in sizes):
            return None
        return cls(param.name, tuple(sorted(sizes)), engine.batch_limit_flag, engine.replica_flag, load, space)

    def cover(self, values: Mapping[str, Any]) -> dict[str, Any]:
        size = values.get(self.flag)
        if not is_number(size):
            return dict(values)
        batch = math.ceil(self.load / max(1, self._value(values, self.replica_flag) or 1))
        limit = self._value(values, self.limit_flag)
        if limit:
            batch = min(batch, limit)
        if size >= batch:
            return dict(values)
        larger = next((n for n in self.sizes if n >= batch), None)
        if larger is None or self.space.violations(covered := {**values, self.flag: larger}):
            return dict(values)
        return covered

    def _value(self, values: Mapping[str, Any], flag: str | None) -> int | None:
        value = values.get(flag, self.space.fixed.get(flag)) if flag else None
        return int(value) if is_number(value) else None


@dataclass(frozen=True)
class BatchLimit:
    """How much of the probe's load a configuration can serve at once: a server that admits 16 requests at a
    time, probed with 256 concurrent ones, decodes batches of 16 while the rest wait, so its throughput is at
    most what it reaches at concurrency 16. Known before the restart, this is weighed like the chance to run
    (its log added to TPE's acquisition): without it, TPE learned that 16 is slow only from 16's own trials,
    and a traced run on a generated landscape probed at 256 spent 9 of its 40 restarts on limits of 16 and 64.
    tests/engines/test_vllm.py checks the premise on vLLM's CPU server, from its own /metrics."""

    flag: str  # SGLang's max-running-requests, vLLM's max-num-seqs
    replica_flag: str | None
    load: int

    @classmethod
    def of(cls, engine: Engine | None, load: int | None) -> BatchLimit | None:
        if engine is None or engine.batch_limit_flag is None or not load:
            return None
        return cls(engine.batch_limit_flag, engine.replica_flag, load)

    def log_share(self, params: Mapping[str, Any]) -> float:
        """log of the share of the load admitted at once (0 where all of it is, or the limit is not set)."""
        limit = params.get(self.flag)
        if not is_number(limit) or limit <= 0:
            return 0.0
        # Each replica has a scheduler of its own, started with the same flags (SGLang 0.5.23's
        # data_parallel_controller.py leaves the limit alone); ranks under DP attention share one limit
        # (model_executor/pool_configurator.py divides it by attn_dp_size), so this overcounts there: the
        # weight errs towards no penalty.
        replicas = params.get(self.replica_flag) if self.replica_flag else None
        if is_number(replicas) and replicas > 1:
            limit *= replicas
        return min(0.0, math.log(limit / self.load))


PRIOR_STRENGTH = 1.0  # how many trials' worth the overall run rate counts for a choice seen rarely


class RunOdds:
    """P(a server runs | its flags), learned from the trials so far.

    A failed trial blames what in it has never been shown to run. For an unordered choice (a backend, a
    dtype, a switch) that is the choice itself. For an ordered flag (a batch size, a memory fraction, a limit),
    where failures are mostly monotone (a server that runs out of memory at max batch 96 does so at 128 too,
    and may well run at 48), it is the failed value and everything beyond it on the side where no trial
    has run: above the largest value that ran, or below the smallest. The blame is split between the two
    kinds of suspect by the failure's kind (an OOM points at sizes, a NaN at kernels), then equally within
    each. A message that names its fix puts half of the blame on the flag it names, on the side its fix moves
    away from, and the other half goes by these rules. If nothing in the
    trial is unproven, the failure is an interaction: of a choice with an ordered value beyond every value that
    ran with that choice (an FP8 KV cache run at batch 64, failing at 512 where the default dtype runs), blamed
    on that pair and the far side, or, where there is no such pair, shared by all of its choices and values.
    Each choice's chance is its runs against its runs plus blame, drawn towards the overall run rate while it
    has been tried little; an ordered value's chance counts as runs the trials that ran at that value or beyond
    it, and is 1 where no blame covers it (a value between or beyond tried ones is not suspect in itself); a
    pair's alike, over the runs with its choice. A configuration runs only if every flag in it does: its chance
    is that of its weakest unordered choice, times that of each ordered value and pair under blame. Trials
    refused for breaking a declared constraint are not failures of any choice.

    The blame rules are tuner/search/_blame.py's (`Shown.blames`), shared with a study's lessons (_lessons.py).
    """

    def __init__(self, log_by_choice: dict[tuple[str, Any], float], log_unseen: dict[str, float],
                 log_base: float, ran_values: dict[str, list[float]],
                 ordered_blame: dict[str, list[tuple[float, int, float]]],
                 ran_with: dict[tuple[tuple[str, Any], str], list[float]],
                 pair_blame: dict[tuple[tuple[str, Any], str], list[tuple[float, int, float]]]) -> None:
        self._log = log_by_choice
        self._unseen = log_unseen  # by flag: a choice of it not tried yet
        self._base = log_base  # a flag not tried yet
        self._ran_values = ran_values  # by ordered flag: its values in the trials that ran
        self._ordered_blame = ordered_blame  # by ordered flag: (value, side, weight) of each blame
        self._ran_with = ran_with  # by (choice, ordered flag): the flag's values in the runs with the choice
        self._pair_blame = pair_blame  # by (choice, ordered flag): (value, side, weight) of each blame

    @classmethod
    def learn(cls, trials: Sequence[FrozenTrial]) -> RunOdds:
        shown = Shown.of(trials)
        blame: dict[tuple[str, Any], float] = {}
        ordered_blame: dict[str, list[tuple[float, int, float]]] = {}
        pair_blame: dict[tuple[tuple[str, Any], str], list[tuple[float, int, float]]] = {}
        for t in shown.failed:
            for b in shown.blames(t):
                if b.choice is not None and b.ordered is not None:
                    name, value, side = b.ordered
                    pair_blame.setdefault((b.choice, name), []).append((value, side, b.weight))
                elif b.choice is not None:
                    blame[b.choice] = blame.get(b.choice, 0.0) + b.weight
                else:
                    name, value, side = b.ordered
                    ordered_blame.setdefault(name, []).append((value, side, b.weight))
        runs, ran_values, ran_with, base = shown.runs, shown.ran_values, shown.ran_with, shown.base
        # A flag whose choices crashed when first tried (backends on unsupported hardware) is likely to crash
        # on the next new choice too: each flag's prior is the share of its tried choices that ever ran (a
        # choice that took part of a failure's blame counts as tried by that part).
        tried: dict[str, float] = {}
        proven: dict[str, int] = {}
        for name, value in {*runs, *blame}:
            ran_here = (name, value) in runs
            tried[name] = tried.get(name, 0.0) + (1.0 if ran_here else min(1.0, blame[name, value]))
            proven[name] = proven.get(name, 0) + ran_here
        prior = {name: base * (proven[name] + 1) / (tried[name] + 1) for name in tried}
        log_by_choice = {c: math.log((runs.get(c, 0) + PRIOR_STRENGTH * prior[c[0]])
                                     / (runs.get(c, 0) + blame.get(c, 0.0) + PRIOR_STRENGTH))
                         for c in set(runs) | set(blame)}
        unseen = {name: math.log(p) for name, p in prior.items()}
        return cls(log_by_choice, unseen, math.log(base), ran_values, ordered_blame, ran_with, pair_blame)

    def log_run(self, params: Mapping[str, Any], search_space: Mapping[str, BaseDistribution]) -> float:
        """log P(runs) of a configuration: that of its least likely unordered choice, times that of each
        ordered value and each pair (a choice, a range of an ordered flag) that a failure's blame covers."""
        weakest, ordered = 0.0, 0.0
        choices, values = [], {}
        for name, value in params.items():
            dist = search_space.get(name)
            if dist is None:
                continue
            if is_ordered(dist):
                values[name] = float(value)
                ordered += _log_run_ordered(self._ordered_blame.get(name, ()), self._ran_values.get(name, ()),
                                            values[name])
            else:
                choices.append((name, choice_key(value)))
                weakest = min(weakest, self._log.get((name, choice_key(value)), self._unseen.get(name, self._base)))
        for (choice, name), blames in self._pair_blame.items():
            if choice in choices and name in values:
                ordered += _log_run_ordered(blames, self._ran_with.get((choice, name), ()), values[name])
        return weakest + ordered


def _log_run_ordered(blames: Sequence[tuple[float, int, float]], ran: Sequence[float], value: float) -> float:
    """Each side's blame that covers this value against the runs that cover it; the worse side counts."""
    worst = 0.0
    for side in (UP, DOWN, AT):
        blame = sum(w for v, s, w in blames if s == side and _covers(v, side, value))
        if blame > 0:
            runs = sum(_covers(value, side, r) for r in ran)
            worst = min(worst, math.log((runs + PRIOR_STRENGTH) / (runs + blame + PRIOR_STRENGTH)))
    return worst


class GraphAwareOdds:
    """P(runs | flags) = P(starts and answers | flags) x P(CUDA graph capture works | flags), the second
    only for a configuration that captures graphs.

    A failed capture cannot happen without capture, yet one `RunOdds` over all trials blames the backend it
    failed with for every configuration, graphs off included: on the generated landscapes where the optimum
    runs such a backend with graphs off, the search left it after one failure (benchmarks/search_efficiency.py).
    So the capture failures (an exception, or a start that hung after the capture-begin line) and the trials
    that captured and ran teach the second factor alone, and every other trial the first. With no failed
    capture this is exactly one `RunOdds` over all trials.
    """

    def __init__(self, general: RunOdds, capture: RunOdds | None) -> None:
        self._general = general
        self._capture = capture

    @classmethod
    def learn(cls, trials: Sequence[FrozenTrial]) -> GraphAwareOdds:
        failed_capture = [failed_capturing(t.user_attrs) for t in trials]
        general = RunOdds.learn([t for t, failed in zip(trials, failed_capture) if not failed])
        if not any(failed_capture):
            return cls(general, None)
        # A graphs-off run proves nothing about capture: counted here, it made a backend look safe to
        # capture with, and the search failed capture with it again and again.
        attempts = [t for t, failed in zip(trials, failed_capture)
                    if failed or (violation(t) <= 0 and captures_graphs(t.params))]
        return cls(general, RunOdds.learn(attempts))

    def log_run(self, params: Mapping[str, Any], search_space: Mapping[str, BaseDistribution]) -> float:
        log = self._general.log_run(params, search_space)
        if self._capture is not None and captures_graphs(params):
            log += self._capture.log_run(params, search_space)
        return log


def _covers(value: float, side: int, other: float) -> bool:
    """Whether `other` lies on `side` of `value` (or is it)."""
    return other == value or (side == UP and other > value) or (side == DOWN and other < value)


def _external(samples: dict[str, np.ndarray], search_space: Mapping[str, BaseDistribution]) -> list[dict[str, Any]]:
    size = len(next(iter(samples.values())))
    return [{name: dist.to_external_repr(samples[name][i].item()) for name, dist in search_space.items()}
            for i in range(size)]
