"""What the terminal shows: per trial its stage and elapsed time, its outcome, the best so far."""

from __future__ import annotations

import os
import re
import statistics
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

import optuna
from optuna.trial import TrialState

from .._failures import FailureKind, measured
from ..spec import Spec


class Progress:
    """One line per finished trial: which of how many, its outcome, the best of the whole study, the time so
    far and an estimate of the time left (the median trial time so far times the trials left)."""

    def __init__(self, spec: Spec, stream: TextIO = sys.stderr) -> None:
        self.spec = spec
        self.stream = stream
        self.live = stream.isatty()
        self._stage_started: dict[int, tuple[str, float]] = {}
        self.best: tuple[int, float] | None = None
        self.total = 0
        self.finished = 0
        self.jobs = 1
        self.seconds: list[float] = []  # of every trial that ran a server (not reused)
        self.started = time.monotonic()

    def begin(self, study: optuna.Study, total: int, jobs: int = 1) -> None:
        """Count what the study already has, so that a resumed run goes on from there."""
        self.total, self.jobs, self.started = total, jobs, time.monotonic()
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            self.finished += 1
            self._learn(t.number, t.user_attrs)

    def say(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def stage(self, number: int, stage: str) -> None:
        self._stage_started[number] = (stage, time.monotonic())
        if self.live:
            self.stream.write(f"\r\033[K  trial {number}: {stage}...")
            self.stream.flush()

    def _learn(self, number: int, attrs: dict[str, Any]) -> None:
        if attrs.get("reused_from") is None and attrs.get("total_seconds"):
            self.seconds.append(float(attrs["total_seconds"]))
        if attrs.get("feasible") and measured(attrs, self.spec.probe.requests):
            value = attrs.get(self.spec.objective.metric, 0.0)
            if self.best is None or (value > self.best[1] if self.spec.objective.direction == "maximize"
                                     else value < self.best[1]):
                self.best = (number, value)

    def trial_end(self, trial: optuna.Trial, attrs: dict[str, Any]) -> None:
        metric = self.spec.objective.metric
        self._learn(trial.number, attrs)
        if attrs.get("failure_kind") != "interrupted":
            self.finished += 1
        if attrs.get("feasible"):
            kind, text = "ok", (f"{metric}={attrs.get(metric, 0.0):.1f} p99_ttft={attrs.get('p99_ttft_ms', 0):.0f}ms "
                                f"p99_itl={attrs.get('p99_itl_ms', 0):.1f}ms")
        elif attrs.get("stopped_early"):
            kind, text = "stopped", "slower than earlier trials (pruner)"
        else:
            # Shortened at a word; `show` and the dashboard keep the whole message.
            kind, text = attrs.get("failure_kind", "none"), shorten(attrs.get("failure_message", "") or "-",
                                                                    MESSAGE_WIDTH)
        note = f"  (same as trial {attrs['reused_from']}, no restart)" if attrs.get("reused_from") is not None else ""
        tag = "baseline" if attrs.get("baseline") else ""
        best = f"best {self.best[1]:.1f} (trial {self.best[0]})" if self.best else "best -"
        self.say(progress_line(f"[{self.finished:>{len(str(self.total))}}/{self.total}]", trial.number, tag, kind,
                               text + note, f"  {attrs.get('total_seconds', 0.0):5.1f}s  {best}  {self._times()}",
                               terminal_columns(self.stream), keep=note))

    def _times(self) -> str:
        elapsed = f"{duration(time.monotonic() - self.started)} elapsed"
        left = max(0, self.total - self.finished)
        if not left or not self.seconds:
            return elapsed
        return f"{elapsed}, ~{duration(statistics.median(self.seconds) * left / self.jobs)} left"


MESSAGE_WIDTH = 56  # of a failure message in the progress line
KIND_WIDTH = max(len(kind.value) for kind in FailureKind)
MIN_MESSAGE = 24  # characters of the message worth giving up the columns' alignment for


def progress_line(counts: str, number: int, tag: str, kind: str, message: str, tail: str, columns: int | None,
                  keep: str = "") -> str:
    """One trial's line: the counts, the trial, its outcome kind and message, then `tail` (time, best, time left).

    Only the message gives way, shortened at a word so that the line fits in `columns` (None: no terminal,
    where nothing wraps; `keep`, the message's ending, stays where there is room for it); where the aligned
    columns leave it less than MIN_MESSAGE characters, the padding goes first. The counts are what a person
    scans for, and `show` and the dashboard keep the whole message. One column is left free: a line that
    fills the last one makes some terminals wrap before the next line's carriage return."""
    head = f"{counts} trial {number:>3} {tag:<8} {kind:<{KIND_WIDTH}} "
    if columns is None:
        return f"{head}{message:<{MESSAGE_WIDTH}}{tail}"
    room = columns - 1 - len(tail)
    if room - len(head) < min(len(message), MIN_MESSAGE):
        head = " ".join(filter(None, [counts, f"trial {number}", tag, kind])) + " "
    pad = min(MESSAGE_WIDTH, room - len(head))
    if len(message) > pad:
        body = message.removesuffix(keep) if keep and pad - len(keep) >= MIN_MESSAGE else message
        message = shorten(body, pad - (len(message) - len(body))) + message[len(body):]
    return f"{head}{message:<{max(0, pad)}}{tail}"


def shorten(text: str, width: int) -> str:
    """`text` on one line in at most `width` characters, cut before a word and marked " ..."; where its first
    word alone is too long, cut inside it ("..." right after)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    short = textwrap.shorten(text, width=width, placeholder=" ...") if width >= 12 else ""
    if short.strip(". "):
        return short
    return text[:max(0, width - 3)] + "..." if width >= 8 else text[:max(0, width)]


def terminal_columns(stream: TextIO) -> int | None:
    """The width that lines written to `stream` get: $COLUMNS where set (as shutil.get_terminal_size reads
    it), else the terminal's own when `stream` is one, else None. The stream's own terminal, not stdout's:
    progress goes to stderr, and `tuner run > out.txt` still shows it in the terminal."""
    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, OSError, ValueError):
        pass
    return None


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def summary(study: optuna.Study, spec: Spec, top: int = 5, dashboard: str | None = None,
            where: str = "") -> str:
    """The run's last screen: what happened, the winner (as export and show name it), what to do next.
    `where`: the --storage and --study every suggested command carries (_which_study.target_args)."""
    from .._errors import NoEligibleTrialError
    from ._results import certainty_lines, gate_lines, versus_baseline, winner

    trials = study.get_trials(deepcopy=False)
    metric = spec.objective.metric
    # A probe cut short recorded as ok (before probe_cut was a kind) is counted as what it was.
    cut = {t.number for t in trials if not measured(t.user_attrs, spec.probe.requests)}
    feasible = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible")
                and t.number not in cut]
    reverse = spec.objective.direction == "maximize"
    feasible.sort(key=lambda t: t.user_attrs.get(metric, 0.0), reverse=reverse)
    kinds = Counter(FailureKind.PROBE_CUT.value if t.number in cut else
                    t.user_attrs.get("failure_kind", t.state.name.lower()) for t in trials
                    if not t.user_attrs.get("feasible") or t.number in cut)
    spent = sum(t.user_attrs.get("total_seconds", 0.0) for t in trials)
    wasted = sum(t.user_attrs.get("total_seconds", 0.0) for t in trials
                 if not t.user_attrs.get("feasible") or t.number in cut)
    lines = [f"{len(trials)} trials: {len(feasible)} qualified; "
             + (", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "no failures"),
             f"time in trials {duration(spent)}, of which {duration(wasted)} on trials that did not qualify"]
    # Each command printed names the storage and study this run used (`where`): in this folder, the default
    # storage may hold another study, and its winner is not the one to deploy.
    at = f" {where}" if where else ""
    lines += gate_lines(study.user_attrs)
    try:
        best = winner(study)
    except NoEligibleTrialError:
        return "\n".join(lines + ["no trial qualified: nothing to export; widen the space or look at "
                                  f"'python -m tuner show{at} --failed'"])
    lines.append(f"winner: {best.describe(metric)}")
    lines += [f"  {line}" for line in certainty_lines(study, best, where)]
    gain = versus_baseline(study, best, metric)
    if gain:
        lines.append(f"  {gain}")
    carried = carried_line(trials, best.trial.number)
    if carried:
        lines.append(f"  {carried}")
    # Each row says where its trial differs from the winner, as show does. It listed every flag that varied
    # among the rows, in the space's order, and cut each row at the same width: every row ended in "+4 more",
    # the flags that told them apart cut off. A row is cut only to fit a terminal; a log keeps it whole.
    reference = best.trial
    lines.append(f"{'trial':>5}  {metric:>18}  {'p99_ttft_ms':>11}  {'p99_itl_ms':>10}  "
                 f"differs from trial {reference.number}")
    shown = feasible[:top]
    room = _room()
    for t in shown:
        differ = [f"{k}={format_value(t.params.get(k))}" for k in dict.fromkeys([*reference.params, *t.params])
                  if format_value(t.params.get(k)) != format_value(reference.params.get(k))]
        flags = "(the winner)" if t.number == reference.number else \
            fit(differ, room) if room else " ".join(differ) or "(the same flags)"
        lines.append(f"{t.number:>5}  {t.user_attrs.get(metric, 0):>18.1f}  {t.user_attrs.get('p99_ttft_ms', 0):>11.0f}"
                     f"  {t.user_attrs.get('p99_itl_ms', 0):>10.1f}  {flags}")
    steps = [] if best.confirmed else [(f"python -m tuner confirm{at} --top 3 --repeats 3",
                                        "re-measure the best on fresh servers")]
    steps += [(f"python -m tuner export{at}", "best.yaml (and the command that launches it)"),
              (f"python -m tuner report{at}", "report/index.html")]
    pad = max(len(command) for command, _ in steps)
    if dashboard:  # longer: it keeps its own width
        steps.append((dashboard, "every trial, its note and server log"))
    return "\n".join(lines + ["next:"] + [f"  {command.ljust(pad)}   # {why}" for command, why in steps])


def carried_line(trials: list, winner: int) -> str | None:
    """What the configurations carried from earlier studies (run --learn-from) took, and whether one won."""
    carried = [t for t in trials if t.user_attrs.get("learned_from")]
    if not carried:
        return None
    numbers = ", ".join(str(t.number) for t in carried)
    sources = sorted({t.user_attrs["learned_from"] for t in carried})
    won = next((t for t in carried if t.number == winner), None)
    restarts = sum(1 for t in carried if "reused_from" not in t.user_attrs  # a reused result launched nothing
                   and t.user_attrs.get("failure_kind") != FailureKind.INVALID_CONFIG.value)
    return (f"carried from {', '.join(sources)}: trial{'s' if len(carried) > 1 else ''} {numbers} ({restarts} "
            f"restart{'' if restarts == 1 else 's'}); "
            + (f"trial {won.number}, carried, is the winner" if won else "none of them is the winner"))


def _room() -> int | None:
    """Characters left for the flags of a row of the last screen (it goes to stderr) after the figures; None
    where stderr is no terminal and COLUMNS is unset (a log, a pipe): nothing is cut."""
    width = terminal_columns(sys.stderr)
    return max(30, width - 53) if width else None


def fit(items: Sequence[str], room: int) -> str:
    """The items joined by spaces, as many as fit in `room` characters, then how many more there are."""
    shown: list[str] = []
    for i, item in enumerate(items):
        rest = len(items) - i - 1
        if len(" ".join([*shown, item])) + (len(f" +{rest} more") if rest else 0) > room:
            return " ".join([*shown, f"+{len(items) - i} more"])
        shown.append(item)
    return " ".join(shown)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """Columns padded to their widest cell; a column of numbers (and "-") is right-aligned."""
    cells = [list(map(str, header))] + [[format_value(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_NUMBER.fullmatch(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if right else c.ljust(w) for c, w, right in zip(r, widths, numeric)).rstrip()
                     for r in cells)


_NUMBER = re.compile(r"-|-?[\d,]+(\.\d+)?")


def format_value(value: Any) -> str:
    if isinstance(value, float):  # also drops the float noise of stepped parameters (0.9000000000000001)
        return f"{value:.4g}" if abs(value) < 100 else f"{value:.1f}"
    return "-" if value is None else str(value)
