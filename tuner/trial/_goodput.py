"""Goodput and SLO attainment of one level, and its steady-state throughput, as SGLang 0.5.23 defines them.

Goodput (`sglang/benchmark/goodput.py`): each SLO is a limit in milliseconds on TTFT, TPOT (from the
second token: (latency - ttft) / (output tokens - 1), 0 for a one-token answer) or E2E latency (`e2el`);
a request is good when it succeeded and met every given SLO. Request goodput is good requests per second
of the level; attainment is good requests over requests sent (failed ones count as sent and not good),
overall and per metric.

Steady state (`sglang/benchmark/steady_state.py`): the longest continuous span during which at least
`ratio` (0.8, as `steady_state_serving`'s examples use) of the peak number of requests were in flight;
output tokens whose arrival time falls inside it, over its length. It leaves out ramp-up and drain,
which the whole-span figure includes.

Times here are the probe's: from each request's scheduled send time (open-loop levels), so queueing in
the client counts against the server's SLO exactly as it would against a user's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

STEADY_RATIO = 0.8


class Timed(Protocol):
    ok: bool
    started: bool
    sent_at: float
    ttft: float
    latency: float
    output_tokens: int
    chunk_times: list[float]  # perf_counter time of each chunk that brought tokens


def observed_ms(r: Timed) -> dict[str, float]:
    tpot = (r.latency - r.ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
    return {"ttft": r.ttft * 1000.0, "tpot": tpot * 1000.0, "e2el": r.latency * 1000.0}


def is_good(r: Timed, slo_ms: Mapping[str, float]) -> bool:
    if not r.ok:
        return False
    seen = observed_ms(r)
    return all(seen[name] <= limit for name, limit in slo_ms.items())


def certainly_bad(r: Timed, expected_tokens: int, elapsed: float, slo_ms: Mapping[str, float]) -> bool:
    """A request still streaming `elapsed` seconds after its scheduled send that can no longer meet the
    SLOs whatever happens next: no first token past the TTFT limit, past the E2E limit, or a TPOT that
    stays over its limit even if every remaining token came at once. Lets a rate that overloads the
    server be judged failed within about one SLO, instead of after its queue drains."""
    ms = elapsed * 1000.0
    if "e2el" in slo_ms and ms > slo_ms["e2el"]:
        return True
    if not r.ttft:
        return "ttft" in slo_ms and ms > slo_ms["ttft"]
    if "tpot" in slo_ms and expected_tokens > 1:
        return (ms - r.ttft * 1000.0) / (expected_tokens - 1) > slo_ms["tpot"]
    return False


def good_latency_bound(slo_ms: Mapping[str, float], output_len: int) -> float | None:
    """Seconds after its scheduled send past which a request of `output_len` tokens still streaming cannot
    be good (see certainly_bad); None when the SLOs bound no latency (a TPOT or TTFT limit alone)."""
    bounds = [slo_ms["e2el"]] if "e2el" in slo_ms else []
    if "ttft" in slo_ms and "tpot" in slo_ms:
        bounds.append(slo_ms["ttft"] + slo_ms["tpot"] * max(output_len - 1, 0))
    return min(bounds) / 1000.0 if bounds else None


def goodput(results: Sequence[Timed], slo_ms: Mapping[str, float], duration: float) -> dict[str, float]:
    """`request_goodput` (good requests/s), `slo_attainment`, and `slo_attainment_<metric>` for each SLO."""
    sent = [r for r in results if r.started]
    good = [r for r in sent if is_good(r, slo_ms)]
    n = max(len(sent), 1)
    out = {"request_goodput": len(good) / duration if duration > 0 else 0.0, "slo_attainment": len(good) / n}
    for name, limit in slo_ms.items():
        out[f"slo_attainment_{name}"] = sum(1 for r in sent if r.ok and observed_ms(r)[name] <= limit) / n
    return out


def steady_output_throughput(results: Sequence[Timed], ratio: float = STEADY_RATIO) -> tuple[float, float]:
    """(output tokens/s, seconds) over the steady-state window; (0, 0) when there is none."""
    done = [r for r in results if r.ok and r.latency > 0]
    events: dict[float, int] = {}
    for r in done:
        events[r.sent_at] = events.get(r.sent_at, 0) + 1
        events[r.sent_at + r.latency] = events.get(r.sent_at + r.latency, 0) - 1
    times = sorted(events)
    intervals, level = [], 0
    for t, nxt in zip(times, times[1:]):
        level += events[t]
        if nxt > t:
            intervals.append((t, nxt, level))
    peak = max((c for _, _, c in intervals), default=0)
    if peak == 0:
        return 0.0, 0.0
    threshold = max(1, math.ceil(peak * ratio))
    spans: list[tuple[float, float]] = []
    for start, end, c in intervals:
        if c < threshold:
            continue
        if spans and spans[-1][1] == start:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    if not spans:
        return 0.0, 0.0
    lo, hi = max(spans, key=lambda s: s[1] - s[0])  # the first of equally long spans, as SGLang's max()
    if hi <= lo:
        return 0.0, 0.0
    tokens = 0.0
    for r in done:
        stamps = r.chunk_times or [r.sent_at + r.latency]
        tokens += r.output_tokens * sum(lo <= s <= hi for s in stamps) / len(stamps)
    return tokens / (hi - lo), hi - lo
