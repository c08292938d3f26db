"""The tuning loop end to end: real tuner process, real simulated servers, a real SQLite study."""

from __future__ import annotations

import re
import signal
import time

import pytest
import yaml
from optuna.trial import TrialState

from conftest import FAULT_SPACE, REPO, instant_space

SIM_FAST = {"TUNER_SIM_TIME_SCALE": "0.03", "TUNER_SIM_STARTUP_SCALE": "0.002"}


@pytest.mark.timeout(900)
def test_glm5_twin_study_prunes_nan_backends_and_ends_with_trtllm(tuner):
    # The NSA backends are tried right after the baseline, with and without graphs: whether the search
    # itself would draw them is up to its seed (it rightly avoids a backend family once a sibling failed).
    space = yaml.safe_load((REPO / "search_spaces" / "glm5-nvfp4-sm120.yaml").read_text())
    nsa_first = {**space["baseline"], "attention-backend": "nsa", "nsa-decode-backend": "flashmla_kv"}
    without_graphs = {k: v for k, v in nsa_first.items() if k != "cuda-graph-max-bs"}
    space["try-first"] = [nsa_first, {**without_graphs, "disable-cuda-graph": True}]
    path = tuner.space(yaml.safe_dump(space, sort_keys=False), "glm5.yaml")
    done = tuner.run("run", "--trials", "40", "--space", str(path), "--simulate", env=SIM_FAST, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("glm5-nvfp4-sm120")
    trials = study.get_trials()
    assert len([t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]) == 40
    assert trials[0].user_attrs["baseline"] is True and trials[0].user_attrs["feasible"] is True
    # The flashmla backends (what "nsa" resolves to on SM120) load and then produce NaN: pruned as such.
    nsa = [t for t in trials if t.params.get("attention-backend") == "nsa" and "reused_from" not in t.user_attrs]
    assert len(nsa) >= 2, "the NSA backends were not tried first"
    for t in nsa:
        assert t.state == TrialState.PRUNED
        assert t.user_attrs["failure_kind"] in ("nan", "garbage", "graph_capture_failed"), t.user_attrs
    # With graphs on they crash at capture first; NaN shows where graphs are off, and in other backends.
    assert any(t.user_attrs["failure_kind"] == "nan" for t in trials)
    for t in nsa:
        if t.params["disable-cuda-graph"]:
            assert t.user_attrs["failure_kind"] in ("nan", "garbage"), t.user_attrs
    best = max((t for t in trials if t.user_attrs.get("feasible")), key=lambda t: t.value)
    assert best.params["attention-backend"] == "trtllm_mla"
    assert study.best_trial.number == best.number
    # Never exported: a NaN trial, whatever its speed.
    export = tuner.run("export", "--out", "best.yaml")
    assert export.returncode == 0, export.stderr
    exported = yaml.safe_load((tuner.folder / "best.yaml").read_text())
    assert exported["attention-backend"] == "trtllm_mla"
    assert "host" not in exported and "port" not in exported
    assert tuner.leftovers() == {}
    # The terminal showed per-trial outcomes and a summary.
    assert "best" in done.stderr and "qualified" in done.stderr and "winner: trial" in done.stderr


def test_readiness_asks_sglang_for_one_generation(tuner):
    """SGLang serves /health and /health_generate with one handler: a one-token generation that answers after
    a second. Readiness asks it once (it asked both: a second generation, a second, on every start)."""
    space = tuner.space(instant_space("ready"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-2000:]
    log = next(tuner.folder.glob("runs/**/trial-0/server.log")).read_text()
    answered = re.findall(r'"GET (/health\S*) HTTP/1.1" 200', log)
    assert answered == ["/health_generate"], answered


def test_check_catches_flags_of_the_other_sglang_version(tuner):
    newer = tuner.space("""
        name: newer-names
        server: {model-path: /m, fixed: {tp-size: 8}}
        params:
          dsa-decode-backend: {type: categorical, choices: [flashmla_kv, trtllm]}
          cuda-graph-max-bs-decode: {type: categorical, choices: [32, 64]}
        """, "newer.yaml")
    done = tuner.run("check", "--space", str(newer), "--simulate", "glm5-nvfp4-sm120")
    assert done.returncode == 2
    assert "--dsa-decode-backend" in done.stdout and "write --nsa-decode-backend instead" in done.stdout
    assert "write --cuda-graph-max-bs instead" in done.stdout
    older = tuner.space("""
        name: older-names
        server: {model-path: /m}
        params:
          nsa-decode-backend: {type: categorical, choices: [flashmla_kv]}
          cuda-graph-max-bs: {type: categorical, choices: [32, 64]}
          attention-backend: {type: categorical, choices: [fa3, flashinferr]}
        """, "older.yaml")
    done = tuner.run("check", "--space", str(older), "--simulate", "llama3-8b-h200")
    assert done.returncode == 2
    assert "write --dsa-decode-backend instead" in done.stdout
    assert "--cuda-graph-max-bs is ambiguous" in done.stdout and "--cuda-graph-max-bs-decode" in done.stdout
    assert "flashinferr: invalid choice" in done.stdout and "did you mean 'flashinfer'" in done.stdout
    # `run` does the same check before its first trial: nothing is launched, nothing stored.
    run = tuner.run("run", "--trials", "3", "--space", str(older), "--simulate", "llama3-8b-h200")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert not (tuner.folder / "trials.db").exists()
    assert not (tuner.folder / "runs").exists()


def test_interrupted_run_resumes_the_same_study_without_losing_a_trial(tuner):
    space = tuner.space(FAULT_SPACE)
    slow = {"TUNER_SIM_FAULTS": "response_delay=0.05"}  # so that a trial is in flight when the signal comes
    proc = tuner.start("run", "--trials", "6", "--space", str(space), "--simulate", "instant", env=slow)
    out = []
    for line in proc.stdout:
        out.append(line)
        if "] trial   1 " in line:
            break
    time.sleep(0.5)  # the third trial is now starting up or being gated
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(out) + rest
    assert "resume" in rest
    assert tuner.leftovers() == {}
    study = tuner.study("faults")
    interrupted = [t for t in study.get_trials() if t.user_attrs.get("failure_kind") == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0].state == TrialState.FAIL
    finished_before = [t.number for t in study.get_trials() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]

    again = tuner.run("run", "--trials", "6", "--space", str(space), "--simulate", "instant", env=slow)
    assert again.returncode == 0, again.stderr
    study = tuner.study("faults")
    finished = [t for t in study.get_trials() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 6
    assert set(finished_before) <= {t.number for t in finished}
    # The interrupted configuration was run again, once.
    rerun = [t for t in finished if t.user_attrs.get("requeued_from") == interrupted[0].number]
    assert len(rerun) == 1 and rerun[0].params == interrupted[0].params
    assert tuner.leftovers() == {}


def test_simulate_follows_the_space(tuner):
    """`--simulate` without a name picks the profile the space names, else the one named like it, else one of
    its SGLang version; a flag error against the simulator names the profile and `--simulate NAME`."""
    done = tuner.run("check", "--simulate", "--space", "search_spaces/default.yaml")  # generic 0.5.23 flags
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(simulator profile llama3-70b-8xh200, SGLang 0.5.23)" in done.stdout
    done = tuner.run("check", "--simulate", "--space", "search_spaces/llama3-8b-h200.yaml")  # named like it
    assert done.returncode == 0 and "(simulator profile llama3-8b-h200, SGLang 0.5.23)" in done.stdout, done.stdout
    run = tuner.run("run", "--trials", "1", "--simulate", "--space", "search_spaces/llama3-8b-h200.yaml", env=SIM_FAST)
    assert run.returncode == 0 and "(simulator profile llama3-8b-h200, SGLang 0.5.23)" in run.stderr, run.stderr[-3000:]
    assert tuner.study("llama3-8b-h200").trials[0].user_attrs["feasible"] is True
    named = tuner.space((REPO / "search_spaces/default.yaml").read_text() + "sim-profile: llama3-8b-h200\n",
                        "named.yaml")
    done = tuner.run("check", "--simulate", "--space", str(named))
    assert done.returncode == 0 and "(simulator profile llama3-8b-h200, SGLang 0.5.23)" in done.stdout, done.stdout
    # A profile of the other version, named on purpose: each error once, on stdout, and what to do about it.
    done = tuner.run("check", "--simulate", "glm5-nvfp4-sm120", "--space", "search_spaces/default.yaml")
    assert done.returncode == 2 and done.stderr == ""
    errors = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(set(errors)) == 2, done.stdout
    assert done.stdout.splitlines()[-1].startswith(
        "hint: search_spaces/default.yaml is written for SGLang 0.5.23 and the server is SGLang 0.5.6 (simulator "
        "profile glm5-nvfp4-sm120): pass --simulate NAME with a profile of SGLang 0.5.23 (llama3-70b-8xh200, "
        "llama3-8b-h200), or rewrite it with: python -m tuner space upgrade --to 0.5.6 search_spaces/default.yaml")
    run = tuner.run("run", "--trials", "1", "--simulate", "glm5-nvfp4-sm120", "--space", "search_spaces/default.yaml")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "pass --simulate NAME" in run.stderr, run.stderr


def test_check_says_did_you_mean_for_a_flag_that_abbreviates_one(tuner):
    space = tuner.space("""
        name: abbreviated
        server: {model-path: /m}
        params:
          trust-remote: {type: bool}
        """)
    done = tuner.run("check", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 2
    assert "error: --trust-remote is not a flag of this server; did you mean --trust-remote-code?" in done.stdout
    assert "ambiguous" not in done.stdout
