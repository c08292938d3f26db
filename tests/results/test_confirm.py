"""`tuner confirm`: the best trials re-measured on fresh servers; a lucky single measurement must not win.

The simulator draws its speed noise once per server start. To make "the first ranking was decided by luck"
certain instead of likely, the test's own profile first gives triton attention a speed it does not really have
(the lucky draw), the study runs, then the profile file is corrected before `confirm` starts its servers (every
start reads the profile again). With the real speeds fa3 > flashinfer > triton, well apart compared with the
profile's 2 % per-start noise, the medians of three fresh starts put the baseline (fa3) first.
"""

from __future__ import annotations

import html
import json
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from conftest import instant_space

LUCKY_SPACE = instant_space("lucky", model="/models/lucky", stall_timeout=5, probe_timeout=10,
                            params="  attention-backend: {type: categorical, choices: [fa3, flashinfer, triton]}\n",
                            baseline="{attention-backend: fa3}", concurrency=8, requests=16, input_len=512,
                            output_len=32)
# Real time: the throughputs are the simulated server's, not those of a machine racing through sleeps.
# (`confirm` does not apply the run's default TUNER_SIM_TIME_SCALE, so it is set for both.)
REAL_TIME = {"TUNER_SIM_TIME_SCALE": "1"}


def _profile(path: Path, triton_speed: float, noise: float = 0.02, speeds: dict[str, float] | None = None) -> None:
    """Llama 8B on one H200 made attention-bound (small weights, large KV), so that the backend decides speed."""
    import tuner.sim

    p = yaml.safe_load((Path(tuner.sim.__file__).parent / "profiles" / "llama3-8b-h200.yaml").read_text())
    p["name"] = "lucky"
    p["startup"] = {k: 0 for k in p["startup"]}
    p["noise"]["relative"] = noise  # fresh per start: TUNER_SIM_SEED is not set
    p["model"]["weight_gb_sharded"] = 1.0
    p["model"]["kv_bytes_per_token_per_layer"] = {"bfloat16": 65536}
    p["model"]["attn_flops_per_token_ctx"] = 524288 * 20
    p["performance"]["attention_backends"].update({"fa3": 1.0, "flashinfer": 0.8, "triton": triton_speed,
                                                   **(speeds or {})})
    path.write_text(yaml.safe_dump(p))


def test_confirm_reranks_a_lucky_first_measurement_and_export_prefers_the_confirmed(tuner):
    profile = tuner.folder / "lucky.yaml"
    _profile(profile, triton_speed=2.0)  # the lucky draw
    space = tuner.space(LUCKY_SPACE)
    run = ("run", "--space", str(space), "--simulate", str(profile))
    done = tuner.run(*run, "--trials", "1", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("lucky")
    study.enqueue_trial({"attention-backend": "flashinfer"})
    study.enqueue_trial({"attention-backend": "triton"})
    done = tuner.run(*run, "--trials", "3", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = tuner.study("lucky").get_trials()
    assert [t.params["attention-backend"] for t in trials] == ["fa3", "flashinfer", "triton"]
    assert all(t.user_attrs["feasible"] for t in trials)
    single = max(trials, key=lambda t: t.value)
    assert single.params["attention-backend"] == "triton", [(t.number, t.value) for t in trials]

    _profile(profile, triton_speed=0.6)  # what triton really does
    done = tuner.run("confirm", "--top", "3", "--repeats", "3", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("lucky")
    confirmations = study.user_attrs["confirmations"]
    assert sorted(confirmations) == ["0", "1", "2"]
    for number, c in confirmations.items():
        assert len(c["values"]) == 3 and c["failures"] == [], (number, c)
        assert c["median"] == statistics.median(c["values"])
    best_median = max(confirmations, key=lambda n: confirmations[n]["median"])
    winner = study.user_attrs["confirmed_winner"]
    assert winner == int(best_median)
    assert winner != single.number, "the lucky trial kept its place"
    assert trials[winner].params["attention-backend"] == "fa3"
    figures = confirmations[str(winner)]
    described = (f"trial {winner}, confirmed: median output_throughput {figures['median']:,.1f} over 3 fresh servers "
                 f"(spread {(max(figures['values']) - min(figures['values'])) / figures['median']:.1%})")
    assert f"winner: {described}" in done.stderr
    # Every run of the winner beat every run of the others: sure of it, no tie to report on any screen below.
    runner_up = sorted(confirmations, key=lambda n: confirmations[n]["median"])[-2]
    assert f"  vs trial {runner_up} (median " in done.stderr and f"P(trial {winner} better) 1.00" in done.stderr
    assert confirmations[runner_up]["versus_winner"]["p_better"] == 1.0
    # Nine fresh servers, each in its own folder, none left running.
    assert len(list((tuner.folder / "runs" / "lucky").glob("confirm-*-*"))) == 9
    assert tuner.leftovers() == {}

    # One winner everywhere, marked confirmed, with its median: export (and its file), show, the report, the run
    # summary (a run of the finished study prints it).
    done = tuner.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    assert f"wrote best.yaml: {described}" in done.stderr
    screens = [done.stderr]
    text = (tuner.folder / "best.yaml").read_text()
    assert text.startswith(f"# Best configuration of study 'lucky': {described}")
    assert f"# medians at concurrency 8: output_throughput {figures['median']:.1f}, " in text
    medians = figures["figures"]
    assert f"p99_ttft_ms {medians['p99_ttft_ms']:.1f}" in text
    assert yaml.safe_load(text)["attention-backend"] == "fa3"
    record = json.loads(tuner.run("export", "--format", "json").stdout)
    assert record["number"] == winner and record["confirmed"] is True
    assert record["figures"]["output_throughput"] == pytest.approx(figures["median"])
    # Its value is the confirmed median, as best.yaml's, not the trial's one run.
    assert record["metric"] == "output_throughput" and record["value"] == pytest.approx(figures["median"])
    assert record["value_from"] == "median of 3 fresh servers" and record["value"] != record["values"][0]
    show = tuner.run("show", env={"COLUMNS": "200"}).stdout
    assert f"winner: {described}" in show
    screens += [text, show]
    report = tuner.run("report")
    assert report.returncode == 0, report.stderr
    assert f"Winner: {described}" in (tuner.folder / "report" / "index.html").read_text()
    again = tuner.run(*run, "--trials", "3", env=REAL_TIME)
    assert again.returncode == 0, again.stderr
    assert f"winner: {described}" in again.stderr
    assert "nothing to run: --trials is the total the study should have, and it has 3; to add 20 more, run " \
           "the same command with --trials 23" in again.stderr
    assert "python -m tuner confirm" not in again.stderr.split("winner: ", 1)[1]  # done already
    screens += [again.stderr, (tuner.folder / "report" / "index.html").read_text()]
    assert not [screen for screen in screens if "within the noise" in screen]


def test_bootstrap_is_sure_of_separated_runs_and_not_of_overlapping_ones():
    from tuner.results._certainty import SURE, compare

    # Every run of the winner above every run of the other: no resample reverses them.
    apart = compare([1010.0, 1020.0, 1030.0], [990.0, 995.0, 1000.0])
    assert apart.p_better == 1.0 and not apart.within_noise
    assert apart.lead == pytest.approx(25 / 995) and 0 < apart.low <= apart.lead <= apart.high
    # The pair: 1.2% apart, with a winner whose own runs spread 7.7%.
    close = compare([1900.0, 1973.9, 2052.0], [1930.0, 1950.3, 1990.0])
    assert 0.5 < close.p_better < SURE and close.within_noise
    assert close.low < 0 < close.lead < close.high
    # Seeded: the same runs give the same verdict every time.
    assert compare([1900.0, 1973.9, 2052.0], [1930.0, 1950.3, 1990.0]) == close
    # Lower is better (a latency objective): the same runs read the other way round.
    latency = compare([990.0, 995.0, 1000.0], [1010.0, 1020.0, 1030.0], maximize=False)
    assert latency.p_better == 1.0 and latency.lead == pytest.approx(25 / 1020)


# The simulator draws its per-start noise at random (or, seeded, the same for every start of a configuration), so
# whether two equally fast configurations' runs overlap would be luck. This launcher makes it certain: it starts
# the real simulator with a profile chosen by the repeat its folder names (confirm-<trial>-<repeat>), each repeat
# 8% faster or slower for both configurations alike; the trials of `run` get the middle one.
LAUNCHER = """\
import os, re, sys
from pathlib import Path

repeat = re.fullmatch(r"confirm-\\d+-(\\d+)", Path.cwd().name)
os.environ["TUNER_SIM_PROFILE"] = str(Path(__file__).parent / f"even-{repeat.group(1) if repeat else 2}.yaml")
os.execv(sys.executable, [sys.executable, "-m", "tuner.sim", *sys.argv[1:]])
"""
REPEAT_SPEED = (1.08, 0.92, 1.0)


def test_confirm_reports_two_near_identical_configurations_as_a_tie_on_every_screen(tuner):
    (tuner.folder / "launch.py").write_text(LAUNCHER)
    for repeat, speed in enumerate(REPEAT_SPEED):  # no noise of its own: only the repeat's speed varies
        _profile(tuner.folder / f"even-{repeat}.yaml", triton_speed=0.6, noise=0.0,
                 speeds={"fa3": speed, "flashinfer": 1.01 * speed})
    (tuner.folder / "model").mkdir()
    space = tuner.space(LUCKY_SPACE.replace("name: lucky", "name: even").replace(
        "model-path: /models/lucky", f"model-path: {tuner.folder / 'model'}\n"
        f"  command: [{sys.executable}, {tuner.folder / 'launch.py'}]")
                        + "try-first: [{attention-backend: flashinfer}]\n")
    run = ("run", "--space", str(space))
    done = tuner.run(*run, "--trials", "2", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]

    done = tuner.run("confirm", "--top", "2", "--repeats", "3", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]
    # Progress over the whole confirm: server i of 6, the time so far, an estimate of the time left until the last.
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert [line[:5] for line in progress] == [f"[{i}/6]" for i in range(1, 7)], done.stderr
    assert all(" elapsed, ~" in line and line.endswith(" left") for line in progress[:-1]), progress
    assert progress[-1].endswith(" elapsed") and "left" not in progress[-1]
    assert tuner.leftovers() == {}

    study = tuner.study("even")
    winner = study.user_attrs["confirmed_winner"]
    other = 1 - winner
    versus = study.user_attrs["confirmations"][str(other)]["versus_winner"]
    assert versus["p_better"] < 0.9 and versus["low"] < 0 < versus["high"], versus
    assert "versus_winner" not in study.user_attrs["confirmations"][str(winner)]
    tie = f"within the noise: trial {winner} is not reliably better than trial {other} (P < 0.9)"
    command = "python -m tuner confirm --top 2 --repeats 6"
    vs = f"vs trial {other} (median "
    assert tie in done.stderr and f"  {command}\n" in done.stderr and vs in done.stderr

    # Every screen that names the winner says so. The command carries --storage and --study as every next step
    # does (target_args): where a plain command would not find this study. The storage's only study needs no
    # --study, even where the user passed one; a storage other than the default is named.
    show = tuner.run("show", "--study", "even", env={"COLUMNS": "200"}).stdout
    assert show.splitlines()[0].startswith(f"study 'even' (sqlite:///trials.db), 2 trials; winner: trial {winner} ")
    assert tie in show and f"    {command}\n" in show and vs in show
    storage = f"sqlite:///{tuner.folder / 'trials.db'}"
    done = tuner.run("export", "--out", "best.yaml", "--storage", storage)
    assert tie in done.stderr and f"{command} --storage {storage}\n" in done.stderr
    # The first line names the study and the trial, how sure confirm is follows it, the launch command alone on
    # stdout.
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"study 'even' ({storage}): wrote best.yaml: trial {winner}, confirmed"), lines[0]
    assert lines[1].startswith(f"  vs trial {other} (median ") and lines[-1] == "launch it with:", lines
    assert done.stdout.count("\n") == 1 and "--config best.yaml" in done.stdout and "within" not in done.stdout
    header = (tuner.folder / "best.yaml").read_text().split("\n# medians at concurrency", 1)[0]
    assert f"#   {tie}" in header and f"#     {command} --storage {storage}" in header
    rivals = json.loads(tuner.run("export", "--format", "json").stdout)["confirm_rivals"]
    assert [(r["number"], r["within_noise"]) for r in rivals] == [(other, True)]
    assert tuner.run("report").returncode == 0
    page = (tuner.folder / "report" / "index.html").read_text()
    assert html.escape(tie) in page and f"<code>{command}</code>" in page
    again = tuner.run(*run, "--trials", "2", env=REAL_TIME)  # the run's last screen: its study named
    assert again.returncode == 0, again.stderr
    assert tie in again.stderr and f"    {command}\n" in again.stderr


def test_confirm_trials_re_measures_the_named_trials_and_refuses_one_that_cannot_be(tuner):
    """`--trials 2,0`: the winner against the baseline, say, whatever the ranking; a trial that failed or does not
    exist is refused in one line that lists those that can be confirmed, and nothing is written."""
    profile = tuner.folder / "lucky.yaml"
    _profile(profile, triton_speed=0.6)
    space = tuner.space(LUCKY_SPACE + "try-first: [{attention-backend: flashinfer}, {attention-backend: triton}]\n")
    done = tuner.run("run", "--space", str(space), "--simulate", str(profile), "--trials", "3", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]

    refused = tuner.run("confirm", "--trials", "2,7", "--repeats", "1", env=REAL_TIME)
    assert refused.returncode != 0
    assert "trial(s) 7 cannot be confirmed" in refused.stderr and "choose among: " in refused.stderr
    assert "confirmations" not in tuner.study("lucky").user_attrs
    assert tuner.run("confirm", "--trials", "two", env=REAL_TIME).returncode == 2

    done = tuner.run("confirm", "--trials", "2,0", "--repeats", "1", env=REAL_TIME)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "confirm: trials 2, 0 on 1 fresh server(s) each, 2 in all" in done.stderr
    assert set(tuner.study("lucky").user_attrs["confirmations"]) == {"0", "2"}
    assert tuner.leftovers() == {}
