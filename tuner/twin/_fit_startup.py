"""Start-up figures from SGLang's own "Engine startup timings (s)" line, the capture lines and the readiness.

First starts that compiled kernels (JIT: flashinfer's, triton's) take minutes the simulator does not model;
they are left out (--jit-starts names them).
"""

from __future__ import annotations

import statistics

from ..sim import Profile
from ._fit import Fitted, Kept, median_error, tidy, with_value
from ._study import Trial

Result = tuple[Profile, list[Fitted | Kept]]
TIMINGS = '"Engine startup timings (s)"'


def fit_startup(profile: Profile, trials: list[Trial]) -> Result:
    warm = [t for t in trials if not t.jit and t.log and t.log.timings]
    out: list[Fitted | Kept] = []
    for fit in (_timing("weight_load_s", "load_weight"), _timing("kv_alloc_s", "kv_cache_allocation"), _capture,
                _process):
        profile, found = fit(profile, warm)
        out += found
    return profile, out


def _timing(key: str, name: str):
    def fit(profile: Profile, warm: list[Trial]) -> Result:
        points = [(t.number, t.log.timings[name]) for t in warm if name in t.log.timings]
        if not points:
            return profile, [Kept("startup", key, f"no {name} in a warm start's {TIMINGS}")]
        value = tidy(statistics.median(v for _, v in points))
        lo, hi = min(v for _, v in points), max(v for _, v in points)
        fitted = Fitted("startup", key, value, getattr(profile.startup, key), f"{name} of {TIMINGS} (median)",
                        tuple(n for n, _ in points), len(points), f"range {lo:g}-{hi:g} s")
        return with_value(profile, "startup", key, value), [fitted]
    return fit


def _capture(profile: Profile, warm: list[Trial]) -> Result:
    """Seconds = per size x sizes captured + per 1k tokens x the prefill token counts' sum / 1000, least
    squares over the decode and prefill captures (no torch.compile, whose capture compiles)."""
    points = []  # (trial, sizes, k tokens, seconds)
    for t in warm:
        if t.knobs.torch_compile:
            continue
        for kind, capture in t.log.captures.items():
            if capture.sizes:
                k = sum(capture.sizes) / 1000.0 if kind == "prefill" else 0.0
                points.append((t.number, len(capture.sizes), k, capture.seconds))
    if not any(k for _, _, k, _ in points) or not any(not k for _, _, k, _ in points):
        why = "needs warm decode and prefill captures without torch.compile"
        return profile, [Kept("startup", "capture_s_per_size", why), Kept("startup", "capture_s_per_1k_tokens", why)]
    snn = sum(n * n for _, n, _, _ in points)
    snk = sum(n * k for _, n, k, _ in points)
    skk = sum(k * k for _, _, k, _ in points)
    snt = sum(n * s for _, n, _, s in points)
    skt = sum(k * s for _, _, k, s in points)
    det = snn * skk - snk * snk
    per_size, per_1k = tidy((snt * skk - skt * snk) / det), tidy((skt * snn - snt * snk) / det)
    residual = median_error([per_size * n + per_1k * k for _, n, k, _ in points], [s for *_, s in points])
    source = 'decode and prefill capture times ("CUDA graph end. elapsed") against sizes and tokens captured'
    numbers = tuple(sorted({n for n, *_ in points}))
    st = profile.startup
    found = [Fitted("startup", "capture_s_per_size", per_size, st.capture_s_per_size, source, numbers, len(points),
                    residual),
             Fitted("startup", "capture_s_per_1k_tokens", per_1k, st.capture_s_per_1k_tokens, source, numbers,
                    len(points), residual)]
    profile = with_value(profile, "startup", "capture_s_per_size", per_size)
    return with_value(profile, "startup", "capture_s_per_1k_tokens", per_1k), found


def _process(profile: Profile, warm: list[Trial]) -> Result:
    """Launch to ready, less the engine's own timings: imports, engine set-up and warm-up. The profile splits
    it into process_s and server_start_s (the base's, kept) and init_distributed_s."""
    st = profile.startup
    points = []
    for t in warm:
        if t.ready_s is None:
            continue
        engine = sum(t.log.timings.get(k, 0.0) for k in ("load_weight", "kv_cache_allocation", "prefill", "decode"))
        dist = st.init_distributed_s * (1.0 if t.knobs.tp * t.knobs.pp * t.knobs.dp > 1 else 0.25)
        points.append((t.number, t.ready_s - engine - dist - st.server_start_s))
    if not points:
        return profile, [Kept("startup", "process_s", "no warm start reached readiness")]
    value = tidy(statistics.median(v for _, v in points))
    spread = median_error([value] * len(points), [v for _, v in points])
    fitted = Fitted("startup", "process_s", value, st.process_s,
                    f"readiness less {TIMINGS} and server_start_s (median)", tuple(n for n, _ in points),
                    len(points), spread)
    return with_value(profile, "startup", "process_s", value), [fitted]
