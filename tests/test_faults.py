"""Every failure kind, produced by the simulator's fault switches, recorded correctly with nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from optuna.trial import TrialState

from conftest import FAULT_SPACE, instant_space, remains_of

CASES = [
    ("crash_at_start", "crash_on_start"),
    ("oom_at_capture", "oom"),
    ("hang_at_capture", "startup_timeout"),
    ("slow_start_no_log=30", "startup_timeout"),
    ("nan_when_batch_over=32", "nan"),
    ("crash_after_requests=30", "crash_under_load"),
    ("http_500_rate=0.1", "errors_under_load"),
    ("stop_answering_after=12", "errors_under_load"),
]


@pytest.mark.parametrize("fault, kind", CASES, ids=[c[0] for c in CASES])
def test_fault_is_recorded_with_its_kind_and_nothing_remains(tuner, fault, kind):
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": fault})
    assert done.returncode == 0, done.stderr
    trials = tuner.study("faults").get_trials()
    assert len(trials) == 2
    for t in trials:  # the second trial starts cleanly after the first failed
        assert t.state == TrialState.PRUNED, (t.number, t.user_attrs)
        assert t.user_attrs["failure_kind"] == kind, t.user_attrs.get("failure_message")
        assert t.user_attrs["feasible"] is False
        assert t.constraints["failure"] > 0
        assert t.user_attrs["failure_message"]
        assert "Traceback (most recent" not in t.user_attrs["failure_message"]  # the exception line instead
    assert len(tuner.server_records()) == 2
    assert tuner.leftovers() == {}


@pytest.mark.parametrize("fault, failed_in", [("oom_at_capture", "cuda_graph_capture"), ("crash_at_start", None)])
def test_a_crash_says_whether_it_happened_capturing_cuda_graphs(tuner, fault, failed_in):
    """An out-of-memory error after SGLang's capture-begin line is an OOM that only a configuration capturing
    graphs meets: the sampler learns it as a failed capture (it says nothing of the same flags with graphs off)."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": fault})
    assert done.returncode == 0, done.stderr
    attrs = tuner.study("faults").trials[0].user_attrs
    assert attrs["failure_kind"] == ("oom" if failed_in else "crash_on_start"), attrs
    assert attrs.get("failed_in") == failed_in
    assert tuner.leftovers() == {}


@pytest.mark.parametrize("fault, hung_in", [("hang_at_capture", "cuda_graph_capture"),
                                             ("slow_start_no_log=30", None)])
def test_a_start_that_times_out_says_whether_it_hung_capturing_cuda_graphs(tuner, fault, hung_in):
    """The simulated server logs SGLang's capture-begin line and then nothing: that hang is the capture's (the
    sampler learns it as a failed capture); a start that hangs before it is only a timeout."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": fault})
    assert done.returncode == 0, done.stderr
    attrs = tuner.study("faults").trials[0].user_attrs
    assert attrs["failure_kind"] == "startup_timeout"
    assert attrs.get("hung_in") == hung_in
    assert ("during CUDA graph capture" in attrs["failure_message"]) == (hung_in is not None)
    assert tuner.leftovers() == {}


def test_response_slower_than_request_timeout_is_errors_under_load(tuner):
    space = tuner.space(FAULT_SPACE.replace("request-timeout: 5", "request-timeout: 0.5")
                        .replace("request-timeout: 10", "request-timeout: 5"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "response_delay=1"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults").trials[0]
    assert t.user_attrs["failure_kind"] == "errors_under_load"
    assert "timeout" in t.user_attrs["failure_message"]
    assert tuner.leftovers() == {}


@pytest.mark.parametrize("fault", ["ignore_sigterm", "child_holds_port"])
def test_stubborn_servers_are_ended_whole(tuner, fault):
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": fault})
    assert done.returncode == 0, done.stderr
    trials = tuner.study("faults").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert t.user_attrs["teardown_leftover_pids"] == []
        if fault == "ignore_sigterm":
            assert t.user_attrs["teardown_killed"] is True
    assert tuner.leftovers() == {}


def test_server_that_escapes_its_process_group_is_found_and_ended(tuner):
    """Children that call setsid() are out of reach of the group's signals: teardown finds the one that
    keeps the port (its environment cleared) by the port, and the other by the marker in its environment,
    ends both, and records how each was found."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "3", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "escape_session"})
    assert done.returncode == 0, done.stderr
    trials = tuner.study("faults").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    records = tuner.server_records()
    for t, record in zip(trials, records):
        found = t.user_attrs["teardown_leftovers"]
        assert sorted(f["found_by"] for f in found) == ["environment marker", f"port {record['port']}"], found
        assert all(f["ended"] for f in found)
        assert t.user_attrs["teardown_leftover_pids"] == []
        assert t.user_attrs["teardown_port_free"] is True
    assert tuner.leftovers() == {}


def test_restart_after_sigkill_ends_what_escaped_the_group(tuner):
    """The tuner SIGKILLed mid-trial leaves a server whose children left its group; the next run finds them
    from the recorded port and marker and ends them before its first trial."""
    space = tuner.space(FAULT_SPACE)
    env = {"TUNER_SIM_FAULTS": "escape_session,response_delay=0.5"}
    first = tuner.start("run", "--trials", "2", "--space", str(space), "--simulate", "instant", env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(len(remains_of(r)) >= 3 for r in tuner.server_records()):  # leader + the two escaped
            assert time.monotonic() < deadline and first.poll() is None, "no server with escaped children"
            time.sleep(0.1)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        os.killpg(tuner.server_records()[0]["pgid"], signal.SIGKILL)  # the group dies; the escaped live on
        time.sleep(0.2)
        assert tuner.leftovers(), "the escaped children should outlive their group"
    finally:
        first.stdout.close()
    again = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                      env={"TUNER_SIM_FAULTS": ""})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "ended 1 server(s)" in again.stderr
    assert tuner.leftovers() == {}


# Issue 35's settings; TUNER_SIM_STARTUP_SCALE=0.1 runs them at a tenth (start-up 6 s, stall 2 s), as --simulate
# scales them. The gate's timeouts are the defaults: 600 s for the first request, 60 s for the others.
HUNG_SPACE = """
name: faults
server:
  model-path: /models/instant
  startup-timeout: {startup}
  stall-timeout: 20
  fixed: {{log-level-http: warning}}
params:
  schedule-conservativeness: {{type: float, low: 0.1, high: 2.0, step: 0.01}}
baseline: {{schedule-conservativeness: 1.0}}
probe: {{concurrency: [8], requests: 16, input-len: 16, output-len: 8, warmup: 0}}
"""
TENTH = {"TUNER_SIM_STARTUP_SCALE": "0.1"}


def test_hung_generate_behind_an_answering_health_generate_ends_at_the_stall_timeout(tuner):
    """/health_generate answers but /generate never does. Readiness has just seen the server generate, so the
    gate's first request gets no first-use allowance of 600 s: no answer and no log output for stall-timeout is
    a hang (it was still in its gate after 460 s)."""
    space = tuner.space(HUNG_SPACE.format(startup=60))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={**TENTH, "TUNER_SIM_FAULTS": "generate_hang"}, timeout=60)
    assert done.returncode == 0, done.stderr
    attrs = tuner.study("faults").trials[0].user_attrs
    assert attrs["failure_kind"] == "hang" and attrs["failure_stage"] == "gate", attrs.get("failure_message")
    assert attrs["failure_message"].startswith("gate request: no response and no log output for 2 s (stall-timeout)")
    # The bound is stall-timeout + 2 s from the request's send; ending at the 600 s timeout would be the bug.
    # (benchmarks/failure_cost.py has the figure to the trial's end.)
    assert 2 <= attrs["hang_waited_s"] < 2 + 2 and attrs["stage_seconds"]["gate"] < 2 + 2
    assert tuner.leftovers() == {}


@pytest.mark.parametrize("warmup, startup, kind", [(4, 100, "none"), (30, 50, "startup_timeout")],
                         ids=["warm-up within the start-up timeout", "longer"])
def test_a_silent_warm_up_answering_503_waits_for_the_start_up_timeout_not_the_stall_timeout(tuner, warmup, startup,
                                                                                              kind):
    """SGLang's /health_generate answers 503 until its warm-up is done (47 s seen on an H100), and the log may
    say nothing meanwhile (here `--log-level-http warning`: no access lines). The 503s are a sign of life: 4 s
    of them pass a 2 s stall-timeout; 30 s end at the start-up timeout, which names them."""
    space = tuner.space(HUNG_SPACE.format(startup=startup))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={**TENTH, "TUNER_SIM_FAULTS": f"warmup_503={warmup}"}, timeout=60)
    assert done.returncode == 0, done.stderr
    attrs = tuner.study("faults").trials[0].user_attrs
    assert attrs["failure_kind"] == kind, attrs.get("failure_message")
    if kind == "startup_timeout":
        assert attrs["failure_message"].startswith("not ready after 5 s; /health_generate answered 503 (warming up) "
                                                   "for the last "), attrs["failure_message"]
    else:
        assert attrs["stage_seconds"]["readiness"] >= warmup
    assert tuner.leftovers() == {}


@pytest.mark.parametrize("fault, kind", [("nan_when_batch_over=32", "nan"), ("http_500_rate=0.1", "errors_under_load")])
def test_probe_verdict_stands_against_request_tracebacks_of_a_live_server(tuner, fault, kind):
    """The live server logs a traceback for each stream the tuner closed at the first NaN (and for each
    HTTP 500): that is evidence beside the probe's own verdict, not a crash, and it names the exception.
    The gate leaves out batch-consistency, whose full batch would meet the NaN before the probe does."""
    space = tuner.space(FAULT_SPACE.replace("  max-new-tokens: 8\n", "  max-new-tokens: 8\n  checks: [known-answer, "
                                            "finite-logprobs, degenerate-text, logprob-consistency, determinism]\n"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": f"{fault},request_tracebacks"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults").trials[0]
    assert t.user_attrs["failure_kind"] == kind, t.user_attrs.get("failure_message")
    log = (tuner.folder / "runs" / "faults" / "trial-0" / "server.log").read_text()
    assert "Traceback (most recent call last)" in log
    message = t.user_attrs["failure_message"]
    assert "Traceback (most recent" not in message
    assert "the server's log shows: " in message and "Error: " in message, message
    assert tuner.leftovers() == {}


def test_log_burst_keeps_the_tuner_small_and_the_stored_log_capped(tuner):
    """60 MB of log lines in a burst: the tuner (measured in its own process) stays under 150 MB, and the
    one log kept per trial is capped at the space's server.log-cap-mb, head and tail with the cut marked.

    The peak is VmHWM, the process's own: ru_maxrss starts at the forking parent's size (Linux keeps the
    high-water mark across fork and exec), and pytest late in the suite is over a gigabyte."""
    space = tuner.space(FAULT_SPACE.replace("  stall-timeout: 3\n", "  stall-timeout: 3\n  log-cap-mb: 4\n"))
    code = ("import runpy, sys\nsys.argv = ['tuner', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_module('tuner', run_name='__main__', alter_sys=True)\nfinally:\n"
            "    hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]\n"
            "    print('PEAK_RSS_KB', hwm, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code, "run", "--trials", "2", "--space", str(space),
                           "--simulate", "instant"], cwd=tuner.folder, capture_output=True, text=True, timeout=300,
                          env={**tuner.env, "TUNER_SIM_FAULTS": "log_burst=60"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    peak_mb = int(done.stderr.rsplit("PEAK_RSS_KB", 1)[1].split()[0]) / 1024
    assert peak_mb < 150, f"tuner peak memory {peak_mb:.0f} MB"
    trials = tuner.study("faults").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        log = tuner.folder / "runs" / "faults" / f"trial-{t.number}" / "server.log"
        assert log.stat().st_size <= 4 * (1 << 20)
        assert b"bytes of this log cut here" in log.read_bytes()
    stored = [p for p in (tuner.folder / "runs" / "artifacts").rglob("*") if p.is_file()]
    assert len(stored) == 2 and all(p.stat().st_size <= 4 * (1 << 20) for p in stored)
    assert tuner.leftovers() == {}


def test_logprob_consistency_uses_the_prompt_ids_from_tokenize_or_is_skipped_with_its_reason(tuner):
    """An answer without input_token_logprobs: the re-prefill gets the prompt's ids from /tokenize and the
    check passes; where /tokenize is missing too, the check is skipped with the reason recorded, and the
    healthy configuration is not failed."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "no_input_logprobs"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults").trials[0]
    assert t.user_attrs["feasible"] is True, t.user_attrs.get("failure_message")
    assert "logprob-consistency" in t.user_attrs["gate_checks"]
    assert t.user_attrs["gate_max_logprob_diff"] < 0.05
    log = (tuner.folder / "runs" / "faults" / "trial-0" / "server.log").read_text()
    assert '"POST /tokenize HTTP/1.1" 200' in log

    space = tuner.space(FAULT_SPACE.replace("name: faults", "name: faults2"), name="space2.yaml")
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "no_input_logprobs,no_tokenize"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults2").trials[0]
    assert t.user_attrs["feasible"] is True, t.user_attrs.get("failure_message")
    assert "logprob-consistency" not in t.user_attrs["gate_checks"]
    assert "/tokenize answered HTTP 404" in t.user_attrs["gate_skipped"]["logprob-consistency"]
    assert tuner.leftovers() == {}


def test_slow_server_is_cut_at_the_probe_budget_and_fails_as_probe_cut(tuner):
    """A server that streams one token every 2 s: the probe ends each level at its share of
    probe.time-budget, instead of minutes per trial. No request finished: what streamed until then is the
    level's start, not a measurement, and the trial fails as probe_cut with the figures it had. Its
    stall-timeout (10 s here) is longer than the 2 s the server goes without a word: a slow server, not a
    hung one."""
    space = tuner.space(instant_space("faults", stall_timeout=10).replace("  warmup: 0\n",
                                                                        "  warmup: 0\n  time-budget: 6\n"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "slow_drip=2", "TUNER_SIM_STARTUP_SCALE": "0.5"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults").trials[0]
    assert t.state == TrialState.PRUNED and t.user_attrs["failure_kind"] == "probe_cut", t.user_attrs
    assert t.user_attrs["feasible"] is False and "output_throughput" not in t.user_attrs  # never an ok figure
    level = t.user_attrs["cut_level"]
    assert level["cut"] is True and level["completed"] == 0 and level["requests"] == 80
    assert 0 < level["output_throughput"] < 100
    assert t.user_attrs["probe_time_budget"] == 6
    assert "with 0 of 80 requests finished at concurrency 40" in t.user_attrs["failure_message"]
    assert t.user_attrs["stage_seconds"]["probe"] < 6 + 2
    assert tuner.leftovers() == {}


def test_pruner_stops_a_slow_server_once_it_cannot_catch_up_with_the_best(tuner):
    """After a healthy baseline, a configuration whose server drips tokens is stopped by the pruner at its
    first judged point, long before its budget."""
    space = tuner.space(FAULT_SPACE.replace("  warmup: 0\n", "  warmup: 0\n  time-budget: 120\n"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "slow_drip=0.5"})
    assert done.returncode == 0, done.stderr
    slow = tuner.study("faults").trials[1]
    assert slow.state == TrialState.PRUNED and slow.user_attrs.get("stopped_early"), slow.user_attrs
    assert slow.user_attrs["stage_seconds"]["probe"] < 60
    assert tuner.leftovers() == {}


def test_probe_prune_false_measures_a_slow_server_to_its_end(tuner):
    """The same slow server under `probe.prune: false`: measured until its budget, never stopped early; cut
    there before a request finished, it fails as probe_cut."""
    space = tuner.space(FAULT_SPACE.replace("  warmup: 0\n", "  warmup: 0\n  time-budget: 8\n  prune: false\n"))
    assert tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant").returncode == 0
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "slow_drip=0.5"})
    assert done.returncode == 0, done.stderr
    slow = tuner.study("faults").trials[1]
    assert slow.user_attrs["failure_kind"] == "probe_cut" and not slow.user_attrs.get("stopped_early"), \
        slow.user_attrs
    assert slow.user_attrs["cut_level"]["cut"] is True  # it ran to the end of its budget
    assert tuner.leftovers() == {}


def test_in_stream_error_events_are_failed_requests(tuner):
    """SGLang reports an error found after the response started as HTTP 200, an error event, then [DONE]:
    the probe counts those requests as failed, not as one-token successes."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "stream_error_rate=0.2"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("faults").trials[0]
    assert t.user_attrs["failure_kind"] == "errors_under_load", t.user_attrs.get("failure_message")
    assert "stream error: Internal server error" in t.user_attrs["failure_message"]
    assert tuner.leftovers() == {}


def test_a_server_killed_from_outside_is_said_to_be(tuner):
    """A SIGKILL the tuner did not send, with no fatal line before it, is named as such (the OOM killer's
    signature), never as a plain exit code."""
    space = tuner.space(FAULT_SPACE)
    proc = tuner.start("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                       env={"TUNER_SIM_FAULTS": "response_delay=0.2"})
    try:
        while not tuner.server_records():
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        os.kill(tuner.server_records()[0]["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    message = tuner.study("faults").trials[0].user_attrs["failure_message"]
    assert message.startswith("server killed by SIGKILL from outside the tuner; the kernel's OOM killer sends it"), message
    assert tuner.leftovers() == {}
