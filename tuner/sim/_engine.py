"""The scheduler: admits waiting requests, runs prefill chunks and decode steps, like SGLang's event loop.

It is clock-free: `next_batch()` picks the next forward and says how long it takes (from the PerfModel);
`complete()` applies its effects. The HTTP server sleeps the duration in wall time between the two; `predict()`
just adds it to a virtual clock. So both see the same batches, the same queueing and the same throughput.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ._model import Health, MemoryPlan, PerfModel, _torch_oom, decode_activation_gb, prefill_activation_gb
from ._profile import Profile
from ._resolve import Knobs

INIT_NEW_TOKEN_RATIO = 0.7  # SGLang's SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
CLIP_MAX_NEW_TOKENS = 4096  # SGLang clips the reservation of long outputs


class Crash(Exception):
    """The scheduler dies. `kind` is a Prediction status; `exc_line` is what the traceback ends with."""

    def __init__(self, kind: str, exc_line: str, where: str = "forward") -> None:
        super().__init__(exc_line)
        self.kind, self.exc_line, self.where = kind, exc_line, where


class Req:
    """One request as the scheduler sees it. Subclasses turn emitted positions into tokens."""

    __slots__ = ("rid", "prompt_len", "target", "max_new", "cached", "prefilled", "n_out", "done", "arrival",
                 "first_token_at", "finished_at", "aborted", "nan_tokens", "kv", "chunks")

    def __init__(self, rid: str, prompt_len: int, max_new: int, cached: int = 0, arrival: float = 0.0) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.target = prompt_len  # tokens to prefill (prompt, or prompt + output after a retraction)
        self.max_new = max_new
        self.cached = min(cached, max(prompt_len - 1, 0))
        self.prefilled = 0
        self.n_out = 0
        self.done = False
        self.aborted = False
        self.arrival = arrival
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        self.nan_tokens = 0
        self.kv = 0  # tokens this request holds in the KV pool
        self.chunks = 0  # prefill chunks run for it (more than one: a chunked prefill)

    def emit(self, nan: bool, decode: bool, batch: int, now: float) -> None:
        """Produce the next output token. `nan`: the logits of this step are NaN."""
        self.n_out += 1
        if nan:
            self.nan_tokens += 1
        if self.n_out >= self.max_new:
            self.done = True

    def prefill_done(self, now: float) -> None:
        """Called when the prompt is fully in the KV cache (input logprobs are known from here)."""


@dataclass
class Batch:
    kind: str  # prefill | decode
    duration: float
    chunks: list[tuple[Req, int, int]] = field(default_factory=list)  # (req, new tokens, offset)
    decode: list[Req] = field(default_factory=list)
    cuda_graph: bool = False


@dataclass
class Stats:
    prefill_batches: int = 0
    decode_steps: int = 0
    generated: int = 0
    nan_tokens: int = 0
    max_decode_batch: int = 0
    retractions: int = 0
    admitted: int = 0
    last_gen_throughput: float = 0.0


class Scheduler:
    def __init__(self, profile: Profile, knobs: Knobs, perf: PerfModel, memory: MemoryPlan, health: Health,
                 log: Callable[[str], None] | None = None, seed: int = 0) -> None:
        self.profile, self.knobs, self.perf, self.memory, self.health = profile, knobs, perf, memory, health
        groups = max(1, knobs.attn_dp)
        self.capacity = memory.kv_tokens * groups  # DP-attention ranks each hold their own KV pool
        self.max_running = max(1, memory.max_running_requests * groups)
        self.log = log
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.used = 0  # tokens held in the KV pool
        self.ctx_sum = 0  # sum of context lengths of the running requests
        cons = knobs.schedule_conservativeness
        self.init_ratio = min(INIT_NEW_TOKEN_RATIO * cons, 1.0)
        self.min_ratio = min(self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.ratio_decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.ratio = self.init_ratio
        self.stats = Stats()
        self.crash_pending: Crash | None = None
        self.rejected: list[Req] = []  # requests that can never fit; the server answers them with an error
        self._decode_streak = 0
        self._since_log_tokens = 0
        self._since_log_time = 0.0
        self._rng = random.Random(seed)

    # -- queue ------------------------------------------------------------------------------------------------

    def submit(self, req: Req) -> None:
        self.waiting.append(req)

    def abort(self, req: Req) -> None:
        """A client went away: free what the request holds."""
        if req.done:
            return
        req.aborted = req.done = True
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self.ctx_sum -= req.kv
        elif req is self.chunked:
            self.chunked = None
        self.used -= req.kv
        req.kv = 0

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and self.chunked is None

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running) + (1 if self.chunked else 0)

    # -- forming batches --------------------------------------------------------------------------------------

    def next_batch(self) -> Batch | None:
        if self.crash_pending is not None:
            raise self.crash_pending
        batch = None
        if self._decode_streak == 0 or not self.running:
            batch = self._prefill_batch()
        if batch is None and self.running:
            batch = self._decode_batch()
        return batch

    def _pick(self) -> Req:
        policy = self.knobs.schedule_policy
        if policy == "lof":
            best = max(self.waiting, key=lambda r: r.max_new)
        elif policy == "random":
            best = self._rng.choice(self.waiting)
        elif policy in ("lpm", "dfs-weight"):
            best = max(self.waiting, key=lambda r: r.cached)
        else:
            return self.waiting[0]
        return best

    def _prefill_batch(self) -> Batch | None:
        if not self.waiting and self.chunked is None:
            return None
        knobs = self.knobs
        chunk = knobs.chunked_prefill_size
        budget = chunk if chunk > 0 else knobs.max_prefill_tokens
        rem_input = knobs.max_prefill_tokens
        chunks: list[tuple[Req, int, int]] = []
        if self.chunked is not None:
            req = self.chunked
            take = min(req.target - req.prefilled, budget)
            chunks.append((req, take, req.prefilled))
            budget -= take
            rem_input -= take
        if self.chunked is None or chunks[-1][1] == self.chunked.target - self.chunked.prefilled:
            reserve = sum(min(r.max_new - r.n_out, CLIP_MAX_NEW_TOKENS) for r in self.running) * self.ratio
            avail = self.capacity - self.used - reserve
            while self.waiting and budget > 0 and rem_input > 0 \
                    and len(self.running) + len(chunks) < self.max_running:
                req = self._pick()
                fresh = req.target - max(req.cached, req.prefilled)
                need = fresh + min(req.max_new, CLIP_MAX_NEW_TOKENS) * self.ratio
                if need > avail:
                    if req.target + 1 > self.capacity and not self.running and not chunks:
                        # Can never fit: SGLang rejects it; here it finishes with an abort.
                        self.waiting.remove(req)
                        req.aborted = req.done = True
                        req.finished_at = -1.0
                        self.rejected.append(req)
                        continue
                    break
                if chunk <= 0 and chunks and fresh > budget:
                    break  # without chunking a prompt is never split, unless it is alone
                avail -= need
                self.waiting.remove(req)
                if req.prefilled == 0 and req.cached:
                    req.prefilled = req.kv = req.cached
                    self.used += req.cached
                take = fresh if chunk <= 0 and not chunks else min(fresh, budget)
                chunks.append((req, take, req.prefilled))
                budget -= take
                rem_input -= take
                self.stats.admitted += 1
                self._check_crash_on_admit()
                if take < fresh:
                    self.chunked = req
                    break
        if not chunks:
            return None
        new_tokens = sum(c[1] for c in chunks)
        attn_ctx = sum(take * (offset + take / 2.0) for _, take, offset in chunks)
        decode = list(self.running) if knobs.mixed_chunk and self.running else []
        need_gb = prefill_activation_gb(self.profile, knobs, new_tokens + len(decode))
        if need_gb > self.memory.avail_after_capture_gb:
            raise Crash("oom", _torch_oom(need_gb, self.memory.total_gb, self.memory.avail_after_capture_gb),
                        where="prefill")
        duration = self.perf.prefill_s(new_tokens, attn_ctx, len(decode), self.ctx_sum if decode else 0,
                                       seqs=len(chunks))
        if self.log is not None:
            cached = sum(r.cached for r, _, off in chunks if off == r.cached and r.cached)
            self.log(f"Prefill batch, #new-seq: {len(chunks)}, #new-token: {new_tokens}, #cached-token: {cached}, "
                     f"token usage: {self.used / max(self.capacity, 1):.2f}, #running-req: {len(self.running)}, "
                     f"#queue-req: {len(self.waiting)}, ")
        return Batch(kind="prefill", duration=duration, chunks=chunks, decode=decode)

    def _check_crash_on_admit(self) -> None:
        h = self.health
        if h.crash_under_load is not None and h.crash_batch_over is None and self.stats.admitted > h.crash_under_load:
            self.crash_pending = Crash("crash_under_load", h.crash_message or _ILLEGAL_ACCESS)

    def _decode_batch(self) -> Batch:
        while self.used + len(self.running) > self.capacity and len(self.running) > 1:
            self._retract()
        b = len(self.running)
        h = self.health
        if h.crash_under_load is not None and h.crash_batch_over is not None \
                and self.stats.admitted >= h.crash_under_load and b > h.crash_batch_over:
            raise Crash("crash_under_load", h.crash_message or _ILLEGAL_ACCESS)
        need_gb = decode_activation_gb(self.profile, b)
        if need_gb > self.memory.avail_after_capture_gb:
            raise Crash("oom", _torch_oom(need_gb, self.memory.total_gb, self.memory.avail_after_capture_gb),
                        where="decode")
        duration, graph = self.perf.decode_s(b, self.ctx_sum)
        return Batch(kind="decode", duration=duration, decode=list(self.running), cuda_graph=graph)

    def _retract(self) -> None:
        # SGLang retracts the request with the least progress (and then the longest prompt) first.
        victim = min(self.running, key=lambda r: (r.n_out, -r.prompt_len))
        self.running.remove(victim)
        self.used -= victim.kv
        self.ctx_sum -= victim.kv
        victim.kv = 0
        victim.target = victim.prompt_len + victim.n_out
        victim.prefilled = 0
        victim.cached = 0
        self.waiting.appendleft(victim)
        old = self.ratio
        self.ratio = min(1.0, max(self.ratio, 0.5) + 0.1)
        self.stats.retractions += 1
        if self.log is not None:
            self.log(f"KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                     f"#new_token_ratio: {old:.4f} -> {self.ratio:.4f}")

    # -- applying a finished forward --------------------------------------------------------------------------

    def _is_nan(self, req: Req, batch: int) -> bool:
        h = self.health
        if h.nan_after_tokens is not None and req.n_out >= h.nan_after_tokens:
            return True
        return h.nan_when_batch_over is not None and batch > h.nan_when_batch_over

    def complete(self, batch: Batch, now: float) -> list[Req]:
        finished: list[Req] = []
        stats = self.stats
        if batch.kind == "prefill":
            stats.prefill_batches += 1
            for req, take, _ in batch.chunks:
                if req.done:  # aborted while its chunk ran
                    continue
                req.prefilled += take
                req.chunks += 1
                req.kv += take
                self.used += take
                if req.prefilled < req.target:
                    continue
                if req is self.chunked:
                    self.chunked = None
                req.prefill_done(now)
                if req.n_out >= req.max_new:  # max_new_tokens=0: a pure prefill (scoring, re-prefill checks)
                    req.done = True
                    self.used -= req.kv
                    req.kv = 0
                    req.finished_at = now
                    finished.append(req)
                    continue
                req.emit(self._is_nan(req, 1), False, 1, now)
                stats.generated += 1
                if req.first_token_at is None:
                    req.first_token_at = now
                if req.done:
                    self.used -= req.kv
                    req.kv = 0
                    req.finished_at = now
                    finished.append(req)
                    continue
                self.running.append(req)
                req.kv += 1
                self.used += 1
                self.ctx_sum += req.kv
        if batch.decode:
            b = len(batch.decode)
            if batch.kind == "decode":
                stats.decode_steps += 1
                stats.max_decode_batch = max(stats.max_decode_batch, b)
                self.ratio = max(self.min_ratio, self.ratio - self.ratio_decay)
            for req in batch.decode:
                if req.done:
                    continue
                req.emit(self._is_nan(req, b), True, b, now)
                req.kv += 1
                self.used += 1
                self.ctx_sum += 1
                if req.done:
                    self.used -= req.kv
                    self.ctx_sum -= req.kv
                    req.kv = 0
                    req.finished_at = now
                    finished.append(req)
            stats.generated += b
            self._since_log_tokens += b
            if batch.kind == "decode":
                self.running = [r for r in self.running if not r.done]
        self._since_log_time += batch.duration
        if batch.kind == "decode":
            self._decode_streak = (self._decode_streak + 1) % self.knobs.continuous_decode_steps
            if stats.decode_steps % self.knobs.decode_log_interval == 0:
                self._log_decode(batch.cuda_graph)
        else:
            self._decode_streak = 0
            if batch.decode:
                self.running = [r for r in self.running if not r.done]
        for req in finished:
            stats.nan_tokens += req.nan_tokens
        return finished

    def _log_decode(self, cuda_graph: bool) -> None:
        elapsed = self._since_log_time
        self.stats.last_gen_throughput = self._since_log_tokens / elapsed if elapsed > 0 else 0.0
        self._since_log_tokens, self._since_log_time = 0, 0.0
        if self.log is None:
            return
        self.log(f"Decode batch, #running-req: {len(self.running)}, #token: {self.used}, "
                 f"token usage: {self.used / max(self.capacity, 1):.2f}, cuda graph: {cuda_graph}, "
                 f"gen throughput (token/s): {self.stats.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}, ")


_ILLEGAL_ACCESS = ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                   "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                   "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1")
