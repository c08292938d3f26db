"""`tuner confirm`: re-launch the best K configurations R times each and rank them by the median.

One lucky measurement must not pick the winner: every re-measurement is a fresh server, and a
candidate that fails the gate in any of them is out.
How sure the ranking is (tuner/results/_certainty.py) is stored with the confirmations, for every screen to say.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import TextIO

import optuna

from .._errors import NoEligibleTrialError, UsageError
from .._server_python import resolve_python, with_python
from ..engines import get_engine
from ..search import load_study
from ..spec import ServerConfig, parse_spec
from ..trial import TrialContext, TrialPlan, free_port, model_tokens, run_trial
from ..versions import SIM_SPEED
from ._certainty import compare
from ._progress import duration
from ._results import (CONFIRMATIONS_ATTR, CONFIRMED_ATTR, FIGURES, VERSUS_ATTR, certainty_lines, distinct_ranked,
                       eligible, winner)
from ._which_study import target_args


@dataclass(frozen=True)
class Confirmation:
    number: int
    values: tuple[float, ...]
    failures: tuple[str, ...]
    figures: tuple[dict[str, float], ...] = ()  # FIGURES of each run that qualified

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median: how much one measurement can be trusted."""
        if len(self.values) < 2 or not self.median:
            return 0.0
        return (max(self.values) - min(self.values)) / self.median


def confirm(storage: str, study_name: str | None, top: int, repeats: int, workdir: str = "runs",
            stream=sys.stderr, trials: Sequence[int] = (), server_python: str | None = None) -> list[Confirmation]:
    """Re-measure the `top` best distinct configurations, or the eligible trials numbered `trials`.
    `server_python`: the Python that runs the server's `-m MODULE` instead of the one the study's run used."""
    if top < 1 or repeats < 1:
        raise UsageError("--top and --repeats must be at least 1", "pass e.g. --top 3 --repeats 3")
    python = resolve_python(server_python)
    study = load_study(storage, study_name)
    if len(study.directions) > 1:
        raise UsageError("confirm ranks one objective; this study has two", "export a chosen trial with --trial N")
    candidates = eligible(study)
    if not candidates:
        raise NoEligibleTrialError(f"study {study.study_name!r} has no trial that passed every gate",
                                   "run more trials first")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    if trials:
        by_number = {t.number: t for t in candidates}
        if missing := [n for n in trials if n not in by_number]:
            raise NoEligibleTrialError(
                f"trial(s) {', '.join(map(str, missing))} cannot be confirmed (not COMPLETE, or failed a gate or SLO)",
                f"choose among: {', '.join(str(t.number) for t in distinct_ranked(study)[:20])}")
        candidates = [by_number[n] for n in dict.fromkeys(trials)]
    else:
        candidates = distinct_ranked(study)[:top]
    spec = parse_spec(study.user_attrs["space_source"], "<stored space>", recorded=True)
    command = with_python(study.user_attrs.get("server_command") or get_engine(spec.engine).default_command, python)
    env = {**os.environ, **spec.server.env}
    if study.user_attrs.get("simulate"):
        env["TUNER_SIM_PROFILE"] = study.user_attrs["simulate"]
        for name, value in SIM_SPEED.items():
            env.setdefault(name, value)
    # The same prompts as the study's trials: lengths in the model's tokens where its tokenizer is there.
    ctx = TrialContext(spec, get_engine(spec.engine), command, base_env=env, tokens=model_tokens(spec)[0])
    metric = spec.objective.metric
    results = []
    progress = _Progress(len(candidates) * repeats, stream)
    print(f"confirm: trials {', '.join(str(t.number) for t in candidates)} on {repeats} fresh server(s) each, "
          f"{progress.total} in all", file=stream)
    for t in candidates:
        values, failures, figures = [], [], []
        config = ServerConfig(t.user_attrs["flags"], t.user_attrs.get("env", {}))
        for r in range(repeats):
            folder = Path(workdir) / study.study_name / f"confirm-{t.number}-{r}"
            started = time.monotonic()
            result = run_trial(ctx, TrialPlan(t.number, config, folder, free_port(spec.server.host),
                                              reference=study.user_attrs.get("reference")))
            if result.ok:
                # max_rate_under_slo: run_trial searched the rate again on the fresh server.
                values.append(result.probe.value(metric, spec.objective.concurrency))
                if any(m.rate is None for m in result.probe.levels):  # a closed-loop level to report
                    level = result.probe.level(spec.objective.concurrency)
                    figures.append({name: level.metric(name) for name in FIGURES})
            else:
                failures.append(result.failure.kind.value if result.failure else "stopped")
            progress.server_end(f"trial {t.number:>3} repeat {r + 1}/{repeats}: "
                                + (f"{values[-1]:.1f}" if result.ok else failures[-1]), time.monotonic() - started)
        results.append(Confirmation(t.number, tuple(values), tuple(failures), tuple(figures)))
    qualified = [c for c in results if not c.failures and c.values]
    qualified.sort(key=lambda c: c.median, reverse=maximize)
    # How sure the winner is to beat each other qualified candidate, stored with that candidate's runs.
    versus = {c.number: compare(qualified[0].values, c.values, maximize).to_attr() for c in qualified[1:]}
    study.set_user_attr(CONFIRMATIONS_ATTR, {
        str(c.number): {"values": list(c.values), "failures": list(c.failures),
                        "median": c.median if c.values else None,
                        "figures": {name: statistics.median(f[name] for f in c.figures) for name in FIGURES}
                        if c.figures else {},
                        **({VERSUS_ATTR: versus[c.number]} if c.number in versus else {})}
        for c in results})
    if not qualified:
        raise NoEligibleTrialError("no candidate passed every re-measurement", "inspect them with 'tuner show'")
    study.set_user_attr(CONFIRMED_ATTR, qualified[0].number)
    print(f"{'trial':>5}  {'first run':>10}  {'median':>10}  {'spread':>7}  runs", file=stream)
    first = {t.number: t.value for t in candidates}
    for c in sorted(results, key=lambda c: (bool(c.failures), -c.median if maximize else c.median)):
        runs = ", ".join(f"{v:.1f}" for v in c.values) + (f" failed: {', '.join(c.failures)}" if c.failures else "")
        print(f"{c.number:>5}  {first[c.number]:>10.1f}  {c.median:>10.1f}  {c.spread:>6.1%}  {runs}", file=stream)
    best = winner(study)
    print(f"winner: {best.describe(metric)}", file=stream)
    where = shlex.join(target_args(storage, study, workdir))  # this study, not another: every suggested command
    for line in certainty_lines(study, best, where):
        print(f"  {line}", file=stream)
    print(f"confirm took {duration(time.monotonic() - progress.started)} for {progress.total} server(s)", file=stream)
    at = f" {where}" if where else ""
    print(f"next: python -m tuner export{at} (writes it with these medians), python -m tuner report{at}", file=stream)
    return results


class _Progress:
    """One line per fresh server, as `run` prints one per trial: which of how many, its outcome, the time so far
    and an estimate of the time left (the median server time so far times the servers left)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.done = 0
        self.seconds: list[float] = []
        self.started = time.monotonic()

    def server_end(self, outcome: str, seconds: float) -> None:
        self.done += 1
        self.seconds.append(seconds)
        left = self.total - self.done
        times = f"{duration(time.monotonic() - self.started)} elapsed"
        if left:
            times += f", ~{duration(statistics.median(self.seconds) * left)} left"
        print(f"[{self.done:>{len(str(self.total))}}/{self.total}] {outcome:<40} {seconds:5.1f}s  {times}",
              file=self.stream, flush=True)
