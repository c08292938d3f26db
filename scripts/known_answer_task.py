"""The known-answer task of scripts/make_known_answer_model.py: its vocabulary, its token streams and its prompts.

Pure Python (no torch), so that a stream depends on its seed alone: the same on the GPU, on a CPU, and in the tests.

A sequence is a stream of items, then one last item whose answer ends with <eos>; each token is a word of the
task's own vocabulary:

    record   k0412 v1033 v0007 ;             a key and 1-4 values
    query    ? k0412 v1033 v0007 ;           a key defined earlier, then its values (an answer)
    ...
    last     find k0412 v1033 v0007 <eos>            a look-up whose answer ends the sequence, or
             copy : v0200 v0051 v3090 | v0200 v0051 v3090 <eos>     2-8 values, then the same again

Every key and value is defined at most once in a sequence, so each answer token is decided by one earlier
position: the token after the one just read (an induction head). A position, KV-cache or batching error then
reads the wrong position and gives another word, not only another logprob. Training predicts the answers only
(`mask`): the queries' inside the stream (many, at every distance) and the last item's. A prompt is a sequence
cut where its last answer starts; its text has no special token (the server's tokenizer adds BOS).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

# The chat specials of scripts/make_gpu_model.py (which imports torch only inside functions), and <unk> for
# words outside the vocabulary.
from make_gpu_model import SPECIAL_TOKENS

BOS, EOS, PAD, UNK = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<unk>"
SPECIALS = [*SPECIAL_TOKENS, UNK]
MARKS = [";", "?", "find", "copy", ":", "|"]
# Plain English words, so that the gate's own prompts (its long filler, the batch's other prompts) and the
# probe's random words are read as words rather than <unk>. The model never trains on them.
WORDS = sorted(set("""
the of and to in is for on that with as by at from it this be are was or an have not but can all new more one
time data system model power city water light music river table market green paper number people world house
story night point state small large early runs past old mill town where work land keep bridge good repair
winter when high cold Write few sentences about harbour mountain pass library orchard railway glacier forge
vineyard canal observatory desert well lighthouse Continue What capital France Answer word Paris number The
quick brown fox jumps over lazy dog Once upon there a A I you we he she they Hello How today please thank
. , ! ' " ( ) - 0 1 2 3 4 5 6 7 8 9
""".split()) - set(MARKS))

P_QUERY = 0.3  # the share of queries among a stream's items; the rest are records
MAX_VALUES, COPY_MIN, COPY_MAX = 4, 2, 8
KINDS = ("lookup", "copy")  # the last item's
LAST_MAX = 2 * COPY_MAX + 4  # the longest last item, answer included


@dataclass(frozen=True)
class Vocab:
    """Token ids of the task's words: specials, marks, English words, then keys k0000.. and values v0000..
    A multiple of 64 in all, padded with reserved specials the model never emits."""

    keys: int
    values: int

    @cached_property
    def tokens(self) -> list[str]:
        head = [*SPECIALS, *MARKS, *WORDS]
        body = [f"k{i:04d}" for i in range(self.keys)] + [f"v{i:04d}" for i in range(self.values)]
        pad = -(len(head) + len(body)) % 64
        return head + [f"<|reserved_{i}|>" for i in range(pad)] + body

    @cached_property
    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    def id(self, token: str) -> int:
        return self.index[token]

    @property
    def key0(self) -> int:
        return self.id("k0000")

    @property
    def value0(self) -> int:
        return self.id("v0000")

    def text(self, ids: list[int]) -> str:
        """The words of `ids` joined by spaces: what the tokenizer reads back as exactly these ids."""
        tokens = self.tokens
        return " ".join(tokens[i] for i in ids)


@dataclass(frozen=True)
class Sequence:
    kind: str  # the last item's: "lookup" or "copy"
    ids: list[int]  # BOS first, the last answer's <eos> last
    mask: list[int]  # 1 where ids[i] is an answer token (predicted from ids[:i])
    answer: int  # how many tokens the last answer has (<eos> included): the prompt is ids[:-answer]
    distance: int  # how far back the last answer's source lies from the prompt's end, in tokens

    @property
    def prompt(self) -> list[int]:
        return self.ids[:-self.answer]

    @property
    def expect(self) -> list[int]:
        return self.ids[-self.answer:]


def sequence(rng: random.Random, vocab: Vocab, length: int, kind: str, source: str = "any") -> Sequence:
    """A stream of items, then a last item of `kind`: at most `length` tokens (BOS and <eos> included), and more
    than `length - 2 * LAST_MAX`, or a single record where `length` is shorter. The last look-up's record, by
    `source`: "far", one of 2-4 values from the stream's first quarter, so that its answer lies at least 3/4 of
    the prompt back and decoding each of its tokens reads there again (held-out examples and gate prompts);
    "near", one of 2-4 values from the last eighth, so that in a long prompt its values lie past the first chunk
    of a chunked prefill; "any", any record."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: use one of {', '.join(KINDS)}")
    if source not in ("any", "far", "near"):
        raise ValueError(f"unknown source {source!r}: use any, far or near")
    v = vocab.id
    semi, query, find, copy, colon, bar = (v(t) for t in (";", "?", "find", "copy", ":", "|"))
    keys = [vocab.key0 + i for i in rng.sample(range(vocab.keys), vocab.keys)]
    values = [vocab.value0 + i for i in rng.sample(range(vocab.values), vocab.values)]
    ids, mask = [v(BOS)], [0]
    records: list[tuple[int, list[int], int]] = []  # (key, values, position of the key)

    def add(tokens: list[int], answer: bool) -> None:
        ids.extend(tokens)
        mask.extend([int(answer)] * len(tokens))

    # The last item's size is drawn first; the stream stops where its longest item and the last still fit. The
    # first item is always a record, for a look-up to ask for.
    copied = rng.randint(COPY_MIN, COPY_MAX) if kind == "copy" else 0
    last = 2 * copied + 4 if kind == "copy" else MAX_VALUES + 3
    while not records or len(ids) + MAX_VALUES + 3 + last <= length:
        if records and rng.random() < P_QUERY:
            key, vals, _ = rng.choice(records)
            add([query, key], False)
            add([*vals, semi], True)
        elif keys and len(values) >= MAX_VALUES + COPY_MAX:
            key, vals = keys.pop(), [values.pop() for _ in range(rng.randint(1, MAX_VALUES))]
            records.append((key, vals, len(ids)))
            add([key, *vals, semi], False)
        else:
            raise ValueError(f"{vocab.keys} keys and {vocab.values} values do not fill {length} tokens")
    if kind == "lookup":
        pool = records
        if source == "far":
            pool = [r for r in records if r[2] < len(ids) // 4 and len(r[1]) >= 2] or records
        elif source == "near":
            pool = [r for r in records if r[2] >= len(ids) * 7 // 8 and len(r[1]) >= 2] or records
        key, vals, at = rng.choice(pool)
        add([find, key], False)
        distance = len(ids) - at
    else:
        vals = [values.pop() for _ in range(copied)]
        add([copy, colon, *vals, bar], False)
        distance = len(vals) + 1
    add([*vals, v(EOS)], True)
    return Sequence(kind, ids, mask, len(vals) + 1, distance)


def held_out(seed: int, salt: str, vocab: Vocab, length: int, n: int) -> list[Sequence]:
    """`n` far look-ups and copies (alternating) of at most `length` tokens, from a random stream of their own:
    `salt` keeps them apart from training's (seeded by step) and from each other's."""
    rng = random.Random(f"{seed}/{salt}/{length}")
    return [sequence(rng, vocab, length, KINDS[i % 2], "far") for i in range(n)]


def near_lookups(seed: int, salt: str, vocab: Vocab, length: int, n: int) -> list[Sequence]:
    """`n` look-ups of at most `length` tokens whose record lies in the stream's last eighth ("near")."""
    rng = random.Random(f"{seed}/{salt}/near/{length}")
    return [sequence(rng, vocab, length, "lookup", "near") for _ in range(n)]


def training_batch(seed: int, step: int, vocab: Vocab, length: int,
                   batch: int) -> tuple[list[list[int]], list[list[int]]]:
    """`batch` sequences of exactly `length` tokens (<|pad|> after the last <eos>) and their answer masks; half
    of them end in a look-up, half in a copy."""
    rng = random.Random(f"{seed}/train/{step}")
    pad = vocab.id(PAD)
    ids, masks = [], []
    for i in range(batch):
        s = sequence(rng, vocab, rng.randint(max(length - 64, length // 2), length), KINDS[i % 2])
        ids.append((s.ids + [pad] * (length - len(s.ids)))[:length])  # cut where a short length takes no copy
        masks.append((s.mask + [0] * (length - len(s.ids)))[:length])
    return ids, masks
