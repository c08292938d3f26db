"""The probe's workloads from local files and the shared-prefix generator; nothing is downloaded."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import REPO, instant_space
from sim.simproc import SimFactory, quick_start_profile
from test_bad_input import assert_refused
from tuner.trial._probe import run_probe
from tuner.spec._spec import ProbeSpec, SharedPrefix, parse_spec
from tuner.trial._tokens import load_prompt_tokens
from tuner.trial._workloads import make_workload
from tuner.engines import get_engine

sys.path.insert(0, str(REPO / "scripts"))
from make_gpu_model import build_tokenizer  # noqa: E402  the tokenizer of the real GPU study's made model

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


def model_folder(folder: Path) -> Path:
    """A model folder with a real tokenizer.json: the GPU study's made byte-level BPE (scripts/make_gpu_model.py,
    its tiny preset's 4096 tokens), with BOS in front of every prompt as Llama 3's tokenizer.json puts it."""
    from tokenizers import processors

    tok, _ = build_tokenizer(4096)
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_prompt_lengths_are_tokens_of_the_models_tokenizer(tmp_path):
    tokens, why = load_prompt_tokens(str(model_folder(tmp_path / "model")))
    assert tokens is not None and why == ""
    spec = ProbeSpec(input_len=512, output_len=8)
    exact = make_workload(spec, 64, tokens=tokens)
    assert {tokens.count(i.prompt) for i in exact} == {512}  # BOS included, as the server counts
    assert exact == make_workload(spec, 64, tokens=tokens)  # seeded: every trial gets the same requests
    assert len({i.prompt for i in exact}) == 64 and all(i.prompt.startswith(f"{n}:") for n, i in enumerate(exact))
    counts = [tokens.count(i.prompt) for i in make_workload(dataclasses.replace(spec, len_jitter=0.1), 256,
                                                            tokens=tokens)]
    assert 460 <= min(counts) < 480 and 545 < max(counts) <= 563 and len(set(counts)) > 50
    # Words, as without a tokenizer: this one split 512 of them into about 1,225 tokens in the GPU study.
    assert min(tokens.count(i.prompt) for i in make_workload(spec, 64)) > 1000


def test_shared_prefix_lengths_are_tokens_too(tmp_path):
    tokens, _ = load_prompt_tokens(str(model_folder(tmp_path / "model")))
    spec = ProbeSpec(output_len=8, shared_prefix=SharedPrefix(groups=3, system_prompt_len=200, question_len=10))
    items = make_workload(spec, 30, tokens=tokens)
    prefixes = {i.prompt.split("\nQuestion")[0] for i in items}
    assert len(prefixes) == 3 and {tokens.count(p, special=False) for p in prefixes} == {200}
    assert {tokens.count(i.prompt) for i in items} == {1 + 200 + 10}  # BOS, system prompt, question
    assert {i.prompt.split("\nQuestion")[0] for i in make_workload(spec, 30, salt=7, tokens=tokens)} == prefixes


def test_the_server_counts_the_prompt_tokens_asked_for(tmp_path, start_sim):
    """The simulated server counts prompts with the model folder's tokenizer.json, as SGLang does: the tokens
    it reports are those asked for, within the jitter; words come to more than twice as many."""
    folder = model_folder(tmp_path / "model")
    sim = start_sim(model_path=str(folder))
    tokens, _ = load_prompt_tokens(str(folder))
    spec = ProbeSpec(concurrency=(8,), requests=32, input_len=512, output_len=4, len_jitter=0.05, warmup=0,
                     check_tokens=0, request_timeout=60)
    result = run_probe(sim.url, {}, get_engine("sglang"), spec, alive=lambda: None, tokens=tokens)
    level = result.level(8)
    assert result.lengths == "tokens" and level.extra["prompt_tokens_counted"] == level.completed == 32
    assert 486 <= level.extra["prompt_tokens_min"] < level.extra["prompt_tokens_max"] <= 537
    asked = sum(tokens.count(w.prompt) for w in make_workload(spec, 32, salt=8, tokens=tokens))
    assert level.total_input_tokens == asked and level.extra["prompt_tokens_mean"] == asked / 32
    # Output tokens as the server streamed them (the instant profile ends some requests a token early).
    assert level.extra["output_tokens_max"] == 4 and level.extra["output_tokens_mean"] * 32 == level.total_output_tokens
    words = run_probe(sim.url, {}, get_engine("sglang"), spec, alive=lambda: None)
    assert words.lengths == "words" and words.level(8).extra["prompt_tokens_min"] > 1000


def test_a_run_says_when_lengths_are_words_and_records_what_the_server_counted(tuner):
    """Without a tokenizer.json the run says so on its first screen and records it; with one, every prompt
    is the asked length by the server's count, and `show` prints the workload as sent."""
    model = model_folder(tuner.folder / "model")
    bare = tuner.folder / "bare"
    bare.mkdir()
    for name, folder in (("tok", model), ("bare", bare)):
        space = tuner.space(instant_space(name, model=str(folder), concurrency=8, requests=40, input_len=64),
                            f"{name}.yaml")
        done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
        assert done.returncode == 0, done.stderr[-3000:]
        study = tuner.study(name)
        trial, = study.get_trials()
        a = trial.user_attrs
        assert a["prompt_tokens_counted"] == a["completed"] == 40
        note = (f"probe lengths are words, not tokens: no tokenizer.json in {bare}; each trial records the prompt "
                "tokens the server counted")
        if name == "tok":
            assert note.split(":")[0] not in done.stderr
            assert study.user_attrs["probe_lengths"] == {"unit": "tokens", "tokenizer": str(model / "tokenizer.json")}
            assert a["probe_lengths"] == "tokens" and a["prompt_tokens_min"] == a["prompt_tokens_max"] == 64
            shown = tuner.run("show", "--study", name, env={"COLUMNS": "300"}).stdout
            line, = [line for line in shown.splitlines() if line.startswith("workload as sent")]
            # Output as the server streamed it: 24 tokens, or a range where it ended some early.
            assert re.fullmatch(r"workload as sent \(trial 0, concurrency 8\): 40 requests, prompt 64 tokens \(mean "
                                r"64\.0, server-counted\), output (\d+-)?24 tokens; probe\.input-len counts tokens", line)
        else:
            assert note in done.stderr.splitlines()
            assert study.user_attrs["probe_lengths"] == {"unit": "words", "why": f"no tokenizer.json in {bare}"}
            assert a["probe_lengths"] == "words" and a["prompt_tokens_min"] > 64
