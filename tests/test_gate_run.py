"""The gate through `python -m tuner run --simulate`: the self-comparisons catch the faults they are for, healthy
configurations of a shipped space pass them, and a baseline without reference differences is said and re-measured."""

from __future__ import annotations

import optuna

from conftest import REPO, instant_space

SIM_FAST = {"TUNER_SIM_TIME_SCALE": "0.03", "TUNER_SIM_STARTUP_SCALE": "0.002"}
CHUNKED = "  fixed: {chunked-prefill-size: 512}\n"


def _failure(tuner, name: str, faults: str) -> dict:
    space = tuner.space(instant_space(name, server=CHUNKED))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": faults})
    assert done.returncode == 0, done.stderr[-3000:]
    return tuner.study(name).trials[0].user_attrs


def test_batch_consistency_catches_an_answer_that_depends_on_its_batch(tuner):
    attrs = _failure(tuner, "batch", "batch_slot_error=8")
    assert attrs["failure_kind"] in ("wrong_answer", "inconsistent_logprobs")
    assert attrs["failure_message"].startswith("batch-consistency:"), attrs["failure_message"]


def test_long_context_consistency_catches_kv_corrupted_after_the_first_chunk(tuner):
    attrs = _failure(tuner, "chunk", "chunk_kv_error")
    assert attrs["failure_kind"] == "inconsistent_logprobs"
    assert attrs["failure_message"].startswith("long-context-consistency:"), attrs["failure_message"]


def test_healthy_configurations_of_a_shipped_space_pass_the_self_comparisons(tuner):
    space = REPO / "search_spaces" / "sglang-0.5.17-h100-llama3-8b.yaml"
    done = tuner.run("run", "--trials", "3", "--space", str(space), "--simulate", env=SIM_FAST, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = tuner.study("sglang-0.5.17-h100-llama3-8b").trials
    gated = [t for t in trials if "batch-consistency" in t.user_attrs.get("gate_checks", [])]
    assert gated, [t.user_attrs.get("failure_message") for t in trials]
    for t in trials:
        assert t.user_attrs.get("failure_kind") not in ("wrong_answer", "inconsistent_logprobs", "nan"), \
            t.user_attrs.get("failure_message")
    for t in gated:
        figures = t.user_attrs["gate_figures"]
        assert {"batch-consistency", "long-context-consistency", "logprob-consistency"} <= set(figures)
        assert any(k.startswith("after-load ") for k in figures)


def test_a_baseline_without_reference_differences_is_said_and_measured_again(tuner):
    space = tuner.space(instant_space("gap"))
    assert tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant").returncode == 0
    # As a study from before the differences were recorded (the first GPU study): the baseline has none.
    study = tuner.study("gap")
    assert study.user_attrs["reference_logprob_diffs"]["diffs"]
    study.set_user_attr("reference_logprob_diffs", None)
    said = "logprob-excess check not run: the baseline has no reference differences"
    assert said in tuner.run("show").stdout
    done = tuner.run("run", "--trials", "3", "--space", str(space), "--simulate", "instant", "--continue")
    assert done.returncode == 0, done.stderr[-3000:]
    assert said in done.stdout + done.stderr
    trials = optuna.load_study(study_name="gap", storage=tuner.storage).trials
    again = trials[1]
    assert again.user_attrs.get("remeasure_reference") and again.params == trials[0].params
    assert not again.user_attrs.get("reused_from")  # launched, not answered from the baseline's record
    assert tuner.study("gap").user_attrs["reference_logprob_diffs"]["diffs"]
    assert said not in tuner.run("show").stdout
