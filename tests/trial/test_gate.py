"""The gate against real simulated servers: near-ties between healthy kernels pass, a decode-position error
(sglang-jax 0.0.1's bug) does not, by agreement with the baseline alone or by decode vs re-prefill alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml

from tuner._failures import FailureKind, TrialFailure
from tuner.trial._gate import run_gate
from tuner.spec._spec import GatePrompt, GateSpec
from tuner.engines import SGLang
from tuner.sim._profile import PROFILE_DIR


PROMPTS = tuple(GatePrompt(p) for p in (
    "Write a few sentences about rivers and the cities along them.",
    "Describe how a bridge carries its load.",
    "List some things found in a kitchen.",
    "Tell a short story about a lighthouse keeper.",
))
SPEC = GateSpec(prompts=PROMPTS, max_new_tokens=16,
                checks=("finite-logprobs", "determinism", "baseline-agreement", "logprob-consistency"))


def _profile(tmp_path: Path, effect: str, value: float | None = None) -> str:
    """The instant profile, with `effect` on the triton backend only."""
    data = yaml.safe_load((PROFILE_DIR / "instant.yaml").read_text())
    rule = {"when": {"decode_backend": "triton"}, "effect": effect}
    if value is not None:
        rule["value"] = value
    data["health"] = [rule]
    path = tmp_path / f"{effect}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _gate(sim, spec: GateSpec, reference=None):
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return run_gate(client, SGLang(), spec, reference=reference)


def _baseline_and_trial(start_sim, profile: str):
    baseline = start_sim(profile=profile)
    reference = _gate(baseline, SPEC).reference
    return reference, start_sim("--attention-backend", "triton", profile=profile)


def test_near_ties_decided_the_other_way_pass(start_sim, tmp_path):
    reference, trial = _baseline_and_trial(start_sim, _profile(tmp_path, "near_tie_flip", 0.2))
    result = _gate(trial, SPEC, reference)
    assert "baseline-agreement" in result.checks and result.divergences
    assert all(abs(d.margin) <= SPEC.agreement_tie_tolerance for d in result.divergences)
    assert any(result.reference[p] != reference[p] for p in reference)
    # The same output judged token by token (no tie tolerance) is a wrong answer: what the old gate did.
    with pytest.raises(TrialFailure) as exc:
        _gate(trial, replace(SPEC, agreement_tie_tolerance=0.0), reference)
    assert exc.value.kind is FailureKind.WRONG_ANSWER and "not at a near-tie" in exc.value.message


def test_decode_position_error_fails_agreement_alone(start_sim, tmp_path):
    reference, trial = _baseline_and_trial(start_sim, _profile(tmp_path, "decode_position_error"))
    with pytest.raises(TrialFailure) as exc:
        _gate(trial, replace(SPEC, checks=("baseline-agreement",)), reference)
    assert exc.value.kind is FailureKind.WRONG_ANSWER
    assert "leaves the baseline's at token 1" in exc.value.message  # token 0 comes from the prefill


def test_decode_position_error_fails_consistency_alone(start_sim, tmp_path):
    trial = start_sim("--attention-backend", "triton", profile=_profile(tmp_path, "decode_position_error"))
    with pytest.raises(TrialFailure) as exc:
        _gate(trial, replace(SPEC, checks=("logprob-consistency",)))
    assert exc.value.kind is FailureKind.INCONSISTENT_LOGPROBS


def test_a_drift_within_the_tolerance_fails_over_the_baseline(start_sim, tmp_path):
    """A drift within logprob-tolerance is still caught against the baseline's own difference."""
    profile = _profile(tmp_path, "logprob_drift", 0.04)
    baseline = _gate(start_sim(profile=profile), SPEC)
    assert all(d < 0.01 for d in baseline.logprob_diffs.values())
    trial = start_sim("--attention-backend", "triton", profile=profile)
    with httpx.Client(base_url=trial.url, timeout=30) as client:
        with pytest.raises(TrialFailure) as exc:
            run_gate(client, SGLang(), SPEC, reference=baseline.reference, reference_diffs=baseline.logprob_diffs)
        assert exc.value.kind is FailureKind.INCONSISTENT_LOGPROBS and "more than the baseline's" in exc.value.message
        assert run_gate(client, SGLang(), SPEC, reference=baseline.reference).max_logprob_diff < SPEC.logprob_tolerance
