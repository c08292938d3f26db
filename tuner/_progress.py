"""What the terminal shows: per trial its stage and elapsed time, its outcome, the best so far."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

import optuna
from optuna.trial import TrialState

from ._spec import Spec


class Progress:
    def __init__(self, spec: Spec, stream: TextIO = sys.stderr) -> None:
        self.spec = spec
        self.stream = stream
        self.live = stream.isatty()
        self._stage_started: dict[int, tuple[str, float]] = {}
        self.best: tuple[int, float] | None = None

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

    def trial_end(self, trial: optuna.Trial, attrs: dict[str, Any]) -> None:
        metric = self.spec.objective.metric
        kind = attrs.get("failure_kind", "none")
        tag = "baseline" if attrs.get("baseline") else ""
        seconds = attrs.get("total_seconds", 0.0)
        if attrs.get("feasible"):
            value = attrs.get(metric, 0.0)
            better = self.best is None or (value > self.best[1] if self.spec.objective.direction == "maximize"
                                           else value < self.best[1])
            if better:
                self.best = (trial.number, value)
            outcome = (f"ok        {metric}={value:.1f}  p99_ttft={attrs.get('p99_ttft_ms', 0):.0f}ms "
                       f"p99_itl={attrs.get('p99_itl_ms', 0):.1f}ms")
        elif attrs.get("stopped_early"):
            outcome = "stopped   slower than earlier trials (pruner)"
        else:
            outcome = f"{kind:<9} {attrs.get('failure_message', '')[:90]}"
        if attrs.get("reused_from") is not None:
            outcome += f"  (reused trial {attrs['reused_from']}, no restart)"
        best = f"best {self.best[1]:.1f} (trial {self.best[0]})" if self.best else "best -"
        self.say(f"trial {trial.number:>3} {tag:<8} {outcome:<100.100} {seconds:6.1f}s  {best}")


def summary(study: optuna.Study, spec: Spec, top: int = 5) -> str:
    trials = study.get_trials(deepcopy=False)
    metric = spec.objective.metric
    feasible = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible")]
    reverse = spec.objective.direction == "maximize"
    feasible.sort(key=lambda t: t.user_attrs.get(metric, 0.0), reverse=reverse)
    kinds = Counter(t.user_attrs.get("failure_kind", t.state.name.lower()) for t in trials
                    if not t.user_attrs.get("feasible"))
    spent = sum(t.user_attrs.get("total_seconds", 0.0) for t in trials)
    wasted = sum(t.user_attrs.get("total_seconds", 0.0) for t in trials if not t.user_attrs.get("feasible"))
    lines = [f"{len(trials)} trials: {len(feasible)} feasible; "
             + (", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "no failures"),
             f"time in trials {spent:.0f} s, of which {wasted:.0f} s on trials that did not qualify"]
    if feasible:
        lines.append(f"{'trial':>5}  {metric:>18}  {'p99_ttft_ms':>11}  {'p99_itl_ms':>10}  flags")
        for t in feasible[:top]:
            flags = " ".join(f"{k}={format_value(v)}" for k, v in t.params.items())
            lines.append(f"{t.number:>5}  {t.user_attrs.get(metric, 0):>18.1f}  {t.user_attrs.get('p99_ttft_ms', 0):>11.0f}"
                         f"  {t.user_attrs.get('p99_itl_ms', 0):>10.1f}  {flags}")
    return "\n".join(lines)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [[format_value(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def format_value(value: Any) -> str:
    if isinstance(value, float):  # also drops the float noise of stepped parameters (0.9000000000000001)
        return f"{value:.4g}" if abs(value) < 100 else f"{value:.1f}"
    return "-" if value is None else str(value)
