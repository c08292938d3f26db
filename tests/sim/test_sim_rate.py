"""The simulator under an open-loop rate behaves like a server: below capacity latency stays flat, past it
the queue grows without bound (longer runs see longer latency), and goodput peaks near capacity and falls."""

from __future__ import annotations

import itertools

import pytest

from tuner.trial._probe import run_probe
from tuner.spec._spec import ProbeSpec
from tuner.engines import get_engine

from .simproc import quick_start_profile

SLO_MS = {"ttft": 300.0}


_SEEDS = itertools.count()


def _probe(url: str, **kw):
    # Prompts of a seed of their own for every run: with the same prompts again, the simulator's prefix cache
    # served them, and an overloaded run found the earlier runs' prefill done.
    spec = ProbeSpec(**{"concurrency": (64,), "requests": 128, "input_len": 256, "output_len": 32, "warmup": 0,
                        "check_tokens": 0, "request_timeout": 60, "max_send_lateness": 0.2, "seed": next(_SEEDS),
                        **kw})
    return run_probe(url, {}, get_engine("sglang"), spec, alive=lambda: None, goodput_slo=SLO_MS)


@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_rate_past_capacity_queues_without_bound_and_goodput_falls(start_sim, tmp_path):
    # Real time: rates the probe sends on time from a shared 2-core machine. At most 16 running: the closed loop
    # of 64 saturates it, so its throughput is the capacity (about 45/s). At 32 (about 90/s), four times it was
    # 351/s, and on CI one request in ten went out 201 ms late: the client's limit, not the server's.
    sim = start_sim("--max-running-requests", "16", profile=quick_start_profile(tmp_path, "llama3-8b-h200"), scale=1.0,
                    model_path="meta-llama/Llama-3.1-8B-Instruct", timeout=120)
    capacity = _probe(sim.url).level(None).request_throughput  # closed loop at 64: what it serves flat out

    def at(share: float, requests: int):
        return _probe(sim.url, concurrency=(), requests=requests, rates=(share * capacity,)).levels[-1]

    light_short, light_long = at(0.3, 40), at(0.3, 160)
    over_short, over_long = at(4.0, 100), at(4.0, 400)
    # Below capacity, a run four times as long sees the same latency; past it, each request waits behind
    # all that arrived faster than the server serves, so the latency grows with the run.
    assert light_long.latency_ms["median_ttft_ms"] < 2 * light_short.latency_ms["median_ttft_ms"] + 50
    assert over_long.latency_ms["median_ttft_ms"] > 2.5 * over_short.latency_ms["median_ttft_ms"]
    assert over_long.latency_ms["p99_ttft_ms"] > 10 * light_long.latency_ms["p99_ttft_ms"]
    # Goodput rises with the offered rate while the server keeps up, then falls once queueing breaks the SLO.
    goodput = {share: at(share, int(160 * share)).extra["request_goodput"] for share in (0.3, 0.8, 4.0)}
    assert goodput[0.8] > 1.8 * goodput[0.3]  # 0.8/0.3 = 2.7 while every request is good
    assert goodput[4.0] < 0.5 * goodput[0.8]
    assert light_long.extra["slo_attainment"] > 0.95 > 0.5 > over_long.extra["slo_attainment"]
