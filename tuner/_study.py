"""Opening the storage and the study: samplers, heartbeats, and the space the study was made with."""

from __future__ import annotations

import hashlib
import logging
import warnings
from typing import Any

import optuna
import sqlalchemy.exc

from ._errors import StorageError, StudyMismatchError, UsageError
from ._spec import Spec

# Heartbeats, the retry callback and metric names are marked experimental; they are what we rely on.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

SAMPLERS = ("tpe", "random", "gp")
HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 20
MAX_RETRY = 1  # a trial whose worker died is run once more, not forever


def open_storage(url: str, heartbeat: bool = True) -> optuna.storages.RDBStorage:
    if "://" not in url:
        raise StorageError(f"storage URL {url!r} is not a URL", f"write e.g. sqlite:///{url}")
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several processes on one SQLite file wait for each other instead of failing with
        # "database is locked".
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    kwargs: dict[str, Any] = {}
    if heartbeat:
        kwargs = dict(heartbeat_interval=HEARTBEAT_INTERVAL, grace_period=GRACE_PERIOD,
                      heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                          max_retry=MAX_RETRY))
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise StorageError(f"storage URL {url!r} is malformed ({type(exc).__name__})",
                           "use sqlite:///trials.db or postgresql://user:pass@host/db") from exc
    except sqlalchemy.exc.OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else "unreachable"
        raise StorageError(f"storage {_safe_url(url)} is unreachable: {reason}",
                           "check that the database server runs and the URL is right") from exc
    except ModuleNotFoundError as exc:
        raise StorageError(f"the driver for {_safe_url(url)} is not installed ({exc.name})",
                           "pip install 'tuner[postgres]'") from exc


def _safe_url(url: str) -> str:
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<storage>"


def space_digest(spec: Spec) -> str:
    return hashlib.sha256(spec.source.encode()).hexdigest()[:16]


def make_sampler(name: str, seed: int | None, spec: Spec) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=8)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise UsageError(f"unknown sampler {name!r}", f"use one of {', '.join(SAMPLERS)}")


def load_or_create(storage: optuna.storages.BaseStorage, study_name: str, spec: Spec, sampler_name: str,
                   seed: int | None, on_space_change: str = "refuse") -> optuna.Study:
    """The study to run, created on first use; a study made with another space is refused."""
    sampler = make_sampler(sampler_name, seed, spec)
    pruner = _pruner(spec)
    directions = spec.objective.directions
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if study_name in existing:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner)
        digest = study.user_attrs.get("space_digest")
        if digest and digest != space_digest(spec):
            if on_space_change == "fresh":
                optuna.delete_study(study_name=study_name, storage=storage)
                return load_or_create(storage, study_name, spec, sampler_name, seed)
            if on_space_change != "continue":
                raise StudyMismatchError(f"study {study_name!r} exists with a different search space",
                                         "pass --continue to go on with the new space, --fresh to start over, "
                                         "or --study NAME for a new study")
            study.set_user_attr("space_digest", space_digest(spec))
        if [d.name.lower() for d in study.directions] != directions:
            raise StudyMismatchError(f"study {study_name!r} has other objectives",
                                     "use --study NAME for a new study")
        return study
    logging.getLogger("optuna").setLevel(logging.WARNING)
    study = optuna.create_study(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner,
                                directions=directions)
    study.set_user_attr("space_digest", space_digest(spec))
    study.set_user_attr("space_name", spec.name)
    study.set_user_attr("space_source", spec.source)
    study.set_user_attr("engine", spec.engine)
    study.set_user_attr("sampler", sampler_name)
    study.set_metric_names(spec.objective.names)
    if spec.space.baseline is not None:
        study.enqueue_trial(dict(spec.space.baseline), user_attrs={"baseline": True})
    for point in spec.try_first:
        study.enqueue_trial(dict(point), user_attrs={"try_first": True})
    return study


def _pruner(spec: Spec) -> optuna.pruners.BasePruner:
    if spec.objective.second_metric:
        return optuna.pruners.NopPruner()  # report/should_prune raise on multi-objective studies
    # Steps are completed probe requests; judge only after a third of them.
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=max(1, spec.probe.requests // 3))
