"""The worker: asks Optuna for a configuration, runs one trial, and tells Optuna what happened.

How outcomes reach the sampler matters: a configuration that crashes or produces NaN is recorded
as PRUNED with a violated constraint (the GP sampler only reads COMPLETE trials, so there it is
COMPLETE with a pessimistic value and the violated constraint). FAIL is kept for what is not the
configuration's fault (an interrupted run), because samplers learn nothing from FAIL.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from ._errors import TunerError
from ._failures import FailureKind, FailureRecord
from ._procs import free_port
from ._record import FEASIBILITY, note_markdown, redact_log, save_note, trial_attrs, upload_log, write_attrs
from ._redact import Redactor
from ._slots import NotEnoughGpus, SlotPool
from ._space import ServerConfig
from ._spec import Spec
from ._trial import TrialContext, TrialPlan, TrialResult, run_trial

REFERENCE_ATTR = "reference"


class Interrupted(TunerError):
    """The run was stopped (Ctrl-C, SIGTERM) while this trial ran; it is run again on resume."""


@dataclasses.dataclass
class Worker:
    spec: Spec
    ctx: TrialContext
    workdir: Path  # runs/<study>
    sampler_name: str
    artifact_store: Any = None
    redactor: Redactor = dataclasses.field(default_factory=lambda: Redactor({}))
    on_trial_end: Callable[[optuna.Trial, dict[str, Any]], None] = lambda trial, attrs: None
    pool: SlotPool | None = None  # GPU slots; None: the server sees whatever GPUs the tuner sees

    # -- the objective ------------------------------------------------------------------------------
    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        space = self.spec.space
        values = space.suggest(trial)
        config = space.config(values)
        key = config.key()
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("started_at", time.time())
        broken = space.violations(values)
        if broken:
            result = TrialResult(trial.number, config)
            result.failure = FailureRecord(FailureKind.INVALID_CONFIG, f"breaks the constraint {broken[0]}", "",
                                           "space")
            return self._finish(trial, result, {})
        prior = self._same_config_done(trial, key)
        if prior is not None:
            return self._reuse(trial, prior)
        try:
            result = self._run(trial, config)
        except NotEnoughGpus as exc:
            result = TrialResult(trial.number, config)
            result.failure = FailureRecord(FailureKind.INVALID_CONFIG, str(exc), "", "slots")
        except KeyboardInterrupt:
            trial.set_user_attr("failure_kind", FailureKind.INTERRUPTED.value)
            trial.set_user_attr("ended_at", time.time())
            raise
        if result.failure is not None and result.failure.kind is FailureKind.INTERRUPTED:
            trial.set_user_attr("failure_kind", FailureKind.INTERRUPTED.value)
            trial.set_user_attr("ended_at", time.time())
            raise Interrupted(f"trial {trial.number} interrupted")
        return self._finish(trial, result, {"baseline": bool(trial.user_attrs.get("baseline"))})

    def _run(self, trial: optuna.Trial, config: ServerConfig) -> TrialResult:
        plan = TrialPlan(trial.number, config, self.workdir / f"trial-{trial.number}",
                         free_port(self.spec.server.host), reference=trial.study.user_attrs.get(REFERENCE_ATTR))
        ctx = dataclasses.replace(self.ctx, on_progress=self._reporter(trial))
        if self.pool is None:
            return run_trial(ctx, plan)
        with self.pool.acquire(self.ctx.engine.gpus_needed(config.flags), self.ctx.cancel) as grant:
            trial.set_user_attr("gpu_ids", list(grant.gpu_ids))
            trial.set_user_attr("slot_acquired_at", time.time())
            result = run_trial(ctx, dataclasses.replace(plan, gpu_ids=grant.gpu_ids))
            trial.set_user_attr("slot_released_at", time.time())
        return result

    def _reporter(self, trial: optuna.Trial) -> Callable[[int, float], bool] | None:
        if self.spec.objective.second_metric or "throughput" not in self.spec.objective.metric:
            return None

        def report(step: int, rate: float) -> bool:
            trial.report(rate, step)
            return trial.should_prune()
        return report

    # -- outcomes -----------------------------------------------------------------------------------
    def _finish(self, trial: optuna.Trial, result: TrialResult, extra: dict[str, Any]) -> float | list[float]:
        redact_log(result, self.redactor)
        attrs = trial_attrs(result, self.spec, extra)
        values = None
        if result.ok:
            level = result.probe.level(self.spec.objective.concurrency)
            values = [level.metric(name) for name in self.spec.objective.names]
            slo = [f"{name} {level.metric(name):.1f} > {limit:g}" for name, limit in self.spec.objective.slo.items()
                   if level.metric(name) > limit]
            if slo:
                attrs["failure_kind"] = FailureKind.SLO_VIOLATION.value
                attrs["slo_violations"] = slo
                attrs["failure_message"] = "; ".join(slo)
        feasible = result.ok and attrs["failure_kind"] == "none"
        attrs["feasible"] = feasible
        attrs["ended_at"] = time.time()
        write_attrs(trial, attrs)
        trial.set_constraint(FEASIBILITY, 0.0 if feasible or result.stopped_early else 1.0)
        if feasible and extra.get("baseline") and result.gate is not None:
            trial.study.set_user_attr(REFERENCE_ATTR, dict(result.gate.reference))
        self._annotate(trial, result, attrs, feasible)
        self.on_trial_end(trial, attrs)
        if values is not None:
            return values if len(values) > 1 else values[0]
        if result.stopped_early:
            raise optuna.TrialPruned("stopped early by the pruner")
        return self._infeasible(attrs)

    def _infeasible(self, attrs: dict[str, Any]) -> float | list[float]:
        if self.sampler_name == "gp":
            # GPSampler reads COMPLETE trials only: a pessimistic value plus the violated constraint.
            worst = [0.0 if d == "maximize" else 1e9 for d in self.spec.objective.directions]
            return worst if len(worst) > 1 else worst[0]
        raise optuna.TrialPruned(f"{attrs['failure_kind']}: {attrs.get('failure_message', '')}")

    def _annotate(self, trial: optuna.Trial, result: TrialResult, attrs: dict[str, Any], feasible: bool) -> None:
        save_note(trial, self.redactor(note_markdown(result, attrs, feasible)))
        if self.artifact_store is not None:
            upload_log(trial, result, self.artifact_store)

    # -- never the same restart twice ---------------------------------------------------------------
    def _same_config_done(self, trial: optuna.Trial, key: str) -> optuna.trial.FrozenTrial | None:
        """An earlier trial with the same server configuration, waiting for it if it is still running."""
        while True:
            running = None
            for other in trial.study.get_trials(deepcopy=False):
                if other.number == trial.number or other.user_attrs.get("config_key") != key:
                    continue
                if other.user_attrs.get("reused_from") is not None:
                    continue
                if other.state in (TrialState.COMPLETE, TrialState.PRUNED) and "feasible" in other.user_attrs:
                    return other
                if other.state == TrialState.RUNNING and other.number < trial.number:
                    running = other
            if running is None:
                return None
            time.sleep(1.0)  # another worker runs this very configuration: wait for its result

    def _reuse(self, trial: optuna.Trial, prior: optuna.trial.FrozenTrial) -> float | list[float]:
        skip = {"started_at", "ended_at", "baseline", "gpu_ids", "config_key", "requeued_from",
                "slot_acquired_at", "slot_released_at"}
        for k, v in prior.user_attrs.items():
            if k not in skip:
                trial.set_user_attr(k, v)
        trial.set_user_attr("reused_from", prior.number)
        trial.set_user_attr("ended_at", time.time())
        feasible = bool(prior.user_attrs.get("feasible"))
        trial.set_constraint(FEASIBILITY, 0.0 if feasible else 1.0)
        self.on_trial_end(trial, dict(trial.user_attrs))
        if prior.state == TrialState.COMPLETE and prior.values is not None:
            return prior.values if len(prior.values) > 1 else prior.values[0]
        raise optuna.TrialPruned(f"same configuration as trial {prior.number}")
