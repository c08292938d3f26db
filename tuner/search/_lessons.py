"""What a study's failures blame: one analysis for every screen that explains them.

`tuner show` (and the report) lists the values each failure kind blames; `knowledge export` writes the ones that
carry to later studies. Both take them from `blame_failures`, so they tell one story. The blame is the sampler's
own (tuner/search/_blame.py, `Shown.blames`, which `RunOdds` in tuner/search/_tpe.py learns from), not a
correlation computed for display: it is what the search avoids from then on and what a later study is told, so a
screen that explained failures otherwise would explain a search that did not happen. (A value frequent among
failures may also have run fine elsewhere; the sampler does not blame it, and neither does a screen.)

A lesson is a suspect that explains some failures: a value that never ran (`attention-backend: nsa`), an ordered
value beyond every one that ran (`cuda-graph-max-bs: {at-least: 96}`), or a pair (a choice with an ordered value
beyond every one it ran with). Each keeps the failure kind, the failures it explains (count, blame, trials), how
many trials ran fine with it, and the first failure's message. A failure that blames nothing in particular (every
value in it ran elsewhere) is left unexplained. A lesson that fewer than SURE_AFTER failures point at alone, or
that some trial ran fine with, reads as a suspicion ("may hang at start"), not as a fact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from .._failures import KERNEL, MEMORY, FailureKind, carries_trial, failed_capturing
from ._context import ENGINE_NAMES
from ._blame import AT, UP, Blame, Shown, captures_graphs, is_number, violation

AT_LEAST, AT_MOST = "at-least", "at-most"
# Failed trials that must point at a lesson alone (no other suspect in them) before it reads as a fact: one
# failure cannot tell its cause from what merely came with it (a timeout at one batch size may be the machine).
SURE_AFTER = 2
# How a failure kind reads: as a fact, and as a suspicion.
_KIND_READS = {
    FailureKind.NAN: ("gives NaN", "may give NaN"),
    FailureKind.GARBAGE: ("gives garbage", "may give garbage"),
    FailureKind.WRONG_ANSWER: ("answers wrongly", "may answer wrongly"),
    FailureKind.INCONSISTENT_LOGPROBS: ("gives inconsistent logprobs", "may give inconsistent logprobs"),
    FailureKind.CRASH_ON_START: ("crashes at start", "may crash at start"),
    FailureKind.GRAPH_CAPTURE_FAILED: ("fails CUDA graph capture", "may fail CUDA graph capture"),
    FailureKind.HANG: ("hangs", "may hang"),
    FailureKind.CRASH_UNDER_LOAD: ("crashes under load", "may crash under load"),
    FailureKind.OOM: ("runs out of memory", "may run out of memory"),
    FailureKind.STARTUP_TIMEOUT: ("hangs at start", "may hang at start"),
    FailureKind.ERRORS_UNDER_LOAD: ("fails requests under load", "may fail requests under load"),
    FailureKind.SLO_VIOLATION: ("misses the SLO", "may miss the SLO"),
    FailureKind.SLO_UNREACHABLE: ("meets the SLO at no rate", "may meet the SLO at no rate"),
    FailureKind.PROBE_CUT: ("is too slow for the probe's time budget", "may be too slow for the probe's time budget"),
}


@dataclass(frozen=True)
class Lesson:
    """Values that failed in a study, and how (one entry of a knowledge file, one line of `show`)."""

    values: Mapping[str, Any]  # flag: value; an ordered flag's range as {at-least: V} or {at-most: V}
    kind: FailureKind
    context: Mapping[str, Any]  # the study's context attr: engine, gpus, model
    count: int = 1  # failed trials it took part in
    blame: float = 1.0  # failures' worth: values that only ever failed together share theirs
    evidence: str = ""  # the first failure's message
    study: str = ""
    trials: tuple[int, ...] = ()
    capture: bool = False  # learnt from a failed CUDA graph capture: speaks only of configurations that capture
    scaled_from: Mapping[str, Any] | None = None  # the values as learnt, where a warm start moved them (_warm.py)
    ran_fine: int | None = None  # trials of its study that ran and passed with these values; None: not known

    @property
    def carries(self) -> str | None:
        """KERNEL or MEMORY (FailureKind.carries); a capture that hung is a kernel's failure."""
        return KERNEL if self.capture and self.kind != FailureKind.OOM else self.kind.carries

    @property
    def suspected(self) -> bool:
        """Whether the evidence is thin: fewer than SURE_AFTER failures, blame shared with values that failed with
        it each time, or a trial that ran fine with it. The warm start weighs a lesson by its blame either way."""
        return self.count < SURE_AFTER or self.blame < self.count - 1e-9 or bool(self.ran_fine)

    def matches(self, params: Mapping[str, Any]) -> bool:
        """Whether a configuration has these values (and, for a capture lesson, captures CUDA graphs)."""
        if self.capture and not captures_graphs(params):
            return False
        return all(name in params and _within(params[name], want) for name, want in self.values.items())

    def reads_values(self) -> str:
        """'nsa-decode-backend: flashmla_sparse', 'cuda-graph-max-bs: >= 96'."""
        return ", ".join(f"{name}: {_value_text(v)}" for name, v in self.values.items())

    def says(self) -> str:
        """The values and what they do, without where: '`cuda-graph-max-bs: >= 96` may run out of memory'."""
        verb = _KIND_READS.get(self.kind, (f"fails ({self.kind.value})", f"may fail ({self.kind.value})"))[
            self.suspected]
        if self.capture and self.kind != FailureKind.GRAPH_CAPTURE_FAILED:
            verb += " capturing CUDA graphs"
        return f"`{self.reads_values()}` {verb}"

    def counted(self) -> str:
        """The evidence, counted: '(1 failed trial: 7; none ran fine with it)', '(3 failed trials: 2, 3, 4)'."""
        text = f"{self.count} failed trial{'' if self.count == 1 else 's'}"
        if self.trials:
            text += ": " + ", ".join(map(str, self.trials))
        others = round(self.count / self.blame) - 1 if self.blame > 0 else 0
        if others > 0:  # values that failed together each time: any of them may be the cause
            text += f", blamed with {others} other value{'' if others == 1 else 's'}"
        if self.ran_fine is not None:
            text += "; " + ("none ran fine with it" if not self.ran_fine
                            else f"{self.ran_fine} ran fine with it")
        return f"({text})"

    def reads(self) -> str:
        """What it says, as it carries, with its evidence: '`nsa-decode-backend: flashmla_sparse` gives NaN on SM120
        with SGLang 0.5.6 (2 failed trials: 2, 3)', '`cuda-graph-max-bs: >= 96` may run out of memory with GLM-5
        (744B) on 8x 95.6 GB, SGLang 0.5.6 (1 failed trial: 4)'."""
        says = self.says()
        engine, gpus, model = (self.context.get(k) or {} for k in ("engine", "gpus", "model"))
        version = f"{ENGINE_NAMES.get(engine.get('name'), engine.get('name'))} {engine.get('version') or '?'}"
        if self.carries != MEMORY:
            arch = str(gpus.get("compute_capability") or "").replace(".", "")
            return f"{says}" + (f" on SM{arch}" if arch else "") + f" with {version} {self.counted()}"
        size = f" ({model['params_b']:g}B)" if model.get("params_b") else ""
        memory = f" on {gpus['count']}x {gpus['memory_gb']:g} GB" if gpus.get("count") and gpus.get("memory_gb") else ""
        who = f"{model.get('name') or 'a model'}{size}{memory}, {version}"
        if self.scaled_from is None:
            return f"{says} with {who} {self.counted()}"
        learnt = ", ".join(f"{name}: {_value_text(v)}" for name, v in self.scaled_from.items())
        return f"{says} here, as `{learnt}` did with {who} {self.counted()}"

    def to_entry(self) -> dict[str, Any]:
        """The knowledge file's entry. `suspected` and `ran_fine` are for people and newer readers: older ones skip
        them, and this one derives `suspected` again from the counts."""
        entry: dict[str, Any] = {"reads": self.reads(), "values": dict(self.values), "kind": self.kind.value}
        if self.capture:
            entry["capture"] = True
        if self.suspected:
            entry["suspected"] = True
        entry.update(count=self.count, blame=round(self.blame, 3))
        if self.ran_fine is not None:
            entry["ran_fine"] = self.ran_fine
        entry.update(evidence=self.evidence, study=self.study, trials=list(self.trials), context=dict(self.context))
        return entry


@dataclass(frozen=True)
class Blamed:
    """What a study's failures blame: its lessons, and the failures that blame nothing in particular."""

    lessons: tuple[Lesson, ...]
    unexplained: tuple[int, ...]  # failed trials each of whose values ran fine elsewhere


def blame_failures(trials: Sequence[FrozenTrial], context: Mapping[str, Any] | None = None,
                   study: str = "") -> Blamed:
    """The lessons of a study's failures, carried or not (`Lesson.carries`), and what each failure blamed nothing
    in: `show` lists them all, `knowledge export` writes those that carry. `context`: the study's, kept in each
    lesson (only the file needs it)."""
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                and t.user_attrs.get("reused_from") is None]  # a reused result is its first trial's, once
    failures, unexplained = _suspects(finished)
    # Carried failures are explained among themselves: a timeout or a missed SLO, which say more of the workload
    # than of the flags, must not decide which value a kernel's lesson names, nor what a later study is told.
    carried = [f for f in failures if carries_trial(f[0].user_attrs) is not None]
    rest = [f for f in failures if carries_trial(f[0].user_attrs) is None]
    ran = [t for t in finished if violation(t) <= 0 and t.user_attrs.get("failure_kind") != FailureKind.INVALID_CONFIG]
    lessons = [_with_runs(Lesson(e["values"], e["kind"], dict(context or {}), e["count"], e["blame"], e["evidence"],
                                 study, tuple(e["trials"]), e["capture"]), ran)
               for e in [*_cover(carried), *_cover(rest)]]
    lessons.sort(key=lambda lesson: (lesson.kind.value, -lesson.blame, json.dumps(lesson.values, default=str)))
    return Blamed(tuple(lessons), tuple(sorted(unexplained)))


def _with_runs(lesson: Lesson, ran: Sequence[FrozenTrial]) -> Lesson:
    """The lesson with the trials that ran fine with its values counted (where it applies: a capture lesson only
    to configurations that capture)."""
    return replace(lesson, ran_fine=sum(lesson.matches(t.params) for t in ran))


def _cover(failures: Sequence[tuple[FrozenTrial, bool, dict[str, tuple[dict, float]]]]) -> list[dict[str, Any]]:
    """The values that explain the failures. Where several failed together, the one among the most failures still
    unexplained takes them all (failing in other company too is what singles it out: `nsa` failed with every
    decode backend and with graphs on and off, graphs off only with `nsa`); suspects that only ever failed together
    share them."""
    merged: dict[tuple[str, str, bool], dict[str, Any]] = {}
    unexplained = set(range(len(failures)))
    while unexplained:
        covers: dict[str, set[int]] = {}
        for i in unexplained:
            for key in failures[i][2]:
                covers.setdefault(key, set()).add(i)
        best = max(sorted(covers), key=lambda k: (len(covers[k]), sum(failures[i][2][k][1] for i in covers[k])))
        group = [k for k in sorted(covers) if covers[k] == covers[best]]
        for i in sorted(covers[best]):
            t, is_capture, suspects = failures[i]
            kind = t.user_attrs["failure_kind"]
            for key in group:
                entry = merged.setdefault((key, kind, is_capture), {
                    "values": suspects[key][0], "kind": FailureKind(kind), "capture": is_capture, "count": 0,
                    "blame": 0.0, "trials": [], "evidence": _evidence(t)})
                entry["count"] += 1
                entry["blame"] += 1.0 / len(group)
                entry["trials"].append(t.number)
        unexplained -= covers[best]
    return list(merged.values())


def _suspects(finished: Sequence[FrozenTrial]
              ) -> tuple[list[tuple[FrozenTrial, bool, dict[str, tuple[dict, float]]]], list[int]]:
    """Each failure the sampler blames, whether it is a capture's, and its suspects: {key: (values, sampler's
    blame)}; and the failures with none. As GraphAwareOdds splits them, a failed capture speaks only of
    configurations that capture graphs and is judged against the trials that captured and ran; every other
    failure against every trial that ran."""
    capture_failed = [failed_capturing(t.user_attrs) for t in finished]
    general = Shown.of([t for t, failed in zip(finished, capture_failed) if not failed])
    capture = Shown.of([t for t, failed in zip(finished, capture_failed)
                        if failed or (violation(t) <= 0 and captures_graphs(t.params))])
    failures, unexplained = [], []
    for shown, is_capture in ((general, False), (capture, True)):
        for t in shown.failed:
            if not _blames_config(t):
                continue
            suspects: dict[str, tuple[dict, float]] = {}
            for b in shown.blames(t):
                if not b.shared:  # `shared`: every value of the trial ran elsewhere, nothing singled out
                    values = _blamed_values(b, t)
                    key = json.dumps(values, sort_keys=True, default=str)
                    suspects[key] = (values, suspects.get(key, (values, 0.0))[1] + b.weight)
            if suspects:
                failures.append((t, is_capture, suspects))
            else:
                unexplained.append(t.number)
    return failures, unexplained


def _blames_config(t: FrozenTrial) -> bool:
    """A failure of the configuration's own (not an interrupted run, a dead worker, a client too slow)."""
    try:
        return FailureKind(t.user_attrs.get("failure_kind")).blames_config
    except ValueError:
        return False


def _blamed_values(b: Blame, t: FrozenTrial) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if b.choice is not None:
        name, (_, value) = b.choice
        values[name] = value
    if b.ordered is not None:
        name, _, side = b.ordered
        value = _tidy(t.params[name])  # as the trial had it (an int stays an int)
        values[name] = value if side == AT else {AT_LEAST if side == UP else AT_MOST: value}
    return values


def _tidy(value: Any) -> Any:
    """A float without the noise of a step grid (1.4000000000000001 -> 1.4)."""
    return round(value, 10) if isinstance(value, float) else value


def _evidence(t: FrozenTrial) -> str:
    message = str(t.user_attrs.get("failure_message") or "").strip()
    line = message.splitlines()[0] if message else ""
    return line[:300]


def _within(value: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if not is_number(value):
            return False
        bound = want.get(AT_LEAST, want.get(AT_MOST))
        return value >= bound if AT_LEAST in want else value <= bound
    if isinstance(want, bool) or isinstance(value, bool):  # True is not 1: a switch is not a size
        return value is want
    return value == want


def _value_text(value: Any) -> str:
    if isinstance(value, Mapping):
        ((side, bound),) = value.items()
        return f"{'>=' if side == AT_LEAST else '<='} {bound}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
