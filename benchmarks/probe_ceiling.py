"""The highest streamed token rate the probe can measure, beside vLLM's own benchmark client on the same
server: `python benchmarks/probe_ceiling.py [--rounds 5] [--quick]`.

Starts `python -m tuner.sim` with the `instant` profile (a server that takes no time to generate:
whatever rate a client measures is the HTTP path's, never the model's), pinned to one core, and pins
this process and every client to the other. Then, alternating who goes first, it streams the same
workload (64 concurrent streams by default; the prompts of vLLM's random dataset, written out by
vLLM's own code) with

- the probe through the vLLM engine (`tuner.trial._probe.run_probe`, POST /v1/completions), and
- `vllm bench serve --backend openai` (vLLM's client, aiohttp) against the same /v1/completions,

and, for information, the probe through the SGLang engine (POST /generate, whose events carry all the
text so far: more bytes per token, so a lower ceiling; vLLM's client cannot speak /generate).
Prints each run's output tok/s, the client's and the server's CPU share, and the ratio of the probe's
median to vLLM's. Target: the probe at least vLLM's rate. When the server's core is saturated
(server CPU near 1.0) the rate is the server's, and both clients should measure the same.

vLLM's environment (.venv-vllm, scripts/setup_vllm_cpu.sh) and the tiny model's tokenizer
(.cache/tiny-llama, scripts/make_tiny_model.py) are needed for vLLM's client and its prompts.

The probe had fallen short because of its HTTP client, httpx, whose h11 parser handles every HTTP chunk
(one per token here) in pure Python. Each client's CPU per streamed token, and the medians of 5
rounds, same machine and load (4 on 2 cores), 2026-12:

    probe on httpx (before)           18,605 tok/s   0.73 x vLLM's client   39 us/token
    probe on _stream_client (after)   27,441 tok/s   1.34 x vLLM's client   20 us/token
                          (again)     31,939 tok/s   1.19 x vLLM's client   17 us/token
    probe over /generate    before    13,604 tok/s   0.54 x                 56 us/token
                            after     20,327 tok/s   0.98 x                 33 us/token
    2026-12-04, events read from meta_info only until the last (tuner/engines/_sglang.py):
    probe on _stream_client           25,952 tok/s   1.08 x vLLM's client   15 us/token
    probe over /generate              25,508 tok/s   1.10 x                 16 us/token

vLLM's client (aiohttp) came in at 20-30 us/token. Neither core is ever fully ours, because other
jobs share both, so client and server each got about 0.6 of a core. Their CPU per token, not the rate,
says which limits which.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's tuner, and the shared helpers
from _vllm_client import (  # noqa: E402
    TINY_MODEL, VllmBench, Workload, add_core_args, check_cores, cpu_seconds, median, print_table, probe_level,
    ready_to_run, wait_ready)
from _sim import start_sim  # noqa: E402

MODEL = "sim/model"  # the name the simulator serves
PROBE, BENCH = "probe (vllm engine)", "vllm bench serve"


@dataclass(frozen=True)
class Run:
    round: int
    client: str
    endpoint: str
    output_throughput: float
    duration: float
    output_tokens: int
    client_cpu_s: float  # the client's CPU seconds over its warm-up and timed run
    server_cpu_s: float  # the simulator's, over the client's whole call

    @property
    def client_us_per_token(self) -> float:
        return self.client_cpu_s / self.output_tokens * 1e6

    @property
    def client_bound_rate(self) -> float:
        """Tokens per second of client CPU: the rate a core of its own would allow this client."""
        return self.output_tokens / self.client_cpu_s


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (vLLM's --max-concurrency)")
    parser.add_argument("--requests", type=int, default=256, help="requests per run")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=2, help="warm-up requests of each client, before its timing")
    add_core_args(parser)
    parser.add_argument("--no-generate", action="store_true", help="leave out the probe over SGLang's /generate")
    parser.add_argument("--quick", action="store_true", help="one short round (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.output_len, args.warmups, args.no_generate = 1, 64, 64, 1, True
    check_cores(parser, args)
    return args


def probe_once(base_url: str, sim, workload: Workload, prompts: Path, engine_name: str, warmups: int) -> Run:
    from tuner.spec._spec import ProbeSpec

    # No check wave: the client CPU counted below is then the timed level's (and the warm-up's) alone.
    spec = ProbeSpec(concurrency=(workload.concurrency,), requests=workload.requests, input_len=workload.input_len,
                     output_len=workload.output_len, warmup=warmups, dataset=str(prompts), request_timeout=60.0,
                     check_tokens=0)
    server0 = cpu_seconds([sim.popen.pid])
    level, cpu = probe_level(base_url, sim, engine_name, spec)
    endpoint = "/v1/completions" if engine_name == "vllm" else "/generate"
    return Run(workload.seed, f"probe ({engine_name} engine)", endpoint, level.output_throughput, level.duration,
               level.total_output_tokens, cpu, cpu_seconds([sim.popen.pid]) - server0)


def bench_once(bench: VllmBench, base_url: str, sim, workload: Workload, warmups: int) -> Run:
    server0 = cpu_seconds([sim.popen.pid])
    result = bench.run(workload, base_url, MODEL, TINY_MODEL, warmups)
    if result.failed:
        raise RuntimeError(f"vllm bench serve: {result.failed} requests failed")
    return Run(workload.seed, BENCH, "/v1/completions", result.output_throughput, result.duration,
               result.total_output_tokens, result.client_cpu_s, cpu_seconds([sim.popen.pid]) - server0)


def print_runs(runs: list[Run]) -> None:
    rows = [(r.round, r.client, r.endpoint, f"{r.output_throughput:,.0f}", f"{r.duration:.2f}", r.output_tokens,
             f"{r.client_cpu_s / r.duration:.2f}", f"{r.server_cpu_s / r.duration:.2f}",
             f"{r.client_us_per_token:.1f}") for r in runs]
    print_table(("round", "client", "endpoint", "output tok/s", "duration s", "out tokens", "client CPU",
                 "server CPU", "client us/token"), rows)


def print_summary(runs: list[Run]) -> None:
    """Per client: the median rate and its per-round ratios to vLLM's client (the runs of a round share
    the machine's state), and the rate its CPU time alone would allow."""
    rows = []
    for client in dict.fromkeys(r.client for r in runs):
        mine = [r for r in runs if r.client == client]
        ratios = [r.output_throughput / _bench_of(runs, r).output_throughput for r in mine]
        rows.append((client, mine[0].endpoint, f"{median([r.output_throughput for r in mine]):,.0f}",
                     f"{median(ratios):.3f}", ", ".join(f"{x:.2f}" for x in ratios),
                     f"{median([r.client_us_per_token for r in mine]):.1f}",
                     f"{median([r.client_bound_rate for r in mine]):,.0f}"))
    print()
    print_table(("client", "endpoint", "median tok/s", "vs vLLM's (median)", "per round",
                 "client us/token", "client-bound tok/s"), rows)
    probe = [r for r in runs if r.client == PROBE]
    ratio = median([r.output_throughput / _bench_of(runs, r).output_throughput for r in probe])
    cpu_ratio = median([r.client_bound_rate for r in probe]) / median(
        [r.client_bound_rate for r in runs if r.client == BENCH])
    print(f"\nprobe over vLLM's client on the same server, {probe[0].endpoint}: measured rate {ratio:.3f} "
          f"(median of {len(probe)} round(s); target >= 1.0: {'met' if ratio >= 1 else 'missed'}); tokens per "
          f"second of client CPU {cpu_ratio:.3f} ({'met' if cpu_ratio >= 1 else 'missed'})", flush=True)


def _bench_of(runs: list[Run], run: Run) -> Run:
    return next(r for r in runs if r.round == run.round and r.client == BENCH)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not ready_to_run("probe_ceiling"):
        return 2
    from tuner.trial._teardown import stop_server

    workloads = [Workload(args.requests, args.streams, args.input_len, args.output_len, seed)
                 for seed in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="probe_ceiling-") as tmp:
        folder = Path(tmp)
        sim = start_sim(folder / "sim", args.server_core, "instant", MODEL)
        try:
            os.sched_setaffinity(0, {args.client_core})  # this process (the probe) and what it starts
            base_url = f"http://127.0.0.1:{sim.port}"
            with VllmBench(folder / "vllm-bench.log", cpu=args.client_core) as bench:
                prompts = bench.write_prompts(workloads, folder, base_url, MODEL, TINY_MODEL)
                wait_ready(base_url + "/health", sim.popen, sim.log_path, timeout=60)
                print(f"simulator (instant, process group {sim.pgid}) on core {args.server_core}, clients on core "
                      f"{args.client_core}; "
                      f"{args.rounds} round(s) of {args.requests} requests x {args.output_len} tokens, "
                      f"{args.streams} streams", flush=True)
                runs = run_rounds(bench, base_url, sim, workloads, prompts, args)
            print()
            print_runs(runs)
            print_summary(runs)
        finally:
            stop_server(sim, grace=5.0)
    return 0


def run_rounds(bench: VllmBench, base_url: str, sim, workloads: list[Workload], prompts: list[Path],
               args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    for workload, prompt_file in zip(workloads, prompts):
        steps = [lambda: probe_once(base_url, sim, workload, prompt_file, "vllm", args.warmups),
                 lambda: bench_once(bench, base_url, sim, workload, args.warmups)]
        if workload.seed % 2:
            steps.reverse()  # alternate who goes first: drift of the machine hits both alike
        if not args.no_generate:
            steps.append(lambda: probe_once(base_url, sim, workload, prompt_file, "sglang", args.warmups))
        for step in steps:
            runs.append(step())
            r = runs[-1]
            print(f"  round {r.round} {r.client}: {r.output_throughput:,.0f} tok/s", flush=True)
    return runs


if __name__ == "__main__":
    sys.exit(main())
