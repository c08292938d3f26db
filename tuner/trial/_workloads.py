"""The probe's requests: seeded random prompts, a JSONL file, a ShareGPT file, a shared-prefix workload, or a
request trace's rows (its arrival times are the probe's: tuner/trial/_probe.py).

Every workload is a function of the space's probe section, a salt and the model's tokenizer only, so every
trial is sent the same requests. Nothing is downloaded: dataset files are local.

Generated prompts are random words. With the model's tokenizer (tuner/trial/_tokens.py) each is cut to its
length in tokens, as bench_serving's random dataset counts; without one the lengths count words.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ..spec import MOONCAKE_BLOCK, ProbeSpec, SharedPrefix, TraceRow, WorkItem, load_rows, load_trace
from ._tokens import PromptTokens

# A handful of ordinary words: a real tokenizer spends about one token on each.
_WORDS = ("the of and to in is for on that with as by at from it this be are was or an have not but can "
          "all new more one time data system model power city water light music river table market green "
          "paper number people world house story night point state small large early").split()


def make_workload(spec: ProbeSpec, n: int, salt: int = 0, tokens: PromptTokens | None = None) -> list[WorkItem]:
    """Seeded prompts: the same spec gives every trial the same requests. With `tokens`, prompt lengths are
    tokens as the server counts them (special tokens included); else words."""
    rng = random.Random(spec.seed * 1_000_003 + salt)
    if spec.shared_prefix:
        return _shared_prefix(spec, spec.shared_prefix, rng, n, tokens)
    if spec.trace:
        rows = load_trace(spec.trace.path, spec.trace.format, spec.trace.limit)
        # Closed-loop levels take the trace's rows in order (repeated where it is shorter), without its times.
        return trace_workload(spec, [rows[i % len(rows)] for i in range(n)], salt, tokens)
    if spec.dataset:
        rows = load_rows(spec.dataset, spec.dataset_format, spec.output_len)
        return _without_replacement(rng, rows, n)
    items = []
    for i in range(n):
        in_len = _jitter(rng, spec.input_len, spec.len_jitter)
        out_len = _jitter(rng, spec.output_len, spec.len_jitter)
        head = f"{i}:"  # no two prompts share a prefix
        prompt = (" ".join([head, *_words(rng, in_len - 1)]) if tokens is None
                  else _in_tokens(tokens, rng, head, in_len, special=True))
        items.append(WorkItem(prompt, out_len))
    return items


def trace_workload(spec: ProbeSpec, rows: Sequence[TraceRow], salt: int = 0,
                   tokens: PromptTokens | None = None) -> list[WorkItem]:
    """One request per trace row: its prompt as given, else random text of its input length.

    A Mooncake row's prompt is its hash ids' blocks of MOONCAKE_BLOCK tokens (words without a tokenizer), each
    block's text seeded by its id, then text of its own, the whole cut to the row's input length. Rows with the
    same leading ids therefore share exactly that prefix, which is what the trace's ids say the prefix cache
    saw. The blocks depend on the salt too, so that each rate step of the search has its own: a step does not
    find the previous step's blocks in the cache."""
    blocks: dict[int, str] = {}

    def block(hash_id: int) -> str:
        if hash_id not in blocks:
            rng = random.Random(f"{spec.seed}/{salt}/{hash_id}")  # strings seed deterministically
            head = f"[{hash_id}]"  # two ids never share text
            blocks[hash_id] = (" ".join([head, *_words(rng, MOONCAKE_BLOCK - 1)]) if tokens is None
                               else _in_tokens(tokens, rng, head, MOONCAKE_BLOCK, special=False))
        return blocks[hash_id]

    rng = random.Random(spec.seed * 1_000_003 + salt)
    items = []
    for i, row in enumerate(rows):
        if row.prompt is not None:
            items.append(WorkItem(row.prompt, row.output_len))
            continue
        prefix = " ".join(block(h) for h in row.hash_ids)
        head = f"{prefix} {i}:" if prefix else f"{i}:"  # the request's own text starts where the blocks end
        if tokens is None:
            words = head.split()
            words += _words(rng, row.input_len - len(words))
            prompt = " ".join(words[:row.input_len])
        else:
            prompt = _in_tokens(tokens, rng, head, row.input_len, special=True)
        items.append(WorkItem(prompt, row.output_len))
    return items


def _in_tokens(tokens: PromptTokens, rng: random.Random, head: str, n: int, special: bool) -> str:
    """`head` and random words, cut to `n` tokens. A word is a token or more, so `n` words nearly always
    suffice; more are drawn where they fall short."""
    words = _words(rng, n)
    while True:
        text = " ".join([head, *words])
        cut = tokens.fit(text, n, special)
        if cut is not None:
            return cut
        words += _words(rng, max(8, n))


def _shared_prefix(spec: ProbeSpec, sp: SharedPrefix, rng: random.Random, n: int,
                   tokens: PromptTokens | None = None) -> list[WorkItem]:
    """As bench_serving's `generated-shared-prefix` (`sglang/benchmark/datasets/generated_shared_prefix.py`):
    `groups` long system prompts, each request one of them followed by a short question of its own, the
    requests of all groups shuffled. The system prompts depend on the seed only, so every rate step and
    trial shares them (which is what a prefix cache is for); the questions on the salt too.

    With `tokens`, each system prompt is `system_prompt_len` tokens and each question (its "Question i:"
    included) `question_len`, as bench_serving counts them; the server adds its special tokens on top."""
    prefix_rng = random.Random(spec.seed)
    if tokens is None:
        prompts = [" ".join([f"System prompt {g}:", *_words(prefix_rng, sp.system_prompt_len)])
                   for g in range(sp.groups)]
        items = [WorkItem(" ".join([f"{prompts[i % sp.groups]}\nQuestion {i}:", *_words(rng, sp.question_len)]),
                          _jitter(rng, spec.output_len, spec.len_jitter)) for i in range(n)]
    else:
        prompts = [_in_tokens(tokens, prefix_rng, f"System prompt {g}:", sp.system_prompt_len, special=False)
                   for g in range(sp.groups)]
        items = [WorkItem(prompts[i % sp.groups] + _in_tokens(tokens, rng, f"\nQuestion {i}:", sp.question_len,
                                                             special=False),
                          _jitter(rng, spec.output_len, spec.len_jitter)) for i in range(n)]
    rng.shuffle(items)
    return items


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(max(0, n))]


def _without_replacement(rng: random.Random, rows: Sequence[Any], n: int) -> list[Any]:
    """`n` rows in a seeded order, each row once before any repeats (as bench_serving and vLLM's client
    sample). Drawing with replacement repeated about a third of the prompts when `n` equals the dataset's
    size, and a repeated prompt's prefill comes from the prefix cache: cheaper than the workload says."""
    if not rows and n > 0:
        raise ValueError("the probe's dataset has no prompts")
    picks: list[Any] = []
    while len(picks) < n:
        order = list(rows)
        rng.shuffle(order)
        picks.extend(order[:n - len(picks)])
    return picks


def _jitter(rng: random.Random, mean: int, ratio: float) -> int:
    if ratio <= 0:
        return mean
    return max(1, int(rng.uniform(mean * (1 - ratio), mean * (1 + ratio))))
