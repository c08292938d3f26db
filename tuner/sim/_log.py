"""Log lines in SGLang's format: `[2026-12-02 10:00:00] message`, `[... TP0] message` for scheduler lines.

Everything goes to stdout, flushed per line, because the tuner watches a log file as it grows.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Where SGLang's frames would be in a traceback; only used to make crash logs look like the real ones.
SGLANG_ROOT = "/usr/local/lib/python3.12/dist-packages/sglang"


# Python's logging levels by the names SGLang's --log-level and --log-level-http take.
LEVELS = {"trace": 5, "debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class Log:
    def __init__(self, stream: TextIO | None = None, scheduler_prefix: str = " TP0", http_level: str = "info") -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.scheduler_prefix = scheduler_prefix
        # uvicorn's lines (access lines included) below this are not printed: SGLang hands uvicorn
        # `--log-level-http`, else `--log-level` (entrypoints/http_server.py, launch_server).
        self.http_level = LEVELS.get(http_level.lower(), 20)

    def _write(self, prefix: str, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self.stream.write(f"[{stamp}{prefix}] {message}\n")
        self.stream.flush()

    def main(self, message: str) -> None:
        """A line of the main (tokenizer manager / HTTP) process."""
        self._write("", message)

    def sched(self, message: str) -> None:
        """A line of the rank-0 scheduler process."""
        self._write(self.scheduler_prefix, message)

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        if LEVELS.get(level.lower(), 20) >= self.http_level:
            self._write("", f"{level + ':':<9} {message}")

    def burst(self, size: int) -> None:
        """`size` bytes of decode-batch lines at once, as a server logging every step of a big batch."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = (f"[{stamp}{self.scheduler_prefix}] Decode batch, #running-req: 64, #token: 48000, token usage: "
                "0.41, cuda graph: True, gen throughput (token/s): 2100.00, #queue-req: 0\n")
        block = line * max(1, (1 << 20) // len(line))
        for _ in range(max(1, size // len(block))):
            self.stream.write(block)
        self.stream.flush()

    def raw(self, text: str) -> None:
        self.stream.write(text if text.endswith("\n") else text + "\n")
        self.stream.flush()


def scheduler_traceback(exc_line: str, stage: str) -> str:
    """A traceback shaped like the one SGLang's scheduler process prints for a failure at `stage`."""
    frames = [("managers/scheduler.py", 2680, "run_scheduler_process",
               "scheduler = Scheduler(" if stage != "forward" else "scheduler.event_loop_overlap()")]
    if stage == "forward":
        frames += [("managers/scheduler.py", 1010, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                   ("managers/tp_worker.py", 375, "forward_batch_generation",
                    "logits_output, can_run_cuda_graph = self.model_runner.forward("),
                   ("model_executor/model_runner.py", 2241, "forward", "output = self._forward_raw(")]
    elif stage == "prefill":
        frames += [("managers/scheduler.py", 1010, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                   ("model_executor/model_runner.py", 2180, "forward_extend", "return self.model.forward(")]
    elif stage == "decode":
        frames += [("managers/scheduler.py", 1010, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                   ("model_executor/model_runner.py", 2150, "forward_decode", "return self.model.forward(")]
    else:
        frames += [("managers/scheduler.py", 330, "__init__", "self.tp_worker = TpModelWorker("),
                   ("managers/tp_worker.py", 240, "__init__", "self.model_runner = ModelRunner(")]
        detail = {
            "devices": ("model_executor/model_runner.py", 610, "init_torch_distributed", "torch.get_device_module(self.device).set_device(self.gpu_id)"),
            "load": ("model_executor/model_runner.py", 760, "load_model", "self.model = get_model("),
            "kernels": ("model_executor/model_runner.py", 2320, "init_attention_backend", "self.attn_backend = self._get_attention_backend()"),
            "kv": ("model_executor/model_runner.py", 1750, "init_memory_pool", 'raise RuntimeError('),
            "capture": ("model_executor/model_runner.py", 2440, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
            "start": ("model_executor/model_runner.py", 620, "init_torch_distributed", "initialize_model_parallel("),
        }.get(stage)
        if detail:
            frames.append(detail)
        if stage == "capture":
            frames.append(("model_executor/cuda_graph_runner.py", 346, "__init__", "raise Exception("))
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{SGLANG_ROOT}/srt/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(exc_line)
    return "\n".join(lines) + "\n"
