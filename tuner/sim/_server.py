"""The simulated server process: start-up phases with SGLang's log lines, the scheduler loops, failures, signals.

Start-up follows SGLang's order: arguments, distributed init, weight loading, KV pool, CUDA-graph capture, the
`max_total_num_tokens=...` line, uvicorn, the warm-up generate, "The server is fired up and ready to roll!".
The HTTP port only opens after capture, as in SGLang (the scheduler must be ready before uvicorn starts).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

from ._engine import Crash, Scheduler
from ._events import mark
from ._faults import Faults
from ._log import Log, scheduler_traceback
from ._profile import Profile
from ._requests import GenRequest, Numerics, Sampling, nan_value, prefix_hashes
from ._setup import Setup
from ._text import Tokenizer, folder_splitter, is_known_answer_model, known_answer

VERSION_FILE_FRAME = "<frame at 0x7f3a2c1e5a40, file '/usr/lib/python3.12/selectors.py', line 468, code select>"


class Clock:
    """Simulated seconds, slept in wall time scaled by `scale` (0 = as fast as possible)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.sim = 0.0
        self.origin = time.monotonic()

    def resync(self) -> None:
        """After idling, simulated time catches up with the wall clock."""
        if self.scale > 0:
            self.sim = max(self.sim, (time.monotonic() - self.origin) / self.scale)

    async def sleep(self, seconds: float) -> None:
        self.sim += seconds
        if self.scale <= 0 or seconds <= 0:
            await asyncio.sleep(0)
            return
        delay = self.origin + self.sim * self.scale - time.monotonic()
        await asyncio.sleep(delay if delay > 0 else 0)


class PrefixCache:
    """RadixAttention, coarsely: prompt prefixes seen before (at page granularity) need no prefill."""

    PAGE = 16

    def __init__(self, limit: int) -> None:
        self.limit = max(limit // self.PAGE, 1024)
        self.seen: set[int] = set()

    def match(self, hashes: list[int]) -> int:
        best = 0
        for k in range(self.PAGE, len(hashes) - 1, self.PAGE):
            if hashes[k] not in self.seen:
                break
            best = k
        return best

    def insert(self, hashes: list[int]) -> None:
        if len(self.seen) > self.limit:
            self.seen.clear()  # crude eviction: SGLang evicts LRU leaves
        self.seen.update(hashes[k] for k in range(self.PAGE, len(hashes) - 1, self.PAGE))

    def clear(self) -> None:
        self.seen.clear()


class Group:
    """One scheduler (a data-parallel replica) with its clock and wake-up event."""

    def __init__(self, scheduler: Scheduler, clock: Clock, cache: PrefixCache | None) -> None:
        self.scheduler, self.clock, self.cache = scheduler, clock, cache
        self.wake = asyncio.Event()
        self.numerics: Numerics | None = None


class SimServer:
    def __init__(self, profile: Profile, setup: Setup, values: dict[str, Any], faults: Faults, scale: float,
                 seed: int, log: Log) -> None:
        self.profile, self.setup, self.values, self.faults = profile, setup, values, faults
        self.scale, self.seed, self.log = scale, seed, log
        raw = os.environ.get("TUNER_SIM_STARTUP_SCALE")
        self.startup_scale = float(raw) if raw else None
        self.version = profile.sglang_version
        self.knobs = setup.resolved.knobs
        self.args = setup.resolved.args
        model = profile.model
        folder = str(self.args.get("tokenizer_path") or "")
        self.tokenizer = Tokenizer(model.vocab_size, model.eos_token_id, model.token0_text, model.chars_per_token,
                                   folder_splitter(folder))
        self.task_model = is_known_answer_model(folder)
        self.ready = False
        self.up = False  # uvicorn is listening
        self.frozen = False  # stop_answering_after fired
        self.forever = asyncio.Event()  # never set: what a hung server waits on
        self.request_count = 0
        self.burst_done = False  # log_burst fired
        self.groups: list[Group] = []
        self.next_group = 0
        self.rid_counter = 0
        self.child: subprocess.Popen | None = None
        self.server: asyncio.base_events.Server | None = None
        self.last_nan_step = -1
        sanitized = (self.knobs.nan_detection if self.version == "0.5.6"
                     else os.environ.get("SGLANG_SANITIZE_NAN_LOGITS", "") in ("1", "true", "True"))
        self.nan_check_crash = self.version != "0.5.6" and os.environ.get(
            "SGLANG_ENABLE_NAN_LOGITS_CHECK", "") in ("1", "true", "True")
        self.numerics = Numerics(health=setup.health, jitter=profile.noise.logprob_jitter,
                                 nan_value=nan_value(sanitized, model.vocab_size), vocab_size=model.vocab_size)
        self.sanitized = sanitized
        self.known = tuple((a.prompt, a.answer) for a in profile.known_answers)

    # -- start-up ---------------------------------------------------------------------------------------------

    async def phase(self, seconds: float) -> None:
        """A start-up phase: scaled by TUNER_SIM_STARTUP_SCALE where set (dry runs compress minutes of
        weight loading far more than decode steps, whose wall rate the client must keep up with)."""
        scale = self.startup_scale if self.startup_scale is not None else self.scale
        if scale > 0 and seconds > 0:
            await asyncio.sleep(seconds * scale)

    def die(self, exc_line: str, stage: str, running: bool = False) -> None:
        """A scheduler exception: SGLang logs it, the parent gets SIGQUIT and kills the process tree."""
        self.log.sched(f"Scheduler hit an exception: {scheduler_traceback(exc_line, stage)}")
        if running:
            self.log.main(f"SIGQUIT received. signum=3, frame={VERSION_FILE_FRAME}. It usually means one child failed.")
        else:
            self.log.main("Received sigquit from a child process. It usually means the child failed.")
        sys.stdout.flush()
        sys.stderr.flush()
        mark("exit")
        # kill_process_tree(include_parent=True): the children first, then SIGKILL to itself. A child that
        # holds the port (the fault) is exactly the one that escaped this, so it is left alone.
        os.kill(os.getpid(), signal.SIGKILL)

    async def start(self) -> None:
        setup, log, phases, mem, knobs = self.setup, self.log, self.setup.phases, self.setup.memory, self.knobs
        failure = setup.failure
        model, hw = self.profile.model, self.profile.hardware
        await self.phase(phases.process_s)
        log.sched("Init torch distributed begin.")
        if self.faults.crash_at_start:
            await self.phase(min(phases.init_distributed_s, 1.0))
            self.die("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                     "NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
                     "2.27.3", "start")
        if failure and failure.stage == "devices":
            self.die(failure.exc_line, "devices")
        await self.phase(phases.init_distributed_s)
        log.sched(f"Init torch distributed ends. mem usage={hw.context_overhead_gb:.2f} GB")
        log.sched(f"Load weight begin. avail mem={mem.avail_before_load_gb:.2f} GB")
        if failure and failure.stage == "load":
            await self.phase(phases.weight_load_s * 0.8)
            self.die(failure.exc_line, "load")
        await self.phase(phases.weight_load_s)
        log.sched(f"Load weight end. type={model.architecture}, dtype={model.dtype}, "
                  f"avail mem={mem.avail_after_load_gb:.2f} GB, mem usage={mem.weights_gb:.2f} GB.")
        if failure and failure.stage in ("kernels", "kv"):
            self.die(failure.exc_line, failure.stage)
        await self.phase(phases.kv_alloc_s)
        self._log_kv_allocated()
        log.sched(f"Memory pool end. avail mem={mem.avail_after_kv_gb:.2f} GB")
        await self._capture()
        self._build_groups()
        log.sched(f"max_total_num_tokens={mem.kv_tokens}, chunked_prefill_size={knobs.chunked_prefill_size}, "
                  f"max_prefill_tokens={knobs.max_prefill_tokens}, max_running_requests={mem.max_running_requests}, "
                  f"context_len={knobs.context_length}, available_gpu_mem={self.free_gb():.2f} GB")
        await self.phase(phases.server_start_s)

    def free_gb(self) -> float:
        mem = self.setup.memory
        return mem.avail_after_capture_gb if self.knobs.cuda_graph else mem.avail_after_kv_gb

    def _log_kv_allocated(self) -> None:
        mem = self.setup.memory
        dtype = "torch.float8_e4m3fn" if "fp8" in self.knobs.kv_dtype else "torch.bfloat16"
        size = f"KV size: {mem.kv_pool_gb:.2f} GB" if self.profile.model.attention == "mla" else \
            f"K size: {mem.kv_pool_gb / 2:.2f} GB, V size: {mem.kv_pool_gb / 2:.2f} GB"
        if self.version == "0.5.6":
            self.log.sched(f"KV Cache is allocated. #tokens: {mem.kv_tokens}, {size}")
        else:
            self.log.sched(f"KV Cache is allocated. dtype: {dtype}, #tokens: {mem.kv_tokens}, {size}")

    async def _capture(self) -> None:
        knobs, mem, log, failure = self.knobs, self.setup.memory, self.log, self.setup.failure
        over = self.faults.oom_at_capture_over
        oom_fault = self.faults.oom_at_capture or (
            over is not None and knobs.cuda_graph and max(knobs.cuda_graph_bs, default=0) > over)
        if not knobs.cuda_graph and not self.faults.hang_at_capture and not oom_fault:
            return
        before = mem.avail_after_kv_gb
        bs = list(knobs.cuda_graph_bs)
        if self.version == "0.5.6":
            log.sched(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
            log.sched(f"Capture cuda graph bs {bs}")
        else:
            log.sched(f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                      f"avail mem={before:.2f} GB")
        hang = self.faults.hang_at_capture or (failure is not None and failure.kind == "startup_timeout")
        if hang:
            mark("hang")
            await self.forever.wait()
        if failure is not None and failure.stage == "capture" or oom_fault:
            await self.phase(self.setup.phases.capture_s * 0.3)
            if oom_fault and not (failure and failure.stage == "capture"):
                exc = ("Exception: Capture cuda graph failed: " + _oom_line(2.0, mem.total_gb, 0.4))
            else:
                exc = failure.exc_line  # type: ignore[union-attr]
            hint = _capture_hint(self.version)
            self.die(f"{exc}\n{hint}", "capture")
        await self.phase(self.setup.phases.capture_s)
        elapsed = self.setup.phases.capture_s
        if self.version == "0.5.6":
            log.sched(f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={mem.graph_mem_gb:.2f} GB. "
                      f"avail mem={mem.avail_after_capture_gb:.2f} GB.")
        else:
            log.sched(f"Capture target decode CUDA graph end. bs={bs}, elapsed={elapsed:.2f} s, "
                      f"mem usage={mem.graph_mem_gb:.2f} GB, avail mem={mem.avail_after_capture_gb:.2f} GB.")

    def _build_groups(self) -> None:
        setup = self.setup
        for i in range(self.knobs.dp):
            sched = Scheduler(self.profile, self.knobs, setup.perf, setup.memory, setup.health,
                              log=self.log.sched if i == 0 else None, seed=self.seed + i)
            cache = PrefixCache(setup.memory.kv_tokens) if self.knobs.radix_cache else None
            group = Group(sched, Clock(self.scale), cache)
            group.numerics = replace(self.numerics, on_nan=lambda g=group: self.on_nan(g))
            self.groups.append(group)

    # -- serving ----------------------------------------------------------------------------------------------

    async def run_group(self, group: Group) -> None:
        sched = group.scheduler
        while True:
            if self.frozen:
                await self.forever.wait()
            if sched.idle:
                group.wake.clear()
                await group.wake.wait()
                group.clock.resync()
                continue
            try:
                batch = sched.next_batch()
            except Crash as crash:
                self.die(crash.exc_line, crash.where, running=True)
                return
            for req in sched.rejected:
                if isinstance(req, GenRequest) and req.notify is not None:
                    req.notify()
            sched.rejected.clear()
            if batch is None:
                group.wake.clear()
                await group.wake.wait()
                continue
            await group.clock.sleep(batch.duration)
            if self.faults.slow_drip and any(getattr(r, "streamed", False) for r in batch.decode):
                mark("slow_drip")
                await asyncio.sleep(self.faults.slow_drip)
                group.clock.resync()
            if self.frozen:
                await self.forever.wait()
            finished = sched.complete(batch, group.clock.sim)
            for req in finished:
                if isinstance(req, GenRequest):
                    req.finished_wall = time.monotonic()
                    if group.cache is not None:
                        group.cache.insert(req.hashes)
                    if req.notify is not None:
                        req.notify()

    def on_nan(self, group: Group) -> None:
        sched = group.scheduler
        step = sched.stats.decode_steps + sched.stats.prefill_batches
        if step == self.last_nan_step:
            return
        self.last_nan_step = step
        mark("nan")
        if self.nan_check_crash:
            sched.crash_pending = Crash("nan", "torch.AcceleratorError: CUDA error: device-side assert triggered\n"
                                               "Assertion `NaN detected! sampler: next_token_logits` failed.")
        elif self.version == "0.5.6" and self.knobs.nan_detection:
            self.log.sched("Detected errors during sampling! NaN in the logits.")
        elif self.sanitized:
            self.log.sched("NaN detected in sampler: next_token_logits; values were sanitized before sampling. "
                           "This usually indicates numerical overflow (e.g. fp16 activations) or an upstream bug "
                           "producing NaN. Logged once; further occurrences are silent.")
            self.sanitized = False  # once

    def new_request(self, prompt_ids: list[int], sampling: Sampling, *, prompt_text: str | None,
                    return_logprob: bool, logprob_start_len: int, top_logprobs_num: int,
                    notify: Any) -> tuple[GenRequest, Group]:
        group = self.groups[self.next_group % len(self.groups)]
        self.next_group += 1
        self.rid_counter += 1
        text = prompt_text if prompt_text is not None else self.tokenizer.decode(prompt_ids)
        answer = known_answer(text, self.known)
        plan = None
        if answer is not None:
            plan = self.tokenizer.encode(answer, special=False)
            if not sampling.ignore_eos:
                plan.append(self.tokenizer.eos_token_id)
        elif self.task_model:
            # The known-answer model on text outside its task writes ';' and nothing else: on the probe's random
            # English words the real one did, on an H100 (docs/gpu-sglang-0517-faults, 2026-12-08).
            plan = self.tokenizer.encode(" ".join([";"] * sampling.max_new_tokens), special=False)
        hashes = prefix_hashes(prompt_ids)
        cached = group.cache.match(hashes) if group.cache is not None else 0
        req = GenRequest(uuid.uuid4().hex, self.tokenizer, prompt_ids, sampling, group.numerics, plan,
                         return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                         top_logprobs_num=top_logprobs_num, cached=cached,
                         stream_interval=self.knobs.stream_interval, notify=notify, created_wall=time.monotonic(),
                         arrival=group.clock.sim, hashes=hashes, seed=self.seed + self.rid_counter)
        return req, group

    def submit(self, req: GenRequest, group: Group) -> None:
        group.clock.resync() if group.scheduler.idle else None
        req.arrival = group.clock.sim
        group.scheduler.submit(req)
        group.wake.set()

    def abort(self, req: GenRequest, group: Group) -> None:
        group.scheduler.abort(req)

    # -- the port ---------------------------------------------------------------------------------------------

    def spawn_port_holder(self, sock: socket.socket, new_session: bool = False) -> None:
        """A child keeps a listening socket on the port after the parent dies: in the server's process group
        (child_holds_port), or in a session of its own, out of the group's reach (escape_session)."""
        code = "import signal,time\nwhile True:\n    time.sleep(3600)\n"
        quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Escaped, the port holder also clears its environment (only the port can find it), and a second
        # child keeps the environment but no port (only the environment can find it).
        env = {"PATH": os.environ.get("PATH", "")} if new_session else None
        self.child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(sock.fileno(),), env=env,
                                      start_new_session=new_session, **quiet)
        if new_session:
            self.helper = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, **quiet)
            mark("escaped")


def _capture_hint(version: str) -> str:
    if version == "0.5.6":
        return ("Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n")
    return ("Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
            "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge "
            "performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n")


def _oom_line(want: float, total: float, free: float) -> str:
    from ._model import _torch_oom
    return _torch_oom(want, total, free)


