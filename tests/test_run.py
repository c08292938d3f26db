"""The tuning loop end to end: real tuner process, real simulated servers, a real SQLite study."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

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
    # 12 trials: the broken backends fail within them and only trtllm_mla runs on SM120, so a longer study (it was
    # 40, the test's slowest minutes) ends the same.
    done = tuner.run("run", "--trials", "12", "--space", str(path), "--simulate", env=SIM_FAST, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("glm5-nvfp4-sm120")
    trials = study.get_trials()
    assert len([t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]) == 12
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


# Where to interrupt, the fault that keeps the first trial there long enough, the signal (SIGINT goes to the
# tuner's whole process group, as a terminal's Ctrl-C does; SIGTERM to the tuner alone, as `kill` does), and the
# stages the interrupted trial may be recorded in (empty: the trial in flight is recorded with its result).
INTERRUPTS = {
    "launch": ("", signal.SIGINT, {"launch", "readiness"}),  # launch itself takes milliseconds
    "readiness": ("warmup_503=30", signal.SIGTERM, {"readiness"}),
    "gate": ("generate_hang", signal.SIGINT, {"gate"}),
    "probe": ("slow_drip=0.5", signal.SIGTERM, {"probe"}),
    "teardown": ("slow_exit=2", signal.SIGINT, set()),
    "between": ("", signal.SIGTERM, set()),  # trial 0 recorded, trial 1 not begun (or just begun)
}


@pytest.mark.parametrize("stage", list(INTERRUPTS))
def test_an_interrupt_in_any_stage_prints_no_traceback_and_the_run_resumes(tuner, stage):
    """Ctrl-C or SIGTERM in a first-run probe printed Optuna's "Trial 0 failed" and a 12-line traceback before
    the "interrupted" line. In every stage: one line, the server stopped, the trial marked, nothing left."""
    faults, sig, marked_in = INTERRUPTS[stage]
    space = tuner.space(FAULT_SPACE)
    run = ("run", "--trials", "2", "--space", str(space), "--simulate", "instant")
    proc = tuner.start(*run, env={"TUNER_SIM_FAULTS": faults})
    record = tuner.folder / "runs" / "faults" / "trial-0" / "worker.json"  # the running trial's stage
    while not _reached(record, stage):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.005)  # polling the record for the stage, no timing asserted
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    # 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for SIGTERM (SIGTERM gave 130).
    assert proc.returncode == 128 + sig, out
    assert "Traceback" not in out and " failed with " not in out, out
    assert out.splitlines()[-1].startswith("interrupted: ") and "run the same command again to resume" in out, out
    assert tuner.leftovers() == {}
    trials = tuner.study("faults").get_trials()
    assert all(t.state != TrialState.RUNNING for t in trials), [t.state for t in trials]
    interrupted = [t for t in trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert all(t.state == TrialState.FAIL for t in interrupted)
    if marked_in:
        assert [t.number for t in interrupted] == [0] and interrupted[0].user_attrs["failure_stage"] in marked_in
        assert f"trial 0 (in its {interrupted[0].user_attrs['failure_stage']}) marked interrupted" in out
    else:
        assert trials[0].state == TrialState.COMPLETE and trials[0].user_attrs["feasible"], trials[0].user_attrs
        assert all(t.number == 1 and t.user_attrs.get("failure_stage") in (None, "launch", "readiness")
                   for t in interrupted)
    recorded = {t.number for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}

    again = tuner.run(*run)
    assert again.returncode == 0, again.stderr[-3000:]
    trials = tuner.study("faults").get_trials()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 2 and recorded <= {t.number for t in finished}
    for t in interrupted:  # each interrupted configuration run again, once
        rerun = [f for f in finished if f.user_attrs.get("requeued_from") == t.number]
        assert len(rerun) == 1 and rerun[0].params == t.params
    assert tuner.leftovers() == {}


def _reached(record, stage: str) -> bool:
    try:
        seen = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return seen.get("done", False) if stage == "between" else seen.get("stage") == stage


# Issue 45: torch.compile with decode graphs, interrupted in readiness at the end of two lent-GPU calls, while a
# similar configuration had timed out at start. SLOW and LIKE_SLOW differ in one flag; the baseline and FAST are
# two flags from SLOW. warmup_503 holds every start in readiness (answering 503) for that many seconds.
STARTUP_PARAMS = ("  schedule-conservativeness: {type: float, low: 0.1, high: 2.0, step: 0.01}\n"
                  "  enable-torch-compile: {type: bool}\n")
SLOW = {"schedule-conservativeness": 0.5, "enable-torch-compile": True}
LIKE_SLOW = {"schedule-conservativeness": 0.7, "enable-torch-compile": True}
FAST = {"schedule-conservativeness": 0.3, "enable-torch-compile": False}


def _startup_space(tuner, *try_first: dict) -> Path:
    points = "try-first:\n" + "".join(f"  - {json.dumps(p)}\n" for p in try_first)
    return tuner.space(instant_space("startup", params=STARTUP_PARAMS, extra=points,
                                     baseline="{schedule-conservativeness: 1.0, enable-torch-compile: false}"))


def _interrupt_in_readiness(tuner, run: tuple[str, ...], number: int, env: dict[str, str]) -> None:
    proc = tuner.start(*run, env=env)
    record = tuner.folder / "runs" / "startup" / f"trial-{number}" / "worker.json"
    while not _reached(record, "readiness"):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.005)  # polling the record for the stage, no timing asserted
    proc.send_signal(signal.SIGINT)  # as scripts/gpu_sglang.sh ends a call
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and f"trial {number} (in its readiness) marked interrupted" in out, out


def test_a_start_up_interrupted_twice_is_judged_without_a_restart_where_a_similar_one_timed_out(tuner):
    """Trial 30's configuration ran again as trial 31, sat 411 s in readiness until the call's end, and would have
    run a third time. Now its start-up is judged from what is known: the readiness it spent, and a similar
    configuration that timed out at start. No server is launched for it."""
    space = _startup_space(tuner, SLOW)
    assert tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant").returncode == 0
    slow_start = {"TUNER_SIM_FAULTS": "warmup_503=60"}  # beyond the start-up timeout (5 s, as --simulate scales it)
    run = ("run", "--trials", "2", "--space", str(space), "--simulate", "instant")
    _interrupt_in_readiness(tuner, run, 1, slow_start)
    _interrupt_in_readiness(tuner, run, 2, slow_start)  # trial 1's configuration, re-queued
    space = _startup_space(tuner, SLOW, LIKE_SLOW)  # the similar configuration: trial 3, before the re-queued one
    done = tuner.run("run", "--trials", "3", "--space", str(space), "--simulate", "instant", "--continue",
                     env=slow_start)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = tuner.study("startup").get_trials()
    like, judged = trials[3], trials[4]
    assert like.params == LIKE_SLOW and like.user_attrs["failure_kind"] == "startup_timeout"
    assert judged.params == SLOW and judged.user_attrs["requeued_from"] == 2 and judged.state == TrialState.PRUNED
    attrs = judged.user_attrs
    assert (attrs["failure_kind"], attrs["failure_stage"], attrs["judged"]) == ("startup_timeout", "readiness", True)
    message = attrs["failure_message"]
    assert message.startswith("judged without a restart: interrupted twice in readiness (longest "), message
    assert ", and trial 3, a similar configuration, timed out at start-up (5 s); " in message, message
    assert message.endswith("reaches the start-up timeout (5 s)"), message
    launched = {int(p.parent.name.split("-")[1]) for p in (tuner.folder / "runs").glob("startup/trial-*/server.json")}
    assert launched == {0, 1, 2, 3}
    assert tuner.leftovers() == {}


def test_a_trial_whose_start_up_does_not_fit_in_the_timeout_waits_for_the_next_run(tuner):
    """A run with --timeout starts no trial whose expected start-up (here a similar configuration's, 12 s) does not
    fit in what is left: it says so, ends well, and the next run starts that configuration first. The similar
    start was its run's second: a run's first start is no guide (tests/search/test_startup.py)."""
    space = _startup_space(tuner, LIKE_SLOW, FAST, SLOW)
    real = {"TUNER_SIM_STARTUP_SCALE": "1"}  # the space's start-up timeout as written: 30 s
    run = ("run", "--space", str(space), "--simulate", "instant")
    slow = tuner.run(*run, "--trials", "2", env={**real, "TUNER_SIM_FAULTS": "warmup_503=12"})
    assert slow.returncode == 0, slow.stderr[-3000:]
    assert tuner.study("startup").trials[1].user_attrs["stage_seconds"]["readiness"] >= 12
    short = tuner.run(*run, "--trials", "4", "--timeout", "10", env=real)  # FAST starts (the run's first), SLOW not
    assert short.returncode == 0, short.stderr[-3000:]
    said = [line for line in short.stderr.splitlines() if line.startswith("not starting trial 3: ")]
    assert len(said) == 1 and said[0].endswith("left of --timeout; the next run starts it"), short.stderr[-3000:]
    assert "like trial 1's) does not fit in the " in said[0], said
    trials = tuner.study("startup").get_trials()
    assert trials[2].params == FAST and trials[2].user_attrs["feasible"]
    waiting = trials[3]
    assert waiting.params == SLOW and waiting.state == TrialState.FAIL
    assert (waiting.user_attrs["failure_kind"], waiting.user_attrs["failure_stage"]) == ("interrupted", "not started")
    assert not (tuner.folder / "runs" / "startup" / "trial-3" / "server.json").exists()
    longer = tuner.run(*run, "--trials", "4", "--timeout", "120", env=real)
    assert longer.returncode == 0, longer.stderr[-3000:]
    trials = tuner.study("startup").get_trials()
    assert len(trials) == 5 and sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials) == 4
    rerun = trials[4]
    assert rerun.params == SLOW and rerun.user_attrs["requeued_from"] == 3 and rerun.user_attrs["feasible"]
    assert (tuner.folder / "runs" / "startup" / "trial-4" / "server.json").exists()
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


def test_continue_tries_the_points_the_edited_space_adds(tuner):
    path = tuner.space(FAULT_SPACE)
    assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant").returncode == 0
    path.write_text(path.read_text() + "try-first:\n  - {schedule-conservativeness: 0.5}\n"
                                       "  - {schedule-conservativeness: 1.0}\n")  # the baseline's: tried already
    done = tuner.run("run", "--trials", "3", "--space", str(path), "--simulate", "instant", "--continue")
    assert done.returncode == 0, done.stderr
    trials = tuner.study("faults").trials
    assert trials[1].params == {"schedule-conservativeness": 0.5} and trials[1].user_attrs.get("try_first")
    assert not trials[2].user_attrs.get("try_first")  # the baseline's values were not enqueued again


def test_a_study_keeps_to_one_kind_of_server(tuner):
    """A dry run's study (the README's first command leaves one in trials.db, under the space's name) is not
    gone on by a real server, nor a real study by a dry run: the real server would be judged against the
    simulator's answers. Refused in one line, nothing written; --study NAME starts a study of its own. The
    "real" server here is the simulator launched as a server command of the space's, without --simulate."""
    server = f"  command: [{sys.executable}, -m, tuner.sim]\n  env: {{TUNER_SIM_PROFILE: instant}}\n"
    space = instant_space("kinds", model="stand-in/instant", server=server)
    path = tuner.space(space)
    assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant").returncode == 0
    real = tuner.run("run", "--trials", "2", "--space", str(path))
    assert real.returncode == 2, real.stderr[-2000:]
    assert real.stderr.strip().splitlines() == [
        "error: study 'kinds' holds trials from the simulated server (profile instant), and this run starts a real "
        "one: their answers and figures do not compare; pass --study NAME for a new study, or another --storage"]
    assert len(tuner.study("kinds").trials) == 1 and tuner.study("kinds").user_attrs["simulate"] == "instant"
    own = tuner.run("run", "--trials", "1", "--space", str(path), "--study", "kinds-real")
    assert own.returncode == 0, own.stderr[-2000:]
    assert tuner.study("kinds-real").user_attrs["simulate"] is None
    dry = tuner.run("run", "--trials", "2", "--space", str(path), "--study", "kinds-real", "--simulate", "instant")
    assert dry.returncode == 2 and "holds trials from a real server, and this run starts the simulated one " \
        "(--simulate)" in dry.stderr, dry.stderr[-2000:]
    assert len(tuner.study("kinds-real").trials) == 1
    assert tuner.leftovers() == {}


def test_logprob_drift_within_the_tolerance_is_caught_against_the_baseline(tuner):
    """The baseline records its decode vs re-prefill differences; a trial at the same precision whose kernels
    drift (by 0.03 on average, under logprob-tolerance 0.1) fails by the excess over them. An fp8 KV cache is
    not compared."""
    profile = yaml.safe_load((REPO / "tuner" / "sim" / "profiles" / "instant.yaml").read_text())
    profile["health"] = [{"when": {"decode_backend": "triton"}, "effect": "logprob_drift", "value": 0.08}]
    (tuner.folder / "drift.yaml").write_text(yaml.safe_dump(profile))
    params = ("  attention-backend: {type: categorical, choices: [flashinfer, triton]}\n"
              "  kv-cache-dtype: {type: categorical, choices: [auto, fp8_e4m3]}\n")
    space = tuner.space(instant_space("drift", params=params,
                                      baseline="{attention-backend: flashinfer, kv-cache-dtype: auto}",
                                      extra="try-first:\n  - {attention-backend: triton, kv-cache-dtype: auto}\n"
                                            "  - {attention-backend: triton, kv-cache-dtype: fp8_e4m3}\n"))
    done = tuner.run("run", "--trials", "3", "--space", str(space), "--simulate", str(tuner.folder / "drift.yaml"))
    assert done.returncode == 0, done.stderr
    baseline, drift, fp8 = tuner.study("drift").trials
    assert baseline.user_attrs["feasible"]
    assert drift.user_attrs["failure_kind"] == "inconsistent_logprobs", drift.user_attrs.get("failure_message")
    assert "more than the baseline's" in drift.user_attrs["failure_message"]
    assert "(tolerance" not in drift.user_attrs["failure_message"]  # within the absolute tolerance
    assert fp8.user_attrs["feasible"], fp8.user_attrs.get("failure_message")  # other precision: absolute only


def test_a_probe_cut_before_a_wave_finished_is_a_failure_and_show_suggests_a_budget(tuner):
    """A server that decodes one request at a time (max-running-requests 1, a decode step every 0.05 s) finishes
    a few of 80 requests in the probe's 6 s, where a wave is 40: the trial fails as probe_cut, is never the
    best, and `show` names the budget that would fit. The baseline, 40 at a time, finishes in about 3 s."""
    space = tuner.space(instant_space(
        "cut", params="  max-running-requests: {type: categorical, choices: [64, 1]}\n",
        baseline="{max-running-requests: 64}", probe_timeout=60,
        extra="try-first:\n  - {max-running-requests: 1}\n",
    ).replace("  warmup: 0\n", "  warmup: 0\n  time-budget: 6\n  prune: false\n  check-tokens: 0\n"))
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "slow_drip=0.05"})
    assert done.returncode == 0, done.stderr[-3000:]
    baseline, slow = tuner.study("cut").trials
    assert baseline.user_attrs["feasible"] is True, baseline.user_attrs.get("failure_message")
    assert slow.params == {"max-running-requests": 1}
    assert slow.state == TrialState.PRUNED and slow.user_attrs["failure_kind"] == "probe_cut", slow.user_attrs
    assert slow.user_attrs["feasible"] is False and "output_throughput" not in slow.user_attrs
    level = slow.user_attrs["cut_level"]
    assert level["cut"] is True and level["completed"] < 40 and level["requests"] == 80
    assert level["expected_output_tokens"] == 80 * 24
    assert "probe_cut" in done.stderr  # its progress line
    shown = tuner.run("show", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "winner: trial 0 (not confirmed)" in shown.stdout
    assert re.search(r"^\s+1  probe_cut\s", shown.stdout, re.M), shown.stdout
    message = re.search(r"trial 1 \(probe_cut\): probe cut at its 6 s budget \(\d s for this level\) with "
                        rf"{level['completed']} of 80 requests finished at concurrency 40, at least 40 needed: not a "
                        r"measurement; probe.time-budget: (\d+) would fit \(estimated from [\d,]+ tok/s\)",
                        " ".join(shown.stdout.split()))
    assert message, shown.stdout
    assert int(message.group(1)) > 6
    assert tuner.leftovers() == {}
