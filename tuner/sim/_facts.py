"""Known-answer prompts every healthy simulated model gets right under greedy decoding.

A prompt matches when the question appears in it (case-insensitive), so a chat template, a system prompt or
few-shot examples around it do not matter. Profiles may add entries under `known_answers:`.
"""

from __future__ import annotations

import re

FACTS: tuple[tuple[str, str], ...] = (
    ("What is the capital of France? Answer in one word.", "Paris"),
    ("What is the capital of Japan? Answer in one word.", "Tokyo"),
    ("What is the capital of Germany? Answer in one word.", "Berlin"),
    ("What is the capital of Italy? Answer in one word.", "Rome"),
    ("What is the capital of Spain? Answer in one word.", "Madrid"),
    ("What is the capital of Canada? Answer in one word.", "Ottawa"),
    ("What is the capital of Australia? Answer in one word.", "Canberra"),
    ("What is the capital of the United Kingdom? Answer in one word.", "London"),
    ("What color is the sky on a clear day? Answer in one word.", "Blue"),
    ("How many days are in a week? Answer with a number.", "7"),
    ("How many legs does a spider have? Answer with a number.", "8"),
    ("What is the largest planet in the solar system? Answer in one word.", "Jupiter"),
    ("What is the chemical symbol for gold? Answer in one word.", "Au"),
    # SGLang's own warm-up prompt: a continuation, not a question.
    ("The capital city of France is", " Paris."),
)

# "What is 2 + 3? Answer with a number." and friends: any small arithmetic question.
ARITHMETIC = re.compile(r"what is (-?\d+)\s*([+\-*x×/])\s*(-?\d+)\s*\?", re.IGNORECASE)


def arithmetic_answer(prompt: str) -> str | None:
    match = None
    for match in ARITHMETIC.finditer(prompt):
        pass  # the last question in the prompt is the one being asked
    if match is None:
        return None
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    if op == "+":
        value = a + b
    elif op == "-":
        value = a - b
    elif op in "*x×":
        value = a * b
    else:
        if b == 0 or a % b:
            return None
        value = a // b
    return str(value)


def lookup_answer(prompt: str) -> str | None:
    """The known-answer model's task (scripts/known_answer_task.py), as that model answers it: a prompt ending in
    `find k0412` gives the values of the record `k0412 v1033 v0007 ;` earlier in it ("v1033 v0007"); one ending
    in `copy : v0200 v0051 |` gives "v0200 v0051"."""
    words = prompt.split()
    if len(words) >= 2 and words[-2] == "find":
        key = words[-1]
        for i, word in enumerate(words[:-2]):
            if word == key and (i == 0 or words[i - 1] != "?"):  # a record, not a query ("? k0412 ...")
                values = words[i + 1:words.index(";", i) if ";" in words[i:] else len(words) - 2]
                return " ".join(values) or None
        return None
    if words and words[-1] == "|" and ":" in words:
        start = len(words) - 1 - words[::-1].index(":")
        if start >= 1 and words[start - 1] == "copy" and start < len(words) - 2:
            return " ".join(words[start + 1:-1])
    return None
