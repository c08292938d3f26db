"""Speed figures from the logs' forward times: decode steps with and without CUDA graphs, prefill chunks."""

from __future__ import annotations

import statistics
from functools import partial

from ..sim import PerfModel, Profile
from ._fit import Fitted, Kept, golden, median_error, reference, solve, tidy, with_value
from ._study import Trial

Result = tuple[Profile, list[Fitted | Kept]]


def fit_speed(profile: Profile, trials: list[Trial]) -> Result:
    out: list[Fitted | Kept] = []
    for fit in (partial(_decode, graph=True), partial(_decode, graph=False), _prefill):
        profile, found = fit(profile, trials)
        out += found
    return profile, out


def _decode_steps(profile: Profile, trials: list[Trial], graph: bool) -> list[tuple[Trial, int, int, float]]:
    """(trial, batch, context tokens, seconds) of the decode intervals that replayed graphs (or ran eagerly),
    as the log says and as the simulator would, with the reference kernels, at the batch most of them ran (the
    probe's concurrency: the tail of a wave runs at odd batches, for a few steps)."""
    steps = []
    for t in trials:
        if not t.log or not reference(profile, t.knobs):
            continue
        model = PerfModel(profile, t.knobs)
        for s in t.log.decode:
            if s.graph == graph and (model.graph_size_for(s.batch) is not None) == graph:
                steps.append((t, s.batch, s.ctx, s.seconds))
    if not steps:
        return []
    batches = [b for _, b, _, _ in steps]
    usual = max(set(batches), key=lambda b: (batches.count(b), b))
    return [step for step in steps if step[1] == usual]


def _per_step_fit(profile: Profile, steps, section: str, key: str, lo: float, hi: float) -> tuple[float | None, str]:
    """Each step's own value of the figure (the one that makes the simulator's step last as long), then the
    median of them: robust to the slow first waves of a start and to intervals that held other work."""
    def step_s(t: Trial, batch: int, ctx: int, value: float) -> float:
        return PerfModel(with_value(profile, section, key, value), t.knobs).decode_s(batch, ctx)[0]

    values = [v for t, b, c, s in steps if (v := solve(lambda x: step_s(t, b, c, x), s, lo, hi)) is not None]
    if not values:
        return None, ""
    value = tidy(statistics.median(values))
    model = [step_s(t, b, c, value) for t, b, c, _ in steps]
    return value, median_error(model, [s for *_, s in steps])


def _decode(profile: Profile, trials: list[Trial], graph: bool) -> Result:
    """Decode steps replaying CUDA graphs fit the HBM efficiency; eager ones the cost of a kernel launch."""
    section, key, lo, hi = ("performance", "hbm_efficiency", 0.05, 1.0) if graph else \
        ("hardware", "kernel_launch_us", 0.0, 500.0)
    steps = _decode_steps(profile, trials, graph=graph)
    value, residual = _per_step_fit(profile, steps, section, key, lo, hi) if steps else (None, "")
    if value is None:
        return profile, [Kept(section, key, "no decode interval that replayed CUDA graphs" if graph
                              else "no eager decode interval")]
    batches = "/".join(str(b) for b in sorted({b for _, b, _, _ in steps}))
    source = (f'"Decode batch" intervals replaying CUDA graphs at batch {batches}' if graph
              else f'eager "Decode batch" intervals at batch {batches}')
    fitted = Fitted(section, key, value, getattr(getattr(profile, section), key), source,
                    tuple(sorted({t.number for t, *_ in steps})), len(steps), residual)
    return with_value(profile, section, key, value), [fitted]


def _prefill(profile: Profile, trials: list[Trial]) -> Result:
    """Full chunks run back to back (a "Prefill batch" line's rate is the previous chunk's tokens over the time
    since it): per trial the median chunk time, then least squares over the trials for the MFU and the fixed
    time a batch. Several chunk sizes pin the two apart."""
    points = []  # (trial, tokens, sequences, seconds)
    for t in trials:
        if not t.log or not reference(profile, t.knobs, prefill=True) or t.knobs.chunked_prefill_size <= 0:
            continue
        full = [s for s in t.log.prefill if s.batch == t.knobs.chunked_prefill_size and s.seqs > 1]
        if full:
            points.append((t, t.knobs.chunked_prefill_size, statistics.median(s.seqs for s in full),
                           statistics.median(s.seconds for s in full)))
    if len({n for _, n, _, _ in points}) < 2:
        why = "full prefill chunks of fewer than two sizes"
        return profile, [Kept("performance", "mfu_prefill", why), Kept("performance", "prefill_base_ms", why)]

    def work_s(p: Profile, t: Trial, tokens: int, seqs: float) -> float:
        # Each sequence of the chunk attends to itself: about tokens x (tokens / seqs) / 2 context tokens.
        return PerfModel(p, t.knobs).prefill_s(tokens, tokens * tokens / seqs / 2.0, seqs=round(seqs))

    def fit_base(mfu: float) -> tuple[float, list[float]]:
        p = with_value(with_value(profile, "performance", "mfu_prefill", mfu), "performance", "prefill_base_ms", 0.0)
        works = [work_s(p, t, n, q) for t, n, q, _ in points]
        return max(0.0, statistics.fmean(s - w for (_, _, _, s), w in zip(points, works))), works

    def loss(mfu: float) -> float:
        base, works = fit_base(mfu)
        return sum((base + w - s) ** 2 for (_, _, _, s), w in zip(points, works))

    perf = profile.performance  # the base's figures, for the table
    mfu = tidy(golden(loss, 0.05, 1.0))
    base, _ = fit_base(mfu)
    base_ms = tidy(base * 1000)
    profile = with_value(with_value(profile, "performance", "mfu_prefill", mfu), "performance", "prefill_base_ms",
                         base_ms)
    residual = median_error([work_s(profile, t, n, q) for t, n, q, _ in points], [s for *_, s in points])
    sizes = "/".join(str(n) for n in sorted({n for _, n, _, _ in points}))
    source = f'back-to-back full prefill chunks of {sizes} tokens ("Prefill batch ... input throughput")'
    numbers = tuple(t.number for t, *_ in points)
    return profile, [Fitted("performance", "mfu_prefill", mfu, perf.mfu_prefill, source, numbers, len(points), residual),
                     Fitted("performance", "prefill_base_ms", base_ms, perf.prefill_base_ms, source, numbers,
                            len(points), residual)]
