"""`python -m tuner twin fit`: fit a simulator profile's calibrated figures to a real study, write it, judge it."""

from __future__ import annotations

import datetime
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .._errors import UsageError
from ..sim import ProfileError, load_profile
from ._fidelity import METRIC, BadInput, compare, parse_range, report, study_spec, workload_of
from ._fit import Fitted, Kept, spans
from ._fit_memory import fit_memory
from ._fit_probe import choose_launch
from ._fit_speed import fit_speed
from ._fit_startup import fit_startup
from ._logs import LogsError, read_logs
from ._study import load_storage, trials_in
from ._write import render, write


@dataclass(frozen=True)
class FitOptions:
    storage: str
    study: str | None
    logs: str
    profile: str
    out: str
    trials: str = "0-"
    held_out: str | None = None  # default: the trials after --trials
    jit_starts: tuple[int, ...] = ()
    argv: tuple[str, ...] = ()  # the command line, for the header


def fit_command(opts: FitOptions) -> int:
    try:
        span = parse_range(opts.trials, "--trials")
        held = parse_range(opts.held_out, "--held-out") if opts.held_out else (
            (span[1] + 1, None) if span[1] is not None else None)
        try:
            base = load_profile(opts.profile)
        except ProfileError as exc:
            raise BadInput(f"--profile: {exc}") from None
        study = load_storage(opts.storage, opts.study)
        spec = study_spec(study)
        if spec.objective.metric != METRIC:
            raise BadInput(f"study {study.name!r} maximises {spec.objective.metric}; the twin predicts {METRIC} only")
        logs = read_logs(Path(opts.logs))
        trials = trials_in(study, span, base, logs, set(opts.jit_starts), f"--trials {opts.trials}")
        if not any(t.log for t in trials):
            raise BadInput(f"--logs {opts.logs}: holds no server log of trials {opts.trials}; give the study's logs")
    except (BadInput, LogsError) as exc:
        raise UsageError(str(exc)) from None

    work = workload_of(spec, study.trials)
    profile, results = base, []
    for fit in (fit_memory, fit_speed, fit_startup):
        profile, found = fit(profile, trials)
        results += found
    at = next(i for i, r in enumerate(results) if r.key == "kernel_launch_us")
    profile, results[at] = choose_launch(profile, results[at], trials, work)

    fitted = [r for r in results if isinstance(r, Fitted)]
    header = _header(opts, study.name, trials, base.name)
    write(Path(opts.out), render(Path(base.source).read_text(), fitted, header))
    _table(fitted, [r for r in results if isinstance(r, Kept)])
    print(f"wrote {opts.out}")

    if held is None:
        print("no trial held out (--trials reaches the study's end): nothing to judge the fit on")
        return 0
    title = f"held-out trials {opts.held_out or f'{held[0]}-'} (not fitted on)"
    rows = compare(study.trials, held, spec, load_profile(opts.out), work)
    if rows:
        report(title, rows)
    else:
        print(f"\n== {title} ==\nno trial of the study is in this range: nothing to judge the fit on")
    return 0


def _header(opts: FitOptions, study: str, trials: list, base: str) -> list[str]:
    jit = sorted(t.number for t in trials if t.jit)
    text = (f"Fitted {datetime.date.today().isoformat()} on trials {spans(t.number for t in trials)} of study "
            f"{study!r} ({opts.storage}) and their server logs ({opts.logs}), from the profile {base}. A figure "
            "with a \"fitted:\" comment comes from the trials it names; every other figure is the base's. "
            + (f"Start-up fits leave out the first starts that compiled kernels (JIT): trials {spans(jit)}." if jit
               else "No start was marked as compiling kernels (--jit-starts)."))
    words = ["python", "-m", "tuner", "twin", "fit", *opts.argv]
    command, line = [], "  "
    for i, word in enumerate(words):
        piece = shlex.quote(word)
        if word.startswith("--") and len(line) + len(piece) + len(shlex.quote(words[min(i + 1, len(words) - 1)])) > 100:
            command.append(line + "\\")
            line = "      "
        line += piece + " "
    return textwrap.wrap(text, 110, break_on_hyphens=False, break_long_words=False) + [*command, line.rstrip()]


def _table(fitted: list[Fitted], kept: list[Kept]) -> None:
    print(f"{'figure':<46} {'fitted':>10} {'base':>10}  trials (n)")
    for f in fitted:
        base = "-" if f.base is None else f"{f.base:g}"
        print(f"{f.section + '.' + f.key:<46} {f.value:>10g} {base:>10}  {spans(f.trials)} (n={f.n}; {f.residual})")
    for k in kept:
        print(f"{k.section + '.' + k.key:<46} {'kept':>10} {'':>10}  {k.why}")
