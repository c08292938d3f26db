"""How well and how cheaply `max_rate_under_slo` finds a server's capacity under an SLO:
`python benchmarks/rate_search.py` (~9 min; `--quick` for a smoke run).

One simulated SGLang server (the 8B profile on one H200, 4x slower than real time) is started once. Then, on it:
  1. the tuner's rate search, as a trial runs it (closed-loop level at 64, then bracket and bisection);
  2. a slow sweep for the truth: fine steps of `--sweep-step` around the found rate, each rate run to its end
     for `--sweep-seconds` with no early stop; the capacity at the SLO is the highest rate that met it;
  3. a linear sweep as `vllm bench sweep` runs one: rates of 1, 2, 3, ... x `--precision` of the starting
     rate, each run to its end, until the first that misses (the step is what reaches the same precision).
Prints the rates, whether the found one is within 5% of the capacity, and each method's measuring time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from sim.simproc import SimFactory, quick_start_profile  # noqa: E402

from tuner._failures import TrialFailure  # noqa: E402
from tuner.trial._probe import run_probe  # noqa: E402
from tuner.spec import ProbeSpec, RateSearchSpec  # noqa: E402
from tuner.trial import slo_text  # noqa: E402
from tuner.engines import get_engine  # noqa: E402

# The SLO of the real-time server: 300 ms TTFT, 30 ms TPOT. The simulator runs `--time-scale` times slower
# than real time (so that the probe keeps every rate, and the simulator its pace, on a shared 2-core
# machine), and the SLOs are scaled alike.
REAL_SLO_MS = {"ttft": 300.0, "tpot": 30.0}
SLO_MS = dict(REAL_SLO_MS)
ATTAINMENT = 0.99


def probe(url: str, rate_search: RateSearchSpec | None = None, **kw):
    spec = ProbeSpec(**{"concurrency": (), "requests": 128, "input_len": 512, "output_len": 64, "warmup": 0,
                        "check_tokens": 0, "request_timeout": 120, "max_send_lateness": 0.1, **kw})
    return run_probe(url, {}, get_engine("sglang"), spec, alive=lambda: None, goodput_slo=SLO_MS,
                     rate_search=rate_search)


SWEEP_SEEDS = itertools.count(1000)


def full_rate(url: str, rate: float, seconds: float) -> tuple[float, float]:
    """(attainment, seconds taken) of `rate` run to its end, as a sweep runs each rate; a rate this machine
    cannot send counts as missed. Each rate gets prompts of its own seed: with the same prompts every time,
    the server's prefix cache served them (median TPOT 29 ms instead of 86 ms at 13 req/s), and the sweep
    met the SLO at every rate up to 17.6/s, 50% above what new prompts meet."""
    t0 = time.monotonic()
    try:
        level = probe(url, requests=max(20, round(rate * seconds)), rates=(rate,), seed=next(SWEEP_SEEDS)).levels[-1]
    except TrialFailure as exc:
        print(f"  rate {rate:8.2f}/s  {exc.kind.value}")
        return 0.0, time.monotonic() - t0
    return level.extra["slo_attainment"], time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, coarse steps: a smoke run")
    parser.add_argument("--time-scale", type=float, default=4.0)
    # The same hold for the search and the sweep: just above capacity the queue grows slowly, so the rate that
    # meets the SLO depends on how long it is held (10 s steps met 12.69/s where 20 s steps met 11.93/s).
    parser.add_argument("--seconds-per-rate", type=float, default=20.0)
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    parser.add_argument("--sweep-step", type=float, default=0.02, help="of the found rate")
    parser.add_argument("--skip-slow-sweep", action="store_true", help="search and linear sweep only")
    args = parser.parse_args()
    SLO_MS.update({k: v * args.time_scale for k, v in REAL_SLO_MS.items()})
    sweep_steps = range(-4, 21)
    if args.quick:
        args.seconds_per_rate, args.sweep_seconds, args.sweep_step, args.precision = 1.0, 2.0, 0.1, 0.25
        sweep_steps = range(-1, 2)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still ends the simulator (finally)
    # /health answers at once (SGLang's switch for it): the probe's tests poll it, and a one-token generation
    # 4x slower than real time outlasts the poll; readiness is not what this benchmark measures.
    os.environ["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "0"
    folder = Path(tempfile.mkdtemp(prefix="rate-search-"))
    factory = SimFactory(folder)
    try:
        sim = factory(profile=quick_start_profile(folder, "llama3-8b-h200"), scale=args.time_scale,
                      model_path="meta-llama/Llama-3.1-8B-Instruct", timeout=120)
        print(f"SLO {slo_text(SLO_MS)} for {ATTAINMENT:.0%} of requests; simulated llama3-8b-h200 "
              f"{args.time_scale:g}x slower than real time")
        search = RateSearchSpec(SLO_MS, ATTAINMENT, args.precision, budget=60 * args.seconds_per_rate,
                                seconds_per_rate=args.seconds_per_rate)
        t0 = time.monotonic()
        found = probe(sim.url, concurrency=(64,), rate_search=search).rate_search
        search_s = time.monotonic() - t0
        print(f"\nrate search: {found.rate:.2f} req/s in {len(found.steps)} rates, {found.seconds:.0f} s of search "
              f"({search_s:.0f} s with the closed-loop start); ended: {found.stopped}")
        print(found.table())

        print(f"\nslow sweep ({args.sweep_seconds:g} s per rate, steps of {args.sweep_step:.0%}):")
        capacity, sweep_s, misses = None, 0.0, 0
        for k in (() if args.skip_slow_sweep else sweep_steps):  # upwards from 4 steps below the found rate until two misses in a row
            rate = found.rate * (1 + k * args.sweep_step)
            att, sec = full_rate(sim.url, rate, args.sweep_seconds)
            sweep_s += sec
            print(f"  rate {rate:8.2f}/s  attainment {att:6.1%}  {'met' if att >= ATTAINMENT else 'missed'}")
            capacity, misses = (rate, 0) if att >= ATTAINMENT else (capacity, misses + 1)
            if misses >= 2 and capacity is not None:
                break
        capacity = capacity or found.rate  # (a quick run's sweep may meet nothing)
        print(f"capacity at the SLO: {capacity:.2f} req/s (sweep took {sweep_s:.0f} s)")

        print(f"\nlinear sweep as vllm bench sweep ({args.seconds_per_rate:g} s per rate, "
              f"steps of {args.precision:.0%} of the start {found.start:.1f}/s):")
        linear_s, n, last_met = 0.0, 0, 0.0
        while True:
            n += 1
            rate = found.start * args.precision * n
            att, sec = full_rate(sim.url, rate, args.seconds_per_rate)
            linear_s += sec
            if att < ATTAINMENT:
                break
            last_met = rate
            if args.quick and n >= 3:  # the smoke run shows the row; a full sweep takes minutes
                break
        print(f"  {n} rates, last met {last_met:.2f}/s, {linear_s:.0f} s")

        error = (found.rate - capacity) / capacity
        print("\n| method | rate found (req/s) | vs capacity | rates run | measuring time |")
        print("|---|---|---|---|---|")
        print(f"| tuner rate search | {found.rate:.2f} | {error:+.1%} | {len(found.steps)} | {found.seconds:.0f} s |")
        print(f"| linear sweep (vllm bench sweep) | {last_met:.2f} | {(last_met - capacity) / capacity:+.1%} "
              f"| {n} | {linear_s:.0f} s |")
        print(f"| slow sweep (the truth) | {capacity:.2f} | - | - | {sweep_s:.0f} s |")
        print(f"\nwithin 5% of the capacity: {'yes' if abs(error) <= 0.05 else 'NO'}; "
              f"search cost {found.seconds / linear_s:.2f}x the linear sweep's")
    finally:
        factory.cleanup()


if __name__ == "__main__":
    main()
