"""benchmarks/pruner_replay.py on every real study recorded in docs/: the shipped pruner, fed the recorded
curves, stops no trial whose end figure is within the noise of the best, and stops the configurations that were
far behind early in their level.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import pruner_replay  # noqa: E402

from tuner.search._pruner import CURVE_FLOOR  # noqa: E402

STUDIES = pruner_replay.recorded_studies()


def test_every_recorded_study_is_replayed_and_printed():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "pruner_replay.py")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert STUDIES, "no real study in docs/**/trials.db"
    assert done.stdout.count("== ") == len(STUDIES)
    for rule in ("old", "median", "new"):
        assert re.search(rf"^{rule}: stops \d+ of \d+; within the noise of the best: ", done.stdout, re.M)


@pytest.mark.parametrize("db", STUDIES, ids=lambda p: str(p.parent.relative_to(REPO / "docs")))
def test_the_shipped_pruner_stops_no_trial_within_the_noise(db):
    _, attrs, trials = pruner_replay.read_study(db)
    noise = pruner_replay.study_noise(attrs)
    for v in pruner_replay.replay(attrs, trials, {}):
        if v.end_over_best is not None and v.end_over_best >= 1 - noise:
            assert v.stops["new"] is None, f"trial {v.number} ended at {v.end_over_best:.3f} of the best"


@pytest.mark.parametrize("db", STUDIES, ids=lambda p: str(p.parent.relative_to(REPO / "docs")))
def test_the_curve_floor_holds_on_every_recorded_study(db):
    """CURVE_FLOOR was measured on these curves: a study whose curves fall lower needs a new constant."""
    floor, _ = pruner_replay.curve_floor(pruner_replay.read_study(db)[2])
    assert floor is None or floor >= CURVE_FLOOR


def test_far_behind_configurations_are_stopped_in_the_first_third():
    """docs/gpu-sglang-0517: torch_native (trials 12, 15, 27) ran at a twentieth of flashinfer's speed."""
    _, attrs, trials = pruner_replay.read_study(REPO / "docs" / "gpu-sglang-0517" / "trials.db")
    stops = {v.number: v.stops for v in pruner_replay.replay(attrs, trials, {})}
    for number in (12, 15, 27):
        assert stops[number]["new"] is not None and stops[number]["new"] % 1000 <= 333, stops[number]
    # What the first study's rules did: its near-winner trial 26 (0.97 of the best) was stopped by both.
    assert stops[26]["old"] is not None and stops[26]["median"] is not None and stops[26]["new"] is None
