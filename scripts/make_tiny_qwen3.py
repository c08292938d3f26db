"""Make a tiny random-weight Qwen3 model folder for serving with sglang-jax on CPU.

    .venv-sgljax/bin/python scripts/make_tiny_qwen3.py .cache/tiny-qwen3

sglang-jax has no dummy load format, so real weights are written: model.safetensors with random values
(numpy, fixed seed, through `safetensors.numpy`; no torch). Also config.json (Qwen3ForCausalLM: vocab 512,
hidden 256, 2 layers, 4 heads of head_dim 128, 2 KV heads), a byte-level BPE tokenizer trained locally on a
few built-in sentences (tokenizer.json, tokenizer_config.json with a ChatML chat template,
special_tokens_map.json) and generation_config.json. Nothing is downloaded. Deterministic: the same files
on every run, and a folder that already holds them is left as it is. Needs `numpy`, `safetensors`,
`tokenizers` and `transformers` (all in the sglang-jax environment made by scripts/setup_sglang_jax.sh).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 512
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
# sglang-jax 0.0.1.post1 pads head_dim to 128 in its weight loader but not q_norm/k_norm: anything but
# 128 fails to load.
HEAD_DIM = 128
MAX_POSITIONS = 4096
SEED = 1234
DTYPE = "bfloat16"
# Random weights of the usual 0.02 scale give a flat next-token distribution (every logprob near
# -log(vocab)), in which a wrong KV cache or position cannot be told from a right one. These scales give
# peaked, input-dependent distributions: projections keep unit variance, the LM head spreads the logits
# (std ~5) so that greedy choices are well separated.
LM_HEAD_STD = 0.3
EMBED_STD = 1.0

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
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
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n",
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


def make_weights(np):
    """The Qwen3ForCausalLM tensors, named as in Hugging Face checkpoints (float32 here, bf16 on disk)."""
    rng = np.random.default_rng(SEED)

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def linear(out_features, in_features):  # [out, in], as torch's nn.Linear stores it
        return normal((out_features, in_features), 1.0 / np.sqrt(in_features))

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    tensors = {"model.embed_tokens.weight": normal((VOCAB_SIZE, HIDDEN_SIZE), EMBED_STD)}
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}"
        tensors[f"{p}.input_layernorm.weight"] = ones(HIDDEN_SIZE)
        tensors[f"{p}.post_attention_layernorm.weight"] = ones(HIDDEN_SIZE)
        tensors[f"{p}.self_attn.q_proj.weight"] = linear(NUM_HEADS * HEAD_DIM, HIDDEN_SIZE)
        tensors[f"{p}.self_attn.k_proj.weight"] = linear(NUM_KV_HEADS * HEAD_DIM, HIDDEN_SIZE)
        tensors[f"{p}.self_attn.v_proj.weight"] = linear(NUM_KV_HEADS * HEAD_DIM, HIDDEN_SIZE)
        tensors[f"{p}.self_attn.o_proj.weight"] = linear(HIDDEN_SIZE, NUM_HEADS * HEAD_DIM)
        tensors[f"{p}.self_attn.q_norm.weight"] = ones(HEAD_DIM)
        tensors[f"{p}.self_attn.k_norm.weight"] = ones(HEAD_DIM)
        tensors[f"{p}.mlp.gate_proj.weight"] = linear(INTERMEDIATE_SIZE, HIDDEN_SIZE)
        tensors[f"{p}.mlp.up_proj.weight"] = linear(INTERMEDIATE_SIZE, HIDDEN_SIZE)
        tensors[f"{p}.mlp.down_proj.weight"] = linear(HIDDEN_SIZE, INTERMEDIATE_SIZE)
    tensors["model.norm.weight"] = ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = normal((VOCAB_SIZE, HIDDEN_SIZE), LM_HEAD_STD)
    return tensors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)

    try:
        import ml_dtypes
        import numpy as np
        from safetensors.numpy import save_file
        from transformers import PreTrainedTokenizerFast, Qwen3Config
    except ImportError as exc:
        print(f"make_tiny_qwen3: {exc}; run it with the sglang-jax environment's python "
              "(.venv-sgljax/bin/python, made by scripts/setup_sglang_jax.sh)", file=sys.stderr)
        return 1

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)

    raw = build_tokenizer()
    vocab = raw.get_vocab()
    if len(vocab) > VOCAB_SIZE:
        print(f"make_tiny_qwen3: tokenizer has {len(vocab)} tokens, more than the model's {VOCAB_SIZE}",
              file=sys.stderr)
        return 1
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    # The template goes into tokenizer_config.json (not chat_template.jinja), which every transformers
    # release reads.
    tokenizer.save_pretrained(str(out), save_jinja_files=False)
    (out / "chat_template.jinja").unlink(missing_ok=True)

    config = Qwen3Config(
        architectures=["Qwen3ForCausalLM"],
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        attention_bias=False,
        tie_word_embeddings=False,
        bos_token_id=vocab["<|endoftext|>"],
        eos_token_id=vocab["<|im_end|>"],
        pad_token_id=vocab["<|endoftext|>"],
        torch_dtype=DTYPE,
    )
    config.save_pretrained(str(out))
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
                  "pad_token_id": config.pad_token_id, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")

    # The weights take the longest to write; a file from an earlier run with the same content is kept
    # (same seed, same shapes: the same bytes), so that a second run changes nothing on disk.
    tensors = {k: v.astype(ml_dtypes.bfloat16) for k, v in make_weights(np).items()}
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].tobytes())
    stamp = out / ".weights.sha256"
    weights = out / "model.safetensors"
    if not (weights.is_file() and stamp.is_file() and stamp.read_text().strip() == digest.hexdigest()):
        tmp = out / "model.safetensors.tmp"
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        tmp.replace(weights)
        stamp.write_text(digest.hexdigest() + "\n")
    n_params = sum(t.size for t in tensors.values())
    print(f"make_tiny_qwen3: wrote {out} (vocab {len(vocab)}/{VOCAB_SIZE}, {NUM_LAYERS} layers, "
          f"{n_params / 1e6:.2f}M parameters, {weights.stat().st_size / 2**20:.1f} MiB of weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
