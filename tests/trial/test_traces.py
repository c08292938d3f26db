"""Trace replay (probe.trace): arrival times kept and scaled, shared prefixes shared, lengths in tokens, bad files
refused in one line; through `python -m tuner run --simulate` against the simulated SGLang server."""

from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import REPO, instant_space
from test_bad_input import assert_refused
from trial.test_workloads import model_folder
from tuner.spec import MOONCAKE_BLOCK, ProbeSpec, TraceRow, TraceSpec, load_trace, loop_trace, mean_rate, parse_spec
from tuner.trial._tokens import load_prompt_tokens
from tuner.trial._workloads import make_workload, trace_workload

# Arrivals of the test traces (seconds): a burst, a lull, another burst; replayed twice as fast.
OFFSETS = [0.0, 0.02, 0.03, 0.05, 0.6, 1.2, 1.21, 1.22, 1.5, 2.0, 2.01, 2.4]
SCALE = 2.0
# Hash ids: rows 0-3 share blocks 1-2 (a system prompt), rows 4-5 share block 7; the rest are their own.
HASH_IDS = [[1, 2, 10], [1, 2, 11], [1, 2], [1, 2, 12, 13], [7, 20], [7, 21], [30], [31], [32], [33], [34], [35]]


def write_trace(folder: Path, fmt: str) -> Path:
    if fmt == "mooncake":
        path = folder / "trace.jsonl"
        path.write_text("".join(json.dumps({"timestamp": 5000 + round(t * 1000),  # ms, not from 0
                                            "input_length": (len(ids) - 1) * MOONCAKE_BLOCK + 40,
                                            "output_length": 4 + i, "hash_ids": ids}) + "\n"
                                for i, (t, ids) in enumerate(zip(OFFSETS, HASH_IDS))))
    elif fmt == "azure":
        path = folder / "trace.csv"
        start = datetime(2023, 11, 16, 18, 15, 46, 680590)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
            for i, t in enumerate(OFFSETS):
                writer.writerow([(start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0", 30 + 10 * i, 6])
    else:
        path = folder / "trace.jsonl"
        path.write_text("".join(json.dumps({"timestamp": 100 + t, **({"prompt": f"Question {i}: tell me a story."}
                                                                      if i % 2 else {"input_len": 50 + i}),
                                            "output_len": 5}) + "\n" for i, t in enumerate(OFFSETS)))
    return path


def trace_space(name: str, trace: Path, fmt: str, model: str = "/models/instant", extra: str = "") -> str:
    # A generous send-lateness limit: two shared cores may be busy, and lateness is checked from what was recorded.
    return instant_space(name, model=model, concurrency=4, requests=12, output_len=6, extra=extra).replace(
        "  warmup: 0\n", f"  warmup: 0\n  check-tokens: 0\n  max-send-lateness: 1.0\n"
                         f"  trace: {{path: {trace}, format: {fmt}, scale: {SCALE}}}\n")


def trace_level(tuner, name: str) -> dict:
    trial, = tuner.study(name).get_trials()
    assert trial.state.name == "COMPLETE", trial.user_attrs
    level, = [m for m in trial.user_attrs["levels"] if "trace_scale" in m]
    return level


@pytest.mark.parametrize("fmt", ["mooncake", "azure", "jsonl"])
def test_a_trace_is_replayed_at_its_arrival_times_scaled(tuner, fmt):
    """Every request is due at its trace offset (from the first arrival) / scale, and was sent then: no earlier,
    and no later than the level's recorded worst send lateness."""
    trace = write_trace(tuner.folder, fmt)
    space = tuner.space(trace_space(fmt, trace, fmt))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    level = trace_level(tuner, fmt)
    assert level["trace_scale"] == SCALE and level["requests"] == level["completed"] == len(OFFSETS)
    assert level["trace_due_s"] == pytest.approx([t / SCALE for t in OFFSETS], abs=1e-4)
    worst = level["send_lateness_max_ms"] / 1000 + 1e-4  # + the rounding of what was recorded
    for due, sent in zip(level["trace_due_s"], level["trace_sent_s"]):
        assert due - 1e-4 <= sent <= due + worst
    assert level["rate"] == pytest.approx((len(OFFSETS) - 1) / OFFSETS[-1] * SCALE, abs=1e-4)  # recorded rounded


def test_mooncake_prompts_share_prefixes_exactly_where_hash_ids_do(tmp_path):
    """With the model's tokenizer each block is 512 tokens and each prompt its input_length, as the server counts."""
    tokens, _ = load_prompt_tokens(str(model_folder(tmp_path / "model")))
    rows = load_trace(str(write_trace(tmp_path, "mooncake")), "mooncake")
    spec = ProbeSpec(trace=TraceSpec(str(tmp_path / "trace.jsonl"), "mooncake"))
    items = trace_workload(spec, rows, tokens=tokens)
    assert [tokens.count(i.prompt) for i in items] == [r.input_len for r in rows]
    assert [i.output_len for i in items] == [r.output_len for r in rows]

    def shared(a: str, b: str) -> int:
        return len(os.path.commonprefix([a, b]))

    system = items[2].prompt  # row 2 is blocks 1-2 alone, cut 40 tokens into block 2
    assert all(items[k].prompt.startswith(system.rsplit(" ", 1)[0]) for k in (0, 1, 3))
    assert tokens.count(items[0].prompt[:shared(items[0].prompt, items[1].prompt)], special=False) >= MOONCAKE_BLOCK
    assert shared(items[4].prompt, items[5].prompt) > shared(items[4].prompt, items[6].prompt) + 1000
    assert shared(items[0].prompt, items[4].prompt) < 10 and shared(items[6].prompt, items[7].prompt) < 10
    # Another rate step (salt) gets its own blocks, so it does not find the last step's in the prefix cache.
    again = trace_workload(spec, rows, salt=5, tokens=tokens)
    assert shared(again[0].prompt, items[0].prompt) < 10
    # Closed-loop levels take the rows in order, repeated where the trace is shorter.
    assert [i.output_len for i in make_workload(spec, 14, tokens=tokens)] == [r.output_len for r in rows + rows[:2]]


def test_a_mooncake_replay_hits_the_prefix_cache_and_counts_tokens(tuner):
    """On the simulated server (a radix cache, the model folder's tokenizer): the trace level's prompts are the
    trace's input lengths in tokens, and the shared blocks are served from the cache."""
    model = model_folder(tuner.folder / "model")
    trace = write_trace(tuner.folder, "mooncake")
    space = tuner.space(trace_space("mc", trace, "mooncake", model=str(model)))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    level = trace_level(tuner, "mc")
    lengths = [(len(ids) - 1) * MOONCAKE_BLOCK + 40 for ids in HASH_IDS]
    assert (level["prompt_tokens_min"], level["prompt_tokens_max"]) == (min(lengths), max(lengths))
    assert level["total_input_tokens"] == sum(lengths)
    # Rows 1-3 find at least block 1 cached once row 0 was prefilled (row 5 block 7, once row 4 was).
    assert level["cached_tokens_total"] >= MOONCAKE_BLOCK


def test_the_rate_search_scales_the_traces_time_axis(tuner):
    trace = write_trace(tuner.folder, "azure")
    objective = ("objective:\n  metric: max_rate_under_slo\n  slo: {ttft: 5000}\n  seconds-per-rate: 1\n"
                 "  search-budget: 4\n")
    space = tuner.space(trace_space("rs", trace, "azure", extra=objective))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    trial, = tuner.study("rs").get_trials()
    steps = trial.user_attrs["rate_search"]["steps"]
    base = mean_rate(load_trace(str(trace), "azure"))
    assert steps and all(s["trace_scale"] == pytest.approx(s["rate"] / base, rel=1e-3) for s in steps)


def test_a_rate_is_offered_for_its_whole_time_the_trace_repeated_where_it_is_shorter():
    """Sent once, a 3-row trace at a high rate is a burst of 3: every rate above what a burst of 3 allows would
    pass (the H200 trace space's dry run ended at 2.7e54 requests/s). Repeated, each rate is offered for real."""
    rows = [TraceRow(0.0, 10, 5, hash_ids=(1,)), TraceRow(1.0, 20, 5, hash_ids=(1, 2)), TraceRow(2.0, 30, 5)]
    assert mean_rate(rows) == 1.0
    looped = loop_trace(rows, 7.0)
    assert [r.offset for r in looped] == [0, 1, 2, 3, 4, 5, 6]  # one mean gap after the last row, again
    assert [r.hash_ids for r in looped[3:6]] == [r.hash_ids for r in rows]  # bursts and shared prefixes kept
    assert len(loop_trace(rows, 0.5, at_least=5)) == 5
    assert [r.offset for r in loop_trace(rows, 2.5)] == [0, 1, 2]  # shorter than the trace: its first rows
    assert loop_trace([], 5.0, at_least=5) == []  # nothing to repeat: no rows, and no endless loop


def test_the_example_traces_and_space_load():
    """The shipped examples (scripts/make_example_traces.py) are valid traces of their formats."""
    for name, fmt in (("mooncake.jsonl", "mooncake"), ("azure.csv", "azure"), ("plain.jsonl", "jsonl")):
        rows = load_trace(str(REPO / "search_spaces" / "traces" / name), fmt)
        assert len(rows) == 60 and rows[0].offset == 0 and rows[-1].offset > 0
    text = (REPO / "search_spaces" / "llama3-8b-h200-trace.yaml").read_text()
    assert parse_spec(text.replace("search_spaces/traces/", f"{REPO}/search_spaces/traces/")).probe.trace


@pytest.mark.parametrize("fmt, content, expected", [
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                 '{"timestamp": 10, "input_length": 10, "output_length": "abc"}\n',
     "trace.txt row 2: output_length is 'abc', not a whole number"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 10, "output_length": 5}\n',
     "trace.txt row 2: has no input_length"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\nyesterday,10,5\n",
     "trace.txt row 3: TIMESTAMP is 'yesterday', not a date and time"),
    ("azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,10\n",
     "trace.txt row 1: the header has no GeneratedTokens column"),
    ("jsonl", '{"timestamp": 0.5, "output_len": 5}\n', "trace.txt row 1: has no input_len or a prompt"),
    ("jsonl", "", "trace.txt has no rows"),
    ("jsonl", '{"timestamp": 0, "input_len": 3, "output_len": 5}\n{"timestamp": 0, "input_len": 3, "output_len": 5}\n',
     "every row has the same timestamp"),
    ("mooncak", '{"timestamp": 0}\n', "probe.trace.format: unknown trace format 'mooncak'"),
])
def test_bad_traces_are_refused_in_one_line(tuner, fmt, content, expected):
    (tuner.folder / "trace.txt").write_text(content)
    space = tuner.space(trace_space("bad", Path("trace.txt"), fmt))
    assert_refused(tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant"), expected, tuner)
