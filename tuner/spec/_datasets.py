"""A probe's dataset file (JSONL, or ShareGPT as bench_serving reads it), read into requests.

The spec reads it when it loads, so that a missing or malformed file is refused before anything is launched; the
workload (tuner/trial/_workloads.py) draws each trial's requests from the same rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Without the model's tokenizer, a ShareGPT answer's length in tokens is estimated as for English BPE text.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class WorkItem:
    prompt: str
    output_len: int


def load_rows(path: str, fmt: str, default_output_len: int) -> list[WorkItem]:
    """All usable rows of a dataset file; ValueError names what is wrong with it."""
    text = Path(path).read_text()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return [WorkItem(str(r["prompt"]), int(r.get("output_len", default_output_len))) for r in rows]
    return _sharegpt(json.loads(text))


def _sharegpt(data: Any) -> list[WorkItem]:
    """bench_serving's ShareGPT format, read as SGLang 0.5.23's `sglang/benchmark/datasets/sharegpt.py`
    (`sample_sharegpt_requests`) reads it: a list of {"conversations": [{"from", "value"}, ...]} ("conversation"
    also taken); conversations of fewer than two turns dropped; the first turn is the prompt, the second's
    length the output length (here estimated, see CHARS_PER_TOKEN); rows under 2 tokens either way dropped."""
    if not isinstance(data, list):
        raise ValueError("a ShareGPT file is a JSON list of {\"conversations\": [...]}")
    items = []
    for row in data:
        turns = row.get("conversations", row.get("conversation", [])) if isinstance(row, dict) else []
        if len(turns) < 2:
            continue
        prompt, answer = str(turns[0].get("value", "")), str(turns[1].get("value", ""))
        output_len = math.ceil(len(answer) / CHARS_PER_TOKEN)
        if len(prompt) >= 2 * CHARS_PER_TOKEN and output_len >= 2:
            items.append(WorkItem(prompt, output_len))
    return items
