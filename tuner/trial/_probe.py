"""Stage 6: the throughput probe — streamed requests at each concurrency level, measured the way
SGLang's own benchmark measures, with every response's content checked too.

A benchmark that counts HTTP 200 as success is how broken configurations win; here a response with
NaN logprobs or degenerate text fails the trial. Logprobs are asked for only in an untimed check wave
before the timed levels (`_check_wave`), so that the timed requests are the engine's own benchmark
client's and cost the server what they cost there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from .._failures import FailureKind, ProbeStopped, TrialFailure, cut_short, enough_finished
from ..engines import Engine
from ..spec import ProbeSpec, TraceRow, load_trace, loop_trace, mean_rate
from ._arrivals import send_offsets
from ._goodput import certainly_bad, good_latency_bound, goodput, is_good, steady_output_throughput
from ._ratesearch import MIN_REQUESTS, RATE_STEPS, Measure, RateSearchResult, RateSearchSpec, RateStep, search_rate
from ._stream_client import StreamClient, StreamError, StreamTimeout
from ._textcheck import degenerate_reason, nan_positions
from ._tokens import PromptTokens
from ._workloads import WorkItem, make_workload, trace_workload

@dataclass
class RequestResult:
    started: bool = False  # sent, or due (a level cut at its deadline counts the tokens of those still streaming)
    sent_at: float = 0.0  # perf_counter time latencies are measured from: the scheduled send time when open-loop
    lateness: float = 0.0  # seconds the client sent it after its scheduled time (open-loop levels)
    ok: bool = False
    error: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of the prompt, served from the prefix cache (where the engine reports it)
    itl: list[float] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)  # when each chunk with tokens arrived (steady state)
    text: str = ""
    problem: str = ""  # content check failure


# Send times kept per trace level: enough to check a replay's pattern, without a long trace bloating the study.
MAX_SENDS_KEPT = 2000


@dataclass(frozen=True)
class LevelMetrics:
    concurrency: int
    duration: float
    completed: int
    errors: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_throughput: float
    latency_ms: Mapping[str, float]  # e.g. {"p99_ttft_ms": ..., "mean_itl_ms": ...}
    cut: bool = False  # ended at its share of probe.time-budget: figures over what streamed until then
    requests: int = 0  # sent or due in all, and the output tokens they ask for (what a cut level fell short of)
    expected_output_tokens: int = 0
    rate: float | None = None  # requests/s offered (open loop); None: a closed loop of `concurrency` streams
    # Steady-state output throughput; for open-loop levels how late the client sent (send_lateness_*_ms);
    # with SLOs, goodput and attainment (tuner/trial/_goodput.py).
    extra: Mapping[str, float] = field(default_factory=dict)
    # A trace level: the scale it was replayed at, and per request (in trace order) the seconds after the
    # level's start it was due and was sent, so that a replay can be checked against the trace.
    trace_scale: float | None = None
    sends: tuple[tuple[float, float], ...] = ()

    def metric(self, name: str) -> float:
        for table in (self.latency_ms, self.extra):
            if name in table:
                return table[name]
        return float(getattr(self, name))

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("concurrency", "duration", "completed", "errors", "total_input_tokens",
                                            "total_output_tokens", "request_throughput", "output_throughput",
                                            "total_throughput", "cut", "requests",
                                            "expected_output_tokens")}
        if self.rate is not None:
            d["rate"] = self.rate
        if self.trace_scale is not None:
            d["trace_scale"] = self.trace_scale
            d["trace_due_s"] = [round(due, 4) for due, _ in self.sends[:MAX_SENDS_KEPT]]
            d["trace_sent_s"] = [round(sent, 4) for _, sent in self.sends[:MAX_SENDS_KEPT]]
        d.update(self.latency_ms)
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class ProbeResult:
    seconds: float
    levels: tuple[LevelMetrics, ...]
    rate_search: RateSearchResult | None = None
    lengths: str = "words"  # what probe.input-len counted: "tokens" of the model's tokenizer, or "words"

    def level(self, concurrency: int | None) -> LevelMetrics:
        """A closed-loop level: the one of `concurrency`, or the highest."""
        closed = [m for m in self.levels if m.rate is None]
        if concurrency is None:
            return max(closed, key=lambda m: m.concurrency)
        return next(m for m in closed if m.concurrency == concurrency)

    def value(self, name: str, concurrency: int | None) -> float:
        """An objective's figure: the rate the search found, or a metric of the objective's level."""
        if name == "max_rate_under_slo":
            return float(self.rate_search.rate) if self.rate_search and self.rate_search.rate is not None else 0.0
        return self.level(concurrency).metric(name)


# A PROBE_CUT trial's attributes: its objective level's figures, and the probe's time budget it was cut under.
CUT_LEVEL_ATTR = "cut_level"
TIME_BUDGET_ATTR = "probe_time_budget"
# A suggested budget: the pace of a cut level is that of its start, which may be slower or faster than the rest;
# a quarter more, in whole minutes, so that a level near the estimate is not cut again.
BUDGET_MARGIN = 1.25


def cut_message(level: Mapping[str, Any], time_budget: float | None, requests: int | None = None,
                expected_tokens: int | None = None) -> str:
    """What a level cut short measured, and the probe.time-budget that would fit it, estimated from its pace so
    far: its budget grown as much as the level's share must grow (every level gets an equal share).
    `requests` and `expected_tokens` where its figures do not hold them (recorded before they did)."""
    n = int(level.get("requests") or requests or 0)
    expected = level.get("expected_output_tokens") or expected_tokens
    concurrency = int(level.get("concurrency") or 0)
    share = float(level.get("duration") or 0.0)
    at = f"its {time_budget:g} s budget ({share:.0f} s for this level)" if time_budget else "its time budget"
    of = f" of {n}" if n else ""
    need = f", at least {enough_finished(concurrency, n)} needed" if n else ""
    text = (f"probe cut at {at} with {int(level.get('completed') or 0)}{of} requests finished at concurrency "
            f"{concurrency}{need}: not a measurement")
    pace = float(level.get("output_throughput") or 0.0)
    per_request = float(level.get("request_throughput") or 0.0)
    if pace > 0 and expected:
        seconds, basis = expected / pace, f"{pace:,.0f} tok/s"
    elif per_request > 0 and n:
        seconds, basis = n / per_request, f"{per_request:.2f} requests/s"
    else:
        return text + "; nothing streamed to estimate a budget from"
    if not time_budget or share <= 0:
        return text + f"; the level would need about {seconds:.0f} s (estimated from {basis})"
    fits = math.ceil(time_budget * seconds / share * BUDGET_MARGIN / 60) * 60
    return text + f"; probe.time-budget: {fits} would fit (estimated from {basis})"


# In front of every prompt of the check wave, so that it shares no prefix with a timed prompt.
CHECK_MARK = "[check] "

Progress = Callable[[int, float], bool]  # (step, throughput so far) -> stop?

# The pruner hears a level's throughput so far at each of these shares of its output tokens (in
# thousandths: step = level index * 1000 + share), so every trial reports at the same steps, and a slow
# server reports its first figure after 1% of its tokens rather than after its first finished requests.
PROGRESS_EVERY = 10
TICK_S = 0.25
# The pruner's word is acted on only after this long into a level: stopping a level that ends within
# seconds anyway saves nothing, and its first figures are mostly noise.
JUDGE_AFTER_S = 5.0


def run_probe(base_url: str, headers: Mapping[str, str], engine: Engine, spec: ProbeSpec,
              alive: Callable[[], None], objective_level: int | None = None,
              on_progress: Progress | None = None, check_text: bool = True,
              rate_search: RateSearchSpec | None = None, goodput_slo: Mapping[str, float] | None = None,
              tokens: PromptTokens | None = None) -> ProbeResult:
    """Measure every concurrency level, then every rate level, then (with `rate_search`) search the highest
    rate that meets the SLO. `alive()` raises the trial's failure if the server died. Rate levels report
    goodput against `goodput_slo` (default: the search's SLOs). With `tokens` (the model's tokenizer) prompt
    lengths are tokens, else words.

    NaN logprobs always fail the trial; degenerate text only with `check_text` (random weights write
    nothing but symbols, and a space for them turns the check off)."""
    if goodput_slo is None and rate_search is not None:
        goodput_slo = rate_search.slo_ms
    return asyncio.run(_probe(base_url, headers, engine, spec, alive, objective_level, on_progress, check_text,
                              rate_search, goodput_slo, tokens))


async def _probe(base_url: str, headers: Mapping[str, str], engine: Engine, spec: ProbeSpec,
                 alive: Callable[[], None], objective_level: int | None, on_progress: Progress | None,
                 check_text: bool, rate_search: RateSearchSpec | None,
                 goodput_slo: Mapping[str, float] | None, tokens: PromptTokens | None) -> ProbeResult:
    t0 = time.monotonic()
    deadline = time.perf_counter() + spec.time_budget
    # Not httpx: its per-chunk cost capped what one core could measure (see tuner/trial/_stream_client.py).
    # The semaphore of each level bounds the connections; the timeout is per read, as httpx's was.
    async with StreamClient(base_url, headers, read_timeout=spec.request_timeout, connect_timeout=10.0,
                            reuse=engine.bench_reuses_connections) as client:
        watch = asyncio.create_task(_watch(alive))
        try:
            if spec.warmup:
                warm = make_workload(spec, spec.warmup, salt=-1, tokens=tokens)
                await _race(watch, asyncio.gather(*(_one(client, engine, WorkItem(w.prompt, min(16, w.output_len)),
                                                         False, check_text, RequestResult()) for w in warm)))
            # Each level (the check wave too) may use an equal share of what is left of the budget.
            left = len(spec.concurrency) + len(spec.rates) + bool(spec.check_tokens) + bool(spec.trace)

            def share() -> float:
                nonlocal left
                left -= 1
                now = time.perf_counter()
                return now + (deadline - now) / (left + 1)

            if spec.check_tokens:
                await _race(watch, _check_wave(client, engine, spec, check_text, share(), tokens))
            target = objective_level if objective_level is not None else max(spec.concurrency, default=None)
            levels = []
            for step_base, conc in enumerate(spec.concurrency):
                work = make_workload(spec, spec.requests, salt=conc, tokens=tokens)
                # Under the rate objective the pruner hears the tested rates, not a throughput.
                report = on_progress if conc == target and rate_search is None else None
                levels.append(await _race(watch, _level(client, engine, spec, conc, work, report, step_base,
                                                          check_text, share())))
                if conc == target and rate_search is None and cut_short(levels[-1].as_dict()):
                    figures = {k: round(v, 4) if isinstance(v, float) else v
                               for k, v in levels[-1].as_dict().items()}
                    raise TrialFailure(FailureKind.PROBE_CUT, cut_message(figures, spec.time_budget), "", "probe",
                                       {CUT_LEVEL_ATTR: figures, TIME_BUDGET_ATTR: spec.time_budget})
            slo = SloVerdict(goodput_slo, None) if goodput_slo else None  # measured, never an early stop
            for i, rate in enumerate(spec.rates):
                work = make_workload(spec, spec.requests, salt=-10 - i, tokens=tokens)
                arrivals = OpenLoop(rate, send_offsets(len(work), rate, spec.burstiness, spec.seed), spec.max_in_flight)
                levels.append(await _race(watch, _level(client, engine, spec, 0, work, None, 0, check_text, share(),
                                                          open_loop=arrivals, slo=slo)))
            if spec.trace:
                rows = load_trace(spec.trace.path, spec.trace.format, spec.trace.limit)
                work, arrivals = _trace_arrivals(spec, rows, spec.trace.scale, salt=-20, tokens=tokens)
                levels.append(await _race(watch, _level(client, engine, spec, 0, work, None, 0, check_text, share(),
                                                          open_loop=arrivals, slo=slo)))
            found = None
            if rate_search is not None:
                start = next(m for m in levels if m.rate is None and m.concurrency == target).request_throughput
                found = await _race(watch, search_rate(rate_search, start, on_progress,
                                                        _rate_step(client, engine, spec, rate_search, check_text,
                                                                   tokens)))
        finally:
            watch.cancel()
    return ProbeResult(time.monotonic() - t0, tuple(levels), found, "words" if tokens is None else "tokens")


def _trace_arrivals(spec: ProbeSpec, rows: Sequence[TraceRow], scale: float, salt: int,
                    tokens: PromptTokens | None) -> tuple[list[WorkItem], OpenLoop]:
    """A trace's rows as an open-loop level: each sent at its offset divided by `scale`; the rate offered is
    the trace's mean rate times `scale`."""
    offsets = [row.offset / scale for row in rows]
    return (trace_workload(spec, rows, salt, tokens),
            OpenLoop(mean_rate(list(rows)) * scale, offsets, spec.max_in_flight, scale))


def _rate_step(client: StreamClient, engine: Engine, spec: ProbeSpec, search: RateSearchSpec,
               check_text: bool, tokens: PromptTokens | None = None) -> Measure:
    """How the rate search measures one rate on this server: open-loop arrivals for seconds-per-rate, the
    verdict as soon as it is certain."""
    slo = SloVerdict(search.slo_ms, search.attainment)
    rows = load_trace(spec.trace.path, spec.trace.format, spec.trace.limit) if spec.trace else []

    async def measure(rate: float, index: int, deadline: float) -> RateStep:
        n = max(MIN_REQUESTS, math.ceil(rate * search.seconds_per_rate))
        # The same prompts for the n-th tested rate of every trial; new ones for each rate, so that a rate
        # does not find the previous rate's prompts in the prefix cache.
        if rows:
            # With a trace its time axis is scaled to the rate, keeping its bursts and shared prefixes: the rows
            # due within seconds-per-rate (at least MIN_REQUESTS of them), the trace repeated where it is shorter.
            scale = rate / mean_rate(rows)
            due = loop_trace(rows, search.seconds_per_rate * scale, MIN_REQUESTS)
            work, arrivals = _trace_arrivals(spec, due, scale, RATE_STEPS + index, tokens)
            arrivals = dataclasses.replace(arrivals, rate=rate)
        else:
            work = make_workload(spec, n, salt=RATE_STEPS + index, tokens=tokens)
            arrivals = OpenLoop(rate, send_offsets(n, rate, spec.burstiness, spec.seed + index), spec.max_in_flight)
        offsets = arrivals.offsets
        # After the last arrival, as long as a good request can take: then whatever still streams is past saving.
        longest = min(good_latency_bound(search.slo_ms, max(w.output_len for w in work)) or math.inf,
                      spec.request_timeout)
        t0 = time.perf_counter()
        level = await _level(client, engine, spec, 0, work, None, 0, check_text,
                             min(deadline, t0 + offsets[-1] + longest + 0.5),
                             open_loop=arrivals, slo=slo)
        figures = {k: v for k, v in {**level.latency_ms, **level.extra}.items()
                   if k.startswith(("slo_", "request_goodput", "send_lateness_p90", "p99_", "median_"))}
        note = "verdict early" if level.extra.get("slo_missed_early") else "cut" if level.cut else ""
        if arrivals.trace_scale is not None:
            figures["trace_scale"] = arrivals.trace_scale  # the trace's time axis divided by this for the rate
        return RateStep(rate, level.extra["slo_attainment"] >= search.attainment, time.perf_counter() - t0,
                        figures, note)

    return measure


async def _watch(alive: Callable[[], None]) -> None:
    while True:
        alive()
        await asyncio.sleep(0.1)


async def _race(watch: asyncio.Task, work: Any) -> Any:
    """Await `work`, unless the server watcher raises first (the server died): then fail at once."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    if watch in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        watch.result()  # raises the TrialFailure
    return task.result()


async def _check_wave(client: StreamClient, engine: Engine, spec: ProbeSpec, check_text: bool,
                      deadline: float, tokens: PromptTokens | None = None) -> None:
    """Before the timed levels: one request per slot of the highest level at once, each asking for the
    logprob of every token, so that NaN in batched decode shows (and ends the trial at its first token).

    The timed levels then send what the engines' own benchmark clients send. One request that asks for
    logprobs makes the whole batch compute them, in vLLM as in SGLang: with one request in eight asking,
    vLLM's CPU build decoded up to 12% slower (benchmarks/probe_vs_vllm_bench.py). The first such request
    also costs seconds once in vLLM (a kernel compiled), which belongs here, not in a timed p99 TTFT.

    Its prompts start with CHECK_MARK. With a dataset they are drawn from the timed levels' prompts, and
    the server's prefix cache then served part of the timed prefill: on the simulated 8B server, 32 of 64
    timed prompts were cached, and the probe measured half bench_serving's mean TTFT and 1.43x its
    output tok/s (benchmarks/probe_vs_sglang_bench.py). A different first token shares no cached prefix.
    """
    concurrency = max(spec.concurrency, default=spec.max_in_flight or 1)
    work = [WorkItem(CHECK_MARK + w.prompt, min(spec.check_tokens, w.output_len))
            for w in make_workload(spec, concurrency, salt=-2, tokens=tokens)]
    await _level(client, engine, spec, concurrency, work, None, 0, check_text, deadline, logprobs=True)


@dataclass(frozen=True)
class OpenLoop:
    """An open-loop level: requests sent at `offsets` seconds after its start, whatever the server does."""

    rate: float
    offsets: Sequence[float]
    in_flight: int | None = None  # at most this many requests outstanding; the rest wait, and it counts
    trace_scale: float | None = None  # a trace's arrivals, its time axis divided by this


@dataclass(frozen=True)
class SloVerdict:
    """Goodput against `slo_ms`; with `attainment`, the level ends as soon as more requests than
    `1 - attainment` allows can no longer meet them."""

    slo_ms: Mapping[str, float]
    attainment: float | None


async def _level(client: StreamClient, engine: Engine, spec: ProbeSpec, concurrency: int,
                 work: Sequence[WorkItem], report: Progress | None, step_base: int,
                 check_text: bool, deadline: float, logprobs: bool = False, open_loop: OpenLoop | None = None,
                 slo: SloVerdict | None = None) -> LevelMetrics:
    cap = open_loop.in_flight if open_loop else concurrency
    semaphore = asyncio.Semaphore(cap) if cap else contextlib.nullcontext()
    results = [RequestResult() for _ in work]
    start = time.perf_counter()
    expected_tokens = sum(item.output_len for item in work)
    # More failed requests than this and the level fails whatever the rest do.
    allowed_errors = spec.max_error_rate * len(work)
    errors = 0
    pruned = cut = missed = False
    reported = 0
    allowed_bad = (1 - slo.attainment) * len(work) + 1e-9 if slo and slo.attainment is not None else math.inf
    finished_bad = 0

    def past_saving() -> list[RequestResult]:
        """Requests still streaming that can no longer meet the SLOs."""
        now = time.perf_counter()
        return [r for r, item in zip(results, work) if r.started and not (r.ok or r.error)
                and certainly_bad(r, item.output_len, now - r.sent_at, slo.slo_ms)]

    def judge(streaming_too: bool) -> None:
        """End the level once the SLO verdict is certain: more requests than the attainment allows are
        finished and not good, or (on the ticker's scan) still streaming and past saving."""
        nonlocal missed
        if allowed_bad == math.inf or missed:
            return
        bad = finished_bad + (len(past_saving()) if streaming_too else 0)
        if bad > allowed_bad:
            missed = True
            end_level()

    def progress() -> None:
        """Feeds the pruner at each PROGRESS_EVERY thousandths of the level's tokens, streamed or done."""
        nonlocal reported, pruned
        if report is None or pruned:
            return
        tokens = sum(r.output_tokens for r in results if r.started and (r.ok or not r.error))
        share = min(1000, 1000 * tokens // max(1, expected_tokens)) // PROGRESS_EVERY * PROGRESS_EVERY
        if share > reported:
            reported = share
            elapsed = max(time.perf_counter() - start, 1e-9)
            if report(step_base * 1000 + share, tokens / elapsed) and elapsed >= JUDGE_AFTER_S:
                pruned = True
                end_level()

    def end_level() -> None:
        for task in tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def worker(i: int, item: WorkItem, result: RequestResult) -> None:
        nonlocal errors, finished_bad
        due = None
        if open_loop is not None:
            # Latency counts from the scheduled time: a client (or an in-flight cap) that sends late
            # cannot hide queueing. How late the client itself was is kept apart, to tell it from the server.
            due = start + open_loop.offsets[i]
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            result.lateness = max(0.0, time.perf_counter() - due)
            result.started, result.sent_at = True, due
        async with semaphore:
            await _one(client, engine, item, logprobs, check_text, result, due)
            errors += not result.ok
            if result.problem or errors > allowed_errors:
                # The verdict is in: end the level now rather than when the requests still streaming
                # finish, which on a real server can be minutes of a broken configuration.
                end_level()
                return
            finished_bad += slo is not None and not is_good(result, slo.slo_ms)
            progress()
            judge(streaming_too=False)

    async def ticker() -> None:
        """Between completions (a slow server finishes none for minutes): progress, and the deadline."""
        nonlocal cut
        while not pruned:
            await asyncio.sleep(TICK_S)
            if time.perf_counter() >= deadline:
                cut = True
                end_level()
                return
            progress()
            judge(streaming_too=True)

    tasks = [asyncio.ensure_future(worker(i, item, result)) for i, (item, result) in enumerate(zip(work, results))]
    tick = asyncio.ensure_future(ticker())
    try:
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome
    finally:
        tick.cancel()
    duration = time.perf_counter() - start
    # NaN is the cause, garbage text its usual symptom: when both show, report the cause.
    broken = next((r for r in results if r.problem.startswith("NaN")), None) \
        or next((r for r in results if r.problem), None)
    if broken is not None:
        kind = FailureKind.NAN if broken.problem.startswith("NaN") else FailureKind.GARBAGE
        where = (f"rate {open_loop.rate:g}/s" if open_loop else f"concurrency {concurrency}") \
            + (" (check wave, logprobs on)" if logprobs else "")
        raise TrialFailure(kind, f"under load at {where}: {broken.problem}",
                           f"output: {broken.text[:300]!r}", "probe")
    if pruned:
        raise ProbeStopped()
    finished = [r for r in results if r.ok or r.error]
    streaming = [r for r in results if r.started and not (r.ok or r.error)] if cut or missed else []
    metrics = _metrics(concurrency, duration, finished, spec, streaming, cut)
    extra = dict(zip(("steady_output_throughput", "steady_duration"), steady_output_throughput(finished)))
    extra.update(as_sent(finished))
    if open_loop is not None:
        late = [r.lateness for r in results if r.started]
        extra.update({f"send_lateness_{stat}_ms": fn(late) * 1000.0 for stat, fn in
                      (("mean", _mean), ("p90", lambda v: _pct(v, 90)), ("max", lambda v: max(v, default=0.0)))})
        if late and _pct(late, 90) > spec.max_send_lateness:
            raise TrialFailure(FailureKind.CLIENT_TOO_SLOW,
                               f"the probe could not keep rate {open_loop.rate:g}/s: one request in ten was sent "
                               f"{_pct(late, 90) * 1000:.0f} ms or more late (limit probe.max-send-lateness "
                               f"{spec.max_send_lateness * 1000:.0f} ms); the client, not the server, is the limit",
                               "", "probe")
    if slo is not None:
        # At a cut, requests still streaming count as sent and not good; at an early verdict only those
        # already past saving do, and those still undecided are left out.
        if missed:
            streaming = past_saving()
        extra.update(goodput([*finished, *streaming], slo.slo_ms, duration))
        extra["slo_missed_early"] = float(missed)
    sends: tuple[tuple[float, float], ...] = ()
    if open_loop is not None and open_loop.trace_scale is not None:
        # Requests go out in offset order, so those started are the first ones.
        sends = tuple((open_loop.offsets[i], open_loop.offsets[i] + r.lateness)
                      for i, r in enumerate(results) if r.started)
    return dataclasses.replace(metrics, rate=open_loop.rate if open_loop else None,
                               concurrency=cap or 0, extra=extra, requests=len(work),
                               expected_output_tokens=expected_tokens,
                               trace_scale=open_loop.trace_scale if open_loop else None, sends=sends)


async def _one(client: StreamClient, engine: Engine, item: WorkItem, want_logprobs: bool,
               check_text: bool, result: RequestResult, due: float | None = None) -> RequestResult:
    path, body = engine.stream_request(item.prompt, item.output_len, want_logprobs)
    result.started = True
    tally = _Tally(result, engine.stream_parser())
    # Timed from before the connection is taken, as vLLM's and SGLang's benchmark clients time it, or
    # from the scheduled send time of an open-loop request.
    tally.sent = tally.last = result.sent_at = due if due is not None else time.perf_counter()
    try:
        async with client.stream(path, body) as response:
            if response.status != 200:
                await response.read()
                result.error = f"HTTP {response.status}"
                return result
            # The stream is read to its end ("[DONE]" is skipped, not a stop) so that the connection
            # can serve the next request.
            async for payloads in response.data_batches():
                now = time.perf_counter()  # one time for all events one read brought, as aiohttp's iter_any does
                for payload in payloads:
                    if payload != b"[DONE]":
                        tally.add(tally.parser.decode(payload), now)
                if tally.nan_seen:
                    break  # the trial fails on it: stop here (the half-read connection is closed, not reused)
    except StreamTimeout as exc:
        result.error = f"timeout ({str(exc).split(':')[0]})"
        return result
    except (StreamError, httpx.HTTPError) as exc:  # httpx.HTTPError: an error event, from the parser
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        return result
    result.latency = time.perf_counter() - tally.sent
    result.output_tokens = tally.tokens
    result.ok = True
    if tally.nan_seen:
        result.problem = "NaN or inf logprob (null) in a streamed response"
    elif check_text and result.output_tokens:
        result.problem = degenerate_reason(result.text, check_repetition=False) or ""
    return result


class _Tally:
    """One response's events turned into TTFT, inter-token latencies, token count and text."""

    def __init__(self, result: RequestResult, parser: Any) -> None:
        self.result = result
        self.parser = parser
        self.sent = 0.0
        self.last = 0.0
        self.tokens = 0
        self.nan_seen = False

    def add(self, data: Any, now: float) -> None:
        event = self.parser.feed(data)
        result = self.result
        count = event.completion_tokens if event.completion_tokens is not None else self.tokens + 1
        new = count - self.tokens
        if event.logprobs and nan_positions(event.logprobs):
            self.nan_seen = True
        if new > 0 or (event.text and not result.ttft):
            if not result.ttft:
                result.ttft = now - self.sent
            else:
                result.itl.append((now - self.last) / max(new, 1))
            self.last = now
            result.chunk_times.append(now)
            self.tokens = max(count, self.tokens)
            result.output_tokens = self.tokens  # live, for a level cut at its deadline and for the pruner
        if event.text:
            result.text = event.text
        if event.prompt_tokens:
            result.prompt_tokens = event.prompt_tokens
        if event.cached_tokens:
            result.cached_tokens = event.cached_tokens


def _metrics(concurrency: int, duration: float, results: Sequence[RequestResult], spec: ProbeSpec,
             streaming: Sequence[RequestResult] = (), cut: bool = False) -> LevelMetrics:
    """Figures of the finished requests; a level cut at its deadline adds the tokens and first-token times
    of the requests still streaming then."""
    ok = [r for r in results if r.ok]
    errors = len(results) - len(ok)
    if results and errors / len(results) > spec.max_error_rate:
        sample = next(r.error for r in results if not r.ok)
        raise TrialFailure(FailureKind.ERRORS_UNDER_LOAD,
                           f"{errors} of {len(results)} requests failed at concurrency {concurrency} "
                           f"(allowed share {spec.max_error_rate:g}); first: {sample}", "", "probe")
    out_tokens = sum(r.output_tokens for r in [*ok, *streaming])
    in_tokens = sum(r.prompt_tokens or spec.input_len for r in [*ok, *streaming] if r.ttft or r.ok)
    ttft = [r.ttft for r in [*ok, *streaming] if r.ttft or r.ok]
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    itl = [x for r in ok for x in r.itl]
    e2e = [r.latency for r in ok]
    latency: dict[str, float] = {}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e_latency", e2e)):
        for stat, fn in (("mean", _mean), ("median", lambda v: _pct(v, 50)), ("p90", lambda v: _pct(v, 90)),
                         ("p99", lambda v: _pct(v, 99))):
            latency[f"{stat}_{name}_ms"] = fn(values) * 1000.0
    d = duration if duration > 0 else math.inf
    return LevelMetrics(concurrency, duration, len(ok), errors, in_tokens, out_tokens, len(ok) / d,
                        out_tokens / d, (in_tokens + out_tokens) / d, latency, cut)


def as_sent(results: Sequence[RequestResult]) -> dict[str, float]:
    """The workload as the server counted it, per finished request: prompt tokens (`prompt_tokens_*`, from
    the server's usage; `prompt_tokens_counted` requests reported them) and output tokens (`output_tokens_*`)."""
    ok = [r for r in results if r.ok]
    out: dict[str, float] = {}
    for name, values in (("prompt_tokens", [r.prompt_tokens for r in ok if r.prompt_tokens]),
                         ("output_tokens", [r.output_tokens for r in ok])):
        if values:
            out.update({f"{name}_mean": _mean(values), f"{name}_min": float(min(values)),
                        f"{name}_max": float(max(values))})
    out["prompt_tokens_counted"] = float(sum(1 for r in ok if r.prompt_tokens))
    out["cached_tokens_total"] = float(sum(r.cached_tokens for r in ok))
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _pct(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy.percentile does by default."""
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
