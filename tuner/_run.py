"""`tuner run` and `tuner check`: from a space file to a finished (or resumable) study."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ._check import CheckReport, check_flags, parse_help, raise_on_errors, server_help
from ._errors import UsageError
from ._progress import Progress, summary
from ._redact import Redactor
from ._spec import Spec, load_spec
from ._study import load_or_create, open_storage
from ._teardown import end_orphans
from ._trial import TrialContext
from ._worker import Worker
from .engines import get_engine

DEFAULT_SPACE = Path("search_spaces/default.yaml")
DEFAULT_PROFILE = "glm5-nvfp4-sm120"
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


@dataclass(frozen=True)
class Prepared:
    spec: Spec
    command: tuple[str, ...]
    env: dict[str, str]
    report: CheckReport


def resolve_space_path(space: str | None, simulate: str | None) -> Path:
    if space:
        return Path(space)
    if simulate:
        # A simulated deployment ships with its own space: search_spaces/<profile>.yaml.
        matching = Path("search_spaces") / f"{Path(simulate).stem}.yaml"
        if matching.exists():
            return matching
    return DEFAULT_SPACE


def prepare(space: str | None, simulate: str | None, model: str | None, strict: bool = True) -> Prepared:
    """Load the space and check it against the server that will be launched; no storage is touched."""
    spec = load_spec(resolve_space_path(space, simulate))
    if model:
        spec = _with_model(spec, model)
    engine = get_engine(spec.engine)
    env = {**os.environ, **spec.server.env}
    if simulate:
        command = SIM_COMMAND
        env["TUNER_SIM_PROFILE"] = simulate
    else:
        command = spec.server.command or engine.default_command
        _check_model_path(spec.server.model_path)
    report = check_flags(spec, parse_help(server_help(command, env)))
    if strict:
        raise_on_errors(report)
    return Prepared(spec, tuple(command), env, report)


def _with_model(spec: Spec, model: str) -> Spec:
    from dataclasses import replace

    return replace(spec, server=replace(spec.server, model_path=model))


def _check_model_path(path: str) -> None:
    looks_local = path.startswith(("/", "./", "../", "~"))
    if looks_local and not Path(path).expanduser().exists():
        raise UsageError(f"model path {path} does not exist", "pass --model with the model's folder")


def run(options: RunOptions, stream=sys.stderr) -> optuna.Study:
    if options.trials < 1:
        raise UsageError(f"--trials must be at least 1, got {options.trials}", "pass --trials 40, say")
    prepared = prepare(options.space, options.simulate, options.model)
    spec = prepared.spec
    progress = Progress(spec, stream)
    for warning in prepared.report.warnings:
        progress.say(f"warning: {warning}")
    api_key = _api_key(options.api_key_env or spec.server.api_key_env)
    storage = open_storage(options.storage)
    study_name = options.study or spec.name
    study = load_or_create(storage, study_name, spec, options.sampler, options.seed, options.on_space_change)
    workdir = Path(options.workdir) / study_name
    workdir.mkdir(parents=True, exist_ok=True)
    ended = end_orphans(workdir)
    if ended:
        progress.say(f"ended {len(ended)} server(s) left running by an earlier, killed run: groups {ended}")
    _requeue_interrupted(study)
    artifacts = workdir / "artifacts"
    artifacts.mkdir(exist_ok=True)
    from optuna.artifacts import FileSystemArtifactStore

    engine = get_engine(spec.engine)
    ctx = TrialContext(spec, engine, prepared.command, api_key, prepared.env, on_stage=progress.stage)
    redactor = Redactor(prepared.env, [api_key] if api_key else [])
    worker = Worker(spec, ctx, workdir, options.sampler, FileSystemArtifactStore(str(artifacts)), redactor,
                    on_trial_end=progress.trial_end)
    done = _finished(study)
    remaining = options.trials - done
    progress.say(f"study '{study_name}' on {options.storage}: {done} of {options.trials} trials done; "
                 f"{prepared.report.flags_checked} flags checked against '{' '.join(prepared.command)} --help'")
    if remaining > 0:
        with _sigterm_as_interrupt():
            try:
                study.optimize(worker, n_trials=remaining, timeout=options.timeout, catch=(),
                               callbacks=[optuna.study.MaxTrialsCallback(
                                   options.trials, states=(TrialState.COMPLETE, TrialState.PRUNED))],
                               gc_after_trial=False, show_progress_bar=False)
            except KeyboardInterrupt:
                progress.say("interrupted: the server was stopped and the trial marked; "
                             "run the same command again to resume")
                raise
    progress.say(summary(study, spec))
    return study


def _finished(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED))


def _requeue_interrupted(study: optuna.Study) -> None:
    """A trial cut short by Ctrl-C or SIGTERM is not the configuration's fault: run it again, once."""
    requeued = set(study.user_attrs.get("requeued", []))
    new = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        if t.number in requeued or t.user_attrs.get("failure_kind") != "interrupted":
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


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the run the way Ctrl-C does: the trial's server is torn down, the trial marked."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def check(space: str | None, simulate: str | None, model: str | None, stream=sys.stdout) -> CheckReport:
    prepared = prepare(space, simulate, model, strict=False)
    for w in prepared.report.warnings:
        print(f"warning: {w}", file=stream)
    for e in prepared.report.errors:
        print(f"error: {e}", file=stream)
    raise_on_errors(prepared.report)
    print(f"ok: {prepared.spec.name}: {len(prepared.spec.space.params)} parameters, "
          f"{prepared.report.flags_checked} flags checked against '{' '.join(prepared.command)} --help'", file=stream)
    return prepared.report

