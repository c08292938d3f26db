"""Text: a deterministic toy tokenizer and the "language model" behind the simulated server.

The model is a pure function of the context: a rolling 64-bit hash of the token ids so far decides the greedy
next token of free text and the logprob of any token (the greedy token's highest). A decode step and a later re-prefill of the same tokens
therefore compute identical logprobs (up to the kernels' rounding jitter), which is what SGLang's own
decode-vs-prefill KL check expects of a healthy backend. Known questions are answered from `_facts`.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import _facts

MASK = (1 << 64) - 1
_TOKEN = re.compile(r"\s?[A-Za-z]+|\s?\d|\s?[^\sA-Za-z\d]|\s+")
FIRST_HASHED_ID = 256  # ids below are reserved for special tokens

PSEUDO_WORDS = (
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " was", " with", " be", " by",
    " on", " not", " he", " this", " are", " or", " his", " from", " at", " which", " but", " have", " an", " had",
    " they", " you", " were", " their", " one", " all", " we", " can", " her", " has", " there", " been", " if",
    " more", " when", " will", " would", " who", " so", " no", " time", " system", " model", " server", " data",
    " value", " result", " number", " first", " new", " work", " part", " place", " case", " point", " group",
    " problem", " fact", " way", " world", " state", " water", " light", " power", " form", " line", " order",
    " level", " river", " city", " market", " paper", " music", " energy", " field", " table", " signal", " memory",
    " network", " process", " method", " answer", " question", " course", " history", " science", " language",
    " small", " large", " simple", " early", " common", " clear", " strong", " quiet", " bright", " careful",
    " runs", " makes", " gives", " takes", " shows", " keeps", " moves", " holds", " turns", " builds", ",", ".",
    " because", " although", " while", " after", " before", " between", " under", " over", " through", " during",
)

CHAT_ROLES = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>", "tool": "<|observation|>"}


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def step_hash(h: int, token: int) -> int:
    """The context hash after appending `token` (FNV-style multiply-xor: cheap, order-sensitive)."""
    return ((h ^ (token + 0x51ED27)) * 0x100000001B3) & MASK


HASH_SEED = 0xCBF29CE484222325


def unit(h: int, token: int, salt: int = 0) -> float:
    return splitmix64(h ^ (token * 0x2545F4914F6CDD1D) ^ salt) / 18446744073709551616.0


def ranked(h: int, ids: tuple[int, ...]) -> tuple[int, int, float]:
    """The greedy token after context hash `h`, its runner-up, and how far the runner-up's logprob falls under
    the greedy one's. Near-ties (a small gap) are common, as in a real model: a backend that rounds differently
    may pick the runner-up there (the `near_tie_flip` health effect) and still be healthy."""
    x = splitmix64(h)
    n = len(ids)
    top = x % n
    second = (top + 1 + (x // n) % (n - 1)) % n  # never the top
    u = unit(h, 0, 0x71)
    return ids[top], ids[second], 1.5 * u * u


def logprob(h: int, token: int, ids: tuple[int, ...], flip: float = 0.0) -> float:
    """The model's logprob of `token` after context hash `h` (a deterministic value below 0): the greedy token
    scores highest, the runner-up `gap` under it, every other token further down. `flip`: where the gap is
    under it, this server's kernels swap the two (see `ranked`)."""
    top, second, gap = ranked(h, ids)
    best = -(0.0005 + 0.5 * unit(h, 0, 0x5A) ** 2)
    if gap < flip and token in (top, second):
        token = second if token == top else top
    if token == top:
        return best
    if token == second:
        return best - gap
    return best - gap - 0.2 - 3.0 * unit(h, token)


def greedy(h: int, ids: tuple[int, ...], flip: float = 0.0) -> int:
    top, second, gap = ranked(h, ids)
    return second if gap < flip else top


# A text's pieces as a real tokenizer splits it; the flag: add its special tokens (BOS and the like).
Splitter = Callable[[str, bool], list[str]]


class Tokenizer:
    def __init__(self, vocab_size: int, eos_token_id: int, token0_text: str, chars_per_token: float = 0.0,
                 split: Splitter | None = None) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.chars_per_token = chars_per_token
        self.split = split
        self._text: dict[int, str] = {0: token0_text, eos_token_id: ""}
        self._json: dict[int, bytes] = {}
        self._ids: dict[str, int] = {}
        self.pseudo_ids = tuple(self.token_id(w) for w in PSEUDO_WORDS)
        self.plus_id = self.token_id("+")

    def token_id(self, piece: str) -> int:
        tid = self._ids.get(piece)
        if tid is None:
            span = self.vocab_size - FIRST_HASHED_ID
            tid = FIRST_HASHED_ID + zlib.crc32(piece.encode("utf-8")) % span
            # A piece that hashes onto an id already taken would read back as the other piece ("9" as " work" in a
            # 128256-word vocabulary; two of a word-level tokenizer's 5,000 words): it hashes again. Ids taken at
            # start (pseudo words) are the same in every run; others go to the piece seen first.
            salt = 0
            while tid in self._text and self._text[tid] != piece:
                salt += 1
                tid = FIRST_HASHED_ID + zlib.crc32(f"{salt}\0{piece}".encode("utf-8")) % span
            self._ids[piece] = tid
            self._text.setdefault(tid, piece)
        return tid

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Ids of `text`'s pieces; with `special`, as a server encodes a prompt (only a model folder's own
        tokenizer adds special tokens)."""
        if self.split is not None:
            return [self.token_id(piece) for piece in self.split(text, special)]
        pieces = _TOKEN.findall(text)
        if self.chars_per_token > 0:
            pieces = [part for piece in pieces for part in self._split(piece)]
        return [self.token_id(piece) for piece in pieces]

    def _split(self, piece: str) -> list[str]:
        """A sub-word tokenizer's pieces: n characters make about n / chars_per_token tokens (the fraction
        decided by the piece's hash, so a word always splits the same way)."""
        share = zlib.crc32(piece.encode("utf-8")) / 4294967296.0
        n = min(len(piece), max(1, int(len(piece) / self.chars_per_token + share)))
        return [piece[i * len(piece) // n:(i + 1) * len(piece) // n] for i in range(n)]

    def piece(self, tid: int) -> str:
        text = self._text.get(tid)
        if text is not None:
            return text
        if tid < 0 or tid >= self.vocab_size:
            return ""  # SGLang's detokenizer skips ids it cannot map
        return PSEUDO_WORDS[tid % len(PSEUDO_WORDS)]

    def piece_json(self, tid: int) -> bytes:
        """The piece as it appears inside a JSON string (escaped, UTF-8), cached per id."""
        out = self._json.get(tid)
        if out is None:
            out = json.dumps(self.piece(tid), ensure_ascii=False)[1:-1].encode("utf-8")
            self._json[tid] = out
        return out

    def decode(self, ids: Iterable[int]) -> str:
        piece = self.piece
        return "".join(piece(t) for t in ids)


def is_known_answer_model(folder: str) -> bool:
    """The folder holds scripts/make_known_answer_model.py's word-level tokenizer (its task's words and keys)."""
    path = Path(folder) / "tokenizer.json"
    if not folder or not path.is_file():
        return False
    try:
        vocab = json.loads(path.read_text()).get("model", {}).get("vocab", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(vocab, dict) and {"find", "copy", "k0000", "v0000"} <= vocab.keys()


def folder_splitter(folder: str) -> Splitter | None:
    """The pieces of a model folder's tokenizer.json, where it has one, as the real server splits prompts:
    the simulated server then counts prompt tokens as the real one does. Ids stay the simulator's own."""
    path = Path(folder) / "tokenizer.json"
    if not folder or not path.is_file():
        return None
    from tokenizers import Tokenizer as HfTokenizer

    real = HfTokenizer.from_file(str(path))

    def split(text: str, special: bool) -> list[str]:
        # A piece takes the blanks before it too: a word-level tokenizer's offsets leave them out (a byte-level
        # one's keep them), and decoding (pieces joined) must give back "v2715 v2492", not "v2715v2492".
        enc = real.encode(text, add_special_tokens=special)
        pieces, end = [], 0
        for token, (a, b), is_special in zip(enc.tokens, enc.offsets, enc.special_tokens_mask):
            if is_special and a == b:
                pieces.append(token)  # one the tokenizer added (BOS): not in the text
                continue
            pieces.append(token if is_special else text[min(end, a):b])
            end = b
        return pieces

    return split


def apply_chat_template(messages: Sequence[dict]) -> str:
    """A trivial GLM-like template: role tags, one message per block, then the assistant's turn."""
    parts = []
    for message in messages:
        role = CHAT_ROLES.get(str(message.get("role", "user")), "<|user|>")
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"{role}\n{content or ''}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def known_answer(prompt: str, extra: Iterable[tuple[str, str]] = ()) -> str | None:
    """The answer a healthy model gives to the last known question in the prompt, if any."""
    looked_up = _facts.lookup_answer(prompt)
    if looked_up is not None:
        return looked_up
    low = " ".join(prompt.lower().split())
    best, best_at = None, -1
    for question, answer in (*_facts.FACTS, *extra):
        at = low.rfind(" ".join(question.lower().split()))
        if at > best_at:
            best, best_at = answer, at
    match = None
    for match in _facts.ARITHMETIC.finditer(low):
        pass
    if match is not None and match.start() > best_at:
        return _facts.arithmetic_answer(low)
    return best
