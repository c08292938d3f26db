"""The worker: asks Optuna for a configuration, runs one trial, and tells Optuna what happened.

How outcomes reach the sampler matters: a configuration that crashes or produces NaN is recorded
as PRUNED with a violated constraint (the GP sampler only reads COMPLETE trials, so there it is
COMPLETE with a pessimistic value and the violated constraint). FAIL is kept for what is not the
configuration's fault (an interrupted run), because samplers learn nothing from FAIL.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from .._errors import TunerError
from .._failures import FAILED_IN, HUNG_IN, FailureKind, FailureRecord
from .._redact import Redactor
from ..spec import ServerConfig, Spec
from ..trial import (FEASIBILITY, WORKER_RECORD, TrialContext, TrialPlan, TrialResult, free_port, note_markdown,
                     owner_alive, read_record, run_trial, save_note, store_log, this_worker, trial_attrs, upload_log,
                     write_record)
from ._slots import NotEnoughGpus, SlotPool
from ._startup import Startup, estimate
from ._study import set_user_attrs, study_lock

REFERENCE_ATTR = "reference"
REFERENCE_DIFFS_ATTR = "reference_logprob_diffs"
# A trial that runs the baseline's configuration again, only to record what the study's baseline lacks.
REMEASURE_ATTR = "remeasure_reference"


def reference_gap(study_attrs: Mapping[str, Any]) -> str | None:
    """What the logprob-excess check cannot judge, where the baseline ran but recorded no reference
    differences (studies from before they were recorded: the first GPU study's); None where nothing lacks."""
    if study_attrs.get(REFERENCE_ATTR) is None or (study_attrs.get(REFERENCE_DIFFS_ATTR) or {}).get("diffs"):
        return None
    return ("logprob-excess check not run: the baseline has no reference differences (recorded before tuner "
            "recorded them); the next baseline restart records them")
# Flags that set the numbers' precision: decode vs re-prefill differences are compared with the baseline's only
# where these are the baseline's (an fp8 KV cache differs more, and is not broken for it).
PRECISION_FLAGS = ("dtype", "kv-cache-dtype", "quantization", "torchao-config")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# What a retried trial inherits from the one that died (RetryHeartbeatStaleTrialCallback copies every user
# attr) but must not keep: it is about the dead run, not this one.
_RUN_ATTRS = ("config_key", "ended_at", "gpu_ids", "slot_acquired_at", "slot_released_at", "failure_kind",
              "failure_message", "failure_stage", HUNG_IN, FAILED_IN)


class Interrupted(TunerError):
    """The run was stopped (Ctrl-C, SIGTERM) while this trial ran; it is run again on resume."""

    def __init__(self, message: str, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage  # the stage the interrupt found the trial in


class Surplus(Exception):
    """Several workers asked at once and the study's trials are all taken: this one is not run."""


class NotStarted(Exception):
    """The trial's start-up does not fit in what is left of `run --timeout`: not run, and the run starts no more;
    the trial is marked interrupted, so the next run starts its configuration first."""


class _QuietFailures(logging.Filter):
    """Optuna logs every FAIL with a traceback. A surplus trial was never run, and an interrupted one is
    reported once by the run itself ("interrupted: ..."): neither needs one (a Ctrl-C in a probe printed
    "Trial N failed" and 12 lines of traceback before that line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (Surplus, NotStarted, Interrupted, KeyboardInterrupt)):
            return False
        failed = _FAILED.match(record.getMessage())
        return not (failed and int(failed.group(1)) in _quiet_numbers)


_FAILED = re.compile(r"Trial (\d+) failed ")
_quiet_numbers: set[int] = set()  # trials of this process that are surplus, not started or interrupted
logging.getLogger("optuna.study._optimize").addFilter(_QuietFailures())


def _live(t: optuna.trial.FrozenTrial, stale_after: float) -> bool:
    """A RUNNING trial that is really being run. A trial row that a lost commit left behind (created, never
    started, no heartbeat, so never failed as stale) stops counting once it is clearly abandoned."""
    if "started_at" in t.user_attrs:
        return True
    return t.datetime_start is None or (datetime.now() - t.datetime_start).total_seconds() < stale_after


@dataclasses.dataclass
class TrialBudget:
    """`--trials N` is the study's total, shared by every worker on it.

    Optuna's MaxTrialsCallback stops a worker once N trials have finished, but a worker that starts a
    trial while others still run the last ones overshoots N. Here a worker asks for a trial only while
    finished + running < N; when the rest are all running elsewhere it waits (failing stale trials of
    dead workers meanwhile, whose retries it then takes) until they finish or one of them fails. Two
    workers that ask at the same moment are settled by trial number in `claim`: the later one is not run.
    """

    total: int
    cancel: threading.Event
    grace_s: float = 20.0
    poll_s: float = 1.0
    _reserved: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @property
    def _stale_after(self) -> float:
        return max(60.0, 3 * self.grace_s)

    def counts(self, study: optuna.Study) -> tuple[int, int]:
        trials = study.get_trials(deepcopy=False)
        finished = sum(1 for t in trials if t.state in FINISHED)
        running = sum(1 for t in trials if t.state == TrialState.RUNNING and _live(t, self._stale_after))
        return finished, running

    def reserve(self, n: int) -> None:
        with self._lock:
            self._reserved += n

    def room(self, study: optuna.Study) -> int:
        """How many more trials may be asked for now (0: wait; negative never)."""
        finished, running = self.counts(study)
        with self._lock:
            return max(0, self.total - finished - running - self._reserved)

    def wait_for_room(self, study: optuna.Study) -> bool:
        """Block until another trial may be asked for (True) or the study has its N trials (False)."""
        while True:
            if self.cancel.is_set() or study._stop_flag:
                return False
            finished, running = self.counts(study)
            if finished >= self.total:
                return False
            with self._lock:
                if self.total - finished - running - self._reserved > 0:
                    self._reserved += 1
                    return True
            # Every remaining trial is running somewhere. One may be a dead worker's: fail it once its
            # heartbeat is stale, so that its retry (queued by the storage's callback) is run here.
            optuna.storages.fail_stale_trials(study)
            self.cancel.wait(self.poll_s)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """The optimize callback: after each trial, wait until the next one is wanted, or stop."""
        if not self.wait_for_room(study):
            study.stop()

    def claim(self, trial: optuna.Trial) -> None:
        """At the start of a trial: raise Surplus if trials asked before it already fill the study."""
        with self._lock:
            self._reserved = max(0, self._reserved - 1)
        trials = trial.study.get_trials(deepcopy=False)
        finished = sum(1 for t in trials if t.state in FINISHED)
        before = sum(1 for t in trials if t.number < trial.number and (
            t.state == TrialState.WAITING or t.state == TrialState.RUNNING and _live(t, self._stale_after)))
        if finished + before >= self.total:
            raise Surplus(f"the study's {self.total} trials are finished or running")


class PrunerReports:
    """The probe's intermediate throughput, reported to the pruner from a thread of its own.

    The probe calls this from its event loop, where a storage write (a commit: ~10 ms on SQLite, a round
    trip to PostgreSQL) would stall every stream being timed. Each call hands over the newest figure and
    returns the pruner's newest answer, so a decision reaches the probe one report later.
    """

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial
        self.prune = False
        self._pending: tuple[int, float] | None = None
        self._closed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._write, name=f"pruner-reports-{trial.number}", daemon=True)
        self._thread.start()

    def __call__(self, step: int, rate: float) -> bool:
        with self._wake:
            self._pending = (step, rate)  # an older figure not yet written is superseded
            self._wake.notify()
        return self.prune

    def _write(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._closed:
                    self._wake.wait()
                if self._pending is None:
                    return
                step, rate = self._pending
                self._pending = None
            try:
                self.trial.report(rate, step)
                self.prune = self.prune or self.trial.should_prune()
            except Exception as exc:  # the storage stayed away past its retries: go on without the pruner
                logging.getLogger("tuner").warning("tuner: trial %d: progress not reported (%s)",
                                                   self.trial.number, exc)

    def close(self) -> None:
        """Write what is pending and stop; the trial's result is recorded only after this."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()


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
    budget: TrialBudget | None = None  # the study's shared --trials total
    # Trials this worker marked interrupted -> the stage the interrupt found each in (None: not in a stage).
    interrupted: dict[int, str | None] = dataclasses.field(default_factory=dict)
    timeout: float | None = None  # run --timeout: seconds in which this run may start trials
    deadline: float | None = None  # time.monotonic() at which that ends
    say: Callable[[str], None] = lambda line: None  # one line for the person running it
    servers_launched: int = 0  # servers this run launched

    # -- the objective ------------------------------------------------------------------------------
    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        if self.budget is not None:
            try:
                self.budget.claim(trial)
            except Surplus as exc:
                _quiet_numbers.add(trial.number)
                trial.set_user_attr("failure_kind", "surplus")
                trial.set_user_attr("failure_message", f"not run: {exc}")
                raise
        record = self.workdir / f"trial-{trial.number}" / WORKER_RECORD
        # Who runs this trial: a worker restarted in this folder after a SIGKILL fails it at once
        # instead of waiting for the heartbeat's grace period (fail_trials_of_dead_workers).
        owner = {**this_worker(), "trial_id": trial._trial_id, "number": trial.number,
                 "study": trial.study.study_name, "done": False}
        write_record(record, owner)
        try:
            return self._objective(trial)
        except (KeyboardInterrupt, Interrupted) as exc:
            # Wherever the interrupt found it (waiting for GPUs or for a twin configuration, or in a
            # stage): not the configuration's fault, and run again on resume.
            _quiet_numbers.add(trial.number)
            self.interrupted[trial.number] = exc.stage if isinstance(exc, Interrupted) else None
            if not isinstance(exc, Interrupted):
                _mark_interrupted(trial)
            raise
        finally:
            write_record(record, {**owner, "done": True})

    def _objective(self, trial: optuna.Trial) -> float | list[float]:
        space = self.spec.space
        retry_of = trial.study._storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")
        if retry_of is not None:
            # Re-queued by the heartbeat callback after its worker died: drop what describes the dead run.
            trial.set_user_attr("retry_of", retry_of)
            for k in _RUN_ATTRS:
                if k in trial.user_attrs:
                    trial.set_user_attr(k, None)
        values = space.suggest(trial)
        config = space.config(values)
        key = config.key()
        set_user_attrs(trial, {"started_at": time.time(), "worker": owner_label()})
        broken = space.violations(values)
        if broken:
            trial.set_user_attr("config_key", key)
            result = TrialResult(trial.number, config)
            result.failure = FailureRecord(FailureKind.INVALID_CONFIG, f"breaks the constraint {broken[0]}", "",
                                           "space")
            return self._finish(trial, result, {})
        prior = self._claim(trial, key)
        # The baseline run again to record what the study lacks is launched, never answered from its record.
        if prior is not None and not trial.user_attrs.get(REMEASURE_ATTR):
            return self._reuse(trial, prior)
        judged = self._before_launch(trial, values, config)
        if judged is not None:
            return self._finish(trial, judged, {"baseline": bool(trial.user_attrs.get("baseline"))})
        if not self.servers_launched:  # its start-up pays this machine's first-use compiles (_startup.Startup.warm)
            trial.set_user_attr("first_start", True)
        self.servers_launched += 1
        try:
            result = self._run(trial, config)
        except NotEnoughGpus as exc:
            result = TrialResult(trial.number, config)
            result.failure = FailureRecord(FailureKind.INVALID_CONFIG, str(exc), "", "slots")
        if result.failure is not None and result.failure.kind is FailureKind.INTERRUPTED:
            _mark_interrupted(trial, result.failure.stage, result.seconds)
            raise Interrupted(f"trial {trial.number} interrupted", result.failure.stage)
        return self._finish(trial, result, {"baseline": bool(trial.user_attrs.get("baseline"))})

    def _before_launch(self, trial: optuna.Trial, values: dict[str, Any], config: ServerConfig) -> TrialResult | None:
        """What the study knows of this configuration's start-up (tuner/search/_startup.py), before any server
        is launched: a judged `startup_timeout` for a start-up that cannot finish; NotStarted for one that does
        not fit in what is left of --timeout; None: launch it."""
        limit = self.spec.server.startup_timeout
        startup = estimate(trial.study.get_trials(deepcopy=False), trial.number, values, config.key(), limit)
        seconds = startup.seconds
        if seconds is None:
            return None  # nothing known: only a start tells
        # Judged only where the configuration itself was cut off in readiness: a restart would spend again what
        # was spent, and its neighbours say the start-up does not end in time. Never on the neighbours alone:
        # what the sampler proposes it has learnt from them already. A whole --timeout counts too: each run
        # would start it and be cut off again (the lent GPU's calls, each a run of ~400 s).
        reach = None
        if seconds >= limit:
            reach = f"the start-up timeout ({limit:.0f} s)"
        elif self.timeout is not None and seconds >= self.timeout:
            reach = f"a whole --timeout ({self.timeout:.0f} s)"
        if startup.attempts and reach:
            result = TrialResult(trial.number, config)
            result.failure = FailureRecord(
                FailureKind.STARTUP_TIMEOUT, f"judged without a restart: {startup.evidence()}; its start-up "
                f"(~{seconds:.0f} s) reaches {reach}", "", "readiness", {"judged": True})
            return result
        left = None if self.deadline is None else self.deadline - time.monotonic()
        # The first trial of a run always starts: the next run would have no more time for it than this one.
        # A neighbour that was its run's first start is no guide to a later one (Startup.warm); with only such
        # neighbours, the trial starts.
        warm = startup.warm()
        if left is not None and self.servers_launched and warm.seconds is not None and warm.seconds > left:
            self._not_started(trial, warm, max(0.0, left))
        return None

    def _not_started(self, trial: optuna.Trial, startup: Startup, left: float) -> None:
        said = (f"its start-up (~{startup.seconds:.0f} s, {startup.basis()}) does not fit in the {left:.0f} s left "
                "of --timeout; the next run starts it")
        # Marked interrupted: not the configuration's fault, never taught to the sampler, and re-queued by the
        # next run (_run._requeue_interrupted). The run starts no more trials.
        set_user_attrs(trial, {"failure_kind": FailureKind.INTERRUPTED.value, "failure_stage": "not started",
                               "failure_message": f"not started: {said}", "ended_at": time.time()})
        _quiet_numbers.add(trial.number)
        self.say(f"not starting trial {trial.number}: {said}")
        trial.study.stop()
        raise NotStarted(said)

    def _run(self, trial: optuna.Trial, config: ServerConfig) -> TrialResult:
        attrs = trial.study.user_attrs
        diffs = attrs.get(REFERENCE_DIFFS_ATTR) or {}
        same_precision = diffs.get("precision") == _precision(config.flags)
        plan = TrialPlan(trial.number, config, self.workdir / f"trial-{trial.number}",
                         free_port(self.spec.server.host), reference=attrs.get(REFERENCE_ATTR),
                         reference_diffs=diffs.get("diffs") if same_precision else None)
        objective = self.spec.objective
        prunable = not objective.second_metric and ("throughput" in objective.metric or objective.rate_search)
        reports = PrunerReports(trial) if prunable else None
        record = self.workdir / f"trial-{trial.number}" / WORKER_RECORD

        def on_stage(number: int, stage: str) -> None:
            self.ctx.on_stage(number, stage)
            # The stage the trial is in, for a person (or a test) looking at the run from outside.
            write_record(record, {**(read_record(record) or {}), "stage": stage})

        ctx = dataclasses.replace(self.ctx, on_progress=reports, on_stage=on_stage)
        try:
            if self.pool is None:
                return run_trial(ctx, plan)
            with self.pool.acquire(self.ctx.engine.gpus_needed(config.flags), self.ctx.cancel) as grant:
                set_user_attrs(trial, {"gpu_ids": list(grant.gpu_ids), "slot_acquired_at": time.time()})
                result = run_trial(ctx, dataclasses.replace(plan, gpu_ids=grant.gpu_ids))
                trial.set_user_attr("slot_released_at", time.time())
            return result
        finally:
            if reports is not None:
                reports.close()

    # -- outcomes -----------------------------------------------------------------------------------
    def _finish(self, trial: optuna.Trial, result: TrialResult, extra: dict[str, Any]) -> float | list[float]:
        store_log(result, self.redactor, self.spec.server.log_cap_mb)
        attrs = trial_attrs(result, self.spec, extra)
        values = None
        if result.ok:
            level = result.probe.level(self.spec.objective.concurrency)
            values = [result.probe.value(name, self.spec.objective.concurrency) for name in self.spec.objective.names]
            slo = [f"{name} {level.metric(name):.1f} > {limit:g}" for name, limit in self.spec.objective.slo.items()
                   if level.metric(name) > limit]
            if slo:
                attrs["failure_kind"] = FailureKind.SLO_VIOLATION.value
                attrs["slo_violations"] = slo
                attrs["failure_message"] = "; ".join(slo)
        gap = reference_gap(trial.study.user_attrs)
        if gap and not extra.get("baseline") and result.gate is not None and self.spec.gate.enabled(
                "logprob-consistency") and self.spec.gate.logprob_excess_tolerance is not None:
            attrs["gate_skipped"] = {**attrs.get("gate_skipped", {}), "logprob-excess": gap}
        feasible = result.ok and attrs["failure_kind"] == "none"
        attrs["feasible"] = feasible
        attrs["ended_at"] = time.time()
        set_user_attrs(trial, attrs)
        # A client too slow for its rate says nothing about the configuration: not taught as a bad region.
        blameless = result.stopped_early or (result.failure is not None and not result.failure.kind.blames_config)
        trial.set_constraint(FEASIBILITY, feasibility_constraint(feasible, blameless))
        if feasible and extra.get("baseline") and result.gate is not None:
            # A re-measure keeps the reference that earlier trials were judged against.
            if not trial.user_attrs.get(REMEASURE_ATTR) or trial.study.user_attrs.get(REFERENCE_ATTR) is None:
                trial.study.set_user_attr(REFERENCE_ATTR, dict(result.gate.reference))
            trial.study.set_user_attr(REFERENCE_DIFFS_ATTR, {"precision": _precision(result.config.flags),
                                                             "diffs": dict(result.gate.logprob_diffs)})
        self._annotate(trial, result, attrs, feasible)
        self.on_trial_end(trial, attrs)
        return objective_result(self.sampler_name, self.spec.objective.directions, values, result.stopped_early,
                                f"{attrs['failure_kind']}: {attrs.get('failure_message', '')}")

    def _annotate(self, trial: optuna.Trial, result: TrialResult, attrs: dict[str, Any], feasible: bool) -> None:
        save_note(trial, self.redactor(note_markdown(result, attrs, feasible)))
        if self.artifact_store is not None:
            upload_log(trial, result, self.artifact_store)

    # -- never the same restart twice ---------------------------------------------------------------
    def _claim(self, trial: optuna.Trial, key: str) -> optuna.trial.FrozenTrial | None:
        """An earlier trial's result for this server configuration, or None once this trial is recorded as
        the one that runs it; while another trial runs it, wait for its result.

        Deciding and recording (`config_key`) happen under the study's lock: otherwise two workers read
        "nobody runs it" at once and both restart the same server.
        """
        first = True
        while True:
            if self.ctx.cancel.is_set():
                raise KeyboardInterrupt("cancelled while waiting for a trial of the same configuration")
            if not first:
                # The trial waited for may be a dead worker's: fail it once stale, so this one runs it.
                optuna.storages.fail_stale_trials(trial.study)
            first = False
            with study_lock(trial.study):
                prior, running = _twins(trial, key)
                if running is None:
                    set_user_attrs(trial, {"config_key": key, "started_at": time.time()})
                    return prior
            self.ctx.cancel.wait(1.0)  # another worker runs this very configuration: wait for its result

    def _reuse(self, trial: optuna.Trial, prior: optuna.trial.FrozenTrial) -> float | list[float]:
        skip = {"started_at", "ended_at", "baseline", "gpu_ids", "config_key", "requeued_from",
                "slot_acquired_at", "slot_released_at", "worker", "retry_of"}
        inherited = {k: v for k, v in prior.user_attrs.items() if k not in skip}
        set_user_attrs(trial, {**inherited, "reused_from": prior.number, "ended_at": time.time()})
        feasible = bool(prior.user_attrs.get("feasible"))
        # A twin of a trial the pruner stopped is as feasible as that trial was, not a failure.
        stopped_early = bool(prior.user_attrs.get("stopped_early"))
        trial.set_constraint(FEASIBILITY, feasibility_constraint(feasible, stopped_early))
        self.on_trial_end(trial, dict(trial.user_attrs))
        if prior.state == TrialState.COMPLETE and prior.values is not None:
            return prior.values if len(prior.values) > 1 else prior.values[0]
        raise optuna.TrialPruned(f"same configuration as trial {prior.number}")


def _twins(trial: optuna.Trial, key: str) -> tuple[optuna.trial.FrozenTrial | None, optuna.trial.FrozenTrial | None]:
    """Another trial of this configuration with a result, else one that is running it now."""
    running = None
    for other in trial.study.get_trials(deepcopy=False):
        if other.number == trial.number or other.user_attrs.get("config_key") != key:
            continue
        if other.user_attrs.get("reused_from") is not None:
            continue
        if other.state in FINISHED and "feasible" in other.user_attrs:
            return other, None
        if other.state == TrialState.RUNNING:
            running = other
    return None, running


def _during(record: dict) -> str:
    """Where a dead worker's trial was, as its record says (the stage is written as each begins)."""
    return f" during its {record['stage']}" if isinstance(record.get("stage"), str) else ""


def _mark_interrupted(trial: optuna.Trial, stage: str | None = None, seconds: dict[str, float] | None = None) -> None:
    attrs: dict[str, Any] = {"failure_kind": FailureKind.INTERRUPTED.value, "ended_at": time.time()}
    if stage:  # where the interrupt found it, and how long each stage ran until then
        attrs.update({"failure_stage": stage, "failure_message": f"the run was interrupted during {stage}; "
                      "its configuration runs again on resume",
                      "stage_seconds": {k: round(v, 3) for k, v in (seconds or {}).items()}})
    set_user_attrs(trial, attrs)


def feasibility_constraint(feasible: bool, stopped_early: bool) -> float:
    """The trial's FEASIBILITY constraint (> 0: violated). A trial the pruner stopped was slower than others,
    not broken, so it must not teach the sampler to avoid its region as if it had crashed."""
    return 0.0 if feasible or stopped_early else 1.0


def objective_result(sampler_name: str, directions: Sequence[str], values: list[float] | None,
                     stopped_early: bool, reason: str) -> float | list[float]:
    """What the objective hands Optuna for a finished trial: its value(s), or for a trial without any the
    exception or value that gives it the state the sampler learns from.

    Shared with benchmarks/search_efficiency.py, which drives the same samplers in-process.
    """
    if values is not None:
        return values if len(values) > 1 else values[0]
    if stopped_early:
        raise optuna.TrialPruned("stopped early by the pruner")
    if sampler_name == "gp":
        # GPSampler reads COMPLETE trials only: a pessimistic value plus the violated constraint.
        worst = [0.0 if d == "maximize" else 1e9 for d in directions]
        return worst if len(worst) > 1 else worst[0]
    # TPE and random search read PRUNED trials (FAIL would teach them nothing); the constraint marks it.
    raise optuna.TrialPruned(reason)


def owner_label() -> str:
    me = this_worker()
    return f"{me['host']}:{me['pid']}"


def fail_trials_of_dead_workers(study: optuna.Study, workdir: Path) -> list[int]:
    """Trials that a worker of this host ran from `workdir` and that are still RUNNING although that worker
    is gone (SIGKILL, OOM killer, crash): fail them now and hand them to the storage's stale-trial callback
    (which re-queues each once), exactly as the heartbeat would after its grace period.

    A worker is judged dead only by its pid with the recorded start time on this host and boot; trials
    of live workers sharing the folder, and of other hosts, are left to them and to the heartbeat.
    """
    storage = study._storage
    callback = storage.get_heartbeat_stale_trial_callback() if hasattr(storage, "get_heartbeat_stale_trial_callback") \
        else None
    failed = []
    for path in sorted(workdir.glob(f"trial-*/{WORKER_RECORD}")):
        record = read_record(path)
        if record is None or record.get("done") or record.get("study") != study.study_name:
            continue
        if owner_alive(record) is not False:
            continue
        try:
            trial = storage.get_trial(int(record["trial_id"]))
        except (KeyError, ValueError):
            trial = None
        if trial is not None and trial.state == TrialState.RUNNING:
            try:
                storage.set_trial_user_attr(trial._trial_id, "failure_kind", FailureKind.WORKER_DIED.value)
                storage.set_trial_user_attr(trial._trial_id, "failure_message",
                                            f"the worker running it died{_during(record)}; failed when it restarted")
                changed = storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                changed = False  # the heartbeat check of another worker got there first
            if changed:
                failed.append(trial.number)
                if callback is not None:
                    callback(study, copy.deepcopy(storage.get_trial(trial._trial_id)))
        write_record(path, {**record, "done": True})
    return failed


def _precision(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {name: flags.get(name) for name in PRECISION_FLAGS}
