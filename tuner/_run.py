"""`tuner run` and `tuner check`: from a space file to a finished (or resumable) study."""

from __future__ import annotations

import os
import random
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ._errors import Stopped, UsageError
from ._redact import Redactor, redact_env, redact_url
from ._server_python import resolve_python, with_python
from .engines import get_engine
from .results import Progress, summary, target_args, write_last_run
from .search import (REMEASURE_ATTR, ContextRecorder, GpuProbe, Interrupted, Learning, MemoryBaseline, NotStarted, SlotPool, Surplus,
                     TrialBudget, WarmStart, Worker, best_context, check_gpu_ids, fail_trials_of_dead_workers, gather,
                     heartbeat_settings, learn_line, load_or_create, open_storage, parse_gpu_list, record_learning,
                     stored_context, study_exists, reference_gap, warm_start)
from .spec import Spec, load_spec
from .trial import LENGTHS_ATTR, TrialContext, end_orphans, lengths_attr, model_tokens, words_note
from .versions import (AUTO, DEFAULT_PROFILE, SIM_SPEED, CheckReport, ServerVersion, add_verdict, check_flags,
                       choose_profile, parse_help, probe_version, raise_on_errors, server_help)

SPACES_HERE = Path("search_spaces")
DEFAULT_SPACE = SPACES_HERE / "default.yaml"
# Copies of search_spaces/default.yaml and of the spaces of the shipped simulator profiles, so that an installed
# tuner dry-runs from any folder (tests/test_cli.py checks they equal the repository's).
SHIPPED_SPACES = Path(__file__).resolve().parent / "spaces"
SIM_COMMAND = (sys.executable, "-m", "tuner.sim")


@dataclass(frozen=True)
class RunOptions:
    trials: int
    space: str | None = None
    model: str | None = None
    storage: str = "sqlite:///trials.db"
    study: str | None = None
    simulate: str | None = None  # profile name or path
    sampler: str = "tpe"
    seed: int | None = 0
    workdir: str = "runs"
    timeout: float | None = None
    on_space_change: str = "refuse"
    api_key_env: str | None = None
    gpus: str | None = None  # e.g. "0-7": run trials in parallel on disjoint subsets
    parallel: int | None = None  # trials at once (default: as many as the GPUs allow)
    learn_from: tuple[str, ...] | None = None  # None: the studies of the storage on the same engine and GPU
    carry: frozenset[str] | None = None  # what a warm start carries (tuner/search/_warm.py PARTS); None: the default
    server_python: str | None = None  # the Python that runs the server's -m MODULE (tuner/_server_python.py)


@dataclass(frozen=True)
class Prepared:
    spec: Spec
    command: tuple[str, ...]
    env: dict[str, str]
    report: CheckReport
    takes_config: bool = True  # the server's --help lists --config
    deprecated: frozenset[str] = frozenset()  # flags its --help calls deprecated
    profile: str | None = None  # the simulator's profile, when simulated
    server_version: ServerVersion | None = None  # None where it was not asked
    profile_note: str | None = None  # which profile a dry run uses and why, where the tuner guessed it

    @property
    def checked_against(self) -> str:
        said = [f"simulator profile {self.profile}"] if self.profile else []
        if self.server_version is not None and self.server_version.version:
            said.append(self.server_version.describe())
        return f"'{' '.join(self.command)} --help'" + (f" ({', '.join(said)})" if said else "")


def resolve_space_path(space: str | None, simulate: str | None) -> Path:
    """The --space given; else this folder's search_spaces/<profile>.yaml with --simulate (a simulated
    deployment comes with its own space), else its search_spaces/default.yaml; where this folder has neither
    (an installed tuner run outside the repository), the copy the package carries (tuner/spaces/)."""
    if space:
        return Path(space)
    names = [f"{Path(simulate or DEFAULT_PROFILE).stem}.yaml"] if simulate is not None else []
    names.append(DEFAULT_SPACE.name)
    for name in names:
        for candidate in (SPACES_HERE / name, SHIPPED_SPACES / name):
            if candidate.exists():
                return candidate
    return DEFAULT_SPACE


def prepare(space: str | None, simulate: str | None, model: str | None, strict: bool = True,
            ask_version: bool = False, server_python: str | None = None) -> Prepared:
    """Load the space and check it against the server that will be launched; no storage is touched.
    `simulate`: None for the real server, else a profile name or file, or AUTO (the space's profile).
    `server_python`: the Python that runs the server's `-m MODULE` instead of the command's own (--server-python).
    The server's version is asked (a second start of its Python) with `ask_version`, and where it matters: the
    space declares one, or a flag failed (the cause may be the version)."""
    python = resolve_python(server_python)  # first: a wrong path is said before anything is read or started
    space_path = resolve_space_path(space, simulate)
    spec = load_spec(space_path)
    # Servers run inside their trial folder: relative paths must mean what they meant here.
    spec = _with_model(spec, _absolute(model or spec.server.model_path))
    engine = get_engine(spec.engine)
    env = {**os.environ, **spec.server.env}
    profile = profile_note = None
    if simulate is not None:
        # Plain `--simulate` without --space is the seed deployment's dry run (Quick start).
        profile, profile_note = choose_profile(spec, space_path, DEFAULT_PROFILE if simulate == AUTO and not space else simulate)
        command = SIM_COMMAND
        env["TUNER_SIM_PROFILE"] = profile
        for name, value in SIM_SPEED.items():
            env.setdefault(name, value)
        spec = _compress_timeouts(spec, float(env["TUNER_SIM_STARTUP_SCALE"]))
    else:
        command = spec.server.command or engine.default_command
        if "/" in command[0]:
            command = (os.path.abspath(os.path.expanduser(command[0])), *command[1:])
    command = with_python(command, python)
    help_flags = parse_help(server_help(command, env))
    if simulate is None:
        _check_model_path(spec.server.model_path)  # after the server command: a missing engine is said first
    report = check_flags(spec, help_flags)
    server_version = None
    if spec.engine == "sglang" and (ask_version or spec.sglang_version or report.errors):
        server_version = probe_version(command, env)
    add_verdict(report, spec, space_path, server_version, profile)
    if strict:
        raise_on_errors(report)
    return Prepared(spec, tuple(command), env, report, "config" in help_flags.flags, help_flags.deprecated, profile,
                    server_version, profile_note)


def _with_model(spec: Spec, model: str) -> Spec:
    from dataclasses import replace

    return replace(spec, server=replace(spec.server, model_path=model))


def _compress_timeouts(spec: Spec, scale: float) -> Spec:
    """The simulator compresses start-up by `scale`: so are the waits for it (a simulated hang must not
    cost the 15 real minutes a space allows a real GPU server)."""
    from dataclasses import replace

    if scale <= 0:
        scale = 0.0
    server = replace(spec.server, startup_timeout=max(5.0, spec.server.startup_timeout * scale),
                     stall_timeout=max(2.0, spec.server.stall_timeout * scale))
    return replace(spec, server=server)


def _absolute(path: str) -> str:
    expanded = os.path.expanduser(path)
    if path.startswith(("./", "../", "~")) or (not os.path.isabs(expanded) and os.path.exists(expanded)):
        return os.path.abspath(expanded)
    return path  # an absolute path, or a model id such as org/name


def _check_model_path(path: str) -> None:
    looks_local = path.startswith(("/", "./", "../", "~"))
    if looks_local and not Path(path).expanduser().exists():
        raise UsageError(f"model path {path} does not exist", "pass --model with the model's folder")


def run(options: RunOptions, stream=sys.stderr) -> optuna.Study:
    if options.trials < 1:
        raise UsageError(f"--trials must be at least 1, got {options.trials}", "pass --trials 40, say")
    prepared = prepare(options.space, options.simulate, options.model, server_python=options.server_python)
    spec = prepared.spec
    progress = Progress(spec, stream)
    if prepared.profile_note:
        progress.say(f"note: {prepared.profile_note}")
    for warning in prepared.report.warnings:
        progress.say(f"warning: {warning}")
    api_key = _api_key(options.api_key_env or spec.server.api_key_env)
    study_name = options.study or spec.name
    gpu_probe = None if options.simulate else GpuProbe()
    # Before the storage is opened (which creates it): a source that cannot be used leaves nothing behind.
    warm, learning = _learn(options, prepared, study_name, gpu_probe)
    storage = open_storage(options.storage)
    if warm is not None:
        progress.say(learn_line(warm, learning))
    study = load_or_create(storage, study_name, spec, options.sampler, options.seed, options.on_space_change, warm,
                           simulate=prepared.profile)
    if warm is not None:
        record_learning(study, warm, learning)
    workdir = Path(options.workdir) / study_name
    workdir.mkdir(parents=True, exist_ok=True)
    write_last_run(options.workdir, options.storage, study_name)  # what show, export, ... read without --storage
    ended = end_orphans(workdir, gpu_probe.holders if gpu_probe is not None else None)
    if ended:
        progress.say(f"ended {len(ended)} server(s) left running by an earlier, killed run: groups {ended}")
    died = fail_trials_of_dead_workers(study, workdir)
    if died:
        progress.say(f"failed trial(s) {died}, left RUNNING by a worker of this folder that was killed; "
                     "each is run again once")
    _requeue_interrupted(study)
    _gate_notes(study, spec, progress)
    # What `confirm` needs to launch the same servers again.
    study.set_user_attr("server_command", list(prepared.command))
    study.set_user_attr("simulate", prepared.profile)
    study.set_user_attr("server_takes_config", prepared.takes_config)
    study.set_user_attr("deprecated_flags", sorted(prepared.deprecated))  # export spells them as --config takes them
    study.set_user_attr("server_env", redact_env(spec.server.env))  # what an exported launch needs too
    tokens, why = model_tokens(spec)  # once per run: every trial is sent the same prompts
    if tokens is None and not spec.probe.dataset:  # a dataset's prompts are given text: nothing to count
        progress.say(words_note(why))
    study.set_user_attr(LENGTHS_ATTR, lengths_attr(tokens, why))
    artifacts = Path(options.workdir) / "artifacts"  # one store for every study, as the dashboard reads one
    artifacts.mkdir(parents=True, exist_ok=True)
    from optuna.artifacts import FileSystemArtifactStore

    engine = get_engine(spec.engine)
    pool, n_jobs, baseline = _slots(options, spec, engine, progress, gpu_probe)
    ctx = TrialContext(spec, engine, prepared.command, api_key, prepared.env, on_stage=progress.stage,
                       gpus_settled=baseline.settled if baseline else None,
                       gpu_holders=baseline.new_processes if baseline else None, tokens=tokens)
    redactor = Redactor(prepared.env, [api_key] if api_key else [])
    # The study's context (engine version, GPUs, model, workload), for later studies to match: tuner/search/_context.py.
    context = ContextRecorder(spec, prepared.profile, gpu_probe, pool.gpu_ids if pool else None,
                              prepared.server_version)
    worker = Worker(spec, ctx, workdir, options.sampler, FileSystemArtifactStore(str(artifacts)), redactor,
                    on_trial_end=context.after(progress.trial_end), pool=pool, say=progress.say)
    done = _finished(study)
    remaining = options.trials - done
    progress.say(f"study '{study_name}' on {redact_url(options.storage)}: {done} of {options.trials} trials done; "
                 f"{prepared.report.flags_checked} flags checked against {prepared.checked_against}")
    progress.begin(study, options.trials, n_jobs)
    if remaining <= 0:
        progress.say(f"nothing to run: --trials is the total the study should have, and it has {done}; "
                     f"to add 20 more, run the same command with --trials {done + 20}")
    else:
        budget = TrialBudget(options.trials, ctx.cancel, grace_s=heartbeat_settings()[1])
        worker.budget = budget
        with _interrupts_cancel(ctx.cancel):
            try:
                _while_main_thread_listens(
                    lambda: _optimize(study, worker, budget, n_jobs, options.timeout, progress))
            except (KeyboardInterrupt, Interrupted) as exc:
                ctx.cancel.set()
                progress.say(interrupted_line(worker.interrupted))
                # The signal that stopped it decides the exit status (tuner/_cli.py); Ctrl-C where none is known.
                raise Stopped(getattr(exc, "signum", signal.SIGINT)) from None
    shown = redact_url(options.storage)
    progress.say(summary(study, spec, dashboard=f"optuna-dashboard {shown} --artifact-dir {artifacts}",
                         where=shlex.join(target_args(options.storage, study, options.workdir))))
    return study


def _gate_notes(study: optuna.Study, spec: Spec, progress: Progress) -> None:
    """On the run's first screen: a gate looser than shipped (and recorded with the study), and a baseline that
    lacks what a check needs (its configuration then runs again, once, to record it)."""
    loosened = {k: v for k, v in spec.gate.loosened.items() if k != "why"}
    if loosened:
        progress.say(f"gate loosened by this space: {', '.join(f'{k} {v}' for k, v in loosened.items())} "
                     f"(why: {spec.gate.loosened.get('why')})")
    study.set_user_attr("gate_loosened", dict(spec.gate.loosened) or None)
    gap = reference_gap(study.user_attrs)
    if gap is None or spec.space.baseline is None or not spec.gate.enabled("logprob-consistency") \
            or spec.gate.logprob_excess_tolerance is None:
        return
    progress.say(gap)
    if not any(t.state == TrialState.WAITING and t.user_attrs.get(REMEASURE_ATTR)
               for t in study.get_trials(deepcopy=False)):
        study.enqueue_trial(dict(spec.space.baseline), user_attrs={"baseline": True, REMEASURE_ATTR: True})


def _learn(options: RunOptions, prepared: Prepared, study_name: str,
           gpu_probe: GpuProbe | None) -> tuple[WarmStart | None, Learning]:
    """What earlier studies tell this one (tuner/search/_learn.py, tuner/search/_warm.py); None where nothing is
    learnt from."""
    spec = prepared.spec
    gpu_ids = parse_gpu_list(options.gpus) if options.gpus else None
    recorder = ContextRecorder(spec, prepared.profile, gpu_probe, gpu_ids, prepared.server_version)
    stored = stored_context(options.storage, study_name)
    context = best_context(recorder.collect(None).to_attr(), stored)
    learning = gather(options.learn_from, options.storage, study_name, context)
    if learning.knowledge and not (context.get("engine") or {}).get("version") and spec.engine == "sglang":
        # Kernel lessons carry only to the same version: ask the server's Python, once there is something to match.
        recorder.asked_version = probe_version(prepared.command, prepared.env)
        context = best_context(recorder.collect(None).to_attr(), stored)
    # With nothing learnt from, what the model's size says still holds (_warm.weight_lesson).
    warm = warm_start(learning.knowledge, spec.space, context, *([options.carry] if options.carry is not None else []))
    if not warm.used:
        return None, learning
    return (warm.resumed() if study_exists(options.storage, study_name) else warm), learning


def interrupted_line(marked: dict[int, str | None]) -> str:
    """What an interrupted run says last: which trials it marked (their servers stopped), and how to go on."""
    if not marked:
        return ("interrupted: every trial that ran is recorded and its server stopped; run the same command again "
                "to resume")
    trials = ", ".join(f"{n}" + (f" (in its {stage})" if stage else "") for n, stage in sorted(marked.items()))
    many = len(marked) > 1
    return (f"interrupted: {'every' if many else 'the'} server was stopped and trial{'s' * many} {trials} marked "
            f"interrupted; run the same command again to resume (it runs {'those' if many else 'that'} "
            f"configuration{'s' * many} again)")


def _optimize(study: optuna.Study, worker: Worker, budget: TrialBudget, n_jobs: int, timeout: float | None,
              progress: Progress) -> None:
    """study.optimize until the study has its N trials, however many workers share it (see TrialBudget)."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    # The worker starts no trial whose expected start-up does not fit in what is left (_worker._before_launch).
    worker.timeout, worker.deadline = timeout, deadline
    while True:
        budget._reserved = 0
        room = budget.room(study)
        if room == 0:
            # The rest are running elsewhere: wait until they finish, or one of them dies.
            if not budget.wait_for_room(study):
                return
            budget.reserve(-1)
            room = max(1, budget.room(study))
        jobs = min(n_jobs, room)  # never start more trials than are missing
        budget.reserve(jobs)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        try:
            study.optimize(worker, n_trials=None, timeout=left, catch=(Surplus, NotStarted), n_jobs=jobs,
                           callbacks=[budget], gc_after_trial=False, show_progress_bar=False)
            return
        except (ValueError, AssertionError, optuna.exceptions.UpdateFinishedTrialError) as exc:
            if not _lost_trial(exc) or worker.ctx.cancel.is_set():
                raise
            # Our heartbeat came too late (the storage was away longer than the grace period) and another
            # worker failed this trial as stale; its retry is queued. Carry on with the next one.
            progress.say(f"warning: a trial of this worker was failed as stale by another worker "
                         f"({type(exc).__name__}: {exc}); it is run again, continuing")


def _lost_trial(exc: BaseException) -> bool:
    if isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
        return True
    if isinstance(exc, ValueError):
        return str(exc).startswith("Cannot tell a ")
    return isinstance(exc, AssertionError) and "Should not reach" in str(exc)


def _finished(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED))


def _requeue_interrupted(study: optuna.Study) -> None:
    """A trial cut short by Ctrl-C or SIGTERM, or not started for --timeout, is not the configuration's fault: run
    it again, once. A start-up that cannot finish is judged when the re-queued trial comes up, before its launch
    (search/_worker.py, Worker._before_launch): there the study's newest trials are known."""
    requeued = set(study.user_attrs.get("requeued", []))
    trials = study.get_trials(deepcopy=False)
    # Already run again by another worker, or by the heartbeat's retry (a worker killed after marking it).
    requeued |= {t.user_attrs["requeued_from"] for t in trials if t.user_attrs.get("requeued_from") is not None}
    requeued |= {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    new = []
    for t in trials:
        if t.state != TrialState.FAIL or t.number in requeued or t.user_attrs.get("failure_kind") != "interrupted":
            continue
        attrs = {"requeued_from": t.number}
        if t.user_attrs.get("baseline"):
            attrs["baseline"] = True
        study.enqueue_trial(t.params, user_attrs=attrs)
        new.append(t.number)
    if new:
        study.set_user_attr("requeued", sorted(requeued | set(new)))


def _api_key(env_name: str | None) -> str | None:
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise UsageError(f"environment variable {env_name} (the server's API key) is not set",
                         f"export {env_name}=... or drop --api-key-env")
    return value


def _while_main_thread_listens(work: Callable[[], None]) -> None:
    """Run `work` in a thread while the main thread waits in short steps, and re-raise what it raised.

    Python runs signal handlers in the main thread only. Blocked on a lock (Optuna waiting for its trial
    threads), the main thread does not wake for a SIGTERM that the kernel handed to another thread: the handler
    then ran only when every running trial had ended, measurement and all (tests/search/test_scaling.py,
    test_sigterm_stops_every_parallel_trial_and_resume_finishes, failed so)."""
    raised: list[BaseException] = []
    done = threading.Event()  # not Thread.join: a join that a signal interrupts can mark the thread ended

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the main thread
            raised.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="optimize", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except BaseException:
        # The signal handler has set the cancel event: trials stop at their next check and tear their servers
        # down. Wait for that (a second Ctrl-C must not leave servers behind), then stop.
        while not done.is_set():
            with suppress(KeyboardInterrupt):
                done.wait(0.2)
        raise
    if raised:
        raise raised[0]


@contextmanager
def _interrupts_cancel(cancel: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the run: running trials stop at their next check, their servers are
    torn down, and the trials are marked interrupted."""
    def handler(signum: int, frame: object) -> None:
        cancel.set()
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _slots(options: RunOptions, spec: Spec, engine, progress: Progress, probe: GpuProbe | None):
    """GPU slots, how many trials run at once, and the GPUs' memory baseline (None where unread)."""
    gpus_text = options.gpus
    if gpus_text is None and probe is not None:
        gpus_text = _detected_gpus(probe)
        if gpus_text is not None:
            progress.say(f"GPUs detected: {gpus_text} (--gpus picks others)")
    if gpus_text is None:
        if options.parallel not in (None, 1):
            raise UsageError("--parallel needs --gpus", "pass --gpus 0-7 (the GPUs the trials may use)")
        return None, 1, None
    gpu_ids = parse_gpu_list(gpus_text)
    smallest = _fewest_gpus(spec, engine)
    n_jobs = options.parallel or max(1, len(gpu_ids) // smallest)
    baseline = None
    if probe is not None:
        if probe.backend == "none":
            progress.say(f"warning: no GPU visible ({probe.reason}); GPU memory is not checked between trials")
        else:
            check_gpu_ids(probe, gpu_ids)
            baseline = MemoryBaseline(probe, gpu_ids)
    progress.say(f"GPU slots: {len(gpu_ids)} GPUs {list(gpu_ids)}, up to {n_jobs} trials at once "
                 f"(smallest configuration needs {smallest})")
    return SlotPool(gpu_ids, settled=baseline.settled if baseline else None), n_jobs, baseline


def _detected_gpus(probe: GpuProbe) -> str | None:
    """The GPUs to use without --gpus: those CUDA_VISIBLE_DEVICES names (when given as indices), else all
    that NVML or torch sees; None without a GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        return ",".join(parts) if parts and all(p.isdigit() for p in parts) else None
    if probe.backend == "none":
        return None
    return ",".join(str(g.index) for g in probe.gpus()) or None


def _fewest_gpus(spec: Spec, engine) -> int:
    points = spec.space.grid_points(limit=20_000)
    if points is None:
        rng = random.Random(0)
        points = [spec.space.random_sample(rng) for _ in range(2000)]
    needs = [engine.gpus_needed(spec.space.config(p).flags) for p in points if not spec.space.violations(p)]
    return min(needs) if needs else 1


def check(space: str | None, simulate: str | None, model: str | None, stream=sys.stdout,
          server_python: str | None = None) -> CheckReport:
    """Print every warning and error once (on `stream`) and the verdict; the caller exits 2 on errors."""
    prepared = prepare(space, simulate, model, strict=False, ask_version=True, server_python=server_python)
    if prepared.profile_note and not prepared.report.errors:  # a wrong flag is the space's, whatever the profile
        print(f"note: {prepared.profile_note}", file=stream)
    for w in prepared.report.warnings:
        print(f"warning: {w}", file=stream)
    for e in prepared.report.errors:
        print(f"error: {e}", file=stream)
    if prepared.report.hint:
        print(f"hint: {prepared.report.hint}", file=stream)
    if not prepared.report.errors:
        print(f"ok: {prepared.spec.name}: {len(prepared.spec.space.params)} parameters, "
              f"{prepared.report.flags_checked} flags checked against {prepared.checked_against}",
              file=stream)
    return prepared.report
