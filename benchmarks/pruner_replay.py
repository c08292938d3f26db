"""Replays the recorded throughput curves of real studies through the pruner: which trials each rule stops,
and at what share of their level's work.

    python benchmarks/pruner_replay.py                       # every real study recorded in docs/
    python benchmarks/pruner_replay.py --db docs/gpu-sglang-0517/trials.db [--truth reruns.db]

Each trial's reports are fed in the order they were made, to a study holding the trials that had finished
before it (as they were recorded). Three rules:
- old: the pruner of the first real study (below 1/1.5 of the best's last report before the same step, or
  the median rule once 5 trials had finished);
- median: Optuna's median rule alone (n_startup_trials 5);
- new: tuner/search/_pruner.py as shipped (equal work, margin from the measured noise).

A trial's end figure is its own where it ran to the end, or that of the same configuration in `--truth`
(a study of reruns with `probe.prune: false`). "end/best" is that figure over the best end figure of the
trials finished before it (with `--truth`, over the rerun of that best: reruns may run on other cards);
"within noise" means end/best >= 1 - noise.

It also prints the curve floor measured on the study's completed curves: how far below its final standing a
trial looked part-way (the lowest ratio over every pair of completed trials, every report from 2% of the
level on): the constant CURVE_FLOOR of tuner/search/_pruner.py comes from it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402
from optuna.trial import TrialState, create_trial  # noqa: E402

from tuner.search._pruner import BehindTheBest, standing_at, study_noise  # noqa: E402

STATES = {"COMPLETE": TrialState.COMPLETE, "PRUNED": TrialState.PRUNED, "FAIL": TrialState.FAIL,
          "RUNNING": TrialState.RUNNING, "WAITING": TrialState.WAITING}
WARMUP = 20  # thousandths of a level not judged (the pruner's default)


@dataclass
class Recorded:
    number: int
    state: str
    value: float | None
    curve: dict[int, float]
    attrs: dict

    @property
    def config(self) -> str:
        """The launch flags, as the same configuration in another study has them."""
        return json.dumps(self.attrs.get("flags"), sort_keys=True)


@dataclass
class Verdict:
    number: int
    recorded: str
    end: float | None  # the end figure: its own, or the rerun's
    end_over_best: float | None
    stops: dict[str, int | None]  # rule -> step at which it says stop (None: never, within the curve)
    last_step: int
    last_standing: float | None


def read_study(db: Path) -> tuple[str, dict, list[Recorded]]:
    """The first study of an SQLite trials.db, read from a copy (SQLite writes beside a WAL database)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "trials.db"
        shutil.copyfile(db, copy)
        with contextlib.closing(sqlite3.connect(copy)) as c:
            study_id, name = c.execute("SELECT study_id, study_name FROM studies ORDER BY study_id").fetchone()
            study_attrs = {k: json.loads(v) for k, v in c.execute(
                "SELECT key, value_json FROM study_user_attributes WHERE study_id = ?", (study_id,))}
            trials = []
            for tid, number, state in c.execute("SELECT trial_id, number, state FROM trials WHERE study_id = ? "
                                                "ORDER BY number", (study_id,)).fetchall():
                value = c.execute("SELECT value FROM trial_values WHERE trial_id = ?", (tid,)).fetchone()
                curve = dict(c.execute("SELECT step, intermediate_value FROM trial_intermediate_values "
                                       "WHERE trial_id = ?", (tid,)))
                attrs = {k: json.loads(v) for k, v in c.execute(
                    "SELECT key, value_json FROM trial_user_attributes WHERE trial_id = ?", (tid,))}
                trials.append(Recorded(number, state, value[0] if value else None, curve, attrs))
    return name, study_attrs, trials


def _frozen(t: Recorded, state: TrialState, curve: dict[int, float]) -> optuna.trial.FrozenTrial:
    return create_trial(state=state, value=t.value if state == TrialState.COMPLETE else None,
                        params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
                        intermediate_values=curve, user_attrs=t.attrs)


class OldRule(optuna.pruners.BasePruner):
    """The pruner the first real study ran (commit c946537, tuner/_pruner.py), for comparison."""

    def __init__(self) -> None:
        self.median = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step % 1000 < WARMUP:
            return False
        value = trial.intermediate_values[step]
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))

        def at(t: optuna.trial.FrozenTrial) -> float | None:
            earlier = [s for s in t.intermediate_values if step // 1000 * 1000 <= s <= step]
            return t.intermediate_values[max(earlier)] if earlier else None

        best = max((v for t in finished if t.user_attrs.get("feasible") and (v := at(t)) is not None), default=None)
        if best is not None and value * 1.5 < best:
            return True
        return self.median.prune(study, trial)


def rules() -> dict[str, optuna.pruners.BasePruner]:
    return {"old": OldRule(), "median": optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=WARMUP),
            "new": BehindTheBest()}


def replay(study_attrs: dict, trials: list[Recorded], truth: dict[str, float]) -> list[Verdict]:
    verdicts = []
    for i, t in enumerate(trials):
        if not t.curve:
            continue
        study = optuna.create_study(direction="maximize")
        for k, v in study_attrs.items():
            study.set_user_attr(k, v)
        for earlier in trials[:i]:
            if earlier.state in ("COMPLETE", "PRUNED", "FAIL"):
                study.add_trial(_frozen(earlier, STATES[earlier.state], earlier.curve))
        stops: dict[str, int | None] = {}
        for name, rule in rules().items():
            stops[name] = None
            seen: dict[int, float] = {}
            for step in sorted(t.curve):
                seen[step] = t.curve[step]
                if rule.prune(study, _frozen(t, TrialState.RUNNING, dict(seen))):
                    stops[name] = step
                    break
        finished = [e for e in trials[:i] if e.state == "COMPLETE" and e.attrs.get("feasible") and e.value]
        best = max(finished, key=lambda e: e.value, default=None)
        end, best_end = t.value if t.state == "COMPLETE" and 1000 in t.curve else None, best.value if best else None
        if end is None and best and t.config in truth and best.config in truth:
            # Reruns may run on other cards: their figures are compared with the best's rerun only.
            end, best_end = truth[t.config], truth[best.config]
        last = max(t.curve)
        with_curve = max((e for e in finished if e.curve), key=lambda e: e.value, default=None)
        verdicts.append(Verdict(
            t.number, "completed" if t.state == "COMPLETE" else f"stopped at {last / 10:.0f}%",
            end, end / best_end if end and best_end else None, stops, last,
            standing_at(t.curve, with_curve.curve, last) if with_curve and last % 1000 else None))
    return verdicts


def curve_floor(trials: list[Recorded]) -> tuple[float | None, int]:
    """The lowest (standing at equal work) / (final standing) over every pair of completed, whole curves."""
    whole = [t for t in trials if t.state == "COMPLETE" and 1000 in t.curve and t.value
             and not t.attrs.get("reused_from")]
    lows = []
    for a in whole:
        for b in whole:
            if a is b:
                continue
            final = a.curve[1000] / b.curve[1000]
            lows += [s / final for step in a.curve if WARMUP <= step < 1000
                     if (s := standing_at(a.curve, b.curve, step)) is not None]
    return (min(lows) if lows else None), len(whole)


def _share(step: int | None) -> str:
    return "-" if step is None else f"{step % 1000 / 10:.0f}%"


def print_study(db: Path, truth_db: Path | None, out=sys.stdout) -> list[Verdict]:
    name, study_attrs, trials = read_study(db)
    truth: dict[str, float] = {}
    if truth_db:
        truth = {t.config: t.value for t in read_study(truth_db)[2] if t.state == "COMPLETE" and t.value}
    noise = study_noise(study_attrs)
    verdicts = replay(study_attrs, trials, truth)
    floor, n = curve_floor(trials)
    cut = (1 - noise) * BehindTheBest().floor
    print(f"== {name} ({db.relative_to(REPO) if db.is_relative_to(REPO) else db}): {len(trials)} trials, "
          f"{len(verdicts)} with a curve", file=out)
    print(f"noise {noise:.1%} ({'the study’s own repeats' if study_attrs.get('confirmations') else 'default'}); "
          f"the new rule stops below {cut:.3f} of the best at equal work", file=out)
    print(f"curve floor measured here: {floor:.3f} over {n} completed curves" if floor else
          "curve floor: fewer than 2 completed curves", file=out)
    print(f"{'trial':>5}  {'recorded':<16} {'end':>8} {'end/best':>9} {'at last':>8}  "
          f"{'old':>6} {'median':>7} {'new':>6}", file=out)
    for v in verdicts:
        end = f"{v.end:,.0f}" if v.end else "?"
        ratio = f"{v.end_over_best:.3f}" if v.end_over_best else "-"
        at = f"{v.last_standing:.3f}" if v.last_standing else "-"
        print(f"{v.number:>5}  {v.recorded:<16} {end:>8} {ratio:>9} {at:>8}  "
              f"{_share(v.stops['old']):>6} {_share(v.stops['median']):>7} {_share(v.stops['new']):>6}", file=out)
    print("(old, median, new: the share of the level's output tokens at which each rule says stop; - never, "
          "within the recorded curve. at last: standing at equal work at the last report, against the best "
          "finished before it)", file=out)
    for rule in ("old", "median", "new"):
        stopped = [v for v in verdicts if v.stops[rule] is not None]
        near = [v for v in stopped if v.end_over_best is not None and v.end_over_best >= 1 - noise]
        unknown = [v for v in stopped if v.end_over_best is None]
        print(f"{rule}: stops {len(stopped)} of {len(verdicts)}; within the noise of the best: "
              f"{', '.join(str(v.number) for v in near) or 'none'}; end figure unknown: "
              f"{', '.join(str(v.number) for v in unknown) or 'none'}", file=out)
    return verdicts


def recorded_studies() -> list[Path]:
    """Every real study recorded in docs/: each trials.db under it (a record may hold several studies'
    folders, as docs/gpu-sglang-0517-faults does)."""
    return sorted((REPO / "docs").rglob("trials.db"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, action="append", help="a real study's trials.db (default: every trials.db under docs/)")
    parser.add_argument("--truth", type=Path, help="a trials.db of reruns to the end (probe.prune: false)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for db in args.db or recorded_studies():
        print_study(db.resolve(), args.truth.resolve() if args.truth else None)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
