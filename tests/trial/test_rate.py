"""Open-loop rate levels, goodput and the max_rate_under_slo objective, against the real simulator."""

from __future__ import annotations

import math
import re
import statistics

import optuna
import pytest
from optuna_dashboard._note import get_note_from_system_attrs

from conftest import REPO, instant_space
from test_bad_input import assert_refused
from tuner.trial._arrivals import send_offsets
from tuner._failures import TrialFailure
from tuner.trial._goodput import goodput, steady_output_throughput
from tuner.trial._probe import RequestResult, run_probe
from tuner.search._pruner import BehindTheBest
from tuner.trial._ratesearch import Bracket
from tuner.spec._spec import ProbeSpec
from tuner.engines import get_engine


def get_note(study, trial) -> str:
    return get_note_from_system_attrs(study._storage.get_study_system_attrs(study._study_id), trial._trial_id)["body"]


def test_arrivals_are_seeded_and_offer_the_rate_asked_for():
    poisson = send_offsets(400, 20.0, 1.0, seed=3)
    assert poisson == send_offsets(400, 20.0, 1.0, seed=3) != send_offsets(400, 20.0, 1.0, seed=4)
    assert poisson[-1] == pytest.approx(400 / 20.0)  # scaled to n/rate, as vLLM's client does
    gaps = {b: [y - x for x, y in zip(o, o[1:])]
            for b in (0.2, 1.0, 8.0) for o in [send_offsets(400, 20.0, b, seed=3)]}
    cv = {b: statistics.pstdev(g) / statistics.mean(g) for b, g in gaps.items()}
    assert cv[0.2] > cv[1.0] > cv[8.0]  # burstiness < 1 clumps arrivals, > 1 spreads them evenly
    assert 0.8 < cv[1.0] < 1.2  # exponential gaps


def _done(sent_at: float, ttft: float, latency: float, tokens: int, ok: bool = True) -> RequestResult:
    return RequestResult(started=True, ok=ok, sent_at=sent_at, ttft=ttft, latency=latency, output_tokens=tokens,
                         chunk_times=[sent_at + ttft + (latency - ttft) * i / max(tokens - 1, 1)
                                      for i in range(tokens)])


def test_goodput_uses_sglang_definitions():
    results = [_done(0, 0.1, 1.1, 11),  # TPOT (1.1 - 0.1) / 10 = 100 ms
               _done(0, 0.5, 0.9, 5),  # TTFT 500 ms misses
               _done(0, 0.2, 0.2, 1),  # one token: TPOT 0, meets
               _done(0, 0, 0, 0, ok=False)]  # failed: sent, never good
    g = goodput(results, {"ttft": 300, "tpot": 100}, duration=2.0)
    assert g["request_goodput"] == 1.0 and g["slo_attainment"] == 0.5
    assert g["slo_attainment_ttft"] == 0.5 and g["slo_attainment_tpot"] == 0.75


def test_steady_state_leaves_out_ramp_up_and_drain():
    # Ten requests overlap on [1, 2]; one straggler runs alone to t=10 and a ramp-up one from t=0.
    results = [_done(1.0, 0.1, 1.0, 10) for _ in range(10)] + [_done(0.0, 0.1, 10.0, 10)]
    rate, seconds = steady_output_throughput(results)
    assert seconds == pytest.approx(1.0)
    assert rate > 100 > sum(r.output_tokens for r in results) / 10.0


def test_bracket_brackets_then_bisects_to_the_precision():
    capacity = 37.0
    b = Bracket(start=100.0, precision=0.05)
    while (rate := b.next_rate()) is not None:
        b.record(rate, rate <= capacity)
    assert b.low <= capacity < b.high <= b.low * 1.05
    assert len(b.tested) <= 8
    nothing = Bracket(start=100.0, precision=0.05)
    while (rate := nothing.next_rate()) is not None:
        nothing.record(rate, False)
    assert nothing.low is None and min(nothing.tested) >= 100.0 / 64


def test_pruner_stops_a_search_whose_lowest_miss_is_not_above_the_best_rate():
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=10.0, user_attrs={"feasible": True}))
    assert BehindTheBest._rate_search(study, upper=10.0)  # can end no higher than the best: cannot win
    assert not BehindTheBest._rate_search(study, upper=10.5)
    assert not BehindTheBest._rate_search(study, upper=math.inf)  # nothing missed yet


def _probe(url: str, spec: ProbeSpec, **kw):
    return run_probe(url, {}, get_engine("sglang"), spec, alive=lambda: None, **kw)


@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_open_loop_level_times_from_the_scheduled_send(start_sim):
    """A cap of one request in flight at a rate the delayed server cannot keep: the client sends on time
    (small lateness), but later requests wait for the cap, and that wait is in their TTFT."""
    server = start_sim(faults="response_delay=0.1")
    spec = ProbeSpec(concurrency=(1,), requests=12, input_len=8, output_len=4, warmup=0, check_tokens=0,
                     rates=(40.0,), max_in_flight=1, request_timeout=10, max_send_lateness=0.05)
    found = _probe(server.url, spec, rate_search=None)
    level = next(m for m in found.levels if m.rate == 40.0)
    assert level.concurrency == 1 and level.completed == 12
    assert level.extra["send_lateness_p90_ms"] < 50
    # 12 requests due within 0.3 s, served one at a time at >= 0.1 s each: the last waited ~1 s in the queue.
    assert level.latency_ms["p99_ttft_ms"] > 600
    assert "steady_output_throughput" in level.as_dict() and level.as_dict()["rate"] == 40.0


def test_a_client_that_cannot_keep_the_rate_fails_as_the_clients_problem(start_sim):
    server = start_sim()
    spec = ProbeSpec(concurrency=(1,), requests=200, input_len=8, output_len=4, warmup=0, check_tokens=0,
                     rates=(100_000.0,), request_timeout=10, max_send_lateness=1e-6)
    with pytest.raises(TrialFailure) as caught:
        _probe(server.url, spec)
    assert caught.value.kind.value == "client_too_slow" and not caught.value.kind.blames_config
    assert "the client, not the server" in caught.value.message


RATE_OBJECTIVE = """objective:
  metric: max_rate_under_slo
  slo: {slo}
  attainment: 0.9
  precision: 0.1
  seconds-per-rate: 1
  search-budget: 20
"""


@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_slo_met_at_no_rate_is_infeasible_with_the_closest_attainment(tuner):
    space = tuner.space(instant_space("rate", concurrency=4, requests=8, probe_timeout=5)
                        + RATE_OBJECTIVE.format(slo="{ttft: 100}"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "response_delay=0.3"})
    assert done.returncode == 0, done.stderr
    t = tuner.study("rate").trials[0]
    assert t.user_attrs["failure_kind"] == "slo_unreachable"
    assert "closest: 0.0%" in t.user_attrs["failure_message"]
    assert "missed" in t.user_attrs["failure_evidence"]  # the table of tested rates
    assert all(not step["passed"] for step in t.user_attrs["rate_search"]["steps"])
    assert tuner.leftovers() == {}


@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_max_rate_under_slo_end_to_end_on_the_8b_profile(tuner):
    """The simulated 8B server has a finite capacity: the search brackets it, every tested rate is kept,
    the pruner heard each, the note shows them; the report draws the curves, export states the SLO and the
    rate, confirm searches again on a fresh server."""
    space = tuner.space(instant_space("rate8b", model="meta-llama/Llama-3.1-8B-Instruct", concurrency=32,
                                      requests=64, input_len=256, output_len=32, probe_timeout=20, stall_timeout=30)
                        + RATE_OBJECTIVE.format(slo="{ttft: 400, tpot: 40}"))
    # At a tenth of real time the rates stay within what the probe can send from a shared 2-core machine.
    speed = {"TUNER_SIM_TIME_SCALE": "0.1"}
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "llama3-8b-h200", env=speed)
    assert done.returncode == 0, done.stderr
    t = tuner.study("rate8b").trials[0]
    assert t.user_attrs["failure_kind"] == "none", t.user_attrs.get("failure_message")
    search = t.user_attrs["rate_search"]
    assert t.value == search["rate"] == t.user_attrs["max_rate_under_slo"] > 0
    steps = search["steps"]
    assert any(s["passed"] for s in steps) and any(not s["passed"] for s in steps)
    assert all(s["slo_attainment"] >= 0.9 for s in steps if s["passed"])
    assert search["upper"] is None or search["upper"] > search["rate"]
    assert len(t.intermediate_values) == len(steps)  # each tested rate reported to the pruner
    note = get_note(tuner.study("rate8b"), t)
    # Every tested rate, in order: the note prints three decimals of the rate, the attribute keeps four.
    noted = [float(r) for r in re.findall(r"^rate +([0-9.]+)/s", note, re.MULTILINE)]
    assert "Highest rate under the SLO" in note and noted == pytest.approx([s["rate"] for s in steps], abs=1e-3)

    assert tuner.run("report").returncode == 0
    assert (tuner.folder / "report" / "rates.png").stat().st_size > 0
    assert "SLO attainment and p99 TTFT against request rate" in (tuner.folder / "report" / "index.html").read_text()
    assert tuner.run("export", "--out", "best.yaml").returncode == 0
    header = (tuner.folder / "best.yaml").read_text()
    assert "# SLO: ttft<=400ms tpot<=40ms for 90.0% of requests" in header
    assert f"# sustained {t.value:.3g} requests/s under it" in header
    done = tuner.run("confirm", "--top", "1", "--repeats", "1", env=speed)
    assert done.returncode == 0, done.stderr
    again = tuner.study("rate8b").user_attrs["confirmations"]["0"]
    assert not again["failures"] and 0.5 * t.value < again["values"][0] < 2 * t.value


@pytest.mark.parametrize("objective, expected", [
    ("{metric: max_rate_under_slo, slo: {ttfb: 100}}", "objective.slo.ttfb: is not an SLO metric"),
    ("{metric: max_rate_under_slo, slo: {ttft: 100}, attainment: 1.5}", "objective.attainment: 1.5 is outside (0, 1]"),
    ("{metric: max_rate_under_slo, slo: {ttft: 100}, attainment: 0}", "is outside (0, 1]"),
    ("{metric: max_rate_under_slo, slo: {ttft: 100}, search-budget: 10, seconds-per-rate: 30}",
     "objective.search-budget: 10 s is too short for one rate of 30 s"),
    ("{metric: max_rate_under_slo}", "objective.slo: is required"),
    ("{metric: max_rate_undr_slo}", "did you mean 'max_rate_under_slo'"),
])
def test_bad_slo_settings_are_refused_in_one_line(tuner, objective, expected):
    path = tuner.space(instant_space("bad") + f"objective: {objective}\n")
    assert_refused(tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant"), expected, tuner)


def test_shipped_rate_space_loads_and_runs_under_simulate(tuner):
    """search_spaces/llama3-8b-h200-rate.yaml, the shipped space of the rate objective: it passes the check
    against its simulated twin, and one trial of it (its search cut to a few one-second rates, so that the
    test is cheap; nothing else changed) finds a rate."""
    shipped = REPO / "search_spaces" / "llama3-8b-h200-rate.yaml"
    done = tuner.run("check", "--simulate", "--space", str(shipped))
    assert done.returncode == 0 and "(simulator profile llama3-8b-h200, SGLang 0.5.23)" in done.stdout, done.stdout
    text = shipped.read_text()
    short = text.replace("seconds-per-rate: 30", "seconds-per-rate: 1").replace("search-budget: 600", "search-budget: 6")
    assert short.count("\n") == text.count("\n") and short != text
    space = tuner.space(short, "rate.yaml")
    done = tuner.run("run", "--trials", "1", "--simulate", "--space", str(space), env={"TUNER_SIM_TIME_SCALE": "0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    t = tuner.study("llama3-8b-h200-rate").trials[0]
    assert t.user_attrs["failure_kind"] == "none", t.user_attrs.get("failure_message")
    assert t.value == t.user_attrs["rate_search"]["rate"] > 0
    assert tuner.leftovers() == {}
