"""When each request of an open-loop level is sent: Poisson arrivals, or gamma arrivals with a burstiness
factor, from a seeded RNG so that every trial is offered the same schedule.

As vLLM's `vllm/benchmarks/serve.py` (`get_request`) draws them: gaps from gamma(shape=burstiness,
scale=1/(rate*burstiness)), whose mean is 1/rate whatever the burstiness (1: exponential gaps, Poisson
arrivals; < 1 burstier; larger more even), then scaled so that the last send falls at n/rate, so the
offered rate of a short level is the rate asked for and not the sample's. SGLang 0.5.23's
`sglang/benchmark/serving.py` (`get_request`) draws exponential gaps without the scaling; its benchmark
has no burstiness factor.
"""

from __future__ import annotations

import random


def send_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds after the level's start at which request i is due (the first after one gap, as vLLM)."""
    if n <= 0:
        return []
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be positive")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        offsets.append(t)
    scale = (n / rate) / offsets[-1] if offsets[-1] > 0 else 1.0
    return [o * scale for o in offsets]
