"""The probe's untimed check wave must not warm the server's prefix cache for the timed level: with a
dataset both draw from the same prompts, and a timed prompt whose prefill the cache served is cheaper than
the same prompt in SGLang's own benchmark client (half its mean TTFT on the simulated 8B server)."""

from __future__ import annotations

import json
import re

from sim.conftest import start_sim  # noqa: F401  (the fixture)
from tuner._probe import run_probe
from tuner._spec import ProbeSpec
from tuner.engines import get_engine

WORDS = "the river runs past the old market where people sell green paper and small tables".split()


def test_check_wave_shares_no_cached_prefix_with_the_timed_prompts(start_sim, tmp_path):  # noqa: F811
    sim = start_sim()
    dataset = tmp_path / "prompts.jsonl"
    prompts = [f"{i}: " + " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40)) for i in range(8)]
    dataset.write_text("".join(json.dumps({"prompt": p, "output_len": 8}) + "\n" for p in prompts))
    spec = ProbeSpec(concurrency=(4,), requests=8, dataset=str(dataset), warmup=0, check_tokens=4,
                     request_timeout=30.0)
    level = run_probe(sim.url, {}, get_engine("sglang"), spec, lambda: None, check_text=False).level(4)
    assert level.completed == 8
    # SGLang's prefill log line (as the simulator prints it): how many of a batch's tokens came from the cache.
    cached = [int(n) for n in re.findall(r"#cached-token: (\d+)", sim.log())]
    assert len(cached) >= 2, sim.log()[-2000:]
    # Each prompt is ~50 tokens; what may be shared is the check wave's own mark and a prompt's number.
    assert max(cached) <= 4 * 4, cached
