"""The probe against the simulated SGLang server: its check wave leaves the prefix cache cold for the timed
level, and its cheap reading of /generate's events sees what a full parse sees."""

from __future__ import annotations

import json
import re

import httpx

from tuner.trial._probe import run_probe
from tuner.spec._spec import ProbeSpec
from tuner.engines import get_engine

WORDS = "the river runs past the old market where people sell green paper and small tables".split()


# With a dataset the check wave and the timed level draw from the same prompts, and a timed prompt whose prefill
# the cache served is cheaper than the same prompt in SGLang's own benchmark client (half its mean TTFT on the
# simulated 8B server).
def test_check_wave_shares_no_cached_prefix_with_the_timed_prompts(start_sim, tmp_path):
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


def test_decoding_only_meta_info_sees_what_a_full_parse_sees(start_sim):
    sim = start_sim()
    engine = get_engine("sglang")
    for logprobs in (False, True):
        path, body = engine.stream_request("The river runs past the old market", 12, logprobs)
        with httpx.Client(base_url=sim.url, timeout=30) as client:
            text = client.post(path, json=body).text
        payloads = [line[6:].encode() for line in text.split("\n\n") if line.startswith("data: ")][:-1]
        assert len(payloads) == 12
        cheap, full = engine.stream_parser(), engine.stream_parser()
        for n, payload in enumerate(payloads):
            a, b = cheap.feed(cheap.decode(payload)), full.feed(json.loads(payload))
            assert (a.completion_tokens, a.finished, a.logprobs, a.prompt_tokens) == \
                   (b.completion_tokens, b.finished, b.logprobs, b.prompt_tokens)
            assert a.text == (b.text if n == len(payloads) - 1 else "")  # the text only of the last
        assert len(b.logprobs) == (12 if logprobs else 0) and b.finished


def test_error_events_are_parsed_whole():
    parser = get_engine("sglang").stream_parser()
    payload = b'{"error":{"message":"too long","type":"BadRequestError","code":400}}'
    assert parser.decode(payload) == json.loads(payload)
