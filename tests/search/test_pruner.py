"""The pruner on real curves: docs/gpu-sglang-0517's trial 6 (its best) as the trial to beat, in an in-memory
Optuna study, and trials fed report by report as the probe feeds them."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.search._pruner import DEFAULT_NOISE, BehindTheBest, study_noise

DB = Path(__file__).resolve().parents[2] / "docs" / "gpu-sglang-0517" / "trials.db"


@pytest.fixture(scope="module")
def curves(tmp_path_factory) -> dict[int, dict[int, float]]:
    copy = tmp_path_factory.mktemp("db") / "trials.db"
    shutil.copyfile(DB, copy)
    with contextlib.closing(sqlite3.connect(copy)) as db:
        rows = db.execute("SELECT t.number, v.step, v.intermediate_value FROM trials t "
                          "JOIN trial_intermediate_values v ON v.trial_id = t.trial_id").fetchall()
    out: dict[int, dict[int, float]] = {}
    for number, step, value in rows:
        out.setdefault(number, {})[step] = value
    return out


def _study(best: dict[int, float], confirmations: dict | None = None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    if confirmations:
        study.set_user_attr("confirmations", confirmations)
    study.add_trial(create_trial(value=best[1000], params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
                                 intermediate_values=best, user_attrs={"feasible": True}))
    return study


def _first_stop(study: optuna.Study, curve: dict[int, float], pruner: BehindTheBest) -> int | None:
    seen: dict[int, float] = {}
    for step in sorted(curve):
        seen[step] = curve[step]
        running = create_trial(state=TrialState.RUNNING, params={"x": 0.0},
                               distributions={"x": FloatDistribution(0, 1)}, intermediate_values=dict(seen))
        if pruner.prune(study, running):
            return step
    return None


def test_a_near_winner_across_a_wave_of_prefills_is_not_stopped(curves):
    """Trial 5 was stopped at step 370 by the old rule: mid-wave, against trial 0's report at 340, before its own
    wave of prefills. At equal work it stood at 0.87 of the best."""
    assert _first_stop(_study(curves[6]), curves[5], BehindTheBest()) is None


def test_a_far_slower_trial_is_stopped_at_its_first_judged_report(curves):
    """torch_native (trial 15) ran at a twentieth of the best's speed."""
    assert _first_stop(_study(curves[6]), curves[15], BehindTheBest()) == 20


def test_the_cut_follows_the_noise(curves):
    """A trial at 0.6 of the best's pace all along: stopped at the default 3% noise (cut 0.68), kept where the
    study's own repeats spread 17% (cut 0.58)."""
    slower = {step: value * 0.6 for step, value in curves[6].items() if step < 1000}
    assert _first_stop(_study(curves[6]), slower, BehindTheBest()) == 30
    noisy = {"6": {"values": [2400.0, 2875.0, 2900.0]}}
    assert _first_stop(_study(curves[6], noisy), slower, BehindTheBest()) is None


def test_the_noise_is_the_studys_own_once_a_configuration_was_measured_three_times():
    assert study_noise({}) == DEFAULT_NOISE
    assert study_noise({"confirmations": {"6": {"values": [100.0, 110.0]}}}) == DEFAULT_NOISE  # two: too few
    three = {"6": {"values": [100.0, 110.0, 105.0]}, "0": {"values": [100.0, 101.0, 102.0]}}
    assert study_noise({"confirmations": three}) == pytest.approx(10 / 105)  # the widest
