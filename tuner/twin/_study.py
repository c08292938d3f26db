"""The trials a twin is fitted on: each one's flags as the simulator resolves them, its user attributes, its log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sim import Knobs, Profile
from ._fidelity import METRIC, BadInput, Study, in_range, load_study
from ._logs import ServerLog

SQLITE = "sqlite:///"


@dataclass(frozen=True)
class Trial:
    number: int
    knobs: Knobs  # the flags as the simulator resolves them (backends, graph sizes, chunk)
    attrs: dict[str, Any]
    log: ServerLog | None
    jit: bool  # a first start that compiled kernels: left out of start-up fits
    flags: dict[str, Any]
    tok_s: float | None  # output tok/s of a completed probe (not a reused measurement)

    @property
    def ready_s(self) -> float | None:
        return (self.attrs.get("stage_seconds") or {}).get("readiness") if self.attrs.get("server_version") else None


def load_storage(url: str, name: str | None) -> Study:
    """A study from an Optuna storage URL; an SQLite file is read from a copy (SQLite writes beside it)."""
    if url.startswith(SQLITE):
        return load_study(Path(url[len(SQLITE):]), name, flag="--storage", study_flag="--study")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(url)]
        if name is None and len(names) == 1:
            name = names[0]
        if name not in names:
            raise BadInput(f"--study {name}: not in {url} (it holds {', '.join(names) or 'no study'}); name one "
                           "with --study")
        study = optuna.load_study(study_name=name, storage=url)
    except BadInput:
        raise
    except Exception as exc:
        raise BadInput(f"--storage {url}: cannot be read ({type(exc).__name__}); give an Optuna storage URL, "
                       "e.g. sqlite:///trials.db") from None
    return Study(name, dict(study.user_attrs), study.get_trials(deepcopy=True))


def knobs_of(profile: Profile, flags: dict[str, Any]) -> Knobs:
    from ..engines import flag_argv
    from ..sim import server_values
    from ..sim import resolve

    return resolve(profile, server_values(profile, flag_argv(flags))).knobs


def trials_in(study: Study, span: tuple[int, int | None], profile: Profile, logs: dict[int, ServerLog],
              jit: set[int], flag: str) -> list[Trial]:
    """The trials of the range that started a server (they have flags); refuses a range that holds none."""
    chosen = []
    for t in study.trials:
        if not in_range(t.number, span) or not t.user_attrs.get("flags"):
            continue
        attrs = dict(t.user_attrs)
        done = t.state.name == "COMPLETE" and attrs.get("failure_kind", "none") == "none" \
            and "reused_from" not in attrs and attrs.get(METRIC)
        chosen.append(Trial(t.number, knobs_of(profile, dict(attrs["flags"])), attrs, logs.get(t.number),
                            t.number in jit, dict(attrs["flags"]), float(attrs[METRIC]) if done else None))
    if not chosen:
        numbers = [t.number for t in study.trials]
        held = f"{min(numbers)}-{max(numbers)}" if numbers else "none"
        raise BadInput(f"{flag}: study {study.name!r} has no trial with flags in this range (its trials: {held}); "
                       "give a range of trials it ran")
    return chosen
