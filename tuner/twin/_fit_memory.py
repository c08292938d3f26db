"""Memory figures from the logs: the weights, the KV pool per memory fraction, what the CUDA graphs keep."""

from __future__ import annotations

import statistics

from ..sim import GiB, Profile, kv_bytes_per_token_per_gpu, weight_split
from ._fit import Fitted, Kept, line, reference, tidy, with_value
from ._study import Trial

Result = tuple[Profile, list[Fitted | Kept]]


def fit_memory(profile: Profile, trials: list[Trial]) -> Result:
    out: list[Fitted | Kept] = []
    for fit in (_weights, _kv_pool, _decode_graphs, _prefill_graphs):
        profile, found = fit(profile, trials)
        out += found
    return profile, out


def _weights(profile: Profile, trials: list[Trial]) -> Result:
    """'Load weight end ... mem usage=14.98 GB': one GPU's shard; the profile holds the whole model's."""
    points = [(t.number, t.log.weights_gb * t.knobs.tp * t.knobs.pp) for t in trials
              if t.log and t.log.weights_gb is not None]
    if not points:
        return profile, [Kept("model", "weight_gb_sharded", "no 'Load weight end' line")]
    value = tidy(statistics.median(v for _, v in points))
    spread = max(abs(v - value) for _, v in points)
    fitted = Fitted("model", "weight_gb_sharded", value, profile.model.weight_gb_sharded,
                    '"Load weight end ... mem usage" (median)', tuple(n for n, _ in points), len(points),
                    f"within {spread:.2f} GB")
    return with_value(profile, "model", "weight_gb_sharded", value), [fitted]


def _kv_pool(profile: Profile, trials: list[Trial]) -> Result:
    """The KV pool is (1 - mem_fraction) short of what was free before the weights: free = total - context,
    and tokens x KV bytes = free x mem_fraction - weights. Least squares over the pools gives free."""
    points = []
    for t in trials:
        if t.log and t.log.kv_tokens and t.knobs.max_total_tokens is None:
            kvb = kv_bytes_per_token_per_gpu(profile, t.knobs)
            weights = weight_split(profile, t.knobs).total_gb
            points.append((t, t.knobs.mem_fraction, t.log.kv_tokens * kvb / GiB + weights, kvb, weights))
    if not points:
        return profile, [Kept("hardware", "context_overhead_gb", "no 'KV Cache is allocated' line")]
    free = sum(mf * y for _, mf, y, _, _ in points) / sum(mf * mf for _, mf, _, _, _ in points)
    value = tidy(profile.hardware.memory_per_gpu_gb - free)
    free = profile.hardware.memory_per_gpu_gb - value
    worst = max(abs((free * mf - w) * GiB / kvb - t.log.kv_tokens) / t.log.kv_tokens for t, mf, _, kvb, w in points)
    fitted = Fitted("hardware", "context_overhead_gb", value, profile.hardware.context_overhead_gb,
                    "KV pools (#tokens of \"KV Cache is allocated\") against mem-fraction-static",
                    tuple(t.number for t, *_ in points), len(points), f"pools within {worst:.2%}")
    return with_value(profile, "hardware", "context_overhead_gb", value), [fitted]


def _decode_graphs(profile: Profile, trials: list[Trial]) -> Result:
    """'Capture target decode CUDA graph end ... mem usage' against the number of batch sizes captured."""
    points = [(t.number, len(t.log.captures["decode"].sizes), t.log.captures["decode"].mem_gb) for t in trials
              if t.log and "decode" in t.log.captures and not t.knobs.torch_compile and reference(profile, t.knobs)]
    if len({n for _, n, _ in points}) < 2:
        why = "decode graphs of fewer than two counts of batch sizes (reference kernels, no torch.compile)"
        return profile, [Kept("memory", "graph_fixed_gb", why), Kept("memory", "graph_per_size_gb", why)]
    fixed, per_size = line([n for _, n, _ in points], [gb for _, _, gb in points])
    fixed, per_size = tidy(max(fixed, 0.0)), tidy(per_size)
    worst = max(abs(fixed + per_size * n - gb) for _, n, gb in points)
    numbers = tuple(n for n, _, _ in points)
    source = '"Capture target decode CUDA graph end ... mem usage" against the batch sizes captured'
    mem = profile.memory
    found = [Fitted("memory", "graph_fixed_gb", fixed, mem.graph_fixed_gb, source, numbers, len(points),
                    f"within {worst:.2f} GB"),
             Fitted("memory", "graph_per_size_gb", per_size, mem.graph_per_size_gb, source, numbers, len(points),
                    f"within {worst:.2f} GB")]
    profile = with_value(with_value(profile, "memory", "graph_fixed_gb", fixed), "memory", "graph_per_size_gb", per_size)
    return profile, found


def _prefill_graphs(profile: Profile, trials: list[Trial]) -> Result:
    """What the prefill graphs take: free memory at "Memory pool end" less free memory at the end of their
    capture (it holds buffers the engine allocates before its first capture), against the largest token count."""
    points = []
    for t in trials:
        capture = t.log.captures.get("prefill") if t.log else None
        if capture and capture.sizes and not t.knobs.torch_compile and reference(profile, t.knobs, prefill=True):
            points.append((t.number, max(capture.sizes) / 1000.0, capture.avail_before_gb - capture.avail_after_gb))
    if len({k for _, k, _ in points}) < 2:
        why = "prefill graphs of fewer than two largest token counts (reference kernels, no torch.compile)"
        return profile, [Kept("memory", "prefill_graph_fixed_gb", why),
                         Kept("memory", "prefill_graph_gb_per_1k_tokens", why)]
    fixed, per_1k = line([k for _, k, _ in points], [gb for _, _, gb in points])
    fixed, per_1k = tidy(max(fixed, 0.0)), tidy(per_1k)
    worst = max(abs(fixed + per_1k * k - gb) for _, k, gb in points)
    numbers = tuple(n for n, _, _ in points)
    source = 'free memory from "Memory pool end" to "Capture target prefill CUDA graph end", against the largest ' \
             'token count'
    mem = profile.memory
    found = [Fitted("memory", "prefill_graph_fixed_gb", fixed, mem.prefill_graph_fixed_gb, source, numbers,
                    len(points), f"within {worst:.2f} GB"),
             Fitted("memory", "prefill_graph_gb_per_1k_tokens", per_1k, mem.prefill_graph_gb_per_1k_tokens, source,
                    numbers, len(points), f"within {worst:.2f} GB")]
    profile = with_value(profile, "memory", "prefill_graph_fixed_gb", fixed)
    return with_value(profile, "memory", "prefill_graph_gb_per_1k_tokens", per_1k), found
