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
