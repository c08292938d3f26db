"""`tuner report`: a static HTML page with PNG charts of a study, for people who do not run the dashboard.

Charts: optimisation history, throughput against p99 TTFT with the Pareto front, parameter importance,
time per trial by stage (what the failed restarts cost), failure kinds. Everything is written to a
temporary folder first; the images are then moved into place and index.html last, with os.replace, so an
interrupted report never leaves a half-written page.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import os
import shlex
import shutil
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .._errors import NoEligibleTrialError, UsageError
from .._failures import FailureKind, measured
from ..search import load_study
from ..trial import slo_text
from ._export import launch_argv
from ._results import CONFIRMED_ATTR, certainty_lines, eligible, versus_baseline, winner
from ._show import failure_breakdown
from ._which_study import target_args

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
STAGES = ("launch", "readiness", "server_info", "gate", "probe", "recheck", "teardown")
STAGE_COLOURS = {"launch": "#9e9e9e", "readiness": "#4e79a7", "server_info": "#76b7b2", "gate": "#f28e2b",
                 "probe": "#59a14f", "recheck": "#edc948", "teardown": "#b07aa1"}
IMAGES = {"history": "history.png", "pareto": "pareto.png", "importance": "importance.png",
          "stages": "stages.png", "failures": "failures.png", "rates": "rates.png"}
MIN_TRIALS_FOR_IMPORTANCE = 3


@dataclass
class Chart:
    name: str
    title: str
    file: str | None = None  # None: not drawn, see note
    note: str = ""


@dataclass
class Report:
    study: optuna.Study
    trials: list[FrozenTrial]
    charts: list[Chart] = field(default_factory=list)
    where: str = ""  # --storage and --study that name the study in a suggested command (target_args)


# -- entry point --------------------------------------------------------------------------------------------

def report(storage: str, study_name: str | None, out: str | os.PathLike = "report") -> Path:
    """Write `out`/index.html and its PNG images; returns the path of index.html."""
    study = load_study(storage, study_name)
    trials = [t for t in study.get_trials(deepcopy=False) if t.state in FINISHED]
    if not trials:
        raise NoEligibleTrialError(f"study {study.study_name!r} has no finished trials to report",
                                   "run some trials first: python -m tuner run --trials N")
    plt = _pyplot()
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out, prefix=".report-"))
    except OSError as exc:
        raise UsageError(f"cannot write the report into {out}: {exc.strerror or exc}",
                         "pass --out with a folder you can write") from exc
    try:
        rep = Report(study, trials, where=shlex.join(target_args(storage, study)))
        rep.charts = [
            _history(plt, rep, tmp),
            _pareto(plt, rep, tmp),
            *_rate_curves(plt, rep, tmp),
            _importance(plt, rep, tmp),
            _stages(plt, rep, tmp),
            _failures(plt, rep, tmp),
        ]
        (tmp / "index.html").write_text(_html(rep), encoding="utf-8")
        # Images first, the page last: whatever happens, index.html is either the old page or the new one.
        for chart in rep.charts:
            if chart.file:
                os.replace(tmp / chart.file, out / chart.file)
        for name in IMAGES.values():  # an image this study no longer has must not be shown stale
            if name not in {c.file for c in rep.charts} and (out / name).exists():
                (out / name).unlink()
        os.replace(tmp / "index.html", out / "index.html")
    except OSError as exc:
        raise UsageError(f"cannot write the report into {out}: {exc.strerror or exc}"
                         + (f" ({exc.filename2 or exc.filename})" if exc.filename else ""),
                         "pass --out with a folder you can write; the previous index.html, if any, is kept") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "index.html"


def _pyplot():
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise UsageError("the report needs matplotlib, which is not installed",
                         "pip install 'tuner[report]'") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# -- what the trials say ------------------------------------------------------------------------------------

def _feasible(t: FrozenTrial) -> bool:
    """Qualified: every gate and SLO passed, and a measurement (an old record of a probe cut short is not: its
    level's requests are read from its figures, else one wave of its concurrency is the bar)."""
    return (t.user_attrs.get("feasible") is True and all(v <= 0 for v in t.constraints.values())
            and measured(t.user_attrs))


def _kind(t: FrozenTrial) -> str:
    if t.state == TrialState.FAIL:
        return t.user_attrs.get("failure_kind") or "fail"
    kind = t.user_attrs.get("failure_kind")
    if kind in (None, "none") and not measured(t.user_attrs):
        return FailureKind.PROBE_CUT.value
    if kind in (None, "none") and not _feasible(t):
        return "stopped_early" if t.user_attrs.get("stopped_early") else "not_qualified"
    return kind or "none"


def _metric(t: FrozenTrial, name: str) -> float | None:
    value = t.user_attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _objective_names(study: optuna.Study) -> list[str]:
    names = list(study.metric_names or [])
    n = len(study.directions)
    return (names + [f"objective {i}" for i in range(len(names), n)])[:n]


def _maximize(direction: optuna.study.StudyDirection) -> bool:
    return direction == optuna.study.StudyDirection.MAXIMIZE


def _seconds(t: FrozenTrial) -> dict[str, float]:
    """Wall time this trial itself spent per stage: a reused result cost no restart."""
    if t.user_attrs.get("reused_from") is not None:
        return {}
    stages = t.user_attrs.get("stage_seconds") or {}
    return {k: float(v) for k, v in stages.items() if isinstance(v, (int, float))}


def _wasted(trials: list[FrozenTrial]) -> tuple[float, float]:
    total = sum(sum(_seconds(t).values()) for t in trials)
    lost = sum(sum(_seconds(t).values()) for t in trials if not _feasible(t))
    return total, lost


# -- charts -------------------------------------------------------------------------------------------------

def _save(plt, fig, folder: Path, name: str) -> str:
    file = IMAGES[name]
    fig.tight_layout()
    fig.savefig(folder / file, dpi=110)
    plt.close(fig)
    return file


def _history(plt, rep: Report, folder: Path) -> Chart:
    study, trials = rep.study, rep.trials
    chart = Chart("history", "Optimisation history")
    names = _objective_names(study)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 3.6 * len(names)), squeeze=False)
    for i, (ax, name, direction) in enumerate(zip(axes[:, 0], names, study.directions)):
        ok = [t for t in trials if _feasible(t) and t.values is not None]
        bad = [t for t in trials if not _feasible(t)]
        ax.scatter([t.number for t in ok], [t.values[i] for t in ok], color="#4e79a7", zorder=3,
                   label="feasible trial")
        best, xs, ys = None, [], []
        better = max if _maximize(direction) else min
        for t in sorted(ok, key=lambda t: t.number):
            best = t.values[i] if best is None else better(best, t.values[i])
            xs.append(t.number)
            ys.append(best)
        if xs:
            xs.append(max(t.number for t in trials))
            ys.append(ys[-1])
            ax.step(xs, ys, where="post", color="#e15759", label="best so far")
        if bad:
            # Infeasible trials have no trustworthy value: mark where they happened, on the axis.
            ax.scatter([t.number for t in bad], [0] * len(bad), marker="x", color="#7f7f7f", zorder=3,
                       transform=ax.get_xaxis_transform(), clip_on=False,
                       label=f"did not qualify ({len(bad)})")
        ax.set_xlabel("trial")
        ax.set_ylabel(name)
        ax.set_title(f"{name} ({'maximize' if _maximize(direction) else 'minimize'})")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    chart.file = _save(plt, fig, folder, "history")
    feasible = [t for t in trials if _feasible(t)]
    chart.note = (f"{len(feasible)} of {len(trials)} finished trials qualified (passed the gate and every SLO)."
                  if feasible else "No trial qualified yet: there is no value to plot, only failures.")
    return chart


def _front_2d(points: list[tuple[FrozenTrial, float, float]]) -> list[tuple[FrozenTrial, float, float]]:
    """Non-dominated points for (throughput: higher is better, TTFT: lower is better)."""
    front = []
    for p in points:
        dominated = any(q[1] >= p[1] and q[2] <= p[2] and (q[1] > p[1] or q[2] < p[2]) for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p[2])


# Where a point's label may go, in points from it: right-above first, then the other corners.
_LABEL_OFFSETS = ((6, 4), (6, -12), (-6, 4), (-6, -12), (6, 14), (-6, -22))


def label_points(fig, ax, points: list[tuple[float, float, str]]) -> list:
    """Label each point where its label overlaps no other label; a label with no free
    place is left out (the chart's note lists every point). Returns the labels drawn."""
    fig.canvas.draw()  # the transforms and text extents need a laid-out figure
    placed, boxes = [], []
    for x, y, text in points:
        for dx, dy in _LABEL_OFFSETS:
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=8,
                                ha="left" if dx > 0 else "right")
            box = label.get_window_extent(renderer=fig.canvas.get_renderer()).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in boxes):
                placed.append(label)
                boxes.append(box)
                break
            label.remove()
    return placed


def _pareto(plt, rep: Report, folder: Path) -> Chart:
    chart = Chart("pareto", "Throughput against p99 TTFT")
    points = [(t, _metric(t, "output_throughput"), _metric(t, "p99_ttft_ms")) for t in rep.trials
              if t.user_attrs.get("reused_from") is None]
    ok = [p for p in points if _feasible(p[0]) and p[1] is not None and p[2] is not None]
    bad = [p for p in points if not _feasible(p[0]) and p[1] is not None and p[2] is not None]
    if not ok and not bad:
        chart.note = "No trial finished a throughput measurement: nothing to plot."
        return chart
    fig, ax = plt.subplots(figsize=(9, 5))
    if bad:
        ax.scatter([p[2] for p in bad], [p[1] for p in bad], marker="x", color="#bab0ac",
                   label="did not qualify (measured, then failed)")
    if ok:
        ax.scatter([p[2] for p in ok], [p[1] for p in ok], color="#4e79a7", label="feasible")
        front = _front_2d(ok)
        ax.plot([p[2] for p in front], [p[1] for p in front], "-o", color="#e15759", markersize=8,
                markerfacecolor="none", markeredgewidth=2, label=f"Pareto front ({len(front)})")
        label_points(fig, ax, [(ttft, thr, f"#{t.number}") for t, thr, ttft in front])
        chart.note = ("Pareto front (no other feasible trial is both faster and has a lower p99 TTFT): "
                      + ", ".join(f"trial {t.number} ({thr:.0f} tok/s, {ttft:.0f} ms)" for t, thr, ttft in front)
                      + ".")
    else:
        chart.note = "No feasible trial: the crosses are trials that were measured and then failed a check."
    ax.set_xlabel("p99 time to first token (ms)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_title("Throughput against p99 TTFT (up and left is better)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    chart.file = _save(plt, fig, folder, "pareto")
    return chart


def importances(study: optuna.Study, trials: list[FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    """Optuna's parameter importances for the first objective over the qualified trials, or why not."""
    ok = [t for t in trials if _feasible(t) and t.state == TrialState.COMPLETE and t.values is not None
          and t.user_attrs.get("reused_from") is None]
    name = _objective_names(study)[0]
    if len(ok) < MIN_TRIALS_FOR_IMPORTANCE:
        return None, (f"Parameter importance needs at least {MIN_TRIALS_FOR_IMPORTANCE} qualified trials with "
                      f"distinct configurations; this study has {len(ok)}.")
    varying = {k for k in {k for t in ok for k in t.params}
               if len({repr(t.params.get(k)) for t in ok}) > 1}
    if not varying:
        return None, "Every qualified trial has the same parameter values: no importance can be computed."
    # Only qualified trials count: the value of a trial that produced NaN says nothing about speed.
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        copy = optuna.create_study(direction=study.directions[0].name.lower())
    finally:
        optuna.logging.set_verbosity(verbosity)
    for t in ok:
        copy.add_trial(optuna.trial.create_trial(params=t.params, distributions=t.distributions,
                                                 value=t.values[0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = optuna.importance.get_param_importances(copy)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            return None, f"Optuna could not compute parameter importances: {exc}"
    equal = [w for w in caught if "importances will be equal" in str(w.message).lower()]
    if equal:
        return None, f"Optuna could not tell the parameters apart: {equal[0].message}"
    result = {k: float(v) for k, v in result.items() if math.isfinite(v)}
    if not result:
        return None, "Optuna returned no parameter importances for these trials."
    return result, (f"Importance of each parameter for {name}, over {len(ok)} qualified trials "
                    "(Optuna's default evaluator, PED-ANOVA).")


def _rate_curves(plt, rep: Report, folder: Path) -> list[Chart]:
    """max_rate_under_slo: attainment and p99 TTFT against each tested rate, one line per trial, the
    winner's drawn over the others. No chart for other objectives."""
    searched = [t for t in rep.trials if (t.user_attrs.get("rate_search") or {}).get("steps")
                and t.user_attrs.get("reused_from") is None]
    if not searched:
        return []
    chart = Chart("rates", "SLO attainment and p99 TTFT against request rate")
    try:
        best = winner(rep.study).trial
    except NoEligibleTrialError:
        best = None
    best_number = best.number if best is not None else None
    search = searched[0].user_attrs["rate_search"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for t in sorted(searched, key=lambda t: t.number == best_number):  # the winner last, on top
        steps = sorted((s for s in t.user_attrs["rate_search"]["steps"] if "slo_attainment" in s),
                       key=lambda s: s["rate"])
        rates = [s["rate"] for s in steps]
        style = dict(color="#e15759", linewidth=2.5, zorder=3, label=f"trial {t.number} (winner)") \
            if t.number == best_number else dict(color="#bab0ac", linewidth=1, alpha=0.7)
        top.plot(rates, [s["slo_attainment"] for s in steps], "-o", markersize=3, **style)
        bottom.plot(rates, [s.get("p99_ttft_ms", 0) for s in steps], "-o", markersize=3, **style)
    top.axhline(search["attainment_target"], color="#4e79a7", linestyle="--",
                label=f"target {search['attainment_target']:.1%}")
    if "ttft" in search["slo_ms"]:
        bottom.axhline(search["slo_ms"]["ttft"], color="#4e79a7", linestyle="--", label="TTFT SLO")
    top.set_ylabel("SLO attainment")
    top.set_title(f"SLO {slo_text(search['slo_ms'])}: each tested rate of each trial")
    bottom.set_ylabel("p99 TTFT (ms)")
    bottom.set_yscale("log")
    bottom.set_xlabel("request rate (requests/s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    chart.file = _save(plt, fig, folder, "rates")
    chart.note = (f"{len(searched)} trials searched; " + (
        f"the winner, trial {best_number}, sustained {best.user_attrs['max_rate_under_slo']:.3g} requests/s."
        if best is not None else "none met the SLO at any rate."))
    return [chart]


def _importance(plt, rep: Report, folder: Path) -> Chart:
    chart = Chart("importance", "Parameter importance")
    values, chart.note = importances(rep.study, rep.trials)
    if values is None:
        return chart
    items = sorted(values.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * len(items) + 1.2)))
    ax.barh([k for k, _ in items], [v for _, v in items], color="#4e79a7")
    for y, (_, v) in enumerate(items):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlabel("importance")
    ax.set_title(f"Parameter importance for {_objective_names(rep.study)[0]}")
    ax.grid(axis="x", alpha=0.3)
    chart.file = _save(plt, fig, folder, "importance")
    return chart


def _stages(plt, rep: Report, folder: Path) -> Chart:
    chart = Chart("stages", "Time per trial by stage")
    trials = sorted(rep.trials, key=lambda t: t.number)
    per = [(t, _seconds(t)) for t in trials]
    if not any(s for _, s in per):
        chart.note = "No trial recorded stage times."
        return chart
    names = list(STAGES) + sorted({k for _, s in per for k in s} - set(STAGES))
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(trials) + 3), 5))
    xs = list(range(len(per)))
    bottom = [0.0] * len(per)
    for name in names:
        heights = [s.get(name, 0.0) for _, s in per]
        if not any(heights):
            continue
        ax.bar(xs, heights, bottom=bottom, color=STAGE_COLOURS.get(name, "#bab0ac"), label=name, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights)]
    # Trials that did not qualify: the whole restart was spent for nothing. Outline them in red.
    for x, (t, s) in zip(xs, per):
        if not _feasible(t) and s:
            ax.bar([x], [bottom[x]], fill=False, edgecolor="#d62728", linewidth=1.8, hatch="//", width=0.8)
        elif not s and t.user_attrs.get("reused_from") is not None:
            ax.text(x, 0, "reused", rotation=90, ha="center", va="bottom", fontsize=7, color="#555555")
    ax.set_xticks(xs, [str(t.number) for t, _ in per], fontsize=7 if len(per) > 30 else 9)
    ax.set_xlabel("trial (red hatching: did not qualify)")
    ax.set_ylabel("seconds")
    total, lost = _wasted(trials)
    share = lost / total if total else 0.0
    ax.set_title(f"Time per trial by stage: {total:.0f} s in all, {lost:.0f} s ({share:.0%}) on failed restarts")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    chart.file = _save(plt, fig, folder, "stages")
    by_stage = Counter()
    for t, s in per:
        if not _feasible(t):
            by_stage.update(s)
    worst = ", ".join(f"{k} {v:.1f} s" for k, v in by_stage.most_common(3))
    chart.note = (f"{total:.1f} s spent in trials, of which {lost:.1f} s ({share:.0%}) on trials that did not "
                  "qualify" + (f" (mostly {worst})" if worst else "") + ". Reused results cost no restart.")
    return chart


def _failures(plt, rep: Report, folder: Path) -> Chart:
    from matplotlib.ticker import MaxNLocator

    chart = Chart("failures", "Failure breakdown")
    chart.note = failure_breakdown(rep.trials, cut={t.number for t in rep.trials if not measured(t.user_attrs)})
    counts = Counter(_kind(t) for t in rep.trials)
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.45 * len(counts) + 1.2)))
    items = sorted(counts.items(), key=lambda kv: (kv[0] != "none", kv[1]))
    labels = ["qualified" if k == "none" else k for k, _ in items]
    colours = ["#59a14f" if k == "none" else "#e15759" for k, _ in items]
    ax.barh(labels, [n for _, n in items], color=colours)
    for y, (_, n) in enumerate(items):
        ax.text(n, y, f" {n}", va="center", fontsize=9)
    ax.set_xlabel("trials")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Outcome of {len(rep.trials)} trials by failure kind")
    ax.grid(axis="x", alpha=0.3)
    chart.file = _save(plt, fig, folder, "failures")
    return chart


# -- the page -----------------------------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value)


def _html(rep: Report) -> str:
    study, trials = rep.study, rep.trials
    e = html.escape
    names = _objective_names(study)
    qualified = sum(1 for t in trials if _feasible(t))
    total, lost = _wasted(trials)
    confirmed = study.user_attrs.get(CONFIRMED_ATTR)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tuner report: {e(study.study_name)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}pre{background:#f7f7f7;padding:.8em;"
        "overflow-x:auto}.bad{color:#b00}.ok{color:#070}.note{color:#444}code{font-size:12px}</style>",
        "</head><body>",
        f"<h1>Study <code>{e(study.study_name)}</code></h1>",
        "<table>",
        f"<tr><th>objectives</th><td>{e(', '.join(f'{n} ({d.name.lower()})' for n, d in zip(names, study.directions)))}"
        "</td></tr>",
        # Qualified and failed, as every other screen counts them: Optuna's states (an infeasible trial is
        # "pruned" to it) said "4 pruned" of trials that show and the run call failed.
        f"<tr><th>trials</th><td>{len(trials)} finished: {qualified} qualified, {len(trials) - qualified} failed"
        "</td></tr>",
        f"<tr><th>time in trials</th><td>{total:.0f} s, of which {lost:.0f} s on trials that did not qualify</td></tr>",
        f"<tr><th>engine / version</th><td>{e(str(study.user_attrs.get('engine', '?')))} / "
        + e(str(next((t.user_attrs.get('server_version') for t in trials if t.user_attrs.get('server_version')),
                     'unknown'))) + "</td></tr>",
        f"<tr><th>made</th><td>{dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        "by <code>python -m tuner report</code></td></tr>",
        "</table>",
    ]
    parts += _winner_html(rep)
    parts.append("<h2>Charts</h2>")
    for chart in rep.charts:
        parts.append(f'<h3 id="{chart.name}">{e(chart.title)}</h3>')
        if chart.file:
            parts.append(f'<img src="{e(chart.file)}" alt="{e(chart.title)}">')
        if chart.note:
            tag = "pre" if chart.name == "failures" else "p"
            parts.append(f'<{tag} class="note">{e(chart.note)}</{tag}>')
    parts.append("<h2>Trials</h2>")
    parts.append(_trial_table(study, trials, confirmed))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _winner_html(rep: Report) -> list[str]:
    study, e = rep.study, html.escape
    try:
        best = winner(study)
    except NoEligibleTrialError:
        return ['<h2>Best configuration</h2><p class="bad">No trial passed every gate: nothing may be deployed.</p>']
    a = best.trial.user_attrs
    metric = _objective_names(study)[0]
    rate = [f"max_rate_under_slo {a['max_rate_under_slo']:.2f}"] if isinstance(a.get("max_rate_under_slo"),
                                                                               (int, float)) else []
    metrics = ", ".join(rate + [f"{k} {v:.1f}" for k, v in best.figures.items()])
    gain = versus_baseline(study, best, metric)
    out = ["<h2>Best configuration</h2>",
           f'<p class="ok">Winner: {e(best.describe(metric))}</p>',
           *(f"<p><code>{e(line.strip())}</code></p>" if line.startswith("  ") else
             f'<p class="{"bad" if line.startswith("within the noise") else "note"}">{e(line)}</p>'
             for line in certainty_lines(study, best, rep.where)),
           f"<p>{'Medians' if best.confirmed else 'Metrics'}: {e(metrics)}" + (f"; {e(gain)}" if gain else "")
           + "</p>",
           f"<p>Launched as: <code>{e(shlex.join(launch_argv(study, best.trial)))}</code></p>",
           f"<p>Gate checks passed: {e(', '.join(a.get('gate_checks', [])) or 'none run')}. "
           "Export it with <code>python -m tuner export</code>.</p>"]
    if len(study.directions) > 1:
        out.append(f"<p>{len(eligible(study))} qualified trials; the winner is the Pareto-front member with the "
                   "best first objective.</p>")
    return out


def _trial_table(study: optuna.Study, trials: list[FrozenTrial], confirmed: Any) -> str:
    e = html.escape
    names = _objective_names(study)
    head = ["trial", "outcome", *names, "p99 TTFT ms", "p99 ITL ms", "seconds", "flags"]
    rows = ["<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    for t in sorted(trials, key=lambda t: t.number):
        a = t.user_attrs
        kind = _kind(t)
        ok = _feasible(t)
        outcome = "qualified" if ok else f"failed: {kind}"
        if a.get("reused_from") is not None:
            outcome += f" (reused {a['reused_from']})"
        if confirmed == t.number:
            outcome += " ★ confirmed"
        values = [t.values[i] if ok and t.values else None for i in range(len(names))]
        flags = " ".join(f"{k}={v}" for k, v in (a.get("flags") or {}).items())
        cells = [t.number, outcome, *values, _metric(t, "p99_ttft_ms"),
                 _metric(t, "p99_itl_ms"), sum(_seconds(t).values()) or None, flags]
        cls = "ok" if ok else "bad"
        rows.append(f'<tr class="{cls}">' + "".join(
            f"<td>{e(_fmt(c))}</td>" if i != len(cells) - 1 else f"<td><code>{e(str(c))}</code></td>"
            for i, c in enumerate(cells)) + "</tr>")
    rows.append("</table>")
    return "\n".join(rows)
