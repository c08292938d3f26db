"""The probe's workloads from local files and the shared-prefix generator; nothing is downloaded."""

from __future__ import annotations

import json
import re

import pytest

from conftest import instant_space
from sim.simproc import SimFactory, quick_start_profile
from test_bad_input import assert_refused
from tuner.trial._probe import run_probe
from tuner.spec._spec import ProbeSpec, SharedPrefix, parse_spec
from tuner.trial._workloads import make_workload
from tuner.engines import get_engine

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Tell me about rivers in spring."},
                                  {"from": "gpt", "value": "x" * 400}]},  # ~100 tokens
    {"id": "b", "conversation": [{"from": "human", "value": "What is a market?"},
                                 {"from": "gpt", "value": "A place where people trade goods."}]},
    {"id": "c", "conversations": [{"from": "human", "value": "only one turn"}]},  # dropped: one turn
    {"id": "d", "conversations": [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "hi"}]},  # too short
]


def test_sharegpt_rows_give_real_prompts_and_output_lengths(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    spec = ProbeSpec(dataset=str(path), dataset_format="sharegpt")
    items = make_workload(spec, 4)
    assert {i.prompt for i in items} == {"Tell me about rivers in spring.", "What is a market?"}
    assert {i.output_len for i in items} == {100, 9}
    assert items == make_workload(spec, 4)  # seeded: every trial gets the same requests


def test_shared_prefix_workload_shares_a_few_long_system_prompts():
    spec = ProbeSpec(output_len=8, shared_prefix=SharedPrefix(groups=3, system_prompt_len=200, question_len=10))
    items = make_workload(spec, 30)
    prefixes = {i.prompt.split("\nQuestion")[0] for i in items}
    assert len(prefixes) == 3 and all(len(p.split()) == 203 for p in prefixes)
    assert len({i.prompt for i in items}) == 30  # each request its own question
    # Another rate step (another salt) gets new questions over the very same system prompts.
    assert {i.prompt.split("\nQuestion")[0] for i in make_workload(spec, 30, salt=7)} == prefixes


def test_prefix_cache_matters_for_the_shared_prefix_workload(tmp_path):
    """On the simulator, as on SGLang, the shared system prompts are served from the radix cache, unless
    --disable-radix-cache: its prefill log lines count the cached tokens."""
    factory = SimFactory(tmp_path)
    spec = ProbeSpec(concurrency=(8,), requests=32, output_len=4, warmup=0, check_tokens=0, request_timeout=60,
                     shared_prefix=SharedPrefix(groups=2, system_prompt_len=400, question_len=8))
    cached = {}
    try:
        for flags in ((), ("--disable-radix-cache",)):
            sim = factory(*flags, profile=quick_start_profile(tmp_path, "llama3-8b-h200"), scale=0.1,
                          model_path="meta-llama/Llama-3.1-8B-Instruct", timeout=120)
            run_probe(sim.url, {}, get_engine("sglang"), spec, alive=lambda: None)
            cached[flags] = sum(int(n) for n in re.findall(r"#cached-token: (\d+)", sim.log()))
    finally:
        factory.cleanup()
    # All but the first wave of 8 find their system prompt cached.
    assert cached[()] >= 20 * 400 and cached[("--disable-radix-cache",)] == 0


@pytest.mark.parametrize("content, fmt, expected", [
    ('{"not": "a list"}', "sharegpt", "probe.dataset: "),
    ("[]", "sharegpt", "has no usable prompts"),
    ('{"prompt": "x"}\n', "sharegpt", "probe.dataset: "),
    ("[]", "sharegtp", "probe.dataset-format: unknown format 'sharegtp'"),
])
def test_bad_datasets_are_refused_in_one_line(tuner, content, fmt, expected):
    (tuner.folder / "data.json").write_text(content)
    space = tuner.space(instant_space("bad").replace("  warmup: 0\n", f"  warmup: 0\n  dataset: data.json\n"
                                                                      f"  dataset-format: {fmt}\n"))
    assert_refused(tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant"), expected, tuner)


def test_shared_prefix_and_dataset_exclude_each_other(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "hello there"}\n')
    text = instant_space("x").replace("  warmup: 0\n", f"  warmup: 0\n  dataset: {tmp_path / 'd.jsonl'}\n"
                                                       "  shared-prefix: {groups: 2}\n")
    with pytest.raises(Exception, match="probe.shared-prefix: cannot be used with probe.dataset"):
        parse_spec(text)
