"""`tuner show` and the run's progress lines, as a person reads them, from a real study of the simulator."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO, Tuner, instant_space
from tuner.results._progress import summary
from tuner.results._results import distinct_ranked, eligible, is_measurement, winner
from tuner.search import load_study
from tuner.spec import parse_spec

# Triton attention "needs a newer GPU": every trial with it crashes at start, with a long exception line.
# CUDA graphs are off in nearly every trial, crashed or not: frequent among the crashes, but no cause.
CRASH = ("RuntimeError: the triton attention kernel for this head size requires SM100 (Blackwell); found SM90 "
         "on device 0")
SPACE = instant_space(
    "cause", server="  fixed: {trust-remote-code: true}\n",
    params="  attention-backend: {type: categorical, choices: [fa3, flashinfer, triton]}\n"
           "  disable-cuda-graph: {type: bool}\n"
           "  schedule-conservativeness: {type: categorical, choices: [0.5, 1.0, 1.5]}\n",
    baseline="{attention-backend: fa3, disable-cuda-graph: true, schedule-conservativeness: 1.0}")
QUEUED = [("flashinfer", True, 0.5), ("triton", True, 1.0), ("fa3", False, 1.5), ("triton", True, 0.5),
          ("flashinfer", True, 1.5), ("triton", True, 1.5), ("fa3", True, 0.5)]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    t = Tuner(tmp_path_factory.mktemp("show"))
    from tuner.sim import __file__ as sim_file

    profile = yaml.safe_load((Path(sim_file).parent / "profiles" / "instant.yaml").read_text())
    profile["health"] = [{"when": {"decode_backend": "triton"}, "effect": "crash_on_start", "message": CRASH}]
    (t.folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    run = ("run", "--space", str(t.space(SPACE)), "--simulate", "profile.yaml")
    try:
        done = t.run(*run, "--trials", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        s = t.study("cause")
        for backend, graphs_off, conservativeness in QUEUED:
            s.enqueue_trial({"attention-backend": backend, "disable-cuda-graph": graphs_off,
                             "schedule-conservativeness": conservativeness})
        done = t.run(*run, "--trials", "8")
        assert done.returncode == 0, done.stderr[-3000:]
        t.progress = done.stderr
        yield t
    finally:
        t.end_leftovers()


def test_failures_are_attributed_to_what_the_search_blames(study):
    crashed = [t for t in study.study("cause").get_trials() if t.user_attrs.get("failure_kind") == "crash_on_start"]
    assert sorted(t.number for t in crashed) == [2, 4, 6]
    out = study.run("show", env={"COLUMNS": "200"}).stdout
    assert ("\nfailures, and the values the search blames (knowledge export writes the same):\n"
            "  crash_on_start: 3 trial(s)\n"
            "    `attention-backend: triton` crashes at start (3 failed trials: 2, 4, 6; none ran fine with it)\n"
            ) in out
    # Graphs off in nearly every trial, crashed or not: it ran fine, so it is not blamed.
    assert "disable-cuda-graph: true" not in out


def test_a_failure_whose_every_value_ran_elsewhere_blames_nothing():
    """Two flags that each ran, failing together: the search blames nothing in particular, and show says so."""
    import optuna

    from tuner.results._show import failure_breakdown

    dist = {"attention-backend": optuna.distributions.CategoricalDistribution(["fa3", "flashinfer"]),
            "disable-cuda-graph": optuna.distributions.CategoricalDistribution([False, True])}
    trials = []
    for number, (backend, graphs_off, kind) in enumerate([("fa3", False, None), ("flashinfer", True, None),
                                                          ("flashinfer", False, "crash_on_start")]):
        attrs = {"failure_kind": kind, "failure_message": "boom"} if kind else {"feasible": True}
        trial = optuna.trial.create_trial(
            params={"attention-backend": backend, "disable-cuda-graph": graphs_off}, distributions=dist,
            value=None if kind else 1.0, state=TrialState.PRUNED if kind else TrialState.COMPLETE, user_attrs=attrs,
            system_attrs={"constraints": (1.0 if kind else 0.0,)})
        trial.number = number
        trials.append(trial)
    assert failure_breakdown(trials) == ("failures:\n  crash_on_start: 1 trial(s); trial 2 blames nothing in "
                                         "particular (every value in it ran fine elsewhere)")
    # A missed SLO blames what never ran too, for the search; it says more of the workload than of the flags, so
    # knowledge export leaves it out, and show says so.
    slo = optuna.trial.create_trial(
        params={"attention-backend": "fa3", "disable-cuda-graph": True, "max-running-requests": 256},
        distributions={**dist, "max-running-requests": optuna.distributions.CategoricalDistribution([64, 256])},
        state=TrialState.PRUNED,
        user_attrs={"failure_kind": "slo_violation", "failure_message": "p99_ttft_ms 900 > 500"},
        system_attrs={"constraints": (1.0,)})
    slo.number = 3
    assert failure_breakdown([*trials, slo], width=200).splitlines()[-1] == (
        "    `max-running-requests: >= 256` may miss the SLO (1 failed trial: 3; none ran fine with it) (not carried "
        "to later studies)")


def test_show_fits_the_terminal_and_keeps_whole_messages(study):
    out = study.run("show", env={"COLUMNS": "100"}).stdout
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert lines[0].startswith("study 'cause' (sqlite:///trials.db), 8 trials; winner: trial ") and lines[1] == ""
    header = lines[2].split()
    assert header[:3] == ["trial", "outcome", "out"] and "differs from trial" in lines[2]
    rows = lines[3:11]
    throughput = [re.findall(r"\s(\d+\.\d+|-)\s", row)[0] for row in rows]
    assert all(v == "-" or re.fullmatch(r"\d+\.\d", v) for v in throughput), throughput  # one precision
    assert sum(v == "-" for v in throughput) == 3
    # The whole crash message, once for the three trials that had it, wrapped at words.
    messages = out[out.index("messages:"):]
    # The simulator, as SGLang, SIGKILLs its own process tree after a scheduler exception: said so, with the
    # exception line, not the traceback's first line.
    assert "trials 2, 4, 6 (crash_on_start): RuntimeError: the triton attention" in messages
    assert "(server ended itself with SIGKILL after a fatal error)" in " ".join(messages.split())
    assert " ".join(messages.split()).count(CRASH) == 1
    winner = next(line for line in lines if line.startswith("winner: "))
    assert winner.startswith("winner: trial ") and "not confirmed" in winner
    wide = study.run("show", "--wide").stdout.splitlines()[2].split()
    assert {"attention-backend", "disable-cuda-graph", "schedule-conservativeness"} <= set(wide)


def test_progress_lines_count_and_shorten_messages_at_a_word(study):
    lines = [line for line in study.progress.splitlines() if re.match(r"\[\d/8\] trial", line)]
    assert [line[:5] for line in lines] == [f"[{n}/8]" for n in range(2, 9)]  # trial 0 ran in the first run
    assert "elapsed, ~" in lines[0] and lines[-1].endswith("elapsed")
    crash = [line for line in lines if " crash_on_start " in line]
    assert len(crash) == 3
    full = f"{CRASH} (server ended itself with SIGKILL after a fatal error)"
    for line in crash:
        shown = re.search(r"crash_on_start +(.*?) +\d+\.\ds  best", line).group(1)
        assert shown.endswith(" ...") and full.startswith(shown.removesuffix(" ..."))
        assert full[len(shown) - 4] == " ", shown  # cut before a word, never inside one
    # On resume, "best" is over the whole study: the baseline of the first run counts.
    first, second = study.study("cause").get_trials()[:2]
    best = max((first, second), key=lambda t: t.value)
    assert f"best {best.value:.1f} (trial {best.number})" in lines[0], lines[0]


def test_run_summary_names_the_gain_over_the_baseline_and_next_steps(study):
    trials = study.study("cause").get_trials()
    base = trials[0]
    best = max((t for t in trials if t.user_attrs["feasible"]), key=lambda t: t.value)
    before, after = base.user_attrs["output_throughput"], best.user_attrs["output_throughput"]
    summary = study.progress[study.progress.index("8 trials: 5 qualified; crash_on_start 3"):]
    assert f"winner: trial {best.number}, not confirmed: output_throughput {after:,.1f} from one run" in summary
    if best.number != base.number:  # (the instant profile's speeds are noise: the baseline may win)
        assert (f"  {(after - before) / before:+.0%} over the baseline (trial 0): {before:,.0f} -> {after:,.0f} "
                "tok/s") in summary
    else:
        assert "over the baseline" not in summary
    steps = summary[summary.index("next:"):].splitlines()[1:]
    assert [s.split()[:4] for s in steps] == [
        ["python", "-m", "tuner", "confirm"], ["python", "-m", "tuner", "export"], ["python", "-m", "tuner", "report"],
        ["optuna-dashboard", "sqlite:///trials.db", "--artifact-dir", "runs/artifacts"]]


def test_show_prints_the_workload_as_the_server_counted_it(study):
    """No tokenizer.json in /models/instant: lengths are words, as the run's first screen said."""
    assert ("probe lengths are words, not tokens: no tokenizer.json in /models/instant; each trial records the "
            "prompt tokens the server counted") in study.progress.splitlines()
    out = study.run("show", env={"COLUMNS": "300"}).stdout
    line, = [line for line in out.splitlines() if line.startswith("workload as sent")]
    best = int(re.search(r"winner: trial (\d+)", out).group(1))
    a = study.study("cause").trials[best].user_attrs
    assert line == (f"workload as sent (trial {best}, concurrency 40): 80 requests, prompt {a['prompt_tokens_min']:.0f}-"
                    f"{a['prompt_tokens_max']:.0f} tokens (mean {a['prompt_tokens_mean']:.1f}, server-counted), output "
                    f"24 tokens; probe.input-len counts words (no tokenizer.json in /models/instant)")
    assert a["prompt_tokens_min"] > 16  # 16 words: more tokens than words, by the simulator's count


def test_show_reads_studies_from_before_per_request_figures():
    """Old trials kept only the level's totals: show gives their mean a request."""
    import optuna

    from tuner.results._show import workload_as_sent

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
        "concurrency": 128, "completed": 384, "total_input_tokens": 470400, "total_output_tokens": 49152}))
    assert workload_as_sent(study.user_attrs, None, study.trials) == (
        "workload as sent (trial 0, concurrency 128): 384 requests, prompt 1225.0 tokens a request (level total), "
        "output 128.0 tokens a request; probe.input-len counts words")


def test_an_old_studys_probe_cut_short_is_no_measurement(tmp_path):
    """Trial 27 of the first real GPU study was recorded COMPLETE and ok at 132 tok/s: its level was cut at its
    time budget with 0 of 384 requests finished. Read back today it is probe_cut: not ok, neither the best nor a
    candidate of confirm, and `show` names the budget that would have fitted. Read from a copy."""
    shutil.copyfile(REPO / "docs" / "gpu-sglang-0517" / "trials.db", tmp_path / "trials.db")
    storage = f"sqlite:///{tmp_path / 'trials.db'}"
    study = load_study(storage, None)
    cut = study.trials[27]
    assert cut.state == TrialState.COMPLETE and cut.user_attrs["feasible"] is True  # as recorded
    assert not is_measurement(cut, study)
    assert all(is_measurement(t, study) for t in study.trials if t.number != 27)
    assert 27 not in {t.number for t in eligible(study)}
    assert 27 not in {t.number for t in distinct_ranked(study)}  # confirm --top K takes its candidates from these
    assert winner(study).trial.number == 6
    assert summary(study, parse_spec(study.user_attrs["space_source"], "stored", recorded=True)).startswith(
        "31 trials: 11 qualified; ")
    out = Tuner(tmp_path).run("show", "--storage", storage, env={"COLUMNS": "200"}).stdout
    row, = [line for line in out.splitlines() if line.startswith("   27  ")]
    assert row.split()[1:6] == ["probe_cut", "-", "-", "-", "182.7"], row  # its time, no figure
    assert ("trial 27 (probe_cut): probe cut at its 120 s budget (79 s for this level) with 0 of 384 requests "
            "finished at concurrency 128, at least 128 needed: not a measurement; probe.time-budget: 720 would fit "
            "(estimated from 132 tok/s)") in " ".join(out.split())
    assert "  probe_cut: 1 trial(s)" in out
