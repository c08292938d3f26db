"""What broken output looks like: shared by the gate and the probe."""

from __future__ import annotations

from collections.abc import Sequence


def degenerate_reason(text: str, token_ids: Sequence[int] = (), vocab_size: int | None = None,
                      check_repetition: bool = True) -> str | None:
    """Why `text` is not what a working model writes, or None if it looks like text."""
    if token_ids and vocab_size and any(t < 0 or t >= vocab_size for t in token_ids):
        bad = next(t for t in token_ids if t < 0 or t >= vocab_size)
        return f"token id {bad} is outside the vocabulary of {vocab_size}"
    stripped = text.strip()
    if not stripped:
        return "empty output" if token_ids or not text else "only whitespace"
    if len(stripped) >= 3:
        meaningful = sum(ch.isalnum() for ch in stripped)
        if meaningful / len(stripped) < 0.2:
            return f"output is mostly symbols: {stripped[:40]!r}"
    if check_repetition and len(token_ids) >= 4 and len(set(token_ids)) == 1:
        return f"one token ({token_ids[0]}) repeated {len(token_ids)} times"
    return None


def nan_positions(logprobs: Sequence[float | None]) -> list[int]:
    return [i for i, lp in enumerate(logprobs) if lp is None]
