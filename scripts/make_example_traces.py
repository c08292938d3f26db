"""Writes the small example traces under search_spaces/traces/, one per format the probe replays
(tuner/spec/_traces.py): seeded, so the files are the same on every run.

- bursty arrivals: gamma gaps of burstiness 0.3 (burstier than Poisson), a mean of RATE requests/s;
- mixed lengths: log-uniform prompts and outputs, as real chat traffic is long-tailed;
- shared prefixes (Mooncake): each request continues one of a few conversations, so it starts with that
  conversation's hash ids (its system prompt and earlier turns) and adds blocks of its own.

    python scripts/make_example_traces.py [--out search_spaces/traces] [--rows 60]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

BLOCK = 512  # Mooncake's tokens per hash id
RATE = 4.0  # requests/s on average
BURSTINESS = 0.3
SEED = 49


def arrivals(rng: random.Random, n: int) -> list[float]:
    """Seconds from the first arrival: gamma gaps of mean 1/RATE, burstier than Poisson."""
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(BURSTINESS, 1.0 / (RATE * BURSTINESS))
    return out


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


def mooncake(rng: random.Random, n: int) -> list[dict]:
    # A few conversations: a shared system prompt (ids 0-1) under some, and each its own history blocks.
    next_id = 2
    conversations = []
    for c in range(4):
        history = ([0, 1] if c % 2 == 0 else []) + list(range(next_id, next_id + 1 + c))
        next_id += 1 + c
        conversations.append(history)
    rows = []
    for t in arrivals(rng, n):
        history = conversations[rng.randrange(len(conversations))]
        own = rng.randint(1, 3)
        ids = history + list(range(next_id, next_id + own))
        next_id += own
        # The last block is partly filled, as in Mooncake's traces: input_length <= len(hash_ids) * BLOCK.
        input_length = (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)
        rows.append({"timestamp": round(t * 1000), "input_length": input_length,
                     "output_length": log_uniform(rng, 8, 400), "hash_ids": ids})
    return rows


def azure(rng: random.Random, n: int) -> list[dict]:
    start = datetime(2023, 11, 16, 18, 15, 46)
    return [{"TIMESTAMP": (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0",  # 7 digits
             "ContextTokens": log_uniform(rng, 20, 4000), "GeneratedTokens": log_uniform(rng, 4, 600)}
            for t in arrivals(rng, n)]


def plain(rng: random.Random, n: int) -> list[dict]:
    """Half the rows give their prompt, half only its length."""
    questions = ["Summarise the history of the river trade in one paragraph.",
                 "List three uses of a market table.", "Write a short story about a green city at night."]
    rows = []
    for i, t in enumerate(arrivals(rng, n)):
        row = {"timestamp": round(t, 3)}
        if i % 2:
            row["prompt"] = rng.choice(questions)
        else:
            row["input_len"] = log_uniform(rng, 16, 2000)
        row["output_len"] = log_uniform(rng, 8, 300)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "search_spaces" / "traces"))
    parser.add_argument("--rows", type=int, default=60)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mooncake.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mooncake(random.Random(SEED), args.rows)))
    with open(out / "azure.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        writer.writeheader()
        writer.writerows(azure(random.Random(SEED + 1), args.rows))
    (out / "plain.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain(random.Random(SEED + 2), args.rows)))
    print(f"wrote mooncake.jsonl, azure.csv and plain.jsonl ({args.rows} rows each) to {out}")


if __name__ == "__main__":
    main()
