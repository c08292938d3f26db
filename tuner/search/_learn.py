"""`run --learn-from`: which earlier studies and knowledge files a run learns from, and what it says of them; and
`knowledge export`, which writes a study's knowledge to such a file.

A source is a study of the run's storage (its name), another storage (`sqlite:///other.db`: its studies;
`URL#study`: one), or a knowledge file (`knowledge export`'s YAML or JSON). Without --learn-from, the studies of
the run's storage on the same engine and GPU (name and compute capability) are used; `--learn-from none` starts
cold. What is carried, and how much, is tuner/search/_warm.py's to say.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from .._errors import KnowledgeError, StorageError
from .._files import write_atomically
from .._redact import redact_url
from ._context import ATTR as CONTEXT_ATTR, richness
from ._knowledge import Knowledge, knowledge_of_study, read_knowledge, render
from ._study import load_study, open_storage, stored_study_names
from ._warm import PARTS, WEIGHTS_SOURCE, WarmStart

NONE = "none"
ATTR = "learned"  # the study user attr: what it learnt from where
FILE_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Learning:
    knowledge: tuple[Knowledge, ...]
    default: bool  # found without --learn-from: the studies of this storage on the same engine and GPU


def stored_context(storage_url: str, study_name: str) -> Mapping[str, Any] | None:
    """The context a study of this storage recorded (a resumed run knows its version better than a new one)."""
    return next((s.user_attrs.get(CONTEXT_ATTR) for s in _summaries(storage_url) if s.study_name == study_name),
                None)


def study_exists(storage_url: str, study_name: str) -> bool:
    return any(s.study_name == study_name for s in _summaries(storage_url))


def best_context(fresh: Mapping[str, Any], stored: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return stored if stored is not None and richness(stored) >= richness(fresh) else fresh


def gather(sources: Sequence[str] | None, storage_url: str, study_name: str, context: Mapping[str, Any]) -> Learning:
    """The knowledge of every source named (None: the studies of this storage that match `context`); a source
    that cannot be used is one KnowledgeError naming it and the fix. Nothing is created: a storage that does not
    exist yet holds no study to learn from."""
    if sources is None:
        return Learning(tuple(_matching_studies(storage_url, study_name, context)), default=True)
    if NONE in sources:
        if len(sources) > 1:
            raise KnowledgeError("--learn-from none starts cold, and cannot be given with other sources",
                                 "pass either 'none' or the sources to learn from")
        return Learning((), default=False)
    knowledge: list[Knowledge] = []
    for source in sources:
        if "://" in source:
            knowledge += _storage_studies(source, storage_url, study_name)
        elif source.endswith(FILE_SUFFIXES) or Path(source).exists():
            knowledge.append(read_knowledge(source))
        else:
            knowledge.append(_this_storage_study(source, storage_url, study_name))
    return Learning(tuple(knowledge), default=False)


def _summaries(storage_url: str) -> list[optuna.study.StudySummary]:
    """The studies of a storage, read without creating it; none where it does not exist or holds none."""
    try:
        stored_study_names(storage_url)
    except StorageError:
        return []
    return optuna.get_all_study_summaries(_reader(storage_url), include_best_trial=False)


def _reader(storage_url: str) -> optuna.storages.BaseStorage:
    return open_storage(storage_url, heartbeat=False)


def _matching_studies(storage_url: str, study_name: str, context: Mapping[str, Any]) -> list[Knowledge]:
    """The other studies of this storage whose recorded context has this engine and GPU."""
    engine, gpus = context.get("engine") or {}, context.get("gpus") or {}
    if not gpus.get("name"):
        return []  # no GPU read: nothing to match a study by
    out = []
    for summary in _summaries(storage_url):
        theirs = summary.user_attrs.get(CONTEXT_ATTR)
        if summary.study_name == study_name or not isinstance(theirs, Mapping):
            continue
        their_gpus = theirs.get("gpus") or {}
        if ((theirs.get("engine") or {}).get("name") == engine.get("name")
                and (their_gpus.get("name"), their_gpus.get("compute_capability"))
                == (gpus.get("name"), gpus.get("compute_capability"))):
            study = optuna.load_study(study_name=summary.study_name, storage=_reader(storage_url))
            out.append(knowledge_of_study(study, f"study '{summary.study_name}'"))
    return out


def _this_storage_study(name: str, storage_url: str, study_name: str) -> Knowledge:
    if name == study_name:
        raise KnowledgeError(f"--learn-from {name}: that is the study this run continues",
                             "name another study, a storage URL or a knowledge file")
    names = [s.study_name for s in _summaries(storage_url)]
    if name not in names:
        others = [n for n in names if n != study_name]
        raise KnowledgeError(f"--learn-from {name}: no study of that name in {redact_url(storage_url)}, and no such "
                             "file", f"name one of: {', '.join(others)}" if others else
                             "pass a knowledge file (.yaml or .json) or a storage URL (sqlite:///other.db#study)")
    return knowledge_of_study(optuna.load_study(study_name=name, storage=_reader(storage_url)), f"study '{name}'")


def _storage_studies(source: str, storage_url: str, study_name: str) -> list[Knowledge]:
    url, _, wanted = source.partition("#")
    shown = redact_url(url)
    try:
        names = stored_study_names(url)
    except StorageError as exc:
        raise KnowledgeError(f"--learn-from {redact_url(source)}: {exc.problem}",
                             "pass a storage URL that holds a study, e.g. sqlite:///other.db#study") from None
    if wanted and wanted not in names:
        raise KnowledgeError(f"--learn-from {redact_url(source)}: no study named {wanted!r} in {shown}",
                             f"write {shown}#NAME with one of: {', '.join(names)}")
    same = url == storage_url
    chosen = [wanted] if wanted else [n for n in names if not (same and n == study_name)]
    storage = _reader(url)
    studies = [optuna.load_study(study_name=n, storage=storage) for n in chosen]
    if wanted:
        return [knowledge_of_study(studies[0], f"study '{wanted}' in {shown}")]
    # A whole storage: the studies that recorded a context (older ones cannot be matched to this one).
    usable = [s for s in studies if isinstance(s.user_attrs.get(CONTEXT_ATTR), Mapping)]
    if not usable:
        raise KnowledgeError(f"--learn-from {shown}: none of its studies ({', '.join(chosen) or 'none but this one'}) "
                             "has a recorded context to match this one by",
                             "add one trial to one of them with this tuner, or name another source")
    return [knowledge_of_study(s, f"study '{s.study_name}' in {shown}") for s in usable]


def line(warm: WarmStart, learning: Learning) -> str:
    """What the run says, in one line, of what it learns and from where."""
    parts, sized = [], ""
    for used in warm.used:
        if used.source == WEIGHTS_SOURCE:
            sized = f"{WEIGHTS_SOURCE}: {used.told[0]}"
            continue
        said = f"{used.lessons} lesson{'' if used.lessons == 1 else 's'}"
        if used.first:
            said += f", {used.first} configuration{'' if used.first == 1 else 's'} to try first"
        if used.unfit:
            said += f", {used.unfit} configuration{'' if used.unfit == 1 else 's'} left out: no tensor-parallel " \
                    "size of this space holds this model with them"
        parts.append(f"{used.source} ({said})")
    told = "; ".join(parts)
    left = [p for p in PARTS if p not in warm.parts]
    if parts:
        told += f"; carrying {', '.join(p for p in PARTS if p in warm.parts) or 'nothing'}" + \
            (f" (--carry all adds {', '.join(left)})" if left else "")
    if not parts:
        learnt = ""
    elif learning.default:
        many = len(parts) > 1
        learnt = (f"learning from {len(parts)} earlier stud{'ies' if many else 'y'} of this storage on the same "
                  f"engine and GPU: {told} (--learn-from none starts cold)")
    else:
        learnt = f"learning from {told}"
    return "; ".join(text for text in (learnt, sized) if text)


def record(study: optuna.Study, warm: WarmStart, learning: Learning) -> None:
    """The study's `learned` attr: this run's sources, with the configurations each gave when the study began."""
    before = {s.get("source"): s.get("first", 0) for s in (study.user_attrs.get(ATTR) or {}).get("sources", [])}
    attr = warm.to_attr()
    for source in attr["sources"]:
        source["first"] = source["first"] or before.get(source["source"], 0)
    study.set_user_attr(ATTR, {**attr, "default": learning.default})


def describe(attr: Mapping[str, Any], first_trials: Mapping[str, list[int]]) -> str:
    """What `show` says after 'learned: ', e.g. "7 lessons from study 'x', its configurations tried as trials 1, 2"."""
    parts = []
    for source in attr.get("sources") or []:
        name, lessons = source.get("source", "?"), source.get("lessons", 0)
        text = f"{lessons} lesson{'' if lessons == 1 else 's'} from {name}"
        if trials := first_trials.get(name):
            text += f", its configurations tried as trial{'s' if len(trials) > 1 else ''} {', '.join(map(str, trials))}"
        parts.append(text)
    return "; ".join(parts) or "nothing"


def export_knowledge(storage: str, study_name: str | None, out: str, notes: Sequence[str] = ()) -> Path | None:
    """`knowledge export`: the study's lessons to `out` (.json: JSON, else YAML; '-': stdout), whole or not at all.
    The first line on stderr names the study and the file, then each entry as it reads."""
    study = load_study(storage, study_name)
    knowledge = knowledge_of_study(study)
    fmt = "json" if out.endswith(".json") else "yaml"
    command = shlex.join(["python", "-m", "tuner", "knowledge", "export", "--storage", redact_url(storage),
                          "--study", study.study_name, "--out", out])
    text = render(knowledge, fmt, command)
    path = None if out == "-" else Path(out)
    if path is not None:
        write_atomically(path, text)
    count = len(knowledge.lessons)
    print(f"study '{study.study_name}' ({redact_url(storage)}): {count} entr{'y' if count == 1 else 'ies'} "
          f"written to {path or 'stdout'}", *(f"  {lesson.reads()}" for lesson in knowledge.lessons), *notes,
          sep="\n", file=sys.stderr, flush=True)
    if path is None:
        sys.stdout.write(text)
    return path
