"""Stage 5: the correctness gate, before any load and again after it.

A configuration that is fast but wrong must never win: known answers at temperature 0, finite
logprobs, no degenerate text, decode-time logprobs that a re-prefill reproduces, greedy output
that is deterministic and agrees with the baseline's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
import tenacity

from .._failures import FailureKind, TrialFailure
from ..engines import CheckSkipped, Completion, Engine, prompt_ids_from_server
from ..spec import GateSpec
from ._textcheck import degenerate_reason, nan_positions
from ._watch import Limits, Watch


@dataclass(frozen=True)
class GateResult:
    seconds: float
    checks: tuple[str, ...]  # the checks that ran and passed
    answers: Mapping[str, str]  # prompt -> text
    reference: Mapping[str, list[int]]  # prompt -> greedy token ids, for later trials to agree with
    max_logprob_diff: float | None = None
    logprob_diffs: Mapping[str, float] = field(default_factory=dict)  # prompt -> decode vs re-prefill
    skipped: Mapping[str, str] = field(default_factory=dict)  # check -> why it could not be done
    divergences: tuple[Divergence, ...] = ()  # where greedy output left the baseline's, as near-ties
    # Each self-comparison's measured figure (worst mean |logprob| difference), recorded per trial so that a
    # study on real kernels gives the distribution its tolerance should come from.
    figures: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GateShape:
    """What the self-comparisons need to know of the running server (from /server_info)."""

    batch_size: int | None = None  # batch-consistency: how many prompts are sent at once
    chunk_size: int | None = None  # the configuration's prefill chunk, in tokens; None: not chunked
    long_prompt_tokens: int | None = None  # long-context-consistency: the long prompt's length in tokens


# SGLang's chunked-prefill-size where a space sets none (its default on 80 GB GPUs).
DEFAULT_CHUNK = 8192
# The long prompt's text: common words, repeated (its length in tokens is measured by the server's tokenizer).
_FILLER = ("the river runs past the old mill and the town where the people work the land and keep the "
           "bridge in good repair for the winter when the water is high and cold").split()
# The other prompts of a batch: different from the gate's prompts and from each other.
_TOPICS = ("a harbour", "a mountain pass", "a market", "a library", "an orchard", "a railway", "a glacier",
           "a forge", "a vineyard", "a canal", "an observatory", "a desert well", "a lighthouse", "a mill")


def gate_shape(info: Mapping[str, object], concurrency: tuple[int, ...], spec: GateSpec) -> GateShape:
    """The batch size spans the decode CUDA-graph sizes the server captured (`cuda_graph_config`'s decode bs,
    else the flat `cuda_graph_bs`/`cuda_graph_max_bs`), else the probe's highest concurrency; capped at
    `spec.max_batch` and at the server's running-request limit. The long prompt crosses a prefill chunk
    (2x the default where no chunk is set) where the context allows."""
    def number(value: object) -> int | None:
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None

    sizes: list[int] = []
    graphs = info.get("cuda_graph_config")
    if isinstance(graphs, Mapping) and isinstance(graphs.get("decode"), Mapping):
        bs = graphs["decode"].get("bs")
        sizes = [int(b) for b in bs] if isinstance(bs, list) else []
        sizes = sizes or [n for n in [number(graphs["decode"].get("max_bs"))] if n]
    if not sizes and isinstance(info.get("cuda_graph_bs"), list):
        sizes = [int(b) for b in info["cuda_graph_bs"]]
    if not sizes and number(info.get("cuda_graph_max_bs")):
        sizes = [number(info["cuda_graph_max_bs"])]
    batch = max(sizes) if sizes else max(concurrency, default=spec.max_batch)
    batch = min(batch, spec.max_batch, number(info.get("max_running_requests")) or batch)
    chunk = number(info.get("chunked_prefill_size"))
    context = number(info.get("max_req_input_len")) or number(info.get("context_length")) \
        or number(info.get("max_model_len"))
    tokens = (chunk + chunk // 4 + 64) if chunk else 2 * DEFAULT_CHUNK
    if context:
        tokens = min(tokens, context - spec.max_new_tokens - 64)  # room for the output and the prompt's tail
    return GateShape(max(2, batch), chunk, tokens if tokens > 0 else None)


@dataclass(frozen=True)
class Divergence:
    """Greedy output leaving the baseline's at `position`: `margin` is this server's logprob of its own token
    minus that of the baseline's token there, both from a prefill of the same context on this server."""

    prompt: str
    position: int
    margin: float


def run_gate(client: httpx.Client, engine: Engine, spec: GateSpec, *, stage: str = "gate",
             reference: Mapping[str, list[int]] | None = None,
             reference_diffs: Mapping[str, float] | None = None, vocab_size: int | None = None,
             quick: bool = False, watch: Watch | None = None, stall_timeout: float | None = None,
             generated: bool = False, shape: GateShape | None = None) -> GateResult:
    """Run the checks; raise TrialFailure on the first that fails. `quick` is the after-load re-check.

    Each request runs under `watch` (the server's exit, an interrupt and silence end it; see _Timeouts),
    `generated`: readiness saw the server generate. `reference_diffs`: the baseline's decode vs re-prefill
    differences, where it ran at this trial's precision. `shape`: what the self-comparisons (batch and long
    context) need; None runs them with defaults."""
    t0 = time.monotonic()
    timeouts = _Timeouts(client, spec, quick, stall_timeout, generated, watch)
    passed: set[str] = set()
    answers: dict[str, str] = {}
    ids: dict[str, list[int]] = {}
    worst_diff: float | None = None
    diffs: dict[str, float] = {}
    skipped: dict[str, str] = {}
    divergences: list[Divergence] = []
    alone: dict[str, Completion] = {}
    figures: dict[str, float] = {}
    shape = shape or GateShape(batch_size=spec.max_batch, long_prompt_tokens=2 * DEFAULT_CHUNK)

    def fail(kind: FailureKind, prompt: str, message: str, completion: Completion | None = None) -> None:
        shown = f"prompt: {prompt!r}\noutput: {completion.text[:300]!r}" if completion else f"prompt: {prompt!r}"
        if completion is not None:
            shown += f"\ntoken ids: {list(completion.token_ids[:32])}\nlogprobs: {list(completion.logprobs[:16])}"
        raise TrialFailure(kind, message, shown, stage)

    for item in spec.prompts:
        completion = _complete(client, engine, item.prompt, spec.max_new_tokens, stage, timeouts)
        answers[item.prompt] = completion.text
        alone[item.prompt] = completion
        ids[item.prompt] = list(completion.token_ids)
        if spec.enabled("finite-logprobs"):
            bad = nan_positions(completion.logprobs)
            if bad:
                fail(FailureKind.NAN, item.prompt, f"logprob of output token {bad[0]} is NaN or inf (null)",
                     completion)
            passed.add("finite-logprobs")
        if spec.enabled("degenerate-text"):
            reason = degenerate_reason(completion.text, completion.token_ids, vocab_size)
            if reason:
                fail(FailureKind.GARBAGE, item.prompt, reason, completion)
            passed.add("degenerate-text")
        if spec.enabled("known-answer") and item.expect:
            if item.expect.lower() not in completion.text.lower():
                fail(FailureKind.WRONG_ANSWER, item.prompt,
                     f"expected {item.expect!r}, got {completion.text.strip()[:80]!r}", completion)
            passed.add("known-answer")
        if quick:
            continue
        prefill: tuple[float | None, ...] | None = None
        if spec.enabled("logprob-consistency") and completion.token_ids:
            try:
                prefill = _request(lambda: engine.prefill_logprobs(client, item.prompt, completion), stage,
                                   timeouts)
            except CheckSkipped as exc:
                skipped["logprob-consistency"] = str(exc)
            else:
                diff = _mean_diff(completion.logprobs, prefill)
                if diff is None:
                    fail(FailureKind.NAN, item.prompt, "re-prefill returned NaN or inf logprobs", completion)
                worst_diff = diff if worst_diff is None else max(worst_diff, diff)
                diffs[item.prompt] = diff
                if diff > spec.logprob_tolerance:
                    fail(FailureKind.INCONSISTENT_LOGPROBS, item.prompt,
                         f"decode and re-prefill logprobs differ by {diff:.4f} on average "
                         f"(tolerance {spec.logprob_tolerance})", completion)
                passed.add("logprob-consistency")
        if spec.enabled("baseline-agreement") and reference and item.prompt in reference:
            want = reference[item.prompt][: spec.agreement_tokens]
            got = list(completion.token_ids[: spec.agreement_tokens])
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
            if at is not None:
                try:
                    margin = _tie_margin(client, engine, item.prompt, completion, at, want[at], prefill, stage,
                                         timeouts)
                except CheckSkipped as exc:
                    skipped["baseline-agreement"] = str(exc)
                    continue
                if margin is None or abs(margin) > spec.agreement_tie_tolerance:
                    shown = "NaN" if margin is None else f"{margin:+.4f}"
                    fail(FailureKind.WRONG_ANSWER, item.prompt,
                         f"greedy output leaves the baseline's at token {at}, and not at a near-tie: this server "
                         f"scores its token {shown} against the baseline's (tie tolerance "
                         f"{spec.agreement_tie_tolerance})", completion)
                divergences.append(Divergence(item.prompt, at, margin))
            passed.add("baseline-agreement")

    # Against the baseline's own differences: the worst prompt here against the baseline's worst, not prompt by
    # prompt. Healthy kernels round each prompt differently: triton against flashinfer on an H100 differed by
    # 0.023 on one prompt, and their worst prompts by 0.002 (docs/gpu-sglang-0517-reruns, trial 3).
    judged = [p for p in diffs if (reference_diffs or {}).get(p) is not None]
    excess = spec.logprob_excess_tolerance
    if judged and excess is not None:
        worst = max(judged, key=diffs.__getitem__)
        over = diffs[worst] - max(reference_diffs[p] for p in judged)
        if over > excess:
            fail(FailureKind.INCONSISTENT_LOGPROBS, worst,
                 f"decode and re-prefill logprobs differ by {diffs[worst]:.4f} on average on the worst prompt, "
                 f"{over:.4f} more than the baseline's worst (logprob-excess-tolerance {excess})", alone[worst])

    # The self-comparisons need no known answer: they run on any model, before load and again after it.
    if spec.enabled("batch-consistency") and shape.batch_size:
        figures["batch-consistency"] = _batch_consistency(client, engine, spec, alone, shape.batch_size, stage,
                                                          timeouts, fail)
        passed.add("batch-consistency")
    if spec.enabled("long-context-consistency") and shape.long_prompt_tokens:
        try:
            figures["long-context-consistency"] = _long_context(client, engine, spec, shape, stage, timeouts,
                                                                fail)
        except CheckSkipped as exc:
            skipped["long-context-consistency"] = str(exc)
        else:
            passed.add("long-context-consistency")
    if worst_diff is not None:
        figures["logprob-consistency"] = worst_diff

    if spec.enabled("determinism") and not quick:
        first = spec.prompts[0].prompt
        again = _complete(client, engine, first, spec.max_new_tokens, stage, timeouts)
        if list(again.token_ids) != ids[first]:
            fail(FailureKind.INCONSISTENT_LOGPROBS, first, "greedy output differs between two identical requests",
                 again)
        passed.add("determinism")
    return GateResult(time.monotonic() - t0, tuple(sorted(passed)), answers, ids, worst_diff, diffs, skipped,
                      tuple(divergences), {k: round(v, 6) for k, v in figures.items()})


def _batch_consistency(client: httpx.Client, engine: Engine, spec: GateSpec, alone: Mapping[str, Completion],
                       size: int, stage: str, timeouts: _Timeouts, fail) -> float:
    """Each gate prompt again, inside one batch of `size` different prompts sent at once: a sequence's answer
    must not depend on its batch or its slot in it (a kernel picked by batch size, a CUDA graph captured
    wrong, an index mix-up). Greedy tokens agree up to a near-tie (judged by this server's prefill, as
    baseline-agreement does); logprobs, up to where they part, within batch-logprob-tolerance."""
    prompts = list(alone)
    others = [f"Write a few sentences about {_TOPICS[i % len(_TOPICS)]} ({i + 1})." for i in range(size)]
    batch = (prompts + others)[:max(size, len(prompts))]
    got = _request(lambda: engine.complete_batch(client, batch, spec.max_new_tokens), stage, timeouts)
    # NaN first, in any sequence of the batch: a batched NaN is `nan`, not the wrong tokens it leads to.
    for prompt, completion in zip(batch, got):
        bad = nan_positions(completion.logprobs)
        if bad:
            fail(FailureKind.NAN, prompt, f"batch-consistency: logprob of output token {bad[0]} is NaN or inf (null) "
                 f"in a batch of {len(batch)}", completion)
    worst = 0.0
    for prompt, completion in zip(prompts, got):
        want = alone[prompt]
        at = next((i for i, (a, b) in enumerate(zip(completion.token_ids, want.token_ids)) if a != b), None)
        if at is None and len(completion.token_ids) != len(want.token_ids):
            at = min(len(completion.token_ids), len(want.token_ids))
        n = len(want.token_ids) if at is None else at
        if n:
            diff = _mean_diff(completion.logprobs[:n], want.logprobs[:n])
            if diff is None:
                fail(FailureKind.NAN, prompt, f"batch-consistency: NaN or inf logprobs in a batch of {len(batch)}",
                     completion)
            worst = max(worst, diff)
            if diff > spec.batch_logprob_tolerance:
                fail(FailureKind.INCONSISTENT_LOGPROBS, prompt,
                     f"batch-consistency: logprobs in a batch of {len(batch)} differ from the same prompt's alone "
                     f"by {diff:.4f} on average (batch-logprob-tolerance {spec.batch_logprob_tolerance}, "
                     "provisional)", completion)
        if at is not None and at < min(len(completion.token_ids), len(want.token_ids)):
            try:
                margin = _tie_margin(client, engine, prompt, completion, at, want.token_ids[at], None, stage,
                                     timeouts)
            except CheckSkipped:
                margin = None
            if margin is None or abs(margin) > spec.agreement_tie_tolerance:
                shown = "NaN" if margin is None else f"{margin:+.4f}"
                fail(FailureKind.WRONG_ANSWER, prompt,
                     f"batch-consistency: greedy output in a batch of {len(batch)} leaves the same prompt's alone "
                     f"at token {at}, and not at a near-tie: this server scores its token {shown} against the "
                     f"alone one (tie tolerance {spec.agreement_tie_tolerance})", completion)
    return worst


def _long_context(client: httpx.Client, engine: Engine, spec: GateSpec, shape: GateShape, stage: str,
                  timeouts: _Timeouts, fail) -> float:
    """Decode vs re-prefill after a prompt longer than a prefill chunk: chunked prefill and the KV pages it
    writes (a chunk's KV stored wrong reads back only in the decode that follows) must give what one
    re-prefill of prompt and output gives."""
    target = shape.long_prompt_tokens or 0
    sample = " ".join(_FILLER * 8)
    try:
        per_word = len(_request(lambda: prompt_ids_from_server(client, sample), stage, timeouts)) / (8 * len(_FILLER))
    except CheckSkipped:
        per_word = 2.0  # no tokenizer to ask: a generous guess keeps the prompt inside the context
    words = max(1, int(target / max(per_word, 0.5)))
    filler = " ".join(_FILLER[i % len(_FILLER)] for i in range(words))
    prompt = f"{filler}\n\nContinue the story of the river:"
    completion = _complete(client, engine, prompt, spec.max_new_tokens, stage, timeouts)
    if not completion.token_ids:
        raise CheckSkipped("the long prompt gave no output tokens")
    prefill = _request(lambda: engine.prefill_logprobs(client, prompt, completion), stage, timeouts)
    diff = _mean_diff(completion.logprobs, prefill)
    tokens = len(completion.prompt_ids) or words
    crossed = "" if not shape.chunk_size or tokens > shape.chunk_size \
        else f" (it fits in one chunk of {shape.chunk_size}: the context is too short to cross one)"
    if diff is None:
        fail(FailureKind.NAN, prompt[-80:], f"long-context-consistency: NaN or inf logprobs after a {tokens}-token "
             f"prompt{crossed}", completion)
    if diff > spec.long_context_logprob_tolerance:
        fail(FailureKind.INCONSISTENT_LOGPROBS, prompt[-80:],
             f"long-context-consistency: after a {tokens}-token prompt{crossed}, decode and re-prefill logprobs "
             f"differ by {diff:.4f} on average (long-context-logprob-tolerance "
             f"{spec.long_context_logprob_tolerance}, provisional)", completion)
    return diff


class _Timeouts:
    """The limits of each request, in turn.

    The first request of a fresh server may wait out first-use compilation (`first_request_timeout`). Where
    readiness has already seen the server generate, that wait lasts only while the server's log grows: past
    `request_timeout`, a log quiet for as long is a hang (a hung /generate behind a /health_generate that
    answers waited the whole 600 s). No answer and no log output for `stall_timeout` is a hang throughout,
    except for the first request of a server never seen generating (it may compile silently). Every other
    request, the re-check's first included, gets `request_timeout`."""

    def __init__(self, client: httpx.Client, spec: GateSpec, quick: bool, stall: float | None, generated: bool,
                 watch: Watch | None) -> None:
        self.client, self.spec, self.quick, self.stall, self.generated = client, spec, quick, stall, generated
        self.watch = watch
        self.used = 0

    def next(self) -> Limits:
        first, rest = self.spec.first_request_timeout, self.spec.request_timeout
        if self.used > 0 or self.quick:
            limits = Limits(rest, rest, self.stall)
        elif self.generated:
            limits = Limits(rest, max(first, rest), self.stall)
        else:
            limits = Limits(first, first, None)
        self.used += 1
        self.client.timeout = httpx.Timeout(limits.http_timeout if self.watch else limits.cap, connect=5.0)
        return limits


# Errors of a request that cannot have reached the server (or was refused before it was read): worth a
# retry. A request the server read and did not answer in time is not retried: a hang would cost the
# timeout once per attempt.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.RemoteProtocolError)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _NOT_SENT) or isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def _complete(client: httpx.Client, engine: Engine, prompt: str, max_tokens: int, stage: str,
              timeouts: _Timeouts) -> Completion:
    return _request(lambda: engine.complete(client, prompt, max_tokens), stage, timeouts)


def _request(call, stage: str, timeouts: _Timeouts):
    """One gate request, tried up to three times where it failed before the server could read it, or with
    a 5xx: a single transient error says little about a configuration."""
    limits = timeouts.next()
    seconds = limits.cap
    retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(_retryable),
                                 stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_fixed(0.2),
                                 reraise=True)
    t0 = time.monotonic()
    try:
        if timeouts.watch is None:
            return retrying(call)
        return timeouts.watch.run(lambda: retrying(call), limits, f"{stage} request")
    except httpx.HTTPStatusError as exc:
        raise TrialFailure(FailureKind.ERRORS_UNDER_LOAD, f"gate request answered HTTP {exc.response.status_code}",
                           exc.response.text[:500], stage) from exc
    except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
        raise TrialFailure(FailureKind.HANG, f"gate request not answered after {time.monotonic() - t0:.1f} s "
                           f"(timeout {seconds:g} s); the server took it and never answered", "", stage) from exc
    except httpx.TimeoutException as exc:
        raise TrialFailure(FailureKind.ERRORS_UNDER_LOAD, f"gate request timed out ({type(exc).__name__})",
                           "", stage) from exc
    except httpx.HTTPError as exc:
        raise TrialFailure(FailureKind.CRASH_UNDER_LOAD, f"gate request failed: {exc!r}"[:300], "", stage) from exc


def _mean_diff(decode: tuple[float | None, ...], prefill: tuple[float | None, ...]) -> float | None:
    """Mean absolute difference between decode-time and re-prefill logprobs of the same tokens."""
    pairs = list(zip(decode, prefill))
    if not pairs or any(a is None or b is None for a, b in pairs):
        return None
    return sum(abs(a - b) for a, b in pairs) / len(pairs)


def _tie_margin(client: httpx.Client, engine: Engine, prompt: str, completion: Completion, at: int, theirs: int,
                prefill: tuple[float | None, ...] | None, stage: str, timeouts: _Timeouts) -> float | None:
    """This server's prefill logprob of its own token at `at` minus that of the baseline's token `theirs`, in
    the same context. Kernels that round differently decide a near-tie either way (real bf16 kernels on an
    H100: triton and torch_native left flashinfer's output on every prompt, by at most 0.19); a kernel that
    computes other numbers altogether scores the baseline's token far below its own. A decode-position error
    can stay within the tie (sglang-jax's did): the decode vs re-prefill check is what catches it."""
    context = completion.token_ids[:at]

    def scored(token: int) -> float | None:
        probe = Completion("", (*context, token), (), completion.prompt_ids)
        return _request(lambda: engine.prefill_logprobs(client, prompt, probe), stage, timeouts)[-1]

    own = prefill[at] if prefill is not None else scored(completion.token_ids[at])
    other = scored(theirs)
    if own is None or other is None:
        return None
    return own - other
