"""`tuner confirm`: the best trials re-measured on fresh servers; a lucky single measurement must not win.

The simulator draws its speed noise once per server start. To make "the first ranking was decided by luck"
certain instead of likely, the test's own profile first gives triton attention a speed it does not really have
(the lucky draw), the study runs, then the profile file is corrected before `confirm` starts its servers (every
start reads the profile again). With the real speeds fa3 > flashinfer > triton, well apart compared with the
profile's 2 % per-start noise, the medians of three fresh starts put the baseline (fa3) first.
"""

from __future__ import annotations

import json
import statistics
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


def _profile(path: Path, triton_speed: float) -> None:
    """Llama 8B on one H200 made attention-bound (small weights, large KV), so that the backend decides speed."""
    import tuner.sim

    p = yaml.safe_load((Path(tuner.sim.__file__).parent / "profiles" / "llama3-8b-h200.yaml").read_text())
    p["name"] = "lucky"
    p["startup"] = {k: 0 for k in p["startup"]}
    p["noise"]["relative"] = 0.02  # fresh per start: TUNER_SIM_SEED is not set
    p["model"]["weight_gb_sharded"] = 1.0
    p["model"]["kv_bytes_per_token_per_layer"] = {"bfloat16": 65536}
    p["model"]["attn_flops_per_token_ctx"] = 524288 * 20
    p["performance"]["attention_backends"].update({"fa3": 1.0, "flashinfer": 0.8, "triton": triton_speed})
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
    # Nine fresh servers, each in its own folder, none left running.
    assert len(list((tuner.folder / "runs" / "lucky").glob("confirm-*-*"))) == 9
    assert tuner.leftovers() == {}

    # One winner everywhere, marked confirmed, with its median: export (and its file), show, the report, the run
    # summary (a run of the finished study prints it).
    done = tuner.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    assert f"wrote best.yaml: {described}" in done.stderr
    text = (tuner.folder / "best.yaml").read_text()
    assert text.startswith(f"# Best configuration of study 'lucky': {described}")
    assert f"# medians at concurrency 8: output_throughput {figures['median']:.1f}, " in text
    medians = figures["figures"]
    assert f"p99_ttft_ms {medians['p99_ttft_ms']:.1f}" in text
    assert yaml.safe_load(text)["attention-backend"] == "fa3"
    record = json.loads(tuner.run("export", "--format", "json").stdout)
    assert record["number"] == winner and record["confirmed"] is True
    assert record["figures"]["output_throughput"] == figures["median"]
    show = tuner.run("show", env={"COLUMNS": "200"}).stdout
    assert f"winner: {described}" in show
    report = tuner.run("report")
    assert report.returncode == 0, report.stderr
    assert f"Winner: {described}" in (tuner.folder / "report" / "index.html").read_text()
    again = tuner.run(*run, "--trials", "3", env=REAL_TIME)
    assert again.returncode == 0, again.stderr
    assert f"winner: {described}" in again.stderr
    assert "nothing to run: --trials is the total the study should have, and it has 3; to add 20 more, run " \
           "the same command with --trials 23" in again.stderr
    assert "python -m tuner confirm" not in again.stderr.split("winner: ", 1)[1]  # done already


def test_bootstrap_is_sure_of_separated_runs_and_not_of_overlapping_ones():
    from tuner._certainty import SURE, compare

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
