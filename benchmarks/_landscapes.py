"""A seeded generator of simulator landscapes: a profile (tuner/sim/PROFILES.md) and a matching space.

`make_landscape(seed)` draws, deterministically per seed:

- hardware from GPUS (real parts: memory as torch reports it, HBM bandwidth, SM, dense TFLOP/s, NVLink or
  PCIe with an effective all-reduce bandwidth and latency) and a GPU count of 1/2/4/8 that the model needs or
  twice/four times that (so that data parallelism has room);
- a model from FAMILIES (real shapes: dense GQA, MoE, MLA) in a weight dtype the GPU computes in; its size
  decides which tp/pp/ep fit;
- backend speed tables (attention, MoE runner) around nominal speeds, and health rules: what the hardware
  refuses (fa3 off Hopper, trtllm/fa4 off Blackwell, MLA kernels on GQA models) plus random ones per
  backend (crash on start, NaN only above a batch size, crash at graph capture, garbage, logprob drift, and
  interactions with the KV dtype or torch.compile); OOM is left to the memory physics;
- performance, memory and start-up constants in plausible ranges;
- a space of 6-14 parameters drawn from a pool of SGLang 0.5.23 flags (always the attention backend, the memory
  fraction, CUDA graphs and their max batch size, max running requests, tp where there are GPUs to split),
  with the constraints the flags need (tp x dp <= gpus, ep and attention DP divide tp, graph max batch <= max
  running requests), a probe workload, and a baseline that runs (checked with predict(); a landscape whose
  obvious first deployment fails gets a random valid point that runs, else the seed draws again); a landscape
  where none of 24 random points beats the baseline by 5% draws again too (nothing to search for).

`make_landscape(seed, host=Host(gpu, tables), model=family)` draws a landscape of a *family* (benchmarks/transfer.py):
the GPU and model are given, and each backend's speed and health come from its own generator seeded by `tables`
(one engine version's kernels on that GPU), so landscapes of one host share them whatever their model.

`write_landscape(seed)` writes `<name>.profile.yaml` and `<name>.space.yaml` under .cache/landscapes/ (read by
tuner.sim._profile.load_profile and tuner.spec._spec.load_spec like the shipped files).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LANDSCAPE_DIR = REPO / ".cache" / "landscapes"
SGLANG_VERSION = "0.5.23"
GiB = float(1 << 30)


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    memory_gb: float  # GiB, as torch reports the total
    sm: int
    hbm_gbs: float
    tflops: dict[str, float]  # dense TFLOP/s by compute dtype
    link: str  # nvlink | pcie
    link_gbs: float  # effective all-reduce bus bandwidth per GPU
    allreduce_us: float  # NCCL, small message
    custom_allreduce_us: float | None  # SGLang's custom all-reduce needs P2P over NVLink
    graph_allreduce_factor: float  # NCCL inside a CUDA graph (PCIe loses the proxy-thread pipelining)
    launch_us: float


GPUS = (
    Gpu("NVIDIA H100 80GB HBM3", 79.1, 90, 3350, {"bf16": 989, "fp8": 1979}, "nvlink", 360, 18, 7, 1.0, 4.5),
    Gpu("NVIDIA H200", 139.8, 90, 4800, {"bf16": 989, "fp8": 1979}, "nvlink", 380, 18, 7, 1.0, 4.5),
    Gpu("NVIDIA B200", 178.4, 100, 8000, {"bf16": 2250, "fp8": 4500, "fp4": 9000}, "nvlink", 720, 14, 5, 1.0, 4.0),
    Gpu("NVIDIA A100-SXM4-80GB", 79.2, 80, 2039, {"bf16": 312}, "nvlink", 230, 22, 9, 1.0, 5.0),
    Gpu("NVIDIA H100 PCIe", 79.1, 90, 2000, {"bf16": 756, "fp8": 1513}, "pcie", 25, 60, None, 1.8, 4.5),
    Gpu("NVIDIA L40S", 44.4, 89, 864, {"bf16": 362, "fp8": 733}, "pcie", 10, 100, None, 2.2, 5.0),
    Gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.59, 120, 1790, {"bf16": 500, "fp8": 1000, "fp4": 2000},
        "pcie", 12, 120, None, 2.55, 5.0),
)


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    architecture: str
    params_b: float
    active_b: float
    layers: int
    hidden: int
    vocab: int
    kv_heads: int = 8
    head_dim: int = 128
    mla_kv_dim: int = 0  # MLA: latent + rope elements per token per layer (replicated over tp)
    moe: tuple[int, int, float] | None = None  # (experts, top_k, share of the weights in routed experts)
    context: int = 131072

    @property
    def attention(self) -> str:
        return "mla" if self.mla_kv_dim else "mha"


FAMILIES = (
    Family("Llama-3.1-8B-Instruct", "LlamaForCausalLM", 8.03, 8.03, 32, 4096, 128256),
    Family("Qwen2.5-32B-Instruct", "Qwen2ForCausalLM", 32.8, 32.8, 64, 5120, 152064),
    Family("Llama-3.1-70B-Instruct", "LlamaForCausalLM", 70.6, 70.6, 80, 8192, 128256),
    Family("Mixtral-8x7B-Instruct-v0.1", "MixtralForCausalLM", 46.7, 12.9, 32, 4096, 32000, moe=(8, 2, 0.96),
           context=32768),
    Family("Qwen3-30B-A3B", "Qwen3MoeForCausalLM", 30.5, 3.3, 48, 2048, 151936, kv_heads=4, moe=(128, 8, 0.95),
           context=40960),
    Family("DeepSeek-V2-Lite-Chat", "DeepseekV2ForCausalLM", 15.7, 2.4, 27, 2048, 102400, mla_kv_dim=576,
           moe=(64, 6, 0.9), context=32768),
    Family("DeepSeek-V3", "DeepseekV3ForCausalLM", 671, 37, 61, 7168, 129280, mla_kv_dim=576, moe=(256, 8, 0.97),
           context=163840),
)

# Weight dtypes: bytes per parameter, the compute dtype (a key of Gpu.tflops), the lowest SM that runs it.
DTYPES = {"bf16": (2.0, "bf16", 0), "fp8": (1.0, "fp8", 89), "fp4": (0.56, "fp4", 100)}
QUANTIZATION = {"fp8": "fp8", "fp4": "modelopt_fp4"}  # the quant_method its config.json would name

# Attention backends: nominal speed, the SMs whose kernels exist, whether they serve MHA and/or MLA models.
ATTENTION = {
    "fa3": (1.0, (90,), ("mha", "mla")),
    "flashinfer": (0.95, (80, 89, 90, 100, 120), ("mha", "mla")),
    "triton": (0.7, (80, 89, 90, 100, 120), ("mha", "mla")),
    "flex_attention": (0.3, (80, 89, 90, 100, 120), ("mha",)),
    "torch_native": (0.1, (80, 89, 90, 100, 120), ("mha",)),
    "trtllm_mha": (1.05, (100,), ("mha",)),
    "fa4": (1.1, (100,), ("mha",)),
    "flashmla": (1.1, (90, 100), ("mla",)),
    "trtllm_mla": (1.05, (100, 120), ("mla",)),
    "cutedsl_mla": (1.0, (100,), ("mla",)),
}
# MoE runners: nominal speed, the SMs that run them.
MOE_RUNNERS = {
    "triton": (1.0, (80, 89, 90, 100, 120)),
    "triton_kernel": (0.9, (89, 90, 100, 120)),
    "deep_gemm": (1.2, (90, 100)),
    "flashinfer_cutlass": (1.15, (100, 120)),
    "cutlass": (0.95, (90, 100, 120)),
}
# Random health of a backend that runs on this hardware: (effect, weight).
HEALTH_DRAWS = (("fine", 0.55), ("nan_when_batch_over", 0.13), ("crash_at_capture", 0.1), ("garbage", 0.06),
                ("crash_on_start", 0.08), ("logprob_drift", 0.04), ("hang_at_capture", 0.04))
MESSAGES = {
    "crash_on_start": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "crash_at_capture": "CUDA error: operation not permitted when stream is capturing",
    "hang_at_capture": None,
}
POWERS = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Host:
    """What landscapes of one family share: the GPU, and one engine version's backend speed and health tables
    (`tables` seeds each backend's draws, so they do not depend on which model is served)."""

    gpu: Gpu
    tables: str


# -- drawing ------------------------------------------------------------------------------------------------

def _pick(rng: random.Random, table: tuple | list) -> Any:
    return table[rng.randrange(len(table))]


def _weighted(rng: random.Random, draws: tuple[tuple[str, float], ...]) -> str:
    x = rng.random() * sum(w for _, w in draws)
    for name, w in draws:
        x -= w
        if x <= 0:
            return name
    return draws[-1][0]


def _hardware_and_model(rng: random.Random, host_gpu: Gpu | None = None,
                        model: Family | None = None) -> tuple[Gpu, Family, str, int, int]:
    """A GPU, a model, its weight dtype, the GPUs it needs at least, and the host's GPU count (the GPU and the
    model drawn unless given)."""
    for _ in range(1000):
        gpu, family = host_gpu or _pick(rng, GPUS), model or _pick(rng, FAMILIES)
        dtypes = [d for d, (_, compute, sm) in DTYPES.items() if gpu.sm >= sm and compute in gpu.tflops]
        if family.params_b < 20:
            dtypes = [d for d in dtypes if d != "fp4"]  # nobody ships a small model in fp4
        dtype = _pick(rng, dtypes)
        weights = family.params_b * 1e9 * DTYPES[dtype][0] / GiB
        need = next((n for n in POWERS if weights / n < 0.62 * gpu.memory_gb), None)
        if need is None:
            continue
        counts = [n for n in POWERS if need <= n <= need * 4]
        return gpu, family, dtype, need, _pick(rng, counts)
    raise ValueError(f"{model.name if model else 'no model'} fits on no count of {host_gpu.name if host_gpu else 'GPU'}s")


def fits(gpu: Gpu, model: Family) -> bool:
    """Whether some weight dtype of the model fits on at most 8 of these GPUs."""
    try:
        _hardware_and_model(random.Random(0), gpu, model)
    except ValueError:
        return False
    return True


def _kv_bytes(family: Family) -> dict[str, float]:
    if family.attention == "mla":
        bf16 = family.mla_kv_dim * 2.0
        return {"bfloat16": bf16, "fp8_e4m3": family.mla_kv_dim * 1.0 + 16}
    bf16 = 2.0 * family.kv_heads * family.head_dim * 2.0
    return {"bfloat16": bf16, "fp8_e4m3": bf16 / 2, "fp8_e5m2": bf16 / 2}


def _model(rng: random.Random, family: Family, dtype: str) -> dict[str, Any]:
    weights = family.params_b * 1e9 * DTYPES[dtype][0] / GiB
    replicated = family.vocab * family.hidden * 2 * 2.0 / GiB / 8  # a share of the embeddings stays whole
    model: dict[str, Any] = {
        "name": family.name, "architecture": family.architecture, "params_b": family.params_b,
        "active_params_b": family.active_b, "weight_gb_sharded": round(weights - replicated, 2),
        "weight_gb_replicated": round(replicated, 2), "layers": family.layers, "hidden_size": family.hidden,
        "vocab_size": family.vocab, "context_length": family.context, "attention": family.attention,
        "kv_heads": family.kv_heads, "kv_bytes_per_token_per_layer": _kv_bytes(family),
        "default_kv_dtype": "bfloat16", "compute_dtype": DTYPES[dtype][1], "quantization": QUANTIZATION.get(dtype),
        "kernels_per_layer": rng.choice((12, 14, 16)) + (10 if family.moe else 0),
        "attn_flops_per_token_ctx": 4.0 * family.hidden * family.layers,
        "activation_gb_per_1k_tokens": round(0.02 * family.hidden / 1024 * rng.uniform(0.8, 1.4), 3),
        "decode_activation_mb_per_req": round(family.hidden / 8192 * rng.uniform(0.8, 2.0), 2),
    }
    if family.moe:
        experts, top_k, share = family.moe
        model["moe"] = {"experts": experts, "top_k": top_k, "expert_weight_fraction": share}
    return model


def _health_rule(rng: random.Random, when: dict[str, Any], what: str) -> dict[str, Any] | None:
    effect = _weighted(rng, HEALTH_DRAWS)
    if effect == "fine":
        return None
    rule: dict[str, Any] = {"when": when, "effect": effect}
    if effect == "nan_when_batch_over":
        rule["value"] = rng.choice((8, 16, 32, 64, 128))
        rule["symptom"] = rng.choice(("token0", "out_of_vocab"))
    elif effect == "logprob_drift":
        rule["value"] = round(rng.uniform(0.2, 0.6), 2)
    if effect in MESSAGES:
        rule["message"] = MESSAGES[effect] or None
        if rule["message"] is None:
            del rule["message"]
        elif effect == "crash_on_start":
            rule["message"] = f"RuntimeError: {what}: CUDA error: an illegal memory access was encountered"
    return rule


def _backends(rng: random.Random, gpu: Gpu, family: Family,
              tables: str | None = None) -> tuple[dict, dict, list[dict], list[str], list[str]]:
    """Speed tables, health rules, and the backends a space offers (some of which this hardware refuses). With
    `tables`, each backend's speed and health come from a generator of its own (Host), else from `rng`."""
    def draws(name: str) -> random.Random:
        return rng if tables is None else random.Random(f"{tables}-{name}")

    attention, moe_runners, health = {}, {}, []
    offered_attn, offered_moe = [], []
    kind = family.attention
    for name, (speed, sms, kinds) in ATTENTION.items():
        r = draws(name)
        attention[name] = round(speed * math.exp(r.gauss(0.0, 0.2)), 3)
        if kind not in kinds:
            health.append({"when": {"decode_backend": name}, "effect": "crash_on_start",
                           "message": f"AssertionError: {name} does not support {kind.upper()} attention"})
        elif gpu.sm not in sms:
            health.append({"when": {"decode_backend": name}, "effect": "crash_on_start",
                           "message": f"RuntimeError: {name} has no kernels for SM{gpu.sm}"})
        else:
            offered_attn.append(name)
            rule = _health_rule(r, {"decode_backend": name}, name)
            if rule:
                health.append(rule)
    # A backend that runs badly with an FP8 KV cache or under torch.compile: interactions, not single flags.
    for extra in ({"kv_dtype": "fp8_e4m3"}, {"torch_compile": True}):
        r = draws(str(extra))
        if r.random() < 0.5:
            name = _pick(r, offered_attn)
            rule = _health_rule(r, {"decode_backend": name, **extra}, name)
            if rule:
                health.append(rule)
    if family.moe:
        for name, (speed, sms) in MOE_RUNNERS.items():
            r = draws(f"moe-{name}")
            moe_runners[name] = round(speed * math.exp(r.gauss(0.0, 0.2)), 3)
            if gpu.sm not in sms:
                health.append({"when": {"moe_runner": name}, "effect": "crash_on_start",
                               "message": f"RuntimeError: MoE runner {name} is not supported on SM{gpu.sm}"})
            else:
                offered_moe.append(name)
                if name != "triton":  # the auto choice stays sane, as SGLang's default is meant to
                    rule = _health_rule(r, {"moe_runner": name}, f"MoE runner {name}")
                    if rule:
                        health.append(rule)
        if gpu.link == "pcie":  # DeepEP's kernels need NVLink (or RDMA) between the GPUs
            health.append({"when": {"moe_a2a": "deepep"}, "effect": "crash_on_start",
                           "message": "RuntimeError: DeepEP requires NVLink or RDMA between GPUs; found PCIe"})
    # The space lists the backends that run here, plus one or two that do not (a person does not always know).
    refused = [n for n in ATTENTION if n not in offered_attn and kind in ATTENTION[n][2]]
    attn_choices = rng.sample(offered_attn, min(len(offered_attn), rng.randint(2, 4)))
    attn_choices += rng.sample(refused, min(len(refused), rng.randint(0, 1)))
    moe_choices = ["auto"] + rng.sample([m for m in MOE_RUNNERS if m != "triton"], rng.randint(1, 3)) \
        if family.moe else []
    return attention, moe_runners, health, attn_choices, moe_choices


def _profile(rng: random.Random, seed: int, name: str, gpu: Gpu, family: Family, dtype: str,
             gpus: int, tables: str | None = None) -> tuple[dict[str, Any], list[str], list[str], str]:
    model = _model(rng, family, dtype)
    attention, moe_runners, health, attn_choices, moe_choices = _backends(rng, gpu, family, tables)
    # What SGLang picks when no backend is given: the fastest on paper that this hardware runs and that has no
    # drawn problem of its own (a default is a tested path), else the fastest that runs; the space offers it.
    runs_here = [n for n in ATTENTION if family.attention in ATTENTION[n][2] and gpu.sm in ATTENTION[n][1]]
    troubled = {r["when"]["decode_backend"] for r in health if "decode_backend" in r["when"]}
    auto_attn = max([n for n in runs_here if n not in troubled] or runs_here, key=lambda n: ATTENTION[n][0])
    if auto_attn not in attn_choices:
        attn_choices.insert(0, auto_attn)
    weights = model["weight_gb_sharded"] + model["weight_gb_replicated"]
    profile = {
        "name": name,
        "description": f"generated landscape {seed}: {family.name} ({dtype}) on {gpus}x {gpu.name}",
        "sglang_version": SGLANG_VERSION, "time_scale": 1.0,
        "hardware": {
            "gpu_name": gpu.name, "gpu_count": gpus, "memory_per_gpu_gb": gpu.memory_gb, "sm": gpu.sm,
            "hbm_bandwidth_gbs": gpu.hbm_gbs, "peak_tflops": dict(gpu.tflops), "interconnect": gpu.link,
            "interconnect_bandwidth_gbs": gpu.link_gbs, "allreduce_latency_us": gpu.allreduce_us,
            "custom_allreduce_latency_us": gpu.custom_allreduce_us,
            "graph_allreduce_factor": gpu.graph_allreduce_factor, "kernel_launch_us": gpu.launch_us,
            "graph_replay_us": rng.choice((20, 25, 30)), "graph_node_us": 0.2,
            "context_overhead_gb": round(rng.uniform(0.8, 1.4), 2),
        },
        "model": model,
        "startup": {
            "process_s": round(rng.uniform(5, 15), 1), "init_distributed_s": round(rng.uniform(2, 20), 1),
            # Every rank reads its shard at a few GB/s from local NVMe / page cache.
            "weight_load_s": round(weights / gpus / rng.uniform(1.5, 4.0), 1),
            "kv_alloc_s": round(rng.uniform(0.5, 2.0), 1), "capture_s_per_size": round(rng.uniform(0.3, 2.5), 2),
            "torch_compile_s": round(rng.uniform(30, 240)), "torch_compile_s_per_size": round(rng.uniform(1, 6), 1),
            "server_start_s": round(rng.uniform(1, 3), 1),
        },
        "performance": {
            "hbm_efficiency": round(rng.uniform(0.7, 0.85), 3),
            "moe_efficiency": round(rng.uniform(0.25, 0.9), 3) if family.moe else 1.0,
            "mfu_decode": round(rng.uniform(0.35, 0.55), 3), "mfu_prefill": round(rng.uniform(0.45, 0.7), 3),
            "attention_backends": attention, "moe_runner_backends": moe_runners, "gemm_backends": {"auto": 1.0},
            "torch_compile_kernel_factor": round(rng.uniform(0.6, 0.85), 3),
            "torch_compile_compute_factor": round(rng.uniform(0.9, 1.0), 3),
            "scheduler_base_us": round(rng.uniform(150, 400)), "scheduler_per_req_us": round(rng.uniform(8, 16), 1),
            "prefill_base_ms": round(rng.uniform(1.5, 5.0), 2),
            "dp_attention_comm_factor": round(rng.uniform(1.1, 1.5), 2),
            "moe_slice_efficiency": round(rng.uniform(0.8, 1.0), 3),
        },
        "memory": {
            "graph_fixed_gb": round(rng.uniform(0.2, 0.5), 2),
            "graph_per_size_gb": round(rng.uniform(0.01, 0.04) * family.hidden / 4096, 4),
            "graph_per_bs_gb": round(rng.uniform(0.004, 0.025) * family.hidden / 4096, 4),
            "torch_compile_gb": round(rng.uniform(0.3, 0.6), 2),
            "capture_workspace_gb": round(rng.uniform(0.2, 0.3), 2),
        },
        "noise": {"relative": 0.02, "logprob_jitter": 0.0005},
        "auto": {"attention_backend": auto_attn, "sampling_backend": "flashinfer", "page_size": 1,
                 "moe_runner_backend": "triton", "cuda_graph_backend_prefill": "disabled"},
        "overrides": [],
        "health": health,
        "faults": {},
    }
    return profile, attn_choices, moe_choices, auto_attn


def _grid_float(low: float, high: float, step: float, want: float) -> float:
    k = round((min(max(want, low), high) - low) / step)
    return round(low + k * step, 6)


def _space(rng: random.Random, name: str, family: Family, gpus: int, attn_choices: list[str],
           moe_choices: list[str], auto_attn: str) -> dict[str, Any]:
    params: dict[str, dict[str, Any]] = {}
    baseline: dict[str, Any] = {}
    constraints: list[dict[str, Any]] = []
    sizes = [n for n in POWERS if n <= gpus]

    def add(flag: str, spec: dict[str, Any], base: Any) -> None:
        params[flag] = spec
        baseline[flag] = base

    # Always: the knobs every SGLang tuning guide names first.
    if gpus > 1:
        add("tp-size", {"type": "categorical", "choices": sizes}, gpus)
    add("attention-backend", {"type": "categorical", "choices": attn_choices}, auto_attn)
    low, high = rng.choice((0.7, 0.74, 0.8)), rng.choice((0.9, 0.92, 0.94))  # whole steps of 0.02 apart
    add("mem-fraction-static", {"type": "float", "low": low, "high": high, "step": 0.02},
        _grid_float(low, high, 0.02, 0.86))
    add("disable-decode-cuda-graph", {"type": "bool"}, False)
    graph_sizes = sorted(rng.sample((8, 16, 32, 64, 128, 256, 512), rng.randint(3, 5)))
    add("cuda-graph-max-bs-decode", {"type": "categorical", "choices": graph_sizes,
                                     "when": {"disable-decode-cuda-graph": False}},
        min(graph_sizes, key=lambda b: abs(b - 64)))
    running = sorted(rng.sample((16, 32, 64, 128, 256, 512), rng.randint(3, 5)))
    add("max-running-requests", {"type": "categorical", "choices": running},
        max([r for r in running if r >= baseline["cuda-graph-max-bs-decode"]] or running))
    constraints.append({"at-most": ["cuda-graph-max-bs-decode", "max-running-requests"]})

    # Optional: drawn from the pool until the space has its size.
    pool: list[tuple[str, dict[str, Any], Any]] = [
        ("kv-cache-dtype", {"type": "categorical", "choices": ["auto", "fp8_e4m3"]}, "auto"),
        ("chunked-prefill-size", {"type": "categorical", "choices": [2048, 4096, 8192, 16384]}, 8192),
        ("schedule-conservativeness", {"type": "float", "low": 0.3, "high": 1.5, "step": 0.1}, 1.0),
        ("schedule-policy", {"type": "categorical", "choices": ["fcfs", "lpm"]}, "fcfs"),
        ("enable-torch-compile", {"type": "bool"}, False),
        ("enable-mixed-chunk", {"type": "bool"}, False),
        ("disable-overlap-schedule", {"type": "bool"}, False),
        ("num-continuous-decode-steps", {"type": "categorical", "choices": [1, 2, 4]}, 1),
    ]
    if gpus > 1:
        pool += [("dp-size", {"type": "categorical", "choices": sizes}, 1),
                 ("disable-custom-all-reduce", {"type": "bool"}, False)]
    if family.moe:
        pool.append(("moe-runner-backend", {"type": "categorical", "choices": moe_choices}, "auto"))
        if gpus > 1:
            pool += [("ep-size", {"type": "categorical", "choices": sizes}, 1),
                     ("attn-dp-size", {"type": "categorical", "choices": sizes}, 1),
                     # Tokens travel to their experts by all-to-all only with an a2a backend.
                     ("moe-a2a-backend", {"type": "categorical", "choices": ["none", "deepep"]}, "none")]
    rng.shuffle(pool)
    want = rng.randint(6, 14)
    for flag, spec, base in pool:
        if len(params) >= want:
            break
        add(flag, spec, base)
    if "dp-size" in params:
        constraints.append({"product": ["tp-size", "dp-size"], "max": "gpus"})
    elif "tp-size" in params:
        constraints.append({"product": ["tp-size"], "max": "gpus"})
    for flag in ("ep-size", "attn-dp-size"):
        if flag in params:
            constraints.append({"divides": [flag, "tp-size"]})
    return {"params": params, "constraints": constraints, "baseline": baseline}


def _probe(rng: random.Random) -> dict[str, Any]:
    concurrency = rng.choice((16, 32, 64, 128, 256))
    return {"concurrency": [concurrency], "requests": concurrency * rng.choice((1, 2)),
            "input-len": rng.choice((256, 512, 1024, 2048)), "output-len": rng.choice((32, 64, 128)),
            "warmup": 2}


def landscape_name(seed: int) -> str:
    return f"gen-{seed:04d}"


def make_landscape(seed: int, host: Host | None = None,
                   model: Family | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The profile and the space of landscape `seed` (the same for the same seed, on any machine); on `host`
    (its GPU and backend tables) and of `model` where given."""
    for attempt in range(100):
        rng = random.Random(f"landscape-{seed}-{attempt}" if host is None else
                            f"landscape-{host.tables}-{seed}-{attempt}")
        gpu, family, dtype, need, gpus = _hardware_and_model(rng, host and host.gpu, model)
        name = landscape_name(seed)
        profile, attn_choices, moe_choices, auto_attn = _profile(rng, seed, name, gpu, family, dtype, gpus,
                                                                 host and host.tables)
        drawn = _space(rng, name, family, gpus, attn_choices, moe_choices, auto_attn)
        space = {
            "name": name, "engine": "sglang",
            "help": profile["description"],
            "server": {"command": ["python", "-m", "sglang.launch_server"], "model-path": f"/models/{family.name}",
                       "gpus": gpus, "startup-timeout": 3600, "stall-timeout": 900},
            **drawn, "probe": _probe(rng), "objective": {"metric": "output_throughput"},
        }
        baseline = _running_baseline(rng, profile, space)
        if baseline is not None:
            space["baseline"] = baseline
            if _headroom(random.Random(f"headroom-{seed}-{attempt}"), profile, space):
                _check_flags(space)
                return profile, space
    raise RuntimeError(f"landscape {seed}: no draw with a baseline that runs")


def _evaluator(profile: dict[str, Any], space: dict[str, Any]) -> tuple[Any, Any]:
    """(the parsed space, a function: point -> noiseless output tok/s, None when it breaks a constraint or fails)."""
    from tuner.spec._spec import parse_spec
    from tuner.engines._base import flag_argv
    from tuner.sim._predict import predict
    from tuner.sim._profile import profile_from_mapping

    sim = profile_from_mapping(profile, profile["name"])
    spec = parse_spec(yaml.safe_dump(space, sort_keys=False), space["name"])
    probe = spec.probe

    def value(point: dict[str, Any]) -> float | None:
        if spec.space.violations(point):
            return None
        p = predict(sim, flag_argv(spec.space.config(point).flags), probe.concurrency[0], probe.input_len,
                    probe.output_len, num_requests=probe.requests)
        return p.output_tok_s if p.status == "ok" else None

    return spec.space, value


@functools.cache
def _help_flags() -> Any:
    from tuner.versions._check import parse_help
    from tuner.flags import build_parser
    return parse_help(build_parser(SGLANG_VERSION).format_help())


def _check_flags(space: dict[str, Any]) -> None:
    """The check `tuner check --simulate` runs (every flag and choice against the server's --help): a generated
    space that fails it is a bug in the tables here, not a landscape."""
    from tuner.versions._check import check_flags
    from tuner.spec._spec import parse_spec
    report = check_flags(parse_spec(yaml.safe_dump(space, sort_keys=False), space["name"]), _help_flags())
    if report.errors or report.warnings:
        raise AssertionError(f"{space['name']}: {'; '.join(report.errors + report.warnings)}")


def _running_baseline(rng: random.Random, profile: dict[str, Any], space: dict[str, Any]) -> dict[str, Any] | None:
    """The drawn baseline if it runs (predict() says ok), else a random valid point that does, else None."""
    parsed, value = _evaluator(profile, space)
    if value(space["baseline"]) is not None:
        return space["baseline"]
    for _ in range(30):
        point = parsed.random_sample(rng)
        if value(point) is not None:  # as the space file will spell it (no float noise off the step grid)
            return {k: round(v, 6) if isinstance(v, float) else v for k, v in point.items()}
    return None


def _headroom(rng: random.Random, profile: dict[str, Any], space: dict[str, Any], points: int = 24) -> bool:
    """Whether a few random points beat the baseline by 5%: where the baseline is already about the best,
    every strategy "reaches 98%" at its first restart and the landscape says nothing about search."""
    parsed, value = _evaluator(profile, space)
    base = value(space["baseline"]) or 0.0
    return any((value(parsed.random_sample(rng)) or 0.0) > 1.05 * base for _ in range(points))


class _NoAliases(yaml.SafeDumper):
    """Spell a list out wherever it occurs (tp-size and ep-size share their choices), no &anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_landscape(seed: int, directory: Path = LANDSCAPE_DIR) -> tuple[Path, Path]:
    """Write (once) and return the paths of landscape `seed`'s profile and space."""
    name = landscape_name(seed)
    profile_path, space_path = directory / f"{name}.profile.yaml", directory / f"{name}.space.yaml"
    if not (profile_path.exists() and space_path.exists()):
        profile, space = make_landscape(seed)
        directory.mkdir(parents=True, exist_ok=True)
        for path, data in ((profile_path, profile), (space_path, space)):
            tmp = path.with_suffix(f".tmp{random.random():.6f}")
            tmp.write_text(yaml.dump(data, Dumper=_NoAliases, sort_keys=False))
            tmp.replace(path)  # atomic: parallel benchmark processes may write the same landscape
    return profile_path, space_path
