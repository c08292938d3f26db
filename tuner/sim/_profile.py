"""Simulation profiles: the hardware, the model and the SGLang version a simulated server pretends to be.

A profile is a YAML file (schema in PROFILES.md). Everything the simulator does follows from it: memory from the
sizes, speed from the bandwidths and FLOPs, correctness from the health rules. Unknown keys are errors, so that
a typo in a profile cannot silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_PROFILE = "glm5-nvfp4-sm120"


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class Hardware:
    gpu_name: str
    gpu_count: int
    memory_per_gpu_gb: float  # GiB, as torch reports the total
    sm: int  # compute capability as an integer: 90 = Hopper, 100 = B200, 120 = RTX PRO 6000 Blackwell
    hbm_bandwidth_gbs: float
    peak_tflops: dict[str, float]  # dense TFLOP/s by compute dtype: bf16, fp8, fp4
    interconnect: str = "nvlink"  # pcie | nvlink
    interconnect_bandwidth_gbs: float = 400.0  # effective all-reduce bus bandwidth per GPU
    allreduce_latency_us: float = 20.0  # NCCL, small message
    # Latency of SGLang's custom all-reduce kernel; None where it cannot run (it needs P2P over NVLink).
    custom_allreduce_latency_us: float | None = 8.0
    custom_allreduce_max_mb: float = 8.0  # larger messages go to NCCL anyway
    # All-reduce cost multiplier for collectives captured inside a CUDA graph (PCIe: no proxy pipelining).
    graph_allreduce_factor: float = 1.0
    kernel_launch_us: float = 4.0  # eager launch cost per kernel that the GPU waits for
    graph_replay_us: float = 25.0  # fixed cost of one graph launch
    graph_node_us: float = 0.25  # residual per-kernel cost inside a replayed graph
    context_overhead_gb: float = 1.0  # CUDA context, cuBLAS workspaces, NCCL buffers per GPU


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    expert_weight_fraction: float  # share of the weights that sits in routed experts


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    params_b: float
    active_params_b: float
    weight_gb_sharded: float  # GiB split across tp * pp ranks
    layers: int
    hidden_size: int
    vocab_size: int
    context_length: int
    kv_bytes_per_token_per_layer: dict[str, float]  # by resolved KV dtype, for the whole model (all KV heads)
    weight_gb_replicated: float = 0.0  # GiB every rank holds (embeddings, norms)
    attention: str = "mha"  # mha | mla (MLA's latent KV is replicated across TP ranks)
    kv_heads: int = 8  # MHA only: TP beyond this replicates KV heads
    default_kv_dtype: str = "bfloat16"  # what --kv-cache-dtype auto means
    dsa: bool = False  # DeepSeek sparse attention (NSA/DSA) model
    sparse_attention_topk: int | None = None  # DSA: KV tokens one query reads at most
    moe: Moe | None = None
    dtype: str = "torch.bfloat16"
    quantization: str | None = None  # config.json's quantization_config.quant_method: what the weights are stored in
    compute_dtype: str = "bf16"  # key into hardware.peak_tflops for the GEMMs
    kernels_per_layer: int = 14  # kernels one decoder layer launches in a decode step
    attn_flops_per_token_ctx: float = 0.0  # attention FLOPs per (query token x context token), whole model
    activation_gb_per_1k_tokens: float = 0.5  # prefill activation peak per 1k tokens in a batch, tp 1
    decode_activation_mb_per_req: float = 1.0
    eos_token_id: int = 1
    token0_text: str = "!"  # what id 0 decodes to (NaN logits argmax to it)
    model_type: str = ""  # the HF config's model_type (/model_info); "" = from the architecture's name
    chars_per_token: float = 0.0  # the tokenizer: 0 = a token per word or symbol; else sub-word pieces

    @property
    def hf_model_type(self) -> str:
        return self.model_type or self.architecture.split("For")[0].lower()


@dataclass(frozen=True)
class Startup:
    process_s: float = 2.0  # imports and argument handling
    init_distributed_s: float = 2.0
    weight_load_s: float = 20.0
    kv_alloc_s: float = 0.5
    capture_s_per_size: float = 0.4  # per captured batch size (decode) or token count (prefill)
    capture_s_per_1k_tokens: float = 0.0  # prefill graphs: per 1k tokens over all the captured token counts
    torch_compile_s: float = 60.0
    torch_compile_s_per_size: float = 2.0
    server_start_s: float = 1.0  # uvicorn up, tokenizer manager ready


@dataclass(frozen=True)
class Performance:
    hbm_efficiency: float = 0.8  # achieved share of HBM bandwidth for dense weight/KV streaming
    moe_efficiency: float = 1.0  # achieved share of hbm_efficiency for routed-expert GEMMs at decode
    mfu_decode: float = 0.45
    mfu_prefill: float = 0.6
    attention_backends: dict[str, float] = field(default_factory=dict)  # relative kernel speed, 1.0 = reference
    # Host time per sequence and layer of a backend that runs attention one sequence at a time (a Python loop,
    # in decode and prefill alike): the GPU waits for it, however few tokens the sequence brings.
    attention_seq_us: dict[str, float] = field(default_factory=dict)
    moe_runner_backends: dict[str, float] = field(default_factory=dict)
    gemm_backends: dict[str, float] = field(default_factory=dict)  # --fp4/--fp8-gemm-backend speed
    torch_compile_kernel_factor: float = 0.7  # fewer kernels (fusion) below torch_compile_max_bs
    torch_compile_compute_factor: float = 0.95
    scheduler_base_us: float = 250.0  # CPU time the scheduler spends per forward
    scheduler_per_req_us: float = 12.0
    prefill_base_ms: float = 3.0
    dp_attention_comm_factor: float = 1.2  # all-gather + reduce-scatter instead of one all-reduce
    # Speed of routed-expert GEMMs per halving of the expert slices (moe_tp = tp / ep): 1.0 = slicing is free.
    moe_slice_efficiency: float = 1.0


@dataclass(frozen=True)
class MemoryModel:
    graph_fixed_gb: float = 0.25  # graph pool, static buffers
    graph_per_size_gb: float = 0.01  # per captured batch size
    graph_per_bs_gb: float = 0.01  # per request slot of the largest captured size
    torch_compile_gb: float = 0.5
    capture_workspace_gb: float = 0.3  # transient need while capturing
    # Prefill graphs (0.5.17+): static buffers, plus a pool that grows with the largest captured token count.
    prefill_graph_fixed_gb: float | None = None  # None: graph_fixed_gb
    prefill_graph_gb_per_1k_tokens: float = 0.0


@dataclass(frozen=True)
class Noise:
    relative: float = 0.02  # sigma of the per-start speed factor
    logprob_jitter: float = 5e-4  # decode vs prefill kernels round differently


@dataclass(frozen=True)
class Override:
    """A value the emulated version silently sets (e.g. 0.5.6 forcing NSA backends on SM >= 100)."""
    when: dict[str, Any] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    fail: str | None = None  # an exception line: the start fails with it


HEALTH_EFFECTS = ("fine", "nan_after_tokens", "nan_when_batch_over", "garbage", "logprob_drift", "near_tie_flip",
                  "decode_position_error", "crash_on_start", "crash_at_capture", "hang_at_capture", "crash_under_load")


@dataclass(frozen=True)
class HealthRule:
    when: dict[str, Any]
    effect: str
    value: float | None = None  # K tokens, B batch, N requests, drift size
    message: str | None = None  # the exception line for crashes
    symptom: str = "token0"  # NaN symptom: token0 (id 0 repeated, null logprobs) | out_of_vocab
    batch_over: int | None = None  # crash_under_load only when a decode batch exceeds this


@dataclass(frozen=True)
class Answer:
    prompt: str  # matched case-insensitively as a substring of the prompt
    answer: str


@dataclass(frozen=True)
class Profile:
    name: str
    sglang_version: str
    hardware: Hardware
    model: ModelSpec
    description: str = ""
    time_scale: float = 1.0
    require_model_path: bool = False
    startup: Startup = field(default_factory=Startup)
    performance: Performance = field(default_factory=Performance)
    memory: MemoryModel = field(default_factory=MemoryModel)
    noise: Noise = field(default_factory=Noise)
    auto: dict[str, Any] = field(default_factory=dict)  # what 'auto'/unset backends resolve to here
    overrides: tuple[Override, ...] = ()
    health: tuple[HealthRule, ...] = ()
    faults: dict[str, Any] = field(default_factory=dict)
    known_answers: tuple[Answer, ...] = ()
    source: str = ""


# -- loading ------------------------------------------------------------------------------------------------

def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _convert(hints[key], value, f"{where}.{key}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is tuple and args and dataclasses.is_dataclass(args[0]):
        if not isinstance(value, list):
            raise ProfileError(f"{where}: expected a list")
        return tuple(_build(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ProfileError(f"{where}: expected a mapping")
        return dict(value)
    if hint is float and not isinstance(value, bool) and isinstance(value, (int, str)):
        try:
            return float(value)  # YAML 1.1 reads 1e7 (no dot) as a string
        except ValueError:
            raise ProfileError(f"{where}: expected a number, got {value!r}") from None
    return value


def profile_from_mapping(data: Mapping[str, Any], source: str = "<mapping>") -> Profile:
    data = dict(data)
    data.setdefault("source", source)
    profile = _build(Profile, data, source)
    for rule in profile.health:
        if rule.effect not in HEALTH_EFFECTS:
            raise ProfileError(f"{source}: health effect {rule.effect!r} is not one of {', '.join(HEALTH_EFFECTS)}")
    return profile


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by name (shipped in tuner/sim/profiles/) or by path to a YAML file."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.exists()):
        path = PROFILE_DIR / f"{text}.yaml"
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise ProfileError(f"no simulation profile {text!r} (shipped: {shipped})")
    with open(path) as f:
        data = yaml.safe_load(f)
    return profile_from_mapping(data or {}, source=str(path))


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


# -- rule matching ------------------------------------------------------------------------------------------

_OPS = {
    "gt": lambda a, b: a is not None and a > b,
    "ge": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "le": lambda a, b: a is not None and a <= b,
    "ne": lambda a, b: a != b,
    "in": lambda a, b: a in b,
    "not_in": lambda a, b: a not in b,
}


def matches(when: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """`when` holds conditions on resolved values: a scalar means equal, a list means one of, a mapping holds
    operators (gt, ge, lt, le, ne, in, not_in). A key the values lack counts as None."""
    for key, want in when.items():
        have = values.get(key)
        if isinstance(want, Mapping):
            for op, operand in want.items():
                if op not in _OPS:
                    raise ProfileError(f"unknown operator {op!r} in rule on {key}")
                if not _OPS[op](have, operand):
                    return False
        elif isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True
