"""Make a tiny Llama model folder for serving with vLLM's `--load-format dummy` (no weights).

    .venv-vllm/bin/python scripts/make_tiny_model.py .cache/tiny-llama

Writes config.json (LlamaConfig: vocab 512, hidden 128, 2 layers, 4 heads, 2 KV heads), a byte-level
BPE tokenizer trained on a few built-in sentences (tokenizer.json, tokenizer_config.json with a chat
template, special_tokens_map.json) and generation_config.json. Deterministic: the same files on every
run. Needs `transformers` and `tokenizers` (both are in the vLLM environment).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
MAX_POSITIONS = 2048
# vLLM's dummy loader fills every weight with uniform values in [-1e-3, 1e-3] (seed 1234), which makes
# the logits of so small a model about 1e-5 apart: a flat distribution whose argmax is a near-tie. vLLM's
# Llama multiplies the logits by `logit_scale` from the config (transformers ignores it), so a large
# scale gives peaked, well-separated greedy choices and logprobs far from -log(vocab).
LOGIT_SCALE = 1.0e6

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Answer in one word. Paris.",
    "What is 2 + 3? Answer with a number. 5.",
    "A tiny model answers every question with confidence and no knowledge at all.",
    "The river runs past the old market, where people sell green paper and small tables.",
    "Every night the city lights shine on the water, and music plays in the large house.",
    "This system measures the power of a new data model in the early state of the world.",
    "One, two, three, four, five, six, seven, eight, nine, ten. 0123456789",
    "Once upon a time there was a story about a number, a point, and a light.",
    "The of and to in is for on that with as by at from it this be are was or an have not but can all.",
    "Hello! How are you today? I am fine, thank you. Please write a short poem about the sea.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The corpus is repeated so that merges are learned in a stable order; training is deterministic.
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer, length=len(SENTENCES) * 4)
    return tok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)

    try:
        from transformers import LlamaConfig, PreTrainedTokenizerFast
    except ImportError as exc:
        print(f"make_tiny_model: {exc}; run it with the vLLM environment's python "
              "(.venv-vllm/bin/python)", file=sys.stderr)
        return 1

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)

    raw = build_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))

    vocab = raw.get_vocab()
    config = LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=vocab["<|begin_of_text|>"],
        eos_token_id=vocab["<|end_of_text|>"],
        pad_token_id=vocab["<|pad|>"],
        torch_dtype="bfloat16",
        logit_scale=LOGIT_SCALE,
    )
    config.save_pretrained(str(out))
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
                  "pad_token_id": config.pad_token_id, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")

    # Refuse a tokenizer that a vocab-512 model cannot embed.
    if len(vocab) > VOCAB_SIZE:
        print(f"make_tiny_model: tokenizer has {len(vocab)} tokens, more than the model's {VOCAB_SIZE}",
              file=sys.stderr)
        return 1
    print(f"make_tiny_model: wrote {out} (vocab {len(vocab)}, {len(SENTENCES)} training sentences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
