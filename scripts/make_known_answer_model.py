"""Train a small Llama from scratch on look-ups and copies whose answers are known exactly (nothing is downloaded).

    python3 scripts/make_known_answer_model.py /tmp/known-answer                       # on the GPU: a few minutes
    .venv-vllm/bin/python scripts/make_known_answer_model.py /tmp/ka --preset tiny     # on a CPU: half a minute
    python3 scripts/make_known_answer_model.py --preset gpu --print-gate               # the gate fragment alone
    python3 scripts/make_known_answer_model.py --preset gpu --print-probe              # the probe's prompts, JSONL

Random weights answer nothing, so a gate can only compare a server with itself. This model answers known
questions: `find k0412` after a stream of records `k0412 v1033 v0007 ;` gives `v1033 v0007`, and
`copy : v0200 v0051 |` gives `v0200 v0051` (scripts/known_answer_task.py has the task). Each answer token is
read from one earlier position, so a position, KV-cache, chunking or batching error changes the answer itself.

The folder is a Hugging Face checkpoint that SGLang and vLLM load: config.json (LlamaForCausalLM, bf16),
model.safetensors, generation_config.json, and a word-level tokenizer (tokenizer.json, tokenizer_config.json,
special_tokens_map.json) in which every key and value is one token. Beside them:
  accuracy.json       greedy accuracy on held-out prompts per kind and length (transformers, batch 1, bf16,
                      the saved folder as loaded), and on the gate prompts, with the smallest logprob margin.
  gate-prompts.yaml   a `gate:` fragment for a space: prompts with `expect:` (short ones, ones past 2,048
                      tokens, 64 in all for the GPU preset), all checks on.

Presets (`PRESETS` below):
  gpu    4 layers, hidden 512, 4 heads of 128, 2 KV heads; trained on up to 8,192 tokens, for one H100 or H200.
  tiny   2 layers, hidden 64; up to 96 tokens, 500 steps on a CPU (under half a minute on one core): for the tests.

Training starts from a built look-up circuit (`seed_circuit`), so that every seed learns look-ups. The tiny
preset, seeds 0-7 on a CPU (2026-12-07): all 16 gate prompts right for each seed after 500 steps (smallest
margins 6.6-7.6 nats) and after 2,000 (8.9-10.4); trained from Llama's random start, 3 of the 8 seeds did so
after 2,000 steps.

Deterministic for a given preset, seed, steps and device type (torch's deterministic algorithms; each batch is
seeded by its step). A folder made with the same recipe is kept. The gate prompts depend on the preset and the
seed alone, not on training: a space can carry them before the model exists. Exits 1 if the trained model
misses a gate prompt (the folder is then left unmarked, so that the next call trains again).
Needs torch, safetensors, tokenizers and transformers (all in the GPU image and in .venv-vllm).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import known_answer_task as task  # noqa: E402
from make_gpu_model import CHAT_TEMPLATE, Preset as ModelShape, config_json  # noqa: E402

MARKER = "tuner_known_answer"  # config.json's record of the recipe that made the folder
PROBE_LENGTH, PROBE_ROWS = 512, 64  # the probe's prompts (probe_rows): as the spaces' input-len, one per slot


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    keys: int  # how many key words k0000.. and value words v0000.. the vocabulary has
    values: int
    lengths: tuple[int, ...]  # training lengths, a curriculum: each stage adds the next, longer one
    tokens: int  # per training step
    steps: int
    lr: float
    eval_lengths: tuple[int, ...]
    eval_n: int  # held-out prompts per length (half look-ups, half copies)
    gate: tuple[tuple[int, int], ...]  # (prompt length, how many) of the gate prompts
    max_positions: int
    device: str
    # (prompt length, how many) of near look-ups: their values lie past a 2,048-token first chunk, where a fault in
    # a continued chunk's KV cache (chunk-kv) changes them; a far one's lie in the first chunk
    gate_near: tuple[tuple[int, int], ...] = ()
    seeded: bool = True  # training starts from a built look-up circuit (seed_circuit)
    # Llama 3's: its slowest rotary planes turn little over 8,192 positions, for the induction head to match in
    rope_theta: float = 500000.0
    tied: bool = True  # lm_head shares the embedding (as Llama-3.2 1B/3B): copying a word is then easy to learn


PRESETS = {
    "gpu": Preset(4, 512, 4, 2, 1536, keys=1536, values=3584, lengths=(256, 1024, 2048, 4096, 8192), tokens=65536,
                  steps=1500, lr=1e-3, eval_lengths=(64, 512, 2048, 4096, 8192), eval_n=32,
                  gate=((32, 26), (64, 24), (256, 8), (2304, 3), (4608, 1)), gate_near=((2304, 1), (4608, 1)),
                  max_positions=8192, device="cuda"),
    "tiny": Preset(2, 64, 2, 1, 192, keys=32, values=96, lengths=(48, 96), tokens=1536, steps=500, lr=3e-3,
                   eval_lengths=(32, 64, 96), eval_n=16, gate=((32, 8), (64, 8)), max_positions=128, device="cpu"),
}


def fail(message: str) -> None:
    raise SystemExit(f"make_known_answer_model: {message}")


def vocab_of(p: Preset) -> task.Vocab:
    return task.Vocab(p.keys, p.values)


# -- tokenizer and folder ---------------------------------------------------------------------------------------

def build_tokenizer(vocab: task.Vocab):
    """A word-level tokenizer: words split at spaces and punctuation, one id each, <unk> for any other word; BOS
    in front, as Llama's. Decoding joins words with spaces (no decoder), so "v0020 v0077" reads back as written."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel(vocab=vocab.index, unk_token=task.UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=f"{task.BOS} $A", pair=f"{task.BOS} $A $B",
                                                       special_tokens=[(task.BOS, vocab.id(task.BOS))])
    tok.add_special_tokens([t for t in vocab.tokens if t.startswith("<")])  # marks them special: no new ids
    if tok.get_vocab_size(with_added_tokens=True) != len(vocab.tokens):
        fail(f"tokenizer has {tok.get_vocab_size(True)} tokens, want {len(vocab.tokens)}")
    return tok


def write_tokenizer(folder: Path, vocab: task.Vocab, p: Preset) -> None:
    build_tokenizer(vocab).save(str(folder / "tokenizer.json"))
    special = {"bos_token": task.BOS, "eos_token": task.EOS, "pad_token": task.PAD, "unk_token": task.UNK}
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", **special, "model_max_length": p.max_positions,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}, indent=1) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=1) + "\n")


def model_config(p: Preset, vocab: task.Vocab) -> dict:
    shape = ModelShape("LlamaForCausalLM", "llama", p.layers, p.hidden, p.heads, p.kv_heads, p.intermediate,
                       len(vocab.tokens), rope_theta=p.rope_theta, max_positions=p.max_positions)
    config = config_json(shape, vocab.index)
    config["tie_word_embeddings"] = p.tied
    # Weights drawn with std 1/sqrt(hidden) rather than Llama's 0.02: in so small a model 0.02 leaves attention
    # scores near zero and their gradients with them, and look-ups then take many more steps to start working.
    config["initializer_range"] = round(p.hidden ** -0.5, 4)
    return config


# -- training ---------------------------------------------------------------------------------------------------

def seed_circuit(model, config: dict, seed: int) -> None:
    """Start the model as a working look-up circuit (a previous-token head and an induction head), with every
    other residual branch at zero; every weight still trains.

    An answer word is the word after an earlier copy of the word just read: an induction head, which needs a head
    that tells each position its previous word. Random weights start far from that circuit, and whether training
    finds it turns on the numerics: on 2026-12-07 the same recipe learnt look-ups on one H100 run and not on the
    next (docs/gpu-sglang-0517-faults/known-answer/retrain-2026-12-07), and on a CPU 5 of 8 seeds missed them.
    Built in, it is there from the first step, and training refines it:
      layer 0, head 0: attends one position back (`seed_previous_token_head`) and writes that word's identity
                       (its embedding along the basis `ident`) into the residual along `prev`;
      layer 1, head 0: its query reads the word just read along `ident`, its key the previous word along `prev`,
                       in the slow rotary planes only (those that turn less than half a radian over the longest
                       prompt), so a match scores the same near or far; it writes the matched position's word back
                       along `ident`, which the tied lm_head reads as that word's logit.
    The other heads' outputs and the MLPs start at zero (their inputs still random): at Llama's random start the
    residual after layer 0 is 9x (tiny) and 25x (gpu) an embedding's length, and would drown the circuit."""
    import torch

    d, hd = config["hidden_size"], config["head_dim"]
    theta = config["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # per rotary plane
    slow = [i for i, t in enumerate(theta.tolist()) if t * config["max_position_embeddings"] < 0.5]
    if len(slow) < 4:
        fail(f"rope_theta {config['rope_theta']} leaves {len(slow)} slow rotary planes for the induction head")
    m = 2 * len(slow)  # the induction head's query and key dims: both dims of each slow plane
    gen = torch.Generator().manual_seed(seed + 1)
    basis, _ = torch.linalg.qr(torch.randn(d, 1 + m + hd, generator=gen, dtype=torch.float64))
    u, prev, ident = basis[:, 0], basis[:, 1:1 + m], basis[:, 1 + m:]  # orthonormal columns
    layers = model.model.layers
    with torch.no_grad():
        for layer in layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # Each word's embedding: its own random part r_t, orthogonal to u, then u, both of the rows' mean length:
        # every normalised embedding then has the same part along u, which the previous-token head reads (a part
        # that varies by word shifts that head's scores by more than the gap between its positions).
        emb = model.model.embed_tokens.weight
        r = emb.double() - torch.outer(emb.double() @ u, u)
        size = float(emb.norm(dim=1).mean())
        emb.copy_((r * (size / r.norm(dim=1, keepdim=True).clamp_min(1e-9)) + size * u).float())  # <|pad|>: 0
        # A normalised embedding is sqrt(d/2) (r_t/|r_t| + u): its identity along `ident` has components N(0, 1/2).
        seed_previous_token_head(model, config, u, theta, along=(d / 2) ** 0.5)
        attn0, attn1 = layers[0].self_attn, layers[1].self_attn
        attn0.v_proj.weight[:m] = (2 ** 0.5 * ident[:, :m].T).float()  # the previous word's identity, N(0, 1)
        attn0.v_proj.weight[m:hd] = 0
        strength = 4.0  # the previous word along `prev`, 4x the size of the word's own random part there
        attn0.o_proj.weight[:, :m] = (strength / d ** 0.5 * prev).float()
        # Layer 1's input: the residual r_t + u + strength * prev-signal, normalised; its scale `s1`.
        s1 = d ** 0.5 / (2 + strength ** 2 * m / d) ** 0.5
        match = 20.0  # a matching position's score, in nats; a random one's spread is about match / sqrt(m)
        gain = (match * hd ** 0.5 * d / (strength * m * s1 ** 2)) ** 0.5
        q, k = torch.zeros(hd, d, dtype=torch.float64), torch.zeros(hd, d, dtype=torch.float64)
        dims = [*slow, *(i + hd // 2 for i in slow)]
        q[dims] = gain * ident[:, :m].T
        k[dims] = gain * prev.T
        attn1.q_proj.weight[:hd] = q.float()
        attn1.k_proj.weight[:hd] = k.float()
        attn1.v_proj.weight[:hd] = (d ** 0.5 / s1 * ident.T).float()  # the matched word's identity, N(0, 1)
        # Written back along `ident` 4x the size of the current word's own logit (through the tied lm_head).
        attn1.o_proj.weight[:, :hd] = (4 * d ** 0.5 / hd * ident).float()


def seed_previous_token_head(model, config: dict, u, theta, along: float) -> None:
    """Layer 0's head 0 scores one position back highest: its query and key read only `u` (shared by all
    words), rotated so that in each of the fastest rotary planes the key leads the query by that plane's angle.
    With rotary positions and no biases such a head needs a component shared by all words."""
    import torch

    hd = config["head_dim"]
    planes = min(len(theta), 8)
    gap = 12.0  # score gap between one position back and the nearest others (0 and 2 back), in nats
    weight = gap / float((1 - theta[:planes].cos()).sum())
    a = (weight * hd ** 0.5) ** 0.5 / along
    q, k = torch.zeros(hd, dtype=torch.float64), torch.zeros(hd, dtype=torch.float64)
    q[:planes] = a
    k[:planes] = a * theta[:planes].cos()
    k[hd // 2:hd // 2 + planes] = a * theta[:planes].sin()
    attn = model.model.layers[0].self_attn
    attn.q_proj.weight[:hd] = torch.outer(q, u).float()
    attn.k_proj.weight[:hd] = torch.outer(k, u).float()


def step_length(seed: int, step: int, p: Preset, steps: int) -> int:
    """The curriculum: stage k of len(lengths) equal parts trains on lengths[:k+1], half of its steps on the
    newest; later stages keep the shorter lengths in the mix."""
    stage = min(len(p.lengths) - 1, step * len(p.lengths) // steps)
    rng = random.Random(f"{seed}/length/{step}")
    return p.lengths[stage] if rng.random() < 0.5 else rng.choice(p.lengths[:stage + 1])


def _batch(args: tuple[int, int, int, int, int, Preset]) -> tuple[int, list[list[int]], list[list[int]]]:
    seed, step, keys, values, length, p = args
    batch = max(1, p.tokens // length)
    ids, masks = task.training_batch(seed, step, task.Vocab(keys, values), length, batch)
    return length, ids, masks


def batches(seed: int, p: Preset, steps: int, workers: int):
    """Each step's batch; made `workers` ahead in other processes on a GPU (a batch is seeded by its step, so the
    order of making does not matter)."""
    jobs = ((seed, s, p.keys, p.values, step_length(seed, s, p, steps), p) for s in range(steps))
    if workers <= 1:
        yield from map(_batch, jobs)
        return
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(_batch, jobs, chunksize=1)


def train(p: Preset, config: dict, seed: int, steps: int, device: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cuda = device.startswith("cuda")
    if cuda:  # a CPU's kernels are deterministic already; the mode would only fill new tensors with NaN there
        # Strict: with warn_only, torch 2.11's cuDNN attention backward ran its non-deterministic algorithm (its
        # warning on the H100, 2026-12-07, the only one); strict, it picks its deterministic one.
        torch.use_deterministic_algorithms(True)
    else:  # the tiny preset's matrices are too small to share: 2 threads on 2 busy cores took 4x one thread's time
        torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config)).float()  # made on the CPU: the same start anywhere
    if p.seeded:
        seed_circuit(model, config, seed)
    model.to(device).train()
    decay = [w for n, w in model.named_parameters() if w.dim() >= 2]
    rest = [w for n, w in model.named_parameters() if w.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=p.lr, betas=(0.9, 0.98), eps=1e-8)
    warmup = max(1, steps // 20)

    def lr_at(step: int) -> float:  # linear warm-up, then cosine down to a tenth
        if step < warmup:
            return p.lr * (step + 1) / warmup
        return p.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))

    workers = min(6, (os.cpu_count() or 2) - 1) if cuda else 1
    t0, shown, log = time.monotonic(), 0.0, []
    for step, (length, ids, masks) in enumerate(batches(seed, p, steps, workers)):
        x = torch.tensor(ids, dtype=torch.long).to(device, non_blocking=True)
        m = torch.tensor(masks, dtype=torch.bool)[:, 1:].to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            hidden = model.model(input_ids=x[:, :-1]).last_hidden_state
            # Only the answer tokens are predicted (the rest of a stream is random): their logits alone.
            logits = model.lm_head(hidden[m]).float()
        target = x[:, 1:][m]
        loss = torch.nn.functional.cross_entropy(logits, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last = step == steps - 1
        if last or time.monotonic() - t0 - shown >= 10 or step % max(1, steps // 10) == 0:
            shown = time.monotonic() - t0
            acc = float((logits.argmax(-1) == target).float().mean())
            log.append({"step": step + 1, "length": length, "loss": round(loss.item(), 4), "token_acc": round(acc, 4),
                        "seconds": round(shown, 1)})
            print(f"make_known_answer_model: step {step + 1}/{steps}, length {length}, loss {loss.item():.4f}, "
                  f"answer tokens right {acc:.3f}, {shown:.0f} s", flush=True)
    return model, log, time.monotonic() - t0


def write_weights(model, folder: Path) -> int:
    import torch
    from safetensors.torch import save_file

    tied = model.config.tie_word_embeddings  # a tied lm_head is the embedding: not written twice
    state = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()
             if not (tied and k == "lm_head.weight")}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return sum(t.numel() for t in state.values())


# -- measuring --------------------------------------------------------------------------------------------------

def answer(model, prompt: list[int], n: int, device: str) -> tuple[list[int], float]:
    """Greedy decoding of `n` tokens, batch 1: the tokens and the smallest logprob margin between the chosen
    token and the runner-up over them."""
    import torch

    ids = torch.tensor([prompt], device=device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         output_scores=True, return_dict_in_generate=True)
    margins = []
    for scores in out.scores:
        top = scores[0].float().log_softmax(-1).topk(2).values
        margins.append(float(top[0] - top[1]))
    return out.sequences[0, len(prompt):].tolist(), min(margins)


def measure(folder: Path, p: Preset, vocab: task.Vocab, seed: int, device: str, gate: list[task.Sequence]) -> dict:
    """Accuracy of the saved folder as a server loads it: tokenizer and bf16 weights through transformers. Each
    prompt's text must tokenize back to exactly its ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16).to(device).eval()

    def judge(s: task.Sequence) -> tuple[bool, float]:
        text = vocab.text(s.prompt[1:])
        if tok(text).input_ids != s.prompt:
            fail(f"the tokenizer does not read back a prompt's ids: {text[:80]!r}")
        if tok.decode(s.expect, skip_special_tokens=True) != vocab.text(s.expect[:-1]):
            fail(f"the tokenizer does not decode an answer as written: {vocab.text(s.expect)!r}")
        with torch.no_grad():
            got, margin = answer(model, s.prompt, len(s.expect), device)
        return got == s.expect, margin

    held: dict[str, dict[str, dict]] = {kind: {} for kind in task.KINDS}
    for length in p.eval_lengths:
        results: dict[str, list[tuple[bool, float]]] = {kind: [] for kind in task.KINDS}
        for s in task.held_out(seed, "eval", vocab, length, p.eval_n):
            results[s.kind].append(judge(s))
        for kind, got in results.items():
            right = sum(ok for ok, _ in got)
            held[kind][str(length)] = {"n": len(got), "right": right, "accuracy": round(right / len(got), 4),
                                       "min_margin": round(min(m for _, m in got), 3)}
    judged = [judge(s) for s in gate]
    missed = [i for i, (ok, _) in enumerate(judged) if not ok]
    return {"held_out": held, "gate": {"prompts": len(gate), "right": len(gate) - len(missed), "missed": missed,
                                       "min_margin": round(min(m for _, m in judged), 3),
                                       "longest": max(len(s.prompt) for s in gate)}}


# -- gate prompts -----------------------------------------------------------------------------------------------

def gate_prompts(p: Preset, seed: int) -> list[task.Sequence]:
    """The gate's prompts: for each (length, count) of the preset, far look-ups and copies alternating; then the
    near look-ups."""
    vocab = vocab_of(p)
    out: list[task.Sequence] = []
    for length, count in p.gate:
        out += task.held_out(seed, "gate", vocab, length, count)
    for length, count in p.gate_near:
        out += task.near_lookups(seed, "gate", vocab, length, count)
    return out


def gate_fragment(name: str, seed: int) -> str:
    """gate-prompts.yaml: a `gate:` section to paste into a space. Strings are JSON-quoted (valid YAML). The gate
    matches `expect` as a case-insensitive substring of the output (tuner/trial/_gate.py): the values are
    fixed-width words, so "v0020" is found only where the model wrote that word."""
    p = PRESETS[name]
    vocab = vocab_of(p)
    prompts = gate_prompts(p, seed)
    lengths = ", ".join(f"{n} of ~{length}" for length, n in p.gate)
    lines = [f"# Gate prompts of the known-answer model: scripts/make_known_answer_model.py --preset {name} "
             f"--seed {seed}.",
             f"# {len(prompts)} prompts ({lengths} tokens; the longest "
             f"{max(len(s.prompt) for s in prompts)} with BOS): "
             "far look-ups and copies alternating" + (
                 f"; then near look-ups ({', '.join(f'{n} of ~{length}' for length, n in p.gate_near)}), their "
                 "values past the first 2,048-token chunk." if p.gate_near else "."),
             "# Sent one by one and then all together as one batch (batch-consistency).",
             "gate:", "  prompts:"]
    for s in prompts:
        lines.append(f"    - {{prompt: {json.dumps(vocab.text(s.prompt[1:]))}, "
                     f"expect: {json.dumps(vocab.text(s.expect[:-1]))}}}")
    lines += ["  checks: [known-answer, finite-logprobs, degenerate-text, logprob-consistency, determinism,",
              "           baseline-agreement, batch-consistency, long-context-consistency]",
              "  max-new-tokens: 16", ""]
    return "\n".join(lines)


def probe_rows(name: str, seed: int) -> str:
    """The probe's prompts for a space of this model (`probe.dataset`, JSONL): look-ups and copies of ~PROBE_LENGTH
    tokens, each asking for its answer's length (values and <eos>). The probe's own random English words are not
    this model's language: on them the GPU model wrote '; ; ; ;' and the healthy baseline failed its check wave as
    garbage (docs/gpu-sglang-0517-faults, 2026-12-08). On its own task it writes its answers."""
    p = PRESETS[name]
    vocab = vocab_of(p)
    rows = task.held_out(seed, "probe", vocab, PROBE_LENGTH, PROBE_ROWS)
    return "".join(json.dumps({"prompt": vocab.text(s.prompt[1:]), "output_len": s.answer}) + "\n" for s in rows)


# -- main -------------------------------------------------------------------------------------------------------

def recipe(name: str, seed: int, steps: int, device: str) -> dict:
    # "start": a folder trained from Llama's random start (before seed_circuit) is not this recipe's
    return {"preset": name, "seed": seed, "steps": steps, "device": device.split(":")[0], "start": "circuit"}


def made_by(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "config.json").read_text()).get(MARKER)
    except (OSError, ValueError):
        return None


@contextmanager
def building(out: Path):
    """A folder beside `out` to write into, which replaces `out` once whole; removed if writing fails."""
    partial = out.parent / f".{out.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)


def check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"--device {device}: torch {torch.__version__} sees no CUDA device (use --device cpu)")
    if not device.startswith(("cuda", "cpu")):
        fail(f"--device {device}: use cuda or cpu")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, nargs="?", help="the model folder to write")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    parser.add_argument("--device", help="cuda or cpu (default: the preset's)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--print-gate", action="store_true", help="print the gate fragment and exit (no training)")
    parser.add_argument("--print-probe", action="store_true",
                        help="print the probe's prompts (JSONL for probe.dataset) and exit (no training)")
    parser.add_argument("--tokenizer-only", action="store_true",
                        help="write the tokenizer files and gate-prompts.yaml alone (no training, no torch): enough "
                             "for a dry run (--simulate) of a space with this model")
    args = parser.parse_args(argv)
    p = PRESETS[args.preset]
    if args.print_gate:
        sys.stdout.write(gate_fragment(args.preset, args.seed))
        return 0
    if args.print_probe:
        sys.stdout.write(probe_rows(args.preset, args.seed))
        return 0
    if args.out_dir is None:
        fail("name the model folder to write (or pass --print-gate)")
    steps = p.steps if args.steps is None else args.steps
    if steps < 1:
        fail(f"--steps {steps}: train at least one step")
    device = args.device or p.device
    out: Path = args.out_dir
    want = recipe(args.preset, args.seed, steps, device)
    if made_by(out) == want:
        print(f"make_known_answer_model: {out} already holds {want}")
        return 0
    if out.exists() and not out.is_dir():
        fail(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and made_by(out) is None and not (out / "gate-prompts.yaml").exists():
        fail(f"{out} holds other files; remove it or name an empty or new folder")
    if not out.parent.is_dir():
        fail(f"{out.parent} does not exist")
    vocab = vocab_of(p)
    if args.tokenizer_only:
        with building(out) as partial:
            write_tokenizer(partial, vocab, p)
            (partial / "gate-prompts.yaml").write_text(gate_fragment(args.preset, args.seed))
        print(f"make_known_answer_model: wrote {out}: the tokenizer ({len(vocab.tokens)} words) and gate-prompts.yaml")
        return 0
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA starts
    check_device(device)

    gate = gate_prompts(p, args.seed)
    config = model_config(p, vocab)
    t0 = time.monotonic()
    print(f"make_known_answer_model: {args.preset}: {p.layers} layers, hidden {p.hidden}, vocab {len(vocab.tokens)}, "
          f"{steps} steps on {device}, lengths {'/'.join(map(str, p.lengths))}", flush=True)
    model, log, seconds = train(p, config, args.seed, steps, device)
    with building(out) as partial:
        result, params = write_model(partial, model, config, p, vocab, gate, args, want, log, seconds, device, argv)
    del model
    return report(out, p, result, params, device, t0)


def write_model(partial: Path, model, config: dict, p: Preset, vocab: task.Vocab, gate: list[task.Sequence], args,
                want: dict, log: list, seconds: float, device: str, argv) -> tuple[dict, int]:
    """The folder's files, then its accuracy as loaded from them; config.json names its recipe only once the model
    answers every gate prompt (else the next call trains again)."""
    write_tokenizer(partial, vocab, p)
    (partial / "gate-prompts.yaml").write_text(gate_fragment(args.preset, args.seed))
    (partial / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
         "pad_token_id": config["pad_token_id"], "do_sample": False}, indent=1) + "\n")
    (partial / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    params = write_weights(model, partial)
    t1 = time.monotonic()
    result = measure(partial, p, vocab, args.seed, device, gate)
    summary = {"recipe": want, "command": " ".join(["make_known_answer_model.py", *(argv or sys.argv[1:])]),
               "parameters": params, "train_seconds": round(seconds, 1),
               "measure_seconds": round(time.monotonic() - t1, 1), "preset": asdict(p), "training": log, **result}
    (partial / "accuracy.json").write_text(json.dumps(summary, indent=1) + "\n")
    if not result["gate"]["missed"]:
        config[MARKER] = want
        (partial / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return result, params


def report(out: Path, p: Preset, result: dict, params: int, device: str, t0: float) -> int:
    print(f"make_known_answer_model: greedy accuracy on held-out prompts (transformers, batch 1, bf16, {device}):")
    print("  length " + "".join(f"{kind:>18}" for kind in task.KINDS))
    for length in p.eval_lengths:
        cells = [result["held_out"][kind][str(length)] for kind in task.KINDS]
        print(f"  {length:>6} " + "".join(f"{c['right']:>5}/{c['n']:<3} {c['accuracy']:>6.1%}  " for c in cells))
    g = result["gate"]
    print(f"make_known_answer_model: gate prompts {g['right']}/{g['prompts']} right (smallest margin "
          f"{g['min_margin']:.2f} nats, longest {g['longest']} tokens)")
    print(f"make_known_answer_model: wrote {out}: {params / 1e6:.1f} M parameters, {time.monotonic() - t0:.0f} s")
    if g["missed"]:
        print(f"make_known_answer_model: the model misses gate prompts {g['missed']} (figures in "
              f"{out / 'accuracy.json'}); the recipe answered every seed tried, so report it with that file",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
