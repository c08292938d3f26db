"""Knowledge a study leaves for later ones: the values its failures blame, and its best configurations.

The lessons are those of `blame_failures` (tuner/search/_lessons.py), the same that `tuner show` lists, less the
ones that do not carry to other studies (a timeout, a missed SLO: `FailureKind.carries`). Each keeps the study's
context (tuner/search/_context.py), so a later study knows what it was learnt on.

`knowledge export` writes the lessons as a file (`render`: YAML or JSON, `schema: 2`), with what ran: the values
of each choice flag (a backend, a switch) that ran and passed the gate, and on what engine and GPUs (schema 1
files, without it, still read). `run --learn-from FILE` reads it back; `run --learn-from STUDY` derives the same
from the study itself. Both commands are tuner/search/_learn.py's: this module reads no storage.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from .._errors import KnowledgeError
from .._failures import FailureKind, measured
from ._blame import is_number, violation
from ._context import ATTR as CONTEXT_ATTR
from ._lessons import AT_LEAST, AT_MOST, Lesson, blame_failures

__all__ = ["AT_LEAST", "AT_MOST", "GoodConfig", "Knowledge", "Lesson", "knowledge_of_study", "knowledge_of_trials",
           "read_knowledge", "render"]

SCHEMA = 2
READS = (1, 2)  # schema 1: no `ran` section
RAN_CONTEXT = ("engine", "gpus")  # what ran, ran on these: a kernel that ran there runs on the same GPUs and version
FORMAT = "tuner-knowledge"
GOOD_PER_STUDY = 3  # the best distinct configurations a study passes on


@dataclass(frozen=True)
class GoodConfig:
    """One of the best configurations of an earlier study."""

    params: Mapping[str, Any]
    context: Mapping[str, Any]
    rank: int  # 0: the study's best
    study: str
    trial: int


@dataclass(frozen=True)
class Knowledge:
    """What one source (a study, a file) teaches."""

    source: str  # as a person named it: "study 'x'", "study 'x' in sqlite:///other.db", "knowledge.yaml"
    lessons: tuple[Lesson, ...] = ()
    good: tuple[GoodConfig, ...] = ()
    # A study's own; for a file, what its `ran` section ran on (each lesson has its own context).
    context: Mapping[str, Any] = field(default_factory=dict)
    ran: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # each choice flag: the values that ran


def knowledge_of_trials(study: str, trials: Sequence[FrozenTrial], context: Mapping[str, Any], maximize: bool,
                        source: str | None = None) -> Knowledge:
    """A study's lessons and best configurations, from its trials and its context attr (tuner/search/_context.py).
    Usable without a server or a storage: benchmarks pass the trials of an in-memory study."""
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                and t.user_attrs.get("reused_from") is None]
    kept = {k: context[k] for k in ("engine", "gpus", "model", "workload") if isinstance(context.get(k), Mapping)}
    # A failure is matched by what it ran on; a good configuration by what it was good for too.
    on = {k: v for k, v in kept.items() if k != "workload"}
    # What show lists, less what does not carry: one analysis for both.
    lessons = tuple(lesson for lesson in blame_failures(finished, on, study).lessons if lesson.carries)
    return Knowledge(source or f"study '{study}'", lessons,
                     tuple(_good(finished, kept, study, maximize)), kept, _ran(finished))


def knowledge_of_study(study: optuna.Study, source: str | None = None) -> Knowledge:
    """`knowledge_of_trials` of a stored study; a study without a recorded context is refused."""
    context = study.user_attrs.get(CONTEXT_ATTR)
    name = study.study_name
    if not isinstance(context, Mapping):
        raise KnowledgeError(f"study '{name}' has no recorded context (it ran before the tuner recorded one), so "
                             "nothing it learnt can be matched to another study",
                             f"add one trial to it with this tuner (run --study {name} --trials N+1), or leave it "
                             "out")
    maximize = study.directions[0] == optuna.study.StudyDirection.MAXIMIZE
    return knowledge_of_trials(name, study.get_trials(deepcopy=False), context, maximize, source)


def _ran(finished: Sequence[FrozenTrial]) -> dict[str, tuple[Any, ...]]:
    """The values of each choice flag (a backend, a switch) that ran and passed the gate in some trial."""
    ran: dict[str, list[Any]] = {}
    for t in finished:
        if violation(t) <= 0:
            for name, value in t.params.items():
                if isinstance(value, (str, bool)) and value not in ran.setdefault(name, []):
                    ran[name].append(value)
    return {name: tuple(values) for name, values in ran.items()}


def _good(finished: Sequence[FrozenTrial], context: Mapping[str, Any], study: str, maximize: bool) -> list[GoodConfig]:
    """The best distinct configurations that passed every gate (by the first objective), the best of each shape
    first (`_shape`): a study's best three often differ only in an amount (a memory fraction), and a later
    study, on another model, learns more from three backends than from one backend three times. A probe cut
    short is no measurement (`measured`), even where it was recorded as one."""
    requests = (context.get("workload") or {}).get("requests")
    eligible = [t for t in finished if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible") is True
                and violation(t) <= 0 and t.values and measured(t.user_attrs, requests)]
    sign = 1.0 if maximize else -1.0
    ranked: list[FrozenTrial] = []
    seen: set[str] = set()
    for t in sorted(eligible, key=lambda t: -sign * t.values[0]):
        key = t.user_attrs.get("config_key") or json.dumps(t.params, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            ranked.append(t)
    best_of_shape: dict[str, FrozenTrial] = {}
    for t in ranked:
        best_of_shape.setdefault(_shape(t), t)
    first = list(best_of_shape.values())
    picked = (first + [t for t in ranked if t not in first])[:GOOD_PER_STUDY]
    return [GoodConfig(dict(t.params), context, rank, study, t.number) for rank, t in enumerate(picked)]


def _shape(t: FrozenTrial) -> str:
    """The flags of a configuration that name a choice (a backend, a switch), not an amount."""
    named = {name: value for name, value in t.params.items() if isinstance(value, (str, bool, type(None)))}
    return json.dumps(named, sort_keys=True, default=str)


# -- the file --------------------------------------------------------------------------------------------------

def render(knowledge: Knowledge, fmt: str, command: str) -> str:
    """The knowledge file's text: YAML (with a comment that says what it is) or JSON."""
    made = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    document: dict[str, Any] = {"format": FORMAT, "schema": SCHEMA, "made": {"date": made, "command": command},
                                "entries": [lesson.to_entry() for lesson in knowledge.lessons]}
    if knowledge.ran:
        document["ran"] = {"context": {k: knowledge.context[k] for k in RAN_CONTEXT if k in knowledge.context},
                           "values": {name: list(values) for name, values in knowledge.ran.items()}}
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    head = (f"# What the failures of {knowledge.source} showed, for `python -m tuner run --learn-from FILE`.\n"
            "# Each entry: the values, how they failed, on what (context), in how many trials (count; blame: how\n"
            "# many failures' worth, values that only ever failed together sharing them), the trials that ran\n"
            "# fine with them (ran_fine), the first message. suspected: fewer than 2 failures point at it alone,\n"
            "# or a trial ran fine with it; its sentence (reads) says 'may'.\n"
            "# ran: the backends and switches that ran and passed the gate, and on what; a later study on the\n"
            "# same GPUs and engine version counts a value none of its sources ran as a little likelier to fail.\n")
    return head + yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=200,
                            default_flow_style=None)


class _Dumper(yaml.SafeDumper):
    """Every entry's context written out where it stands, not as a YAML alias of the first one."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def read_knowledge(path: str | Path) -> Knowledge:
    """A knowledge file; anything wrong with it is one KnowledgeError naming the file, the entry and the fix."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise KnowledgeError(f"knowledge file {path} does not exist",
                             "pass a file 'python -m tuner knowledge export' wrote, a study name or a storage URL"
                             ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowledgeError(f"knowledge file {path} cannot be read ({type(exc).__name__})",
                             "pass a file 'python -m tuner knowledge export' wrote") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise KnowledgeError(f"knowledge file {path} is not {'JSON' if path.suffix == '.json' else 'YAML'}{where}",
                             "pass a file 'python -m tuner knowledge export' wrote") from None
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise KnowledgeError(f"{path} is not a tuner knowledge file (no 'format: {FORMAT}')",
                             "pass a file 'python -m tuner knowledge export' wrote")
    if document.get("schema") not in READS:
        raise KnowledgeError(f"{path}: schema {document.get('schema')!r} is not one this tuner reads "
                             f"({', '.join(map(str, READS))})", "export it again with this tuner's 'knowledge export'")
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise KnowledgeError(f"{path}: 'entries' must be a list", "list the entries under 'entries:'")
    lessons = tuple(_lesson(entry, f"{path}: entries[{i}]") for i, entry in enumerate(entries))
    context, ran = _ran_section(document.get("ran"), f"{path}: ran")
    return Knowledge(str(path), lessons, context=context, ran=ran)


def _ran_section(section: Any, where: str) -> tuple[dict[str, Any], dict[str, tuple[Any, ...]]]:
    """The `ran` section's context and values ({} and {} where the file has none)."""
    if section is None:
        return {}, {}
    fix = "write ran: {context: {engine: {...}, gpus: {...}}, values: {attention-backend: [fa3, triton]}}, or drop it"
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{where} must be a mapping of context and values", fix)
    context, values = section.get("context"), section.get("values")
    if not isinstance(context, Mapping) or not isinstance(context.get("engine"), Mapping):
        raise KnowledgeError(f"{where}.context must name the engine the values ran on (and the GPUs)", fix)
    if not isinstance(values, Mapping):
        raise KnowledgeError(f"{where}.values must map each flag to the values that ran", fix)
    ran: dict[str, tuple[Any, ...]] = {}
    for name, listed in values.items():
        if not isinstance(listed, list) or not all(isinstance(v, (str, bool)) for v in listed):
            raise KnowledgeError(f"{where}.values.{name} must be a list of backend names or true/false", fix)
        ran[str(name)] = tuple(listed)
    return {k: context[k] for k in RAN_CONTEXT if isinstance(context.get(k), Mapping)}, ran


def _lesson(entry: Any, where: str) -> Lesson:
    if not isinstance(entry, Mapping):
        raise KnowledgeError(f"{where} must be a mapping", "write each entry as values:, kind:, context:, ...")
    values = entry.get("values")
    if not isinstance(values, Mapping) or not values:
        raise KnowledgeError(f"{where}.values must name at least one flag", "write e.g. values: {attention-backend: "
                             "flashinfer}")
    for name, value in values.items():
        if isinstance(value, Mapping):
            if len(value) != 1 or next(iter(value)) not in (AT_LEAST, AT_MOST) or not is_number(
                    next(iter(value.values()))):
                raise KnowledgeError(f"{where}.values.{name}: a range is {{{AT_LEAST}: N}} or {{{AT_MOST}: N}}",
                                     f"write e.g. {name}: {{{AT_LEAST}: 96}}")
        elif not (value is None or isinstance(value, (str, int, float, bool))):
            raise KnowledgeError(f"{where}.values.{name}: {value!r} is neither a value nor a range",
                                 f"write e.g. {name}: flashinfer")
    try:
        kind = FailureKind(entry.get("kind"))
    except ValueError:
        carried = sorted(k.value for k in FailureKind if k.carries)
        raise KnowledgeError(f"{where}.kind: {entry.get('kind')!r} is not a failure kind",
                             f"use one of {', '.join(carried)}") from None
    capture = entry.get("capture", False)
    if not isinstance(capture, bool):
        raise KnowledgeError(f"{where}.capture must be true or false", "write capture: true, or leave it out")
    if kind.carries is None and not capture:
        raise KnowledgeError(f"{where}.kind: {kind.value} failures are not carried to other studies",
                             "drop the entry")
    context = entry.get("context")
    if not isinstance(context, Mapping) or not isinstance(context.get("engine"), Mapping) \
            or not context["engine"].get("name"):
        raise KnowledgeError(f"{where}.context must name the engine at least (context: {{engine: {{name: sglang, "
                             "version: ...}, gpus: {...}, model: {...}}})", "export the file again")
    count, blame = entry.get("count", 1), entry.get("blame", entry.get("count", 1))
    if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
        raise KnowledgeError(f"{where}.count must be a whole number of trials (1 or more), got {count!r}",
                             "write e.g. count: 2")
    if not (is_number(blame) and 0 < blame <= count and math.isfinite(blame)):
        raise KnowledgeError(f"{where}.blame must be a number in (0, count], got {blame!r}",
                             "write e.g. blame: 1.0, or leave it out")
    trials = entry.get("trials", [])
    if not isinstance(trials, list) or not all(isinstance(n, int) for n in trials):
        raise KnowledgeError(f"{where}.trials must be a list of trial numbers", "write e.g. trials: [3, 7]")
    ran_fine = entry.get("ran_fine")  # files from before it was written: not known
    if ran_fine is not None and not (isinstance(ran_fine, int) and not isinstance(ran_fine, bool) and ran_fine >= 0):
        raise KnowledgeError(f"{where}.ran_fine must be a whole number of trials (0 or more), got {ran_fine!r}",
                             "write e.g. ran_fine: 0, or leave it out")
    # `suspected` is not read: the counts say it (Lesson.suspected).
    return Lesson(dict(values), kind, dict(context), count, float(blame), str(entry.get("evidence") or ""),
                  str(entry.get("study") or ""), tuple(trials), capture, ran_fine=ran_fine)
