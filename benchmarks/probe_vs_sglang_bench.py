"""The tuner's probe against SGLang's own benchmark client (`python -m sglang.bench_serving`), on one
simulated SGLang server and one workload: `python benchmarks/probe_vs_sglang_bench.py [--rounds 5] [--quick]`.

For each profile (default: `llama3-8b-h200`, a server whose speed is the simulated GPU's, then `instant`,
one that takes no time to generate, so that what a client measures is the HTTP path's ceiling) it starts
`python -m tuner.sim` pinned to one core (the clients to the other) and runs, per round, rotating who
goes first, on the very same prompts:

- `bench_serving`: SGLang 0.5.23's client from .venv-sglang, as a subprocess (its own cli_main, with its
  client's CPU time measured around its `benchmark` call): `--backend sglang`
  (POST /generate, streamed), `--dataset-name sharegpt` from a local file in ShareGPT's format written
  here (nothing is downloaded), `--sharegpt-output-len`, EOS ignored, temperature 0, `--max-concurrency`;
  its figures from `--output-file`;
- the probe (`tuner.trial._probe.run_probe` through the SGLang engine, as a trial runs it: warm-up, the untimed
  check wave with logprobs, then the timed level) on the same prompts, read from the same file;
- `bench_serving` again: the control, how far SGLang's client lands from itself on this machine.

The server's prefix cache is flushed before every run, so that no run reuses the prefill of the runs
before it. Each later run's output tok/s, mean and p99 TTFT and mean ITL are divided by the first
`bench_serving` run of its round; the median and the spread over rounds are printed. Targets: on the 8B
profile the probe within 3 % of bench_serving on output tok/s and mean TTFT; on the instant profile the
probe's rate at least bench_serving's.

What the two count, as read in SGLang 0.5.23 (sglang/benchmark/serving.py: async_request_sglang_generate,
benchmark, calculate_metrics) and tuner/trial/_probe.py. They agree:

- Output tokens: `meta_info.completion_tokens` of the last event with text, the server's count.
- Duration: from just before the first timed request is created to the end of the last. Warm-up requests
  come before (bench_serving: `--warmup-requests` copies of the first prompt, at most 32 tokens, then a
  1 s sleep; the probe: `warmup` prompts of 16 tokens, then its check wave).
- TTFT: from just before the POST to the first event with text. ITL: the gap between two such events over
  the tokens the later one added. p99 with numpy's linear interpolation in both.

They differ in what only the table shows: bench_serving's input tokens are its own tokenizer's count of
the prompts (the tiny Llama's BPE here, ~1.4 per word), the probe's the server's (`meta_info.prompt_tokens`).

Where they differed, and why (8B profile, 5 rounds, 2026-12-04):

- The probe's check wave drew its prompts from the same dataset as the timed level, so the server's prefix
  cache held 32 of the 64 timed prompts of the first run: 1.43x bench_serving's output tok/s and 0.51x its
  mean TTFT. Its prompts now start with a mark (tuner/trial/_probe.py, CHECK_MARK) and share no cached prefix.
- bench_serving opens a new connection (an aiohttp session) per request; the probe kept its connections
  alive. Then it measured 1.02x the output tok/s (rounds 1.02-1.04) and 0.88x the mean TTFT (0.85-0.94):
  when a wave of equal-length requests ends together, the server starts prefilling the first new request
  to arrive; kept-alive requests arrived closer together, so more of them shared that first prefill (the
  simulator's log showed first batches of 8 and 10 requests where bench_serving's had 1). Through the
  SGLang engine the probe now connects per request too (`Engine.bench_reuses_connections`).

Against a real server (issue 34: SGLang 0.5.17 on the lent GPU, `scripts/gpu_sglang.sh bench`):
`--url http://127.0.0.1:PORT --tokenizer MODEL_DIR --bench-python python3 [--workload 384,128,512,128]`. The
server is one started elsewhere; the rounds, the rotation, the cache flush and the ratios are the same, and
the profile's name in the tables is `external`.

A tokenizer that bench_serving can load offline is needed for its dataset code: the tiny Llama's
(.cache/tiny-llama, `.venv-sglang/bin/python scripts/make_tiny_model.py .cache/tiny-llama`), which is
also the simulator's --model-path, so that bench_serving finds it from /model_info as with a real server.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's tuner, and the shared helpers
from _sim import start_sim  # noqa: E402
from _vllm_client import (  # noqa: E402
    TINY_MODEL, add_core_args, check_cores, median, print_table, probe_level, ready_to_run, wait_ready)

SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
BENCH, PROBE, BENCH_AGAIN = "bench_serving", "probe", "bench_serving again"
PROFILES = ("llama3-8b-h200", "instant")
EXTERNAL = "external"  # the profile name of a server given with --url
# Per profile: requests, concurrency, prompt words, output tokens. The 8B server's rate (a few thousand
# tokens a second) leaves either client's core mostly idle; the instant one is as fast as a client can read.
WORKLOADS = {"llama3-8b-h200": (128, 32, 256, 128), "instant": (256, 64, 64, 256)}
_WORDS = ("the of and to in is for on that with as by at from it this be are was or an have not but can all new "
          "more one time data system model power city water light music river table market green paper number "
          "people world house story night point state small large early").split()


@dataclass(frozen=True)
class Run:
    profile: str
    round: int
    client: str
    output_throughput: float
    mean_ttft_ms: float
    p99_ttft_ms: float
    mean_itl_ms: float
    duration: float
    input_tokens: int
    output_tokens: int
    # The client's CPU seconds over its warm-up and timed run (the probe's check wave too, where it has one).
    client_cpu_s: float

    @property
    def client_us_per_token(self) -> float:
        return self.client_cpu_s / self.output_tokens * 1e6


@dataclass(frozen=True)
class Workload:
    profile: str
    requests: int
    concurrency: int
    prompt_words: int
    output_len: int
    seed: int


# `python -m sglang.bench_serving ARGV`, with the client's CPU time of its `benchmark` call (warm-up and timed
# run) written to $BENCH_CPU_FILE, less that of `calculate_metrics`, which re-tokenizes every output after
# the timing ends. What runs is SGLang's own cli_main; only those two functions are wrapped.
_DRIVER = r"""
import json, os, sys, time
import sglang.benchmark.serving as serving
spent = {"metrics": 0.0}
_metrics, _benchmark = serving.calculate_metrics, serving.benchmark
def calculate_metrics(*args, **kwargs):
    cpu0 = time.process_time()
    try:
        return _metrics(*args, **kwargs)
    finally:
        spent["metrics"] += time.process_time() - cpu0
async def benchmark(*args, **kwargs):
    cpu0 = time.process_time()
    result = await _benchmark(*args, **kwargs)
    with open(os.environ["BENCH_CPU_FILE"], "w") as f:
        json.dump({"client_cpu_s": time.process_time() - cpu0 - spent["metrics"]}, f)
    return result
serving.calculate_metrics, serving.benchmark = calculate_metrics, benchmark
sys.argv = ["bench_serving", *sys.argv[1:]]
serving.cli_main()
"""


def sglang_available() -> str | None:
    """None when SGLang's environment and a tokenizer it can load offline are here, else what is missing."""
    if not SGLANG_PYTHON.exists():
        return f"{SGLANG_PYTHON} is missing: run scripts/setup_sglang_ref.sh"
    if not (TINY_MODEL / "tokenizer.json").exists():
        return (f"{TINY_MODEL} is missing: run .venv-sglang/bin/python scripts/make_tiny_model.py "
                ".cache/tiny-llama")
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three runs, rotating who goes first")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="simulator profiles, comma-separated")
    parser.add_argument("--warmups", type=int, default=1, help="warm-up requests of each client (bench_serving's "
                                                               "default)")
    add_core_args(parser)
    parser.add_argument("--quick", action="store_true", help="one short round per profile (a smoke test)")
    parser.add_argument("--url", default=None, help="a server started elsewhere (e.g. real SGLang on a GPU) "
                        "instead of the simulator's profiles")
    parser.add_argument("--tokenizer", type=Path, default=None, help="with --url: the server's model folder, "
                        "for bench_serving's tokenizer (default: the tiny Llama)")
    parser.add_argument("--bench-python", default=None, help="with --url: the Python that has "
                        f"SGLang (default: {SGLANG_PYTHON.relative_to(REPO)})")
    parser.add_argument("--workload", default=None, metavar="REQ,CONC,WORDS,OUT", help="with --url: requests, "
                        "concurrency, prompt words, output tokens (default: the 8B profile's)")
    args = parser.parse_args(argv)
    check_cores(parser, args)
    args.profiles = [EXTERNAL] if args.url else [p for p in args.profiles.split(",") if p]
    if args.bench_python and os.sep in args.bench_python:  # bench_serving runs in another folder
        args.bench_python = str(Path(args.bench_python).absolute())
    if args.tokenizer:
        args.tokenizer = args.tokenizer.absolute()
    if args.workload:
        try:
            WORKLOADS[EXTERNAL] = tuple(int(x) for x in args.workload.split(","))
            assert len(WORKLOADS[EXTERNAL]) == 4
        except (ValueError, AssertionError):
            parser.error(f"--workload {args.workload!r}: give four numbers, e.g. 384,128,512,128")
    if args.quick:
        args.rounds = 1
    return args


def workloads(profile: str, rounds: int, quick: bool) -> list[Workload]:
    requests, concurrency, words, output_len = WORKLOADS.get(profile, WORKLOADS["llama3-8b-h200"])
    if quick:
        requests, output_len = 2 * concurrency, 32
    return [Workload(profile, requests, concurrency, words, output_len, seed) for seed in range(rounds)]


def write_dataset(folder: Path, w: Workload) -> tuple[Path, Path]:
    """The same prompts twice: a ShareGPT file for bench_serving (exactly `requests` conversations, each
    kept by its filter, so it sends all of them, shuffled by its seed) and a JSONL file for the probe
    (`probe.dataset`, which sends each row once, shuffled by its own seed). Prompts of equal length, so
    that the two orders cost the server the same; a number first, so that two share at most its first digits
    as a cached prefix."""
    rng = random.Random(w.seed)
    prompts = [f"{i}: " + " ".join(rng.choice(_WORDS) for _ in range(w.prompt_words - 1)) for i in range(w.requests)]
    sharegpt = folder / f"{w.profile}-{w.seed}.sharegpt.json"
    sharegpt.write_text(json.dumps([{"id": str(i), "conversations": [{"from": "human", "value": p},
                                                                     {"from": "gpt", "value": "an answer"}]}
                                    for i, p in enumerate(prompts)]))
    jsonl = folder / f"{w.profile}-{w.seed}.jsonl"
    jsonl.write_text("".join(json.dumps({"prompt": p, "output_len": w.output_len}) + "\n" for p in prompts))
    return sharegpt, jsonl


def flush_cache(base_url: str) -> None:
    """SGLang's /flush_cache, which refuses while requests run: the clients' last ones may still be
    ending on the server's side."""
    for _ in range(50):
        if httpx.post(base_url + "/flush_cache", timeout=10).status_code == 200:
            return
        time.sleep(0.1)  # a request still ending; nothing to wait on instead
    raise RuntimeError("the simulator would not flush its cache")


def run_bench(base_url: str, w: Workload, dataset: Path, folder: Path, args: argparse.Namespace,
              label: str) -> Run:
    """One `python -m sglang.bench_serving` as a subprocess pinned to the clients' core."""
    out = folder / f"bench-{w.profile}-{w.seed}-{label.replace(' ', '-')}.jsonl"
    cpu_file = out.with_suffix(".cpu.json")
    argv = ["taskset", "-c", str(args.client_core), str(args.bench_python or SGLANG_PYTHON), "-c", _DRIVER,
            "--backend", "sglang", "--base-url", base_url, "--dataset-name", "sharegpt",
            "--dataset-path", str(dataset), "--tokenizer", str(args.tokenizer or TINY_MODEL),
            "--num-prompts", str(w.requests),
            "--sharegpt-output-len", str(w.output_len), "--max-concurrency", str(w.concurrency),
            "--seed", str(w.seed), "--warmup-requests", str(args.warmups), "--disable-tqdm",
            "--output-file", str(out)]
    with open(folder / "bench_serving.log", "a") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=folder, timeout=600,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                   "BENCH_CPU_FILE": str(cpu_file)})
    if done.returncode != 0 or not out.exists():
        tail = (folder / "bench_serving.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"bench_serving exited with {done.returncode}:\n{tail}")
    r = json.loads(out.read_text().splitlines()[-1])
    if r["completed"] != w.requests:
        raise RuntimeError(f"bench_serving: {w.requests - r['completed']} requests failed")
    cpu = json.loads(cpu_file.read_text())["client_cpu_s"]
    return Run(w.profile, w.seed, label, r["output_throughput"], r["mean_ttft_ms"], r["p99_ttft_ms"],
               r["mean_itl_ms"], r["duration"], r["total_input_tokens"], r["total_output_tokens"], cpu)


def run_probe_once(base_url: str, sim, w: Workload, dataset: Path, args: argparse.Namespace) -> Run:
    from tuner.spec._spec import ProbeSpec

    # As a trial runs it, with its check wave, except where the client's CPU per token is the figure (the
    # instant profile): there the CPU counted is the warm-up's and the timed level's alone, as bench_serving's.
    spec = ProbeSpec(concurrency=(w.concurrency,), requests=w.requests, input_len=w.prompt_words,
                     output_len=w.output_len, warmup=args.warmups, dataset=str(dataset), seed=w.seed,
                     request_timeout=120.0, check_tokens=0 if w.profile == "instant" else 32)
    level, cpu = probe_level(base_url, sim, "sglang", spec)
    lat = level.latency_ms
    return Run(w.profile, w.seed, PROBE, level.output_throughput, lat["mean_ttft_ms"], lat["p99_ttft_ms"],
               lat["mean_itl_ms"], level.duration, level.total_input_tokens, level.total_output_tokens, cpu)


def run_profile(profile: str, folder: Path, args: argparse.Namespace) -> list[Run]:
    from tuner.trial._teardown import stop_server

    sim = None
    if profile != EXTERNAL:
        # Start-up compressed (weights and graph capture take simulated minutes); serving runs at its speed.
        sim = start_sim(folder / f"sim-{profile}", args.server_core, profile, str(TINY_MODEL), startup_scale=0.01)
    runs: list[Run] = []
    try:
        base_url = args.url.rstrip("/") if sim is None else f"http://127.0.0.1:{sim.port}"
        if sim is not None:
            wait_ready(base_url + "/health", sim.popen, sim.log_path, timeout=300)
        plan = workloads(profile, args.rounds, args.quick)
        w0 = plan[0]
        where = (f"the server at {base_url}" if sim is None else
                 f"simulator (process group {sim.pgid}) on core {args.server_core}")
        print(f"\n{profile}: {where}, clients on core "
              f"{args.client_core}; {args.rounds} round(s) of {w0.requests} requests x {w0.output_len} tokens, "
              f"prompts of {w0.prompt_words} words, concurrency {w0.concurrency}", flush=True)
        for w in plan:
            sharegpt, jsonl = write_dataset(folder, w)
            steps = [lambda: run_bench(base_url, w, sharegpt, folder, args, BENCH),
                     lambda: run_probe_once(base_url, sim, w, jsonl, args),
                     lambda: run_bench(base_url, w, sharegpt, folder, args, BENCH_AGAIN)]
            turn = w.seed % len(steps)
            for step in steps[turn:] + steps[:turn]:  # rotate who goes first: drift hits all alike
                flush_cache(base_url)
                runs.append(step())
                r = runs[-1]
                print(f"  round {r.round} {r.client}: {r.output_throughput:,.1f} tok/s, mean TTFT "
                      f"{r.mean_ttft_ms:,.1f} ms", flush=True)
    finally:
        if sim is not None:
            stop_server(sim, grace=5.0)
    return runs


def print_runs(runs: list[Run]) -> None:
    rows = [(r.profile, r.round, r.client, f"{r.output_throughput:,.1f}", f"{r.mean_ttft_ms:,.1f}",
             f"{r.p99_ttft_ms:,.1f}", f"{r.mean_itl_ms:,.2f}", f"{r.duration:.2f}", r.input_tokens, r.output_tokens,
             f"{r.client_us_per_token:.1f}") for r in runs]
    print_table(("profile", "round", "client", "output tok/s", "mean TTFT ms", "p99 TTFT ms", "mean ITL ms",
                 "duration s", "in tokens", "out tokens", "client us/token"), rows)


METRICS = (("output tok/s", "output_throughput"), ("mean TTFT", "mean_ttft_ms"), ("p99 TTFT", "p99_ttft_ms"),
           ("mean ITL", "mean_itl_ms"), ("client us/token", "client_us_per_token"))


def ratios(runs: list[Run], profile: str, client: str, attr: str) -> list[float]:
    """Per round: `client`'s figure over the first bench_serving run of that round (same machine state)."""
    out = []
    for n in sorted({r.round for r in runs if r.profile == profile}):
        mine = next(r for r in runs if r.profile == profile and r.round == n and r.client == client)
        ref = next(r for r in runs if r.profile == profile and r.round == n and r.client == BENCH)
        out.append(getattr(mine, attr) / getattr(ref, attr))
    return out


def print_summary(runs: list[Run]) -> None:
    rows = []
    for profile in dict.fromkeys(r.profile for r in runs):
        for client in (PROBE, BENCH_AGAIN):
            cells = []
            for _, attr in METRICS:
                x = ratios(runs, profile, client, attr)
                cells.append(f"{median(x):.3f} ({min(x):.2f}-{max(x):.2f})")
            rows.append((profile, client, *cells))
    print()
    print_table(("profile", "client", *(f"{name} / bench_serving" for name, _ in METRICS)), rows)
    print()
    for profile in dict.fromkeys(r.profile for r in runs):
        tps = median(ratios(runs, profile, PROBE, "output_throughput"))
        ttft = median(ratios(runs, profile, PROBE, "mean_ttft_ms"))
        if profile == "instant":
            # The ceiling: the rate a client's own CPU allows (its CPU per token), and the rate measured, which
            # on this shared machine also moves with whatever else runs on the clients' core.
            cpu = 1 / median(ratios(runs, profile, PROBE, "client_us_per_token"))
            print(f"instant: probe over bench_serving, tokens per client CPU second {cpu:.3f}, measured rate "
                  f"{tps:.3f} (target >= 1.0: {'met' if cpu >= 1 and tps >= 1 else 'missed'})", flush=True)
        else:
            ok = abs(tps - 1) <= 0.03 and abs(ttft - 1) <= 0.03
            print(f"{profile}: probe over bench_serving, output tok/s {tps:.3f}, mean TTFT {ttft:.3f} "
                  f"(target 0.97-1.03: {'met' if ok else 'missed'})", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not ready_to_run("probe_vs_sglang_bench", (lambda: None) if args.url else sglang_available):
        return 2
    os.sched_setaffinity(0, {args.client_core})  # the probe runs in this process
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="probe_vs_sglang-") as tmp:
        for profile in args.profiles:
            runs += run_profile(profile, Path(tmp), args)
    print()
    print_runs(runs)
    print_summary(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
