"""What a study expects of a configuration's start-up (tuner/search/_startup.py), from trials as Optuna stores them."""

from __future__ import annotations

from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.search._startup import estimate

DIST = {"attention-backend": CategoricalDistribution(["triton", "flashinfer"]),
        "page-size": CategoricalDistribution([1, 16])}


def _started(number: int, readiness: float, first: bool, **params):
    attrs = {"stage_seconds": {"readiness": readiness}, "config_key": f"k{number}", "feasible": True,
             **({"first_start": True} if first else {})}
    trial = create_trial(state=TrialState.COMPLETE, value=1.0, params=params, distributions=DIST, user_attrs=attrs)
    trial.number = number
    return trial


def test_a_runs_first_start_is_no_guide_to_a_later_one():
    """The lent H200's call (docs/gpu-sglang-0517-gate): trial 0, the run's first server, started in 130 s, 101 s
    of it first-use compiles; trial 1, one flag away, was not started for it, and trial 2 then started in 40 s."""
    first = _started(0, 130.0, True, **{"attention-backend": "triton", "page-size": 1})
    params = {"attention-backend": "triton", "page-size": 16}
    startup = estimate([first], 1, params, "k1", 480.0)
    assert startup.seconds == 130.0  # judging a start-up that cannot finish still reads every start
    assert startup.warm().seconds is None  # fitting one into --timeout does not: it starts

    later = _started(2, 40.0, False, **{"attention-backend": "triton", "page-size": 1})
    assert estimate([first, later], 3, params, "k3", 480.0).warm().seconds == 40.0
