"""Which storage and study a command that reads (show, export, confirm, report, dashboard) acts on, what it says
about that choice, and how the commands printed as next steps name them.

Without --storage such a command follows the last run in this folder (runs/last-run.json), else it reads
sqlite:///trials.db. A person who ran `run --storage sqlite:///8b.db` and then `export` means that run's study: the
default file may hold another study, whose winner was exported before without a word. Whenever the record decided
something the plain default would have decided otherwise, or an explicit --storage is not where the last run went,
a note says so with the command for the other choice.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import optuna

from .._errors import StorageError, UsageError
from .._redact import redact_url
from ..search import stored_study_names
from ._last_run import LastRun, read_last_run

DEFAULT_STORAGE = "sqlite:///trials.db"
DEFAULT_WORKDIR = "runs"


@dataclass(frozen=True)
class Target:
    storage: str  # the URL to open
    study: str | None  # None: the storage's only study
    notes: tuple[str, ...] = ()  # what to tell the person about the choice (stderr)


def choose(command: str, storage: str | None, study: str | None,
           workdir: str | os.PathLike = DEFAULT_WORKDIR) -> Target:
    """What `python -m tuner <command>` acts on, given --storage and --study as typed (None: not given). Refuses a
    storage that holds no study, creating nothing."""
    given = storage is not None
    last = _last_run(workdir, needed=not given)
    if storage is None:
        if last is not None and last.password_masked:
            raise UsageError(f"the last run in this folder went to {last.storage} ({last.path}), whose password is "
                             "not recorded", "pass --storage with the whole URL")
        storage = last.storage if last is not None else DEFAULT_STORAGE
    followed = not given and last is not None
    try:
        names = stored_study_names(storage)
    except StorageError as exc:
        if not followed:
            raise
        raise StorageError(f"{exc.problem}; it is where the last run in this folder went ({last.path})",
                           "pass --storage with the database to read") from None
    shown = redact_url(storage)
    same = last is not None and _same_storage(last.storage, shown)
    notes = []
    if study is None and same and last.study in names and len(names) > 1:
        study = last.study
        notes.append(f"note: {shown} holds {len(names)} studies; acting on '{study}', where the last run in this "
                     f"folder went; --study picks another ({', '.join(n for n in names if n != study)})")
    elif study is None and same and last.study not in names:
        notes.append(f"note: the last run in this folder went to study '{last.study}', which {shown} no longer holds")
    acting = study or (names[0] if len(names) == 1 else None)
    if followed and shown != DEFAULT_STORAGE:
        note = (f"note: {_named(acting)}on {shown}, where the last run in this folder went ({last.path}); "
                "--storage picks another")
        elsewhere = _names_or_none(DEFAULT_STORAGE)
        if elsewhere:
            note += (f"; {DEFAULT_STORAGE} holds {', '.join(repr(n) for n in elsewhere)}: "
                     f"python -m tuner {command} --storage {DEFAULT_STORAGE}")
        notes.insert(0, note)
    elif given and last is not None and not same:
        notes.append(f"note: the last run in this folder ({last.started}) went to study '{last.study}' on "
                     f"{last.storage}, not to {shown}; for it: python -m tuner {command} "
                     f"{shlex.join(['--storage', last.storage])}")
    return Target(storage, study, tuple(notes))


def target_args(storage: str, study: optuna.Study, workdir: str | os.PathLike = DEFAULT_WORKDIR) -> list[str]:
    """--storage and --study for a command printed as a next step: the storage and study this command used, less
    what equals the default (the storage sqlite:///trials.db; a study alone in its storage). A run with another
    --workdir left its record where a plain command does not look, and runs/last-run.json may be an older run's
    or point at another storage, which a plain command would follow: then the storage is named even where it
    is the default. The password of a URL is masked, as everywhere the
    tuner prints one."""
    args = []
    shown = redact_url(storage)
    record = _last_run(DEFAULT_WORKDIR, needed=False)
    elsewhere = record is not None and not _same_storage(record.storage, storage)  # a plain command goes there
    if shown != DEFAULT_STORAGE or Path(workdir) != Path(DEFAULT_WORKDIR) or elsewhere:
        args += ["--storage", shown]
    if len(optuna.get_all_study_names(study._storage)) > 1:
        args += ["--study", study.study_name]
    return args


def _same_storage(a: str, b: str) -> bool:
    """Whether two URLs name one storage: SQLite files compared by their real path (sqlite:///trials.db and
    sqlite:////home/me/trials.db from that folder are one)."""
    if a == b:
        return True
    files = [u.split(":///", 1)[1] for u in (a, b) if u.startswith("sqlite:///")]
    return len(files) == 2 and all(files) and os.path.realpath(files[0]) == os.path.realpath(files[1])


def _last_run(workdir: str | os.PathLike, needed: bool) -> LastRun | None:
    """The record; an unreadable one is an error only where it would decide (no --storage given)."""
    try:
        return read_last_run(workdir)
    except UsageError:
        if needed:
            raise
        return None


def _names_or_none(storage: str) -> list[str] | None:
    try:
        return stored_study_names(storage)
    except StorageError:
        return None


def _named(study: str | None) -> str:
    return f"study '{study}' " if study else ""
