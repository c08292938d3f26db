"""A generate request of the HTTP server: the scheduler's `Req` plus tokens, logprobs and text.

Which token comes out at each step is decided here, from the health of the configuration (NaN, garbage,
drift) and the text model (`_text`). The HTTP layer only reads the results and formats them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

from ._engine import Req
from ._model import Health
from ._text import HASH_SEED, Tokenizer, greedy, logprob, splitmix64, step_hash, unit


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class Numerics:
    """How this server's kernels turn the ideal logprob into what is returned."""
    health: Health
    jitter: float  # decode and prefill kernels round differently by up to this much
    nan_value: float | None  # None: NaN logprob (JSON null); else the sanitized value (-log vocab)
    vocab_size: int
    on_nan: Callable[[], None] | None = None  # the server logs (or dies of) NaN as the version would


class GenRequest(Req):
    __slots__ = ("tok", "prompt_ids", "sampling", "numerics", "plan", "plan_at", "h", "prompt_h", "hashes",
                 "return_logprob", "logprob_start_len", "top_logprobs_num", "out_ids", "out_logprobs", "out_top",
                 "pieces", "finish", "in_logprobs", "in_top", "notify", "stream_interval", "rng", "created_wall",
                 "finished_wall", "first_wall", "ids_json", "text_json", "lp_json", "with_text", "in_json",
                 "streamed", "sent_ts")

    def __init__(self, rid: str, tok: Tokenizer, prompt_ids: list[int], sampling: Sampling, numerics: Numerics,
                 plan: list[int] | None, *, return_logprob: bool = False, logprob_start_len: int = -1,
                 top_logprobs_num: int = 0, cached: int = 0, stream_interval: int = 1,
                 notify: Callable[[], None] | None = None, created_wall: float = 0.0, arrival: float = 0.0,
                 hashes: list[int] | None = None, seed: int = 0) -> None:
        super().__init__(rid, len(prompt_ids), sampling.max_new_tokens, cached=cached, arrival=arrival)
        self.tok, self.prompt_ids, self.sampling, self.numerics = tok, prompt_ids, sampling, numerics
        self.plan, self.plan_at = plan, 0
        self.hashes = hashes if hashes is not None else prefix_hashes(prompt_ids)
        self.h = self.prompt_h = self.hashes[-1]
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len
        self.top_logprobs_num = top_logprobs_num
        self.out_ids: list[int] = []
        self.out_logprobs: list[float | None] = []
        self.out_top: list[list[tuple[float | None, int]]] = []
        self.pieces: list[str] = []
        self.finish: dict[str, Any] | None = None
        self.in_logprobs: list[float | None] | None = None
        self.in_top: list[Any] | None = None
        self.notify = notify
        self.stream_interval = stream_interval
        self.rng = random.Random(sampling.seed if sampling.seed is not None else seed)
        self.created_wall = created_wall
        self.finished_wall: float | None = None
        self.first_wall: float | None = None
        # JSON fragments kept up to date token by token, so that a streamed event (which carries everything
        # so far, as SGLang's do) is a few byte copies instead of re-encoding every id and logprob.
        self.ids_json = bytearray()
        self.text_json = bytearray()
        self.lp_json = bytearray()
        self.with_text = False
        self.streamed = False
        self.sent_ts: float | None = None  # wall time of the first response sent (SGLang reports it once)
        self.in_json: bytes | None = None

    # -- the scheduler's hooks --------------------------------------------------------------------------------

    def prefill_done(self, now: float) -> None:
        if not self.return_logprob or self.in_logprobs is not None or self.logprob_start_len < 0:
            return
        start = min(self.logprob_start_len, len(self.prompt_ids))
        jitter = self.numerics.jitter
        flip = self.numerics.health.tie_flip
        values: list[float | None] = []
        tops: list[Any] = []
        hashes, ids = self.hashes, self.prompt_ids
        for i in range(start, len(ids)):
            if i == 0:
                values.append(None)  # nothing predicts the first token (SGLang returns None there)
                tops.append(None)
                continue
            h, t = hashes[i], ids[i]
            lp = logprob(h, t, self.tok.pseudo_ids, flip)
            if jitter:
                lp += jitter * (unit(h, t, 0x77) - 0.5)
            values.append(lp)
            if self.top_logprobs_num:
                tops.append(self._top(h, t, lp))
        self.in_logprobs = values
        self.in_top = tops if self.top_logprobs_num else None

    def emit(self, nan: bool, decode: bool, batch: int, now: float) -> None:
        numerics, health = self.numerics, self.numerics.health
        h = self.h
        lp: float | None
        matched: Any = None
        if nan:
            self.nan_tokens += 1
            if numerics.on_nan is not None:
                numerics.on_nan()
            if health.nan_symptom == "out_of_vocab":
                # NaN logits sample an id past the vocabulary; SGLang swaps in EOS and stops the request.
                tid = self.tok.eos_token_id
                matched = "NaN happened"
            else:
                tid = 0  # all-NaN (or all -1e5 after sanitising) logits argmax to id 0
            lp = numerics.nan_value
        elif health.garbage:
            tid = self.tok.plus_id
            lp = -(0.001 + 0.01 * unit(h, tid, 0x99))
        else:
            # A decode-position error (sglang-jax 0.0.1's RoPE one position too far): decode computes the logits
            # of another context than the one a re-prefill sees.
            seen = splitmix64(h ^ 0xD1CE) if decode and health.decode_position_error else h
            # A batch-dependent error, or a chunked prefill's KV stored wrong: decode reads another context too.
            if decode and (health.batch_slot_error is not None and batch >= health.batch_slot_error
                           or health.chunk_kv_error and self.chunks > 1):
                seen = splitmix64(h ^ 0xBA7C)
            tid = self._choose(seen)
            lp = logprob(seen, tid, self.tok.pseudo_ids, health.tie_flip)
            if numerics.jitter:
                lp += numerics.jitter * (unit(h, tid, 0x55 if decode else 0x77) - 0.5)
            if decode and health.logprob_drift:
                lp -= health.logprob_drift * (0.25 + unit(h, tid, 0x33))
        self.h = step_hash(h, tid)
        self.n_out += 1
        self.out_ids.append(tid)
        self.ids_json += b"%d," % tid
        tok = self.tok
        self.text_json += tok.piece_json(tid)
        if self.return_logprob:
            self.out_logprobs.append(lp)
            self.lp_json += b"[%s,%d,%s]," % (b"null" if lp is None else repr(lp).encode(), tid,
                                              b'"' + tok.piece_json(tid) + b'"' if self.with_text else b"null")
            if self.top_logprobs_num:
                self.out_top.append(self._top(h, tid, lp))
        self.pieces.append(tok.piece(tid))
        self._check_finished(tid, matched)
        if self.notify is not None and (self.done or self.n_out == 1 or self.n_out % self.stream_interval == 0):
            self.notify()

    # -- helpers ----------------------------------------------------------------------------------------------

    def _choose(self, h: int) -> int:
        s = self.sampling
        plan = self.plan
        if plan is not None and self.plan_at < len(plan):
            # A known answer: greedy follows it; sampling wanders off with a probability growing with T.
            if s.temperature <= 0 or self.rng.random() >= min(0.9, 0.15 * s.temperature):
                tid = plan[self.plan_at]
                self.plan_at += 1
                return tid
            self.plan_at = len(plan)
        ids = self.tok.pseudo_ids
        if s.temperature <= 0:
            return greedy(h, ids, self.numerics.health.tie_flip)
        return ids[self.rng.randrange(len(ids))]

    def _top(self, h: int, tid: int, lp: float | None) -> list[tuple[float | None, int]]:
        out: list[tuple[float | None, int]] = [(lp, tid)]
        ids = self.tok.pseudo_ids
        base = lp if lp is not None else None
        for j in range(1, self.top_logprobs_num):
            alt = ids[splitmix64(h + j) % len(ids)]
            if alt == tid:
                alt = ids[(splitmix64(h + j) + 1) % len(ids)]
            out.append((None if base is None else base - 0.6 - j - unit(h, alt, j), alt))
        return out

    def _check_finished(self, tid: int, matched: Any) -> None:
        s = self.sampling
        if matched is not None:
            self.finish = {"type": "stop", "matched": matched}
        elif not s.ignore_eos and tid == self.tok.eos_token_id:
            self.finish = {"type": "stop", "matched": tid}
        elif tid in s.stop_token_ids:
            self.finish = {"type": "stop", "matched": tid}
        elif s.stop:
            tail = "".join(self.pieces[-8:])
            for stop in s.stop:
                if stop and stop in tail:
                    self.finish = {"type": "stop", "matched": stop}
                    break
        if self.finish is None and self.n_out >= self.max_new:
            self.finish = {"type": "length", "length": self.max_new}
        if self.finish is not None:
            self.done = True

    @property
    def text(self) -> str:
        """Output text so far; a stop string is cut off, as SGLang does."""
        text = "".join(self.pieces)
        if self.finish and isinstance(self.finish.get("matched"), str) and self.finish["matched"] in text \
                and self.finish["matched"] != "NaN happened":
            text = text[: text.rfind(self.finish["matched"])]
        return text


def prefix_hashes(ids: list[int]) -> list[int]:
    """hashes[i] is the context hash before token i; hashes[len(ids)] the hash after the whole prompt."""
    out = [HASH_SEED]
    h = HASH_SEED
    for t in ids:
        h = step_hash(h, t)
        out.append(h)
    return out


def nan_value(sanitized: bool, vocab_size: int) -> float | None:
    # With NaN detection SGLang replaces NaN logits by -1e5: a uniform distribution, logprob -log(vocab).
    return -math.log(vocab_size) if sanitized else None
