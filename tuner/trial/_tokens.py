"""The served model's tokenizer, read from its folder's tokenizer.json, so that probe lengths are tokens.

SGLang's bench_serving counts its random prompts in tokens of the model's tokenizer; the probe does too where
the model folder holds a tokenizer.json. The `tokenizers` package reads it without transformers, and is
imported only where such a file exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec import Spec

TOKENIZER_FILE = "tokenizer.json"
# How far from the target count a cut is tried before the closest one is taken.
_TRIES = 8


@dataclass(frozen=True)
class PromptTokens:
    """Counts prompts as the server counts them: its tokenizer's encode with special tokens (BOS and the
    like), as SGLang and vLLM tokenize a text prompt."""

    tokenizer: Any  # tokenizers.Tokenizer
    path: str

    def count(self, text: str, special: bool = True) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=special).ids)

    def fit(self, text: str, n: int, special: bool = True) -> str | None:
        """`text` cut at a token boundary to `n` tokens as counted; None where it has fewer.

        The cut is checked by encoding it again: a word cut in two may split differently on its own. The
        nearest cut that counts `n` is taken, else the closest."""
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        want = max(1, n - self.count("", special))  # never an empty prompt, even where BOS alone is `n`
        if len(enc.ids) < want:
            return None
        best: tuple[int, str] | None = None
        for step in range(_TRIES):
            for m in dict.fromkeys((want - step, want + step)):
                if not 1 <= m <= len(enc.ids):
                    continue
                cut = text[:enc.offsets[m - 1][1]]
                off = abs(self.count(cut, special) - n)
                if off == 0:
                    return cut
                if best is None or off < best[0]:
                    best = (off, cut)
        return best[1] if best else text


LENGTHS_ATTR = "probe_lengths"  # the study's: what probe lengths count, and why


def model_tokens(spec: Spec) -> tuple[PromptTokens | None, str]:
    """The served model's tokenizer, once per run; else None and why not."""
    return load_prompt_tokens(tokenizer_folder(spec.server.model_path, spec.server.fixed))


def words_note(why: str) -> str:
    """The run's first screen, where lengths stay words."""
    return f"probe lengths are words, not tokens: {why}; each trial records the prompt tokens the server counted"


def lengths_attr(tokens: PromptTokens | None, why: str) -> dict[str, Any]:
    """The study's record of what probe lengths count."""
    return {"unit": "tokens", "tokenizer": tokens.path} if tokens else {"unit": "words", "why": why}


def tokenizer_folder(model_path: str, fixed: Mapping[str, Any] | None = None) -> str:
    """Where the server reads its tokenizer: `--tokenizer-path` where fixed, else the model's folder."""
    return str((fixed or {}).get("tokenizer-path") or (fixed or {}).get("tokenizer") or model_path)


def load_prompt_tokens(folder: str) -> tuple[PromptTokens | None, str]:
    """The tokenizer of `folder`, or None and why probe lengths stay words."""
    path = Path(folder).expanduser() / TOKENIZER_FILE
    if not path.is_file():
        return None, f"no {TOKENIZER_FILE} in {folder}"
    try:
        from tokenizers import Tokenizer
        return PromptTokens(Tokenizer.from_file(str(path)), str(path)), ""
    except Exception as exc:  # a file of another format, or the package missing: words still measure
        return None, f"{path} could not be read ({type(exc).__name__}: {str(exc)[:120]})"
