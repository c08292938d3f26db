"""The physics: memory per GPU, the time of a decode step and of a prefill batch, start-up phases, health.

All of it is computed from the profile's physical constants and the resolved knobs; no configuration is looked
up in a table. The same functions drive the HTTP server's scheduler and `predict()`.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from ._profile import Profile, matches
from ._resolve import Knobs

GiB = float(1 << 30)

# KV bytes relative to bf16 where a profile does not list a dtype.
_KV_DTYPE_RATIO = {"bfloat16": 1.0, "fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "mxfp8": 0.53, "fp4_e2m1": 0.28,
                   "nvfp4": 0.28, "fp4_mx_block16": 0.28}


def kv_bytes_per_token_per_gpu(profile: Profile, knobs: Knobs) -> float:
    model = profile.model
    table = model.kv_bytes_per_token_per_layer
    if knobs.kv_dtype in table:
        per_layer = table[knobs.kv_dtype]
    else:
        base = table.get("bfloat16") or next(iter(table.values()))
        per_layer = base * _KV_DTYPE_RATIO.get(knobs.kv_dtype, 1.0)
    total = per_layer * model.layers / knobs.pp
    if model.attention == "mla":
        return total  # the latent KV is replicated on every attention-TP rank
    attn_tp = max(1, knobs.tp // max(1, knobs.attn_dp))
    return total / min(attn_tp, model.kv_heads)


# -- weights ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WeightSplit:
    """Weights one GPU holds, GiB: the dense part (attention, shared layers, embeddings) and routed experts."""
    dense_gb: float
    expert_gb: float

    @property
    def total_gb(self) -> float:
        return self.dense_gb + self.expert_gb


def weight_split(profile: Profile, knobs: Knobs) -> WeightSplit:
    """Per-GPU weights. Everything sharded is split over tp x pp. Experts stay so whatever ep is: SGLang's ep
    ranks are a split of the tp group (moe_tp = tp / ep), so a rank holds 1/tp of the expert bytes either way,
    as whole experts (ep) or slices of every expert (moe_tp). DP attention runs attention with tp / attn_dp
    ranks per group, so each attention-DP rank holds the non-expert weights of a tp / attn_dp split: attn_dp
    times the bytes of a plain tp split."""
    model = profile.model
    per_gpu = model.weight_gb_replicated + model.weight_gb_sharded / (knobs.tp * knobs.pp)
    share = model.moe.expert_weight_fraction if model.moe else 0.0
    expert, dense = per_gpu * share, per_gpu * (1.0 - share)
    if knobs.attn_dp > 1:
        # Only where attn_dp > 1, so that every figure without DP attention is what it was.
        dense += model.weight_gb_sharded * (1.0 - share) / (knobs.tp * knobs.pp) * (min(knobs.attn_dp, knobs.tp) - 1)
    return WeightSplit(dense, expert)


# -- memory -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryPlan:
    total_gb: float
    weights_gb: float
    kv_bytes_per_token: float
    kv_tokens: int  # max_total_num_tokens of one scheduler
    kv_pool_gb: float
    avail_before_load_gb: float
    avail_after_load_gb: float
    avail_after_kv_gb: float
    graph_mem_gb: float
    avail_after_capture_gb: float
    max_running_requests: int
    failure: str | None = None  # oom_at_load | not_enough_memory | oom_at_capture
    failure_line: str | None = None


def _torch_oom(want_gb: float, total_gb: float, free_gb: float) -> str:
    used = total_gb - free_gb
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {want_gb:.2f} GiB. GPU 0 has a total "
            f"capacity of {total_gb:.2f} GiB of which {max(free_gb, 0) * 1024:.2f} MiB is free. Including non-PyTorch "
            f"memory, this process has {used:.2f} GiB memory in use. Of the allocated memory {used * 0.97:.2f} GiB "
            f"is allocated by PyTorch, and {used * 0.01:.2f} GiB is reserved by PyTorch but unallocated. If reserved "
            "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def decode_graph_memory_gb(profile: Profile, knobs: Knobs) -> float:
    mem = profile.memory
    if not (knobs.cuda_graph and knobs.cuda_graph_bs):
        return 0.0
    gb = mem.graph_fixed_gb + mem.graph_per_size_gb * len(knobs.cuda_graph_bs)
    gb += mem.graph_per_bs_gb * knobs.cuda_graph_max_bs
    return gb + (mem.torch_compile_gb if knobs.torch_compile else 0.0)


def prefill_graph_memory_gb(profile: Profile, knobs: Knobs) -> float:
    mem = profile.memory
    if not knobs.prefill_cuda_graph:
        return 0.0
    fixed = mem.graph_fixed_gb if mem.prefill_graph_fixed_gb is None else mem.prefill_graph_fixed_gb
    return fixed + mem.prefill_graph_gb_per_1k_tokens * max(knobs.prefill_graph_tokens, default=0) / 1000.0


def graph_memory_gb(profile: Profile, knobs: Knobs) -> float:
    return decode_graph_memory_gb(profile, knobs) + prefill_graph_memory_gb(profile, knobs)


def plan_memory(profile: Profile, knobs: Knobs) -> MemoryPlan:
    hw, model = profile.hardware, profile.model
    total = hw.memory_per_gpu_gb
    weights = weight_split(profile, knobs).total_gb
    before_load = total - hw.context_overhead_gb
    after_load = before_load - weights
    kvb = kv_bytes_per_token_per_gpu(profile, knobs)

    def plan(**kw: Any) -> MemoryPlan:
        base = dict(total_gb=total, weights_gb=weights, kv_bytes_per_token=kvb, kv_tokens=0, kv_pool_gb=0.0,
                    avail_before_load_gb=before_load, avail_after_load_gb=after_load, avail_after_kv_gb=after_load,
                    graph_mem_gb=0.0, avail_after_capture_gb=after_load, max_running_requests=0)
        base.update(kw)
        return MemoryPlan(**base)

    if after_load < 0.25:
        return plan(failure="oom_at_load", failure_line=_torch_oom(min(weights, 4.0), total, max(after_load + 4.0, 0.1)))
    # SGLang keeps (1 - mem_fraction_static) of the memory that was free before the weights loaded
    # (kv_cache_configurator._profile_available_bytes: pre_model_load_memory), not of the card's total.
    rest_gb = after_load - before_load * (1 - knobs.mem_fraction)
    tokens = int(rest_gb * GiB / kvb) if rest_gb > 0 else 0
    if knobs.max_total_tokens is not None:
        tokens = min(tokens, knobs.max_total_tokens)
    tokens = tokens // knobs.page_size * knobs.page_size
    if tokens <= 0:
        return plan(failure="not_enough_memory",
                    failure_line="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                                 f"Current value: self.server_args.mem_fraction_static={knobs.mem_fraction}")
    pool = tokens * kvb / GiB
    after_kv = after_load - pool
    graph = graph_memory_gb(profile, knobs)
    req_pool = min(max(int(tokens / knobs.context_length * 512), 2048), 4096)
    if knobs.max_running_requests is None:
        running = tokens // 2
    else:
        running = knobs.max_running_requests // (knobs.attn_dp if knobs.attn_dp > 1 else 1)
    running = max(1, min(running, req_pool))
    kw = dict(kv_tokens=tokens, kv_pool_gb=pool, avail_after_kv_gb=after_kv, graph_mem_gb=graph,
              avail_after_capture_gb=after_kv - graph, max_running_requests=running)
    # Prefill graphs are captured first, largest token count first: its activations are held while the
    # graph pool grows, then freed before the decode graphs are captured.
    transient = 0.0
    if knobs.prefill_cuda_graph and knobs.prefill_graph_tokens:
        activations = prefill_activation_gb(profile, knobs, max(knobs.prefill_graph_tokens))
        transient = max(0.0, activations - decode_graph_memory_gb(profile, knobs))
    need = graph + transient + profile.memory.capture_workspace_gb
    if graph > 0 and need > after_kv:
        return plan(failure="oom_at_capture", failure_line=_torch_oom(need - max(after_kv, 0) + 0.5, total, after_kv),
                    **kw)
    return plan(**kw)


def prefill_activation_gb(profile: Profile, knobs: Knobs, tokens: int) -> float:
    return profile.model.activation_gb_per_1k_tokens * tokens / 1000.0 / knobs.tp


def decode_activation_gb(profile: Profile, batch: int) -> float:
    return profile.model.decode_activation_mb_per_req * batch / 1024.0


# -- speed --------------------------------------------------------------------------------------------------

def noise_factor(profile: Profile, seed_material: str) -> float:
    """Per-start multiplicative speed noise: lognormal with the profile's relative sigma."""
    sigma = profile.noise.relative
    if sigma <= 0:
        return 1.0
    rng = random.Random(seed_material)
    return math.exp(rng.gauss(0.0, sigma))


class PerfModel:
    """Times, in simulated seconds, of the forwards a scheduler runs."""

    def __init__(self, profile: Profile, knobs: Knobs, speed_factor: float = 1.0) -> None:
        self.profile, self.knobs = profile, knobs
        hw, model, perf = profile.hardware, profile.model, profile.performance
        self.factor = speed_factor
        self.instant = hw.hbm_bandwidth_gbs <= 0  # the `instant` profile: no time passes at all
        tp, pp = knobs.tp, knobs.pp
        split = weight_split(profile, knobs)
        self.expert_gb, self.dense_gb = split.expert_gb, split.dense_gb
        self.ep = max(1, min(knobs.ep, tp)) if model.moe else 1
        # Tokens travel by all-to-all only with an a2a backend (--moe-a2a-backend deepep, ...): without one,
        # SGLang's EP MoE combines the experts' outputs by the same all-reduce as TP MoE.
        self.alltoall = self.ep > 1 and knobs.moe_a2a != "none"
        self.kvb = kv_bytes_per_token_per_gpu(profile, knobs)
        self.hbm = max(hw.hbm_bandwidth_gbs, 1e-9) * 1e9 * perf.hbm_efficiency
        gemm = perf.gemm_backends.get(knobs.gemm_backend, 1.0)
        self.peak = max(hw.peak_tflops.get(model.compute_dtype, 1.0), 1e-9) * 1e12 * gemm
        self.flops_per_token = 2.0 * model.active_params_b * 1e9 / (tp * pp)
        self.attn_flops = model.attn_flops_per_token_ctx / (tp * pp)
        self.attn_speed_decode = perf.attention_backends.get(knobs.decode_backend, 1.0)
        self.attn_speed_prefill = perf.attention_backends.get(knobs.prefill_backend, 1.0)
        layer_s = model.layers / pp * 1e-6
        self.attn_seq_decode_s = perf.attention_seq_us.get(knobs.decode_backend, 0.0) * layer_s
        self.attn_seq_prefill_s = perf.attention_seq_us.get(knobs.prefill_backend, 0.0) * layer_s
        self.moe_speed = perf.moe_efficiency * perf.moe_runner_backends.get(knobs.moe_runner, 1.0)
        # Expert GEMMs on slices of experts (moe_tp = tp / ep ranks each) are thinner than on whole experts.
        self.moe_speed *= perf.moe_slice_efficiency ** math.log2(max(1, tp // self.ep))
        self.n_allreduce = 2 * model.layers / pp
        self.kernels = model.layers / pp * model.kernels_per_layer
        self.topk = model.sparse_attention_topk
        self.graph_bs = sorted(knobs.cuda_graph_bs) if knobs.cuda_graph else []

    # all-reduce of one activation tensor across the tp ranks
    def allreduce_s(self, nbytes: float, in_graph: bool) -> float:
        hw, tp = self.profile.hardware, self.knobs.tp
        if tp <= 1:
            return 0.0
        custom = (self.knobs.custom_all_reduce and hw.custom_allreduce_latency_us is not None
                  and nbytes <= hw.custom_allreduce_max_mb * 1e6)
        latency = (hw.custom_allreduce_latency_us if custom else hw.allreduce_latency_us) * 1e-6
        seconds = latency + 2.0 * (tp - 1) / tp * nbytes / (hw.interconnect_bandwidth_gbs * 1e9)
        if in_graph and not custom:
            seconds *= hw.graph_allreduce_factor
        return seconds

    def _expert_share(self, tokens: float) -> float:
        moe = self.profile.model.moe
        if moe is None:
            return 0.0
        return 1.0 - (1.0 - moe.top_k / moe.experts) ** max(tokens, 0.0)

    def alltoall_s(self, tokens: float) -> float:
        """Dispatch + combine of one MoE layer over the ep ranks: each token's hidden state goes to its top_k
        experts and comes back; (ep - 1) / ep of it leaves the GPU. Each rank sends its 1/tp share of the
        tokens (an attention-DP group's own tokens, split over its attention-TP ranks). Two latencies per layer
        where the all-reduce it replaces had one: EP costs at small batches and saves at large ones."""
        hw, model = self.profile.hardware, self.profile.model
        if not self.alltoall:
            return 0.0
        local = tokens / self.knobs.tp
        nbytes = local * model.hidden_size * 2.0 * model.moe.top_k * (self.ep - 1) / self.ep
        return 2.0 * (hw.allreduce_latency_us * 1e-6 + nbytes / (hw.interconnect_bandwidth_gbs * 1e9))

    def _comm_s(self, tokens: float, in_graph: bool) -> float:
        n_allreduce = self.n_allreduce
        if self.alltoall:
            n_allreduce /= 2  # the MoE output is combined by the all-to-all, not all-reduced
        seconds = n_allreduce * self.allreduce_s(tokens * self.profile.model.hidden_size * 2.0, in_graph)
        if self.knobs.attn_dp > 1:
            seconds *= self.profile.performance.dp_attention_comm_factor
        seconds += self.profile.model.layers / self.knobs.pp * self.alltoall_s(tokens)
        if self.knobs.two_batch_overlap:
            seconds *= 0.6  # micro-batches hide part of the communication behind compute
        return seconds

    def _cpu_s(self, batch: int) -> float:
        perf = self.profile.performance
        return (perf.scheduler_base_us + perf.scheduler_per_req_us * batch) * 1e-6

    def graph_size_for(self, batch: int) -> int | None:
        """The captured size a decode batch replays with, or None when it runs eagerly."""
        if not self.graph_bs or batch > self.graph_bs[-1]:
            return None
        i = bisect.bisect_left(self.graph_bs, batch)
        size = self.graph_bs[i]
        if size != batch and not self.knobs.cuda_graph_padding:
            return None
        return size

    def decode_s(self, batch: int, ctx_sum: int) -> tuple[float, bool]:
        """One decode step of `batch` requests whose contexts add up to `ctx_sum` tokens."""
        if self.instant or batch <= 0:
            return 0.0, self.graph_size_for(batch) is not None
        hw, perf, knobs = self.profile.hardware, self.profile.performance, self.knobs
        size = self.graph_size_for(batch)
        in_graph = size is not None
        tokens = float(size if in_graph else batch)
        avg_ctx = ctx_sum / batch
        ctx_read = min(avg_ctx, self.topk) if self.topk else avg_ctx
        t_weights = self.dense_gb * GiB / self.hbm + self.expert_gb * self._expert_share(tokens) * GiB / (
            self.hbm * self.moe_speed)
        t_kv = batch / max(1, knobs.attn_dp) * ctx_read * self.kvb / (self.hbm * self.attn_speed_decode)
        t_compute = tokens * self.flops_per_token / (self.peak * perf.mfu_decode)
        t_compute += batch * ctx_read * self.attn_flops / (self.peak * perf.mfu_decode * self.attn_speed_decode)
        kernels = self.kernels
        if knobs.torch_compile and batch <= knobs.torch_compile_max_bs:
            t_compute *= perf.torch_compile_compute_factor
            kernels *= perf.torch_compile_kernel_factor
        if in_graph:
            t_launch = hw.graph_replay_us * 1e-6 + kernels * hw.graph_node_us * 1e-6
        else:
            t_launch = kernels * hw.kernel_launch_us * 1e-6
        t_loop = batch / max(1, knobs.attn_dp) * self.attn_seq_decode_s
        gpu = max(t_weights + t_kv, t_compute) + self._comm_s(tokens, in_graph) + t_launch + t_loop
        cpu = self._cpu_s(batch)
        step = max(gpu, cpu) if knobs.overlap_schedule else gpu + cpu
        return step * self.factor, in_graph

    def prefill_s(self, new_tokens: int, attn_ctx_sum: float, decode_batch: int = 0, decode_ctx_sum: int = 0,
                  seqs: int = 1) -> float:
        """One prefill forward: `new_tokens` prompt tokens of `seqs` requests (attending to `attn_ctx_sum`
        context tokens in all), plus `decode_batch` decode tokens riding along when mixed chunking is on."""
        if self.instant:
            return 0.0
        hw, perf, knobs = self.profile.hardware, self.profile.performance, self.knobs
        tokens = float(new_tokens + decode_batch)
        t_weights = (self.dense_gb + self.expert_gb * self._expert_share(tokens)) * GiB / self.hbm
        t_compute = tokens * self.flops_per_token / (self.peak * perf.mfu_prefill)
        t_compute += attn_ctx_sum * self.attn_flops / max(1, knobs.attn_dp) / (
            self.peak * perf.mfu_prefill * self.attn_speed_prefill)
        t_kv = 0.0
        if decode_batch:
            avg = decode_ctx_sum / decode_batch
            t_kv = decode_batch * (min(avg, self.topk) if self.topk else avg) * self.kvb / (
                self.hbm * self.attn_speed_decode)
        graphable = knobs.prefill_cuda_graph and tokens <= max(knobs.prefill_graph_tokens, default=0)
        kernels = self.kernels
        work = max(t_weights + t_kv, t_compute)
        if graphable:
            work += hw.graph_replay_us * 1e-6 + kernels * hw.graph_node_us * 1e-6
        else:
            # Eager launches run ahead of the GPU: a prefill's kernels are long enough to hide them.
            work = max(work, kernels * hw.kernel_launch_us * 1e-6)
        t_loop = (seqs + decode_batch) / max(1, knobs.attn_dp) * self.attn_seq_prefill_s
        gpu = work + self._comm_s(tokens, False) + perf.prefill_base_ms * 1e-3 + t_loop
        cpu = self._cpu_s(decode_batch + 1)
        step = max(gpu, cpu) if knobs.overlap_schedule else gpu + cpu
        return step * self.factor


# -- start-up -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Phases:
    process_s: float
    init_distributed_s: float
    weight_load_s: float
    kv_alloc_s: float
    capture_s: float
    server_start_s: float

    @property
    def total_s(self) -> float:
        return (self.process_s + self.init_distributed_s + self.weight_load_s + self.kv_alloc_s + self.capture_s
                + self.server_start_s)


def startup_phases(profile: Profile, knobs: Knobs) -> Phases:
    st, model = profile.startup, profile.model
    total_weights = model.weight_gb_replicated + model.weight_gb_sharded
    per_gpu = weight_split(profile, knobs).total_gb
    # weight_load_s is the time with the profile's full GPU count; ranks load their shards in parallel.
    reference = model.weight_gb_replicated + model.weight_gb_sharded / max(1, profile.hardware.gpu_count)
    load = st.weight_load_s * per_gpu / reference if total_weights > 0 and reference > 0 else 0.0
    capture = 0.0
    if knobs.cuda_graph:
        capture = st.capture_s_per_size * len(knobs.cuda_graph_bs)
        if knobs.torch_compile:
            compiled = sum(1 for b in knobs.cuda_graph_bs if b <= knobs.torch_compile_max_bs)
            capture += st.torch_compile_s + st.torch_compile_s_per_size * compiled
    if knobs.prefill_cuda_graph:
        tokens = knobs.prefill_graph_tokens
        capture += st.capture_s_per_size * len(tokens) + st.capture_s_per_1k_tokens * sum(tokens) / 1000.0
    dist = st.init_distributed_s if knobs.tp * knobs.pp * knobs.dp > 1 else st.init_distributed_s * 0.25
    return Phases(process_s=st.process_s, init_distributed_s=dist, weight_load_s=load, kv_alloc_s=st.kv_alloc_s,
                  capture_s=capture, server_start_s=st.server_start_s)


# -- health -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Health:
    start_failure: str | None = None  # exception line of a crash while loading
    capture: str | None = None  # crash | hang
    capture_message: str | None = None
    nan_after_tokens: int | None = None
    nan_when_batch_over: int | None = None
    nan_symptom: str = "token0"
    garbage: bool = False
    logprob_drift: float = 0.0
    tie_flip: float = 0.0  # healthy: picks the runner-up where it is this close (kernels that round differently)
    decode_position_error: bool = False
    batch_slot_error: int | None = None  # decode in a batch of at least this many reads another context
    chunk_kv_error: bool = False  # decode after a prefill of more than one chunk reads another context
    crash_under_load: int | None = None  # after this many admitted requests
    crash_batch_over: int | None = None
    crash_message: str | None = None

    @property
    def numerically_fine(self) -> bool:
        return (self.nan_after_tokens is None and self.nan_when_batch_over is None and not self.garbage
                and not self.logprob_drift and not self.decode_position_error and self.batch_slot_error is None
                and not self.chunk_kv_error)


def evaluate_health(profile: Profile, namespace: Mapping[str, Any], extra_nan_batch: int | None = None) -> Health:
    fields: dict[str, Any] = {}
    cuda_graph = bool(namespace.get("cuda_graph"))
    for rule in profile.health:
        if not matches(rule.when, namespace):
            continue
        e = rule.effect
        if e == "fine":
            continue
        if e == "crash_on_start":
            fields.setdefault("start_failure", rule.message or "RuntimeError: CUDA error: no kernel image is "
                                                               "available for execution on the device")
        elif e in ("crash_at_capture", "hang_at_capture"):
            if cuda_graph and "capture" not in fields:
                fields["capture"] = "crash" if e == "crash_at_capture" else "hang"
                fields["capture_message"] = rule.message
        elif e == "nan_after_tokens":
            k = int(rule.value or 0)
            if fields.get("nan_after_tokens") is None or k < fields["nan_after_tokens"]:
                fields["nan_after_tokens"] = k
                fields["nan_symptom"] = rule.symptom
        elif e == "nan_when_batch_over":
            b = int(rule.value or 0)
            if fields.get("nan_when_batch_over") is None or b < fields["nan_when_batch_over"]:
                fields["nan_when_batch_over"] = b
                fields.setdefault("nan_symptom", rule.symptom)
        elif e == "garbage":
            fields["garbage"] = True
        elif e == "logprob_drift":
            fields["logprob_drift"] = max(fields.get("logprob_drift", 0.0), float(rule.value or 0.3))
        elif e == "near_tie_flip":
            fields["tie_flip"] = max(fields.get("tie_flip", 0.0), float(rule.value or 0.1))
        elif e == "decode_position_error":
            fields["decode_position_error"] = True
        elif e == "crash_under_load":
            n = int(rule.value or 0)
            if fields.get("crash_under_load") is None or n < fields["crash_under_load"]:
                fields["crash_under_load"] = n
                fields["crash_batch_over"] = rule.batch_over
                fields["crash_message"] = rule.message
    if extra_nan_batch is not None:
        if fields.get("nan_when_batch_over") is None or extra_nan_batch < fields["nan_when_batch_over"]:
            fields["nan_when_batch_over"] = extra_nan_batch
    return Health(**fields)
