"""The record `run` leaves in its work folder (runs/last-run.json): which storage and study it went to.

The commands that only read (show, export, confirm, report, dashboard) follow it when no --storage is given, so
that `python -m tuner export` after `run --storage sqlite:///8b.db` exports that run's winner, not whatever study
the default trials.db holds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._errors import UsageError
from .._redact import MASK, redact_url

RECORD_NAME = "last-run.json"


@dataclass(frozen=True)
class LastRun:
    storage: str  # the URL as given to `run`, its password masked
    study: str
    started: str  # when the run began, e.g. "2026-12-06 04:57 UTC"
    path: Path  # the record itself, to name in messages

    @property
    def password_masked(self) -> bool:
        """Whether the URL needed a password the record does not keep: it cannot be opened from here."""
        return MASK in self.storage


def write_last_run(workdir: str | os.PathLike, storage: str, study: str) -> None:
    """Record where this run went, whole or not at all (a reader never sees half a file)."""
    folder = Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"storage": redact_url(storage), "study": study,
              "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{RECORD_NAME}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        os.replace(tmp, folder / RECORD_NAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_last_run(workdir: str | os.PathLike) -> LastRun | None:
    """The last run's record in `workdir`; None where no run has left one."""
    path = Path(workdir) / RECORD_NAME
    try:
        record = json.loads(path.read_text())
        return LastRun(str(record["storage"]), str(record["study"]), str(record.get("started", "?")), path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is not a record of a run ({type(exc).__name__}: {exc})",
                         "pass --storage (and --study), or delete the file") from None
