"""Opening the storage and the study: samplers, heartbeats, and the space the study was made with."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import os
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
import sqlalchemy.exc
import tenacity
from optuna.storages import RDBStorage
from optuna.storages._rdb.models import TrialModel, TrialUserAttributeModel
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import TrialState

from .._errors import StorageError, StudyMismatchError, UsageError
from .._redact import Redactor, redact_url
from ..engines import get_engine
from ..spec import Spec
from ._tpe import CrashAwareTPE

if TYPE_CHECKING:
    from ._warm import Prior, WarmStart

# Heartbeats, the retry callback and metric names are marked experimental; they are what we rely on.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# The tuner reports every trial itself; Optuna's own per-trial log lines (with tracebacks of an
# interrupted trial) would only repeat it.
optuna.logging.set_verbosity(optuna.logging.ERROR)

SAMPLERS = ("tpe", "random", "gp")
HEARTBEAT_INTERVAL = 5  # seconds between a running trial's heartbeats (env TUNER_HEARTBEAT_INTERVAL)
GRACE_PERIOD = 20  # a RUNNING trial without a heartbeat for this long is failed (env TUNER_GRACE_PERIOD)
MAX_RETRY = 1  # a trial whose worker died is run once more, not forever
SQLITE_TIMEOUT = 60.0  # seconds SQLite waits for another process's lock (env TUNER_SQLITE_TIMEOUT)
STORAGE_RETRY_S = 300.0  # how long a storage call is retried while the database is away (env TUNER_STORAGE_RETRY_S)
STUDY_INIT_WAIT_S = 30.0  # how long a second worker waits for the first to finish creating the study

log = logging.getLogger("tuner.storage")
T = TypeVar("T")


def _env_number(name: str, default: float, kind: type = float) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number", f"unset it or write e.g. {name}={kind(default)}") from None
    if value <= 0:
        raise UsageError(f"{name}={raw!r} must be positive", f"unset it or write e.g. {name}={kind(default)}")
    return value


def heartbeat_settings() -> tuple[int, int]:
    """(heartbeat interval, grace period) in seconds; tests shorten them through the environment."""
    interval = _env_number("TUNER_HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL, int)
    grace = _env_number("TUNER_GRACE_PERIOD", GRACE_PERIOD, int)
    if grace <= interval:
        raise UsageError(f"TUNER_GRACE_PERIOD ({grace}) must be longer than TUNER_HEARTBEAT_INTERVAL ({interval})",
                         "a grace period of three or four heartbeats, e.g. 1 and 4")
    return interval, grace


# -- retries: "database is locked" (SQLite) and a database server that is briefly away (PostgreSQL) ------

def transient(exc: BaseException) -> bool:
    """True for errors that go away by waiting: a lock held by another process, a lost connection."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sqlalchemy.exc.PendingRollbackError):
        return True  # a session left half-rolled-back by a dropped connection: reset, then retry (`retrying`)
    # OperationalError covers SQLite's "database is locked"/"busy" and PostgreSQL's refused or dropped
    # connections and administrator shutdowns; InterfaceError a psycopg2 connection already closed.
    return isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {text[0] if text else ''}"[:200]


def retrying(what: str, budget_s: float | None = None, reset: Callable[[], None] | None = None) -> tenacity.Retrying:
    """A tenacity policy for one storage call: back off up to 2 s between tries, give up after the budget.
    `reset` runs before each new try (a storage's `scoped_session.remove`: a session whose connection
    dropped mid-transaction refuses every later call with PendingRollbackError until it is discarded)."""
    budget = STORAGE_RETRY_S if budget_s is None else budget_s

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if reset is not None:
            reset()
        if state.attempt_number == 1 or state.attempt_number % 10 == 0:
            log.warning("tuner: storage unavailable during %s (%s); retrying for up to %.0f s",
                        what, _reason(exc) if exc else "?", budget)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(transient),
        wait=tenacity.wait_exponential(multiplier=0.05, max=2.0) + tenacity.wait_random(0, 0.1),
        stop=tenacity.stop_after_delay(budget),
        before_sleep=before_sleep, reraise=True)


def retry_call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one storage write of the tuner's own (user attrs, constraints, notes) with retries."""
    for attempt in retrying(what):
        with attempt:
            return fn(*args, **kwargs)
    raise AssertionError("unreachable")  # tenacity re-raises the last error


# Every storage call Optuna makes (ask, tell, heartbeats, stale-trial checks) and every one the tuner
# makes goes through one of these; each is retried while the error is transient.
_RETRIED = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions", "get_study_user_attrs",
    "get_study_system_attrs", "get_all_studies", "create_new_trial", "set_trial_param", "get_trial_param",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr", "get_trial_user_attrs",
    "get_trial_system_attrs", "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials",
    "get_best_trial", "record_heartbeat", "_get_stale_trial_ids",
    # What Optuna's _CachedStorage (the wrapper every Study uses) calls on its backend directly.
    "_create_new_trial", "_get_best_trial_id", "_get_trials", "_set_trial_param",
)
_inside = threading.local()  # a retried call that calls another: only the outer one retries


def _retried(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "depth", 0):
            return method(self, *args, **kwargs)
        _inside.depth = 1
        try:
            for attempt in retrying(name, reset=self.scoped_session.remove):
                with attempt:
                    return method(self, *args, **kwargs)
        finally:
            _inside.depth = 0
    return call


class RetryingRDBStorage(RDBStorage):
    """RDBStorage whose calls wait out "database is locked" and a database server that is briefly away.

    A write whose commit failed was rolled back, so trying it again is safe. The one write that is not
    idempotent by itself, finishing a trial, is made so: a retry that finds the trial already in the
    state it was asked to reach (the first try committed, but the answer was lost) counts as done.
    """

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        tried = False
        for attempt in retrying("set_trial_state_values", reset=self.scoped_session.remove):
            with attempt:
                try:
                    return RDBStorage.set_trial_state_values(self, trial_id, state, values)
                except optuna.exceptions.UpdateFinishedTrialError:
                    if tried and state.is_finished() and RDBStorage.get_trial(self, trial_id).state == state:
                        return True
                    raise
                except BaseException as exc:
                    tried = tried or transient(exc)
                    raise
        raise AssertionError("unreachable")

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Many user attrs in one transaction: one commit (one fsync on SQLite, ~10 ms) instead of one per key,
        which made recording a trial the largest part of the tuner's own time per trial."""
        if not attrs:
            return
        model = TrialUserAttributeModel
        insert = {"sqlite": sqlalchemy.dialects.sqlite.insert,
                  "postgresql": sqlalchemy.dialects.postgresql.insert}.get(self.engine.name)
        for attempt in retrying("set_trial_user_attrs", reset=self.scoped_session.remove):
            with attempt:
                with _create_scoped_session(self.scoped_session, True) as session:
                    if insert is None:
                        for key, value in attrs.items():
                            self._set_trial_attr_without_commit(session, model, trial_id, key, value)
                    else:  # Optuna's own upsert of one attr, for all of them in one statement
                        state = TrialModel.find_or_raise_by_id(trial_id, session).state
                        self.check_trial_is_updatable(trial_id, state)
                        rows = insert(model).values([{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                                                     for key, value in attrs.items()])
                        session.execute(rows.on_conflict_do_update(index_elements=[model.trial_id, model.key],
                                                                   set_={"value_json": rows.excluded.value_json}))


for _name in _RETRIED:
    setattr(RetryingRDBStorage, _name, _retried(_name, getattr(RDBStorage, _name)))


def set_user_attrs(trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """`trial.set_user_attr` for each of `attrs`, in one storage transaction where the storage allows."""
    storage = trial.study._storage
    backend = getattr(storage, "_backend", storage)  # a Study wraps its storage in Optuna's _CachedStorage
    if not isinstance(backend, RetryingRDBStorage):
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    backend.set_trial_user_attrs(trial._trial_id, attrs)
    trial._cached_frozen_trial.user_attrs.update(attrs)  # what trial.set_user_attr keeps in step too


_LOCAL_DECISIONS = threading.Lock()
SQLITE_LOCK_SUFFIX = ".lock"  # trials.db.lock: the lock file of study_lock


@contextlib.contextmanager
def study_lock(study: optuna.Study) -> Iterator[None]:
    """Held by one worker thread of the whole study at a time, across processes and machines.

    For a read-then-write that must not interleave: two workers that both read "nobody runs this
    configuration" and then both write "I run it" would restart the same server twice. PostgreSQL: a
    session advisory lock (released by the server if the worker dies). SQLite: flock on a lock file
    beside the database (one host only, as SQLite is).
    """
    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    engine = getattr(backend, "engine", None)
    if engine is not None and engine.name == "postgresql":
        key = zlib.crc32(f"tuner:{study.study_name}".encode())
        for attempt in retrying("taking the study lock"):  # the server may be away for a moment, as for any call
            with attempt:
                connection = engine.connect()
                try:
                    connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
                except BaseException:
                    connection.close()
                    raise
        try:
            yield
        finally:
            try:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                connection.commit()
            except sqlalchemy.exc.SQLAlchemyError as exc:
                if not transient(exc):
                    raise
                # The connection dropped (the server restarted, the network cut it): the server ended the
                # session and its advisory lock with it. Nothing is left to release; at worst another worker
                # decided at the same time, and one configuration ran twice.
                log.warning("tuner: the study lock's connection dropped (%s); the server released the lock",
                            _reason(exc))
            finally:
                connection.close()
    elif engine is not None and engine.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        # Never open the database file itself: closing any descriptor of it drops every POSIX lock SQLite
        # holds on it in this process, and then another worker's connection, believing itself the last,
        # checkpoints and resets the write-ahead log under this one, whose later commits are lost.
        with open(f"{engine.url.database}{SQLITE_LOCK_SUFFIX}", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    else:
        with _LOCAL_DECISIONS:
            yield


def _schema_race(exc: BaseException) -> bool:
    """Two workers creating the tables of a fresh database at once: the loser sees them half made."""
    if isinstance(exc, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlalchemy.exc.OperationalError) and ("locked" in text or "already exists" in text)


def _serialise_sqlite(engine: sqlalchemy.engine.Engine) -> None:
    """Make every SQLite transaction take the write lock when it begins (BEGIN IMMEDIATE), in WAL mode.

    Python's sqlite3 driver starts a transaction only at the first write, so a read-then-write (Optuna
    popping a WAITING trial: read its state, then set RUNNING) is not atomic: two workers, or two threads
    of one, can both pop the same trial and run it twice. With BEGIN IMMEDIATE the second waits for the
    first (SQLite's busy timeout) and then sees the trial RUNNING. It also removes the lock upgrade that
    fails at once with "database is locked" instead of waiting.
    """

    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        # Write-ahead log: a commit costs one fsync of the log (~3 ms here) instead of the journal's
        # several (~9 ms), and readers (the dashboard, `show`) no longer block the worker's writes.
        # synchronous=FULL keeps every commit durable across a power loss, as before.
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=FULL")

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections made before the listeners existed


def open_storage(url: str, heartbeat: bool = True) -> optuna.storages.RDBStorage:
    if "://" not in url:
        raise StorageError(f"storage URL {url!r} is not a URL", f"write e.g. sqlite:///{url}")
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        _check_sqlite_folder(url)
        # Several processes on one SQLite file wait for each other instead of failing with
        # "database is locked"; what still fails after the timeout is retried (RetryingRDBStorage).
        engine_kwargs = {"connect_args": {"timeout": _env_number("TUNER_SQLITE_TIMEOUT", SQLITE_TIMEOUT)}}
    else:
        # A connection the server dropped (restart, failover) is noticed and replaced before use.
        engine_kwargs = {"pool_pre_ping": True}
    kwargs: dict[str, Any] = {}
    if heartbeat:
        interval, grace = heartbeat_settings()
        kwargs = dict(heartbeat_interval=interval, grace_period=grace,
                      heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                          max_retry=MAX_RETRY))
    with _storage_errors(url):
        for attempt in tenacity.Retrying(retry=tenacity.retry_if_exception(_schema_race),
                                         wait=tenacity.wait_random(0.1, 0.5), stop=tenacity.stop_after_attempt(8),
                                         reraise=True):
            with attempt:
                storage = RetryingRDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
                if url.startswith("sqlite") and heartbeat:
                    # Workers only: readers (show, export, dashboard) keep plain reads, which also work
                    # on a read-only file.
                    _serialise_sqlite(storage.engine)
                return storage
    raise AssertionError("unreachable")


NO_STUDY_FIX = "run 'python -m tuner run' first, or pass --storage with the database the run used"


def stored_study_names(url: str) -> list[str]:
    """The names of the studies `url` holds, read without creating anything (no database file, no tables):
    for the commands that only read. Optuna creates the file and its tables when it opens a URL, which left
    an empty trials.db behind every command run in the wrong folder. StorageError when there is no study."""
    if "://" not in url:
        raise StorageError(f"storage URL {url!r} is not a URL", f"write e.g. sqlite:///{url}")
    names: list[str] = []
    with _storage_errors(url):
        parsed = sqlalchemy.engine.make_url(url)
        database = parsed.database
        if parsed.get_backend_name() == "sqlite" and database and database != ":memory:" \
                and not database.startswith("file:") and not os.path.exists(database):
            raise StorageError(f"no study in {redact_url(url)}: the file {database} does not exist", NO_STUDY_FIX)
        connect_args = {"timeout": SQLITE_TIMEOUT} if parsed.get_backend_name() == "sqlite" else {}
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
        try:
            with engine.connect() as connection:
                if sqlalchemy.inspect(connection).has_table("studies"):
                    rows = connection.execute(sqlalchemy.text("SELECT study_name FROM studies ORDER BY study_id"))
                    names = [row[0] for row in rows]
        finally:
            engine.dispose()
    if not names:
        raise StorageError(f"no study in {redact_url(url)}", NO_STUDY_FIX)
    return names


@contextlib.contextmanager
def _storage_errors(url: str) -> Iterator[None]:
    """A storage URL that cannot be used, as one line naming it (password masked) and the fix."""
    try:
        yield
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise StorageError(f"storage URL {redact_url(url)!r} is malformed ({type(exc).__name__})",
                           "use sqlite:///trials.db or postgresql://user:pass@host/db") from exc
    except sqlalchemy.exc.DatabaseError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else "unreachable"
        if url.startswith("sqlite"):  # a file, not a server: what can be wrong is the file
            raise StorageError(f"SQLite storage {url} cannot be opened: {reason}",
                               "check that the file is a SQLite database and its folder can be written") from exc
        if not isinstance(exc, sqlalchemy.exc.OperationalError):
            raise
        raise StorageError(f"storage {_safe_url(url)} is unreachable: {reason}",
                           "check that the database server runs and the URL is right") from exc
    except sqlalchemy.exc.DatabaseError as exc:  # e.g. SQLite's "file is not a database"
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        raise StorageError(f"storage {_safe_url(url)} cannot be read: {reason}",
                           "pass --storage with the database the run used") from exc
    except ModuleNotFoundError as exc:
        raise StorageError(f"the driver for {_safe_url(url)} is not installed ({exc.name})",
                           "pip install 'tuner[postgres]'") from exc


def _check_sqlite_folder(url: str) -> None:
    """SQLite creates the file but not its folder, and says only "unable to open database file"."""
    try:
        database = sqlalchemy.engine.make_url(url).database
    except sqlalchemy.exc.ArgumentError:
        return  # malformed: open_storage says so
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    folder = Path(database).expanduser().parent
    if not folder.is_dir():
        shown = folder if folder.is_absolute() else f"{folder} ({folder.absolute()})"
        raise StorageError(f"the folder {shown} of the SQLite file in {url} does not exist",
                           f"create it (mkdir -p {folder}) or pass another --storage, e.g. sqlite:///trials.db")


def _safe_url(url: str) -> str:
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<storage>"


def space_digest(spec: Spec) -> str:
    return hashlib.sha256(spec.source.encode()).hexdigest()[:16]


def _trial_seed(seed: int, number: int) -> int:
    return (seed * 1_000_003 + number * 7919 + 17) % (2**32)


def _seeded_per_trial(cls: type) -> type:
    """A sampler class whose random draws depend on (seed, trial number), not on the worker's history.

    With one --seed, several workers (processes or hosts) on one study would otherwise draw the same
    sequence and propose the same configurations at the same time; a single worker stays reproducible.
    """

    class Seeded(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, seed: int | None = None, **kwargs: Any) -> None:
            super().__init__(*args, seed=seed, **kwargs)
            self._tuner_seed = seed

        def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if self._tuner_seed is not None:
                seed = _trial_seed(self._tuner_seed, trial.number)
                self._rng.rng.seed(seed)
                inner = getattr(self, "_random_sampler", None) or getattr(self, "_independent_sampler", None)
                if inner is not None and hasattr(inner, "_rng"):
                    inner._rng.rng.seed(seed ^ 0x5BD1E995)
            super().before_trial(study, trial)

        def reseed_rng(self) -> None:
            # optimize(n_jobs>1) reseeds each thread's sampler from entropy; trial numbers do that here.
            if self._tuner_seed is None:
                super().reseed_rng()

    Seeded.__name__ = Seeded.__qualname__ = cls.__name__
    return Seeded


_TPE = _seeded_per_trial(CrashAwareTPE)
_RANDOM = _seeded_per_trial(optuna.samplers.RandomSampler)
_GP = _seeded_per_trial(optuna.samplers.GPSampler)


def make_sampler(name: str, seed: int | None, spec: Spec, prior: Prior | None = None) -> optuna.samplers.BaseSampler:
    """`prior`: what earlier studies tell this one (tuner/search/_warm.py); only TPE takes it."""
    if name == "tpe":
        # Figures for these settings: benchmarks/search_efficiency.py (tuner/search/_tpe.py says what differs from
        # Optuna's TPE and why).
        return _TPE(seed=seed, space=spec.space, engine=get_engine(spec.engine), load=_load(spec),
                    multivariate=True, constant_liar=True, n_startup_trials=6, prior=prior)
    if name == "random":
        return _RANDOM(seed=seed)
    if name == "gp":
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        if missing:
            # GPSampler imports them only when it first samples, after the baseline has run.
            raise UsageError(f"--sampler gp needs {' and '.join(missing)}, which are not installed",
                             "pip install torch scipy, or use --sampler tpe")
        return _GP(seed=seed)
    raise UsageError(f"unknown sampler {name!r}", f"use one of {', '.join(SAMPLERS)}")


def _load(spec: Spec) -> int | None:
    """The concurrency a throughput objective is measured at; None for latency, rate and two objectives and
    for throughput under an SLO (a smaller batch can serve each request faster)."""
    objective = spec.objective
    if objective.second_metric or objective.rate_search or objective.slo or "throughput" not in objective.metric:
        return None
    return objective.concurrency or max(spec.probe.concurrency, default=None)


def load_or_create(storage: optuna.storages.BaseStorage, study_name: str, spec: Spec, sampler_name: str,
                   seed: int | None, on_space_change: str = "refuse", warm: WarmStart | None = None,
                   simulate: str | None = None) -> optuna.Study:
    """The study to run, created on first use; a study made with another space, or run on the other kind of
    server (`simulate`: the simulator's profile, None for a real server), is refused. `warm`: what earlier
    studies tell it (the configurations to try first only when it is created).

    Several workers may start at once on one study: one creates it, the others get DuplicatedStudyError,
    load it, and wait until the creator has finished setting it up (baseline enqueued, space recorded).
    """
    sampler = make_sampler(sampler_name, seed, spec, warm.prior if warm is not None else None)
    first = warm.first if warm is not None else ()
    pruner = _pruner(spec)
    directions = spec.objective.directions
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if study_name not in existing:
        logging.getLogger("optuna").setLevel(logging.WARNING)
        try:
            study = optuna.create_study(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner,
                                        directions=directions)
        except optuna.exceptions.DuplicatedStudyError:
            pass  # another worker created it a moment ago: load theirs
        else:
            _initialise(study, spec, sampler_name, first)
            return study
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler, pruner=pruner)
    _refuse_other_server_kind(study, simulate)
    digest = _wait_initialised(study, spec, sampler_name)
    if digest != space_digest(spec):
        if on_space_change == "fresh":
            optuna.delete_study(study_name=study_name, storage=storage)
            return load_or_create(storage, study_name, spec, sampler_name, seed, warm=warm)
        if on_space_change != "continue":
            raise StudyMismatchError(f"study {study_name!r} exists with a different search space",
                                     "pass --continue to go on with the new space, --fresh to start over, "
                                     "or --study NAME for a new study")
        # Points the edited space asks to try first are tried now (the same values twice are not).
        for point in spec.try_first:
            study.enqueue_trial(dict(point), user_attrs={"try_first": True}, skip_if_exists=True)
        study.set_user_attr("space_digest", space_digest(spec))
    if [d.name.lower() for d in study.directions] != directions:
        raise StudyMismatchError(f"study {study_name!r} has other objectives",
                                 "use --study NAME for a new study")
    return study


def _refuse_other_server_kind(study: optuna.Study, simulate: str | None) -> None:
    """A study's trials come from one kind of server. The simulator's tokens and figures are not a real
    server's: a real run going on from a dry run's study (the README's first command leaves one in trials.db,
    under the space's name) would judge the real server against the simulator's answers, and learn from its
    figures; a dry run going on from a real study the other way round. A study from before runs recorded
    `simulate` is not judged."""
    if "simulate" not in study.user_attrs or bool(study.user_attrs["simulate"]) == bool(simulate):
        return
    if not any(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials(deepcopy=False)):
        return
    was = study.user_attrs["simulate"]
    ran = f"the simulated server (profile {was})" if was else "a real server"
    now = "the simulated one (--simulate)" if simulate else "a real one"
    raise StudyMismatchError(f"study {study.study_name!r} holds trials from {ran}, and this run starts {now}: "
                             "their answers and figures do not compare",
                             "pass --study NAME for a new study, or another --storage")


def _initialise(study: optuna.Study, spec: Spec, sampler_name: str,
                first: Sequence[tuple[Mapping[str, Any], str]] = ()) -> None:
    """Set up a new study. `space_digest` is written last: loaders take it as 'ready'. `first`: configurations of
    earlier studies (tuner/search/_warm.py), each with where it came from, to run right after the baseline."""
    if spec.space.baseline is not None:
        # First, so that the baseline is trial 0 whichever worker asks first.
        study.enqueue_trial(dict(spec.space.baseline), user_attrs={"baseline": True}, skip_if_exists=True)
    for point, source in first:
        study.enqueue_trial(dict(point), user_attrs={"learned_from": source}, skip_if_exists=True)
    for point in spec.try_first:
        study.enqueue_trial(dict(point), user_attrs={"try_first": True}, skip_if_exists=True)
    study.set_user_attr("space_name", spec.name)
    # The space file as written, for the dashboard and `show`; a secret it sets for the server is masked.
    study.set_user_attr("space_source", Redactor(spec.server.env)(spec.source))
    study.set_user_attr("engine", spec.engine)
    study.set_user_attr("sampler", sampler_name)
    study.set_metric_names(spec.objective.names)
    study.set_user_attr("space_digest", space_digest(spec))


def _wait_initialised(study: optuna.Study, spec: Spec, sampler_name: str) -> str:
    """The study's space digest, once its creator has written it; if the creator died before, finish its job."""
    deadline = time.monotonic() + STUDY_INIT_WAIT_S
    while True:
        digest = study.user_attrs.get("space_digest")
        if digest:
            return digest
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    log.warning("tuner: study %r was never finished by the worker that created it; setting it up here",
                study.study_name)
    _initialise(study, spec, sampler_name)
    return space_digest(spec)


def _pruner(spec: Spec) -> optuna.pruners.BasePruner:
    if spec.objective.second_metric or not spec.probe.prune:
        return optuna.pruners.NopPruner()  # report/should_prune raise on multi-objective studies
    from ._pruner import BehindTheBest

    return BehindTheBest()


def load_study(storage_url: str, study_name: str | None) -> optuna.Study:
    """The study to read; a storage without one is refused before Optuna opens it (which would create the file
    and its tables)."""
    names = stored_study_names(storage_url)
    shown = redact_url(storage_url)
    if study_name is None:
        if len(names) > 1:
            raise StorageError(f"{shown} holds several studies ({', '.join(names)})", "pass --study NAME")
        study_name = names[0]
    if study_name not in names:
        raise StorageError(f"no study named {study_name!r} in {shown}",
                           f"pass --study with one of: {', '.join(names)}")
    return optuna.load_study(study_name=study_name, storage=open_storage(storage_url, heartbeat=False))
