"""Make a model folder with realistic random weights for real SGLang on the lent GPU (nothing is downloaded).

    python3 scripts/make_gpu_model.py llama3-8b /tmp/llama3-8b      # on the GPU machine: ~16 GB, ~1 min
    python3 scripts/make_gpu_model.py tiny /tmp/tiny-llama --device cpu   # a 2-layer check anywhere

SGLang's `--load-format dummy` fills every weight uniformly in +-1e-3: every logprob is then -ln(vocab) and
greedy choices are near-ties, so a gate comparing tokens across backends would judge noise. Here weights are
drawn as transformers initialises them (normal, std `initializer_range` = 0.02; norms 1), on the GPU with a
fixed seed, and written as safetensors shards: logits then spread about 1.3 nats and greedy choices differ
across kernels as a real model's do, rarely and by bf16 rounding.

Presets (`PRESETS` below):
  llama3-8b   LlamaForCausalLM shaped as Llama-3-8B: 32 layers, hidden 4096, 32 heads, 8 KV heads, MLP 14336,
              vocab 128256 (8.0 B parameters).
  qwen3-moe   Qwen3MoeForCausalLM, a scaled-down Qwen3-30B-A3B: 24 layers, hidden 2048, 32 heads, 4 KV heads,
              64 experts, 8 active, expert MLP 768, vocab 151936 (7.6 B parameters), so that SGLang's fused-MoE
              kernels run.
  tiny        LlamaForCausalLM, 2 layers, hidden 256, vocab 4096: to check the script itself.

The tokenizer is a byte-level BPE trained on a few built-in sentences, padded with plain word tokens
(" w1234") up to exactly the config's vocab_size, so that every id the model can emit decodes to text.
Needs torch, safetensors and tokenizers (all in the GPU image; tokenizers also in the overlay). Deterministic
for a given preset, seed and device type.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content']"
                 " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Answer in one word. Paris.",
    "Once upon a time there was a story about a number, a point, and a light.",
    "The river runs past the old market, where people sell green paper and small tables.",
    "Hello! How are you today? I am fine, thank you. Please write a short poem about the sea.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "One, two, three, four, five, six, seven, eight, nine, ten. 0123456789",
]
SHARD_BYTES = 2 << 30


@dataclass(frozen=True)
class Preset:
    architecture: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    rope_theta: float = 500000.0
    max_positions: int = 8192


PRESETS = {
    "llama3-8b": Preset("LlamaForCausalLM", "llama", 32, 4096, 32, 8, 14336, 128256),
    "qwen3-moe": Preset("Qwen3MoeForCausalLM", "qwen3_moe", 24, 2048, 32, 4, 6144, 151936, experts=64,
                        experts_per_token=8, expert_intermediate=768, rope_theta=1000000.0),
    "tiny": Preset("LlamaForCausalLM", "llama", 2, 256, 4, 2, 512, 4096),
}


def build_tokenizer(vocab_size: int):
    """A byte-level BPE whose vocabulary has exactly `vocab_size` entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    def fresh(model):
        tok = Tokenizer(model)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        return tok

    small = fresh(models.BPE(unk_token=None, byte_fallback=False))
    trainer = trainers.BpeTrainer(vocab_size=1024, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    small.train_from_iterator(SENTENCES * 4, trainer=trainer, length=len(SENTENCES) * 4)
    trained = json.loads(small.to_str())["model"]
    vocab: dict[str, int] = dict(trained["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    if len(vocab) > vocab_size:
        raise SystemExit(f"make_gpu_model: the trained tokenizer has {len(vocab)} tokens, more than {vocab_size}")
    n = 0
    while len(vocab) < vocab_size:  # "Ġ" is a space in byte-level BPE: these decode to " w0", " w1", ...
        vocab.setdefault(f"\u0120w{n}", len(vocab))
        n += 1
    tok = fresh(models.BPE(vocab=vocab, merges=merges, unk_token=None, byte_fallback=False))
    tok.add_special_tokens(SPECIAL_TOKENS)  # already in the vocabulary: marks them special, adds no id
    if tok.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise SystemExit(f"make_gpu_model: tokenizer has {tok.get_vocab_size(True)} tokens, want {vocab_size}")
    return tok, vocab


def config_json(p: Preset, vocab: dict[str, int]) -> dict:
    config = {
        "architectures": [p.architecture], "model_type": p.model_type, "vocab_size": p.vocab,
        "hidden_size": p.hidden, "intermediate_size": p.intermediate, "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads, "num_key_value_heads": p.kv_heads, "head_dim": p.hidden // p.heads,
        "hidden_act": "silu", "max_position_embeddings": p.max_positions, "rms_norm_eps": 1e-5,
        "rope_theta": p.rope_theta, "initializer_range": 0.02, "tie_word_embeddings": False,
        "attention_bias": False, "bos_token_id": vocab["<|begin_of_text|>"],
        "eos_token_id": vocab["<|end_of_text|>"], "pad_token_id": vocab["<|pad|>"], "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    if p.experts:
        config.update({"num_experts": p.experts, "num_experts_per_tok": p.experts_per_token,
                       "moe_intermediate_size": p.expert_intermediate, "norm_topk_prob": True,
                       "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
                       "router_aux_loss_coef": 0.001})
    return config


def tensor_shapes(p: Preset):
    """(name, shape, is_norm) of every weight, in the names transformers (and SGLang's loader) use."""
    d, hd = p.hidden, p.hidden // p.heads
    yield "model.embed_tokens.weight", (p.vocab, d), False
    for i in range(p.layers):
        pre = f"model.layers.{i}."
        yield pre + "input_layernorm.weight", (d,), True
        yield pre + "post_attention_layernorm.weight", (d,), True
        yield pre + "self_attn.q_proj.weight", (p.heads * hd, d), False
        yield pre + "self_attn.k_proj.weight", (p.kv_heads * hd, d), False
        yield pre + "self_attn.v_proj.weight", (p.kv_heads * hd, d), False
        yield pre + "self_attn.o_proj.weight", (d, p.heads * hd), False
        if p.model_type == "qwen3_moe":
            yield pre + "self_attn.q_norm.weight", (hd,), True
            yield pre + "self_attn.k_norm.weight", (hd,), True
        if p.experts:
            yield pre + "mlp.gate.weight", (p.experts, d), False
            for e in range(p.experts):
                yield pre + f"mlp.experts.{e}.gate_proj.weight", (p.expert_intermediate, d), False
                yield pre + f"mlp.experts.{e}.up_proj.weight", (p.expert_intermediate, d), False
                yield pre + f"mlp.experts.{e}.down_proj.weight", (d, p.expert_intermediate), False
        else:
            yield pre + "mlp.gate_proj.weight", (p.intermediate, d), False
            yield pre + "mlp.up_proj.weight", (p.intermediate, d), False
            yield pre + "mlp.down_proj.weight", (d, p.intermediate), False
    yield "model.norm.weight", (d,), True
    yield "lm_head.weight", (p.vocab, d), False


def write_weights(p: Preset, out: Path, device: str, seed: int) -> tuple[int, int]:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator(device=device).manual_seed(seed)
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, index, files, params = 0, {}, [], 0

    def flush():
        nonlocal shard, shard_bytes
        if shard:
            name = f"model-{len(files) + 1:05d}.safetensors"
            save_file(shard, str(out / name), metadata={"format": "pt"})
            files.append(name)
            index.update({k: name for k in shard})
            shard, shard_bytes = {}, 0

    for name, shape, is_norm in tensor_shapes(p):
        if is_norm:
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = torch.empty(shape, dtype=torch.float32, device=device).normal_(0.0, 0.02, generator=gen)
            t = t.to(torch.bfloat16).cpu()
        params += t.numel()
        shard[name] = t
        shard_bytes += t.numel() * 2
        if shard_bytes >= SHARD_BYTES:
            flush()
    flush()
    # Shards are renamed to the "-of-N" form transformers writes once N is known.
    total = len(files)
    renamed = {f: f.replace(".safetensors", f"-of-{total:05d}.safetensors") for f in files}
    for old, new in renamed.items():
        (out / old).rename(out / new)
    weight_map = {k: renamed[v] for k, v in sorted(index.items())}
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": params * 2}, "weight_map": weight_map}, indent=1) + "\n")
    return params, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", default="cuda", help="where the weights are drawn (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    p = PRESETS[args.preset]
    out: Path = args.out_dir
    done = out / "config.json"
    if done.exists() and json.loads(done.read_text()).get("tuner_preset") == [args.preset, args.seed]:
        print(f"make_gpu_model: {out} already holds {args.preset} (seed {args.seed})")
        return 0
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors"):
        old.unlink()
    tok, vocab = build_tokenizer(p.vocab)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>", "pad_token": "<|pad|>", "model_max_length": p.max_positions,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}, indent=1) + "\n")
    config = config_json(p, vocab)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
         "pad_token_id": config["pad_token_id"], "do_sample": False}, indent=1) + "\n")
    params, shards = write_weights(p, out, args.device, args.seed)
    # config.json last, with the preset it was made from: a folder cut short by a crash is made again.
    config["tuner_preset"] = [args.preset, args.seed]
    done.write_text(json.dumps(config, indent=1) + "\n")
    print(f"make_gpu_model: wrote {out}: {args.preset}, {params / 1e9:.2f} B parameters in {shards} shards, "
          f"vocab {p.vocab}, {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
