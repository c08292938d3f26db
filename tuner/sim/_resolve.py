"""From parsed flags to the values a server really runs with.

Two steps, as in SGLang's ServerArgs.__post_init__: the profile's version-specific overrides (what SGLang sets
silently for this model on this hardware), then SGLang's generic auto-defaults (chunked prefill and CUDA-graph
sizes by GPU memory, mem_fraction_static from a reserve estimate, the capture batch-size list). The result keeps
SGLang's field names, so /server_info can return it, and a version-independent `Knobs` view feeds the physics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ._profile import Profile, matches


@dataclass(frozen=True)
class Knobs:
    """What the performance and health models need, independent of how a version spells its flags."""
    tp: int
    dp: int  # data-parallel replicas (separate GPUs)
    attn_dp: int  # data-parallel attention groups inside the tp GPUs
    pp: int
    ep: int
    gpus: int
    decode_backend: str
    prefill_backend: str
    kv_dtype: str
    cuda_graph: bool
    cuda_graph_bs: tuple[int, ...]
    cuda_graph_max_bs: int
    cuda_graph_padding: bool
    prefill_cuda_graph: bool
    prefill_graph_tokens: tuple[int, ...]  # token counts the prefill graphs capture (empty without them)
    torch_compile: bool
    torch_compile_max_bs: int
    mem_fraction: float
    chunked_prefill_size: int
    max_prefill_tokens: int
    max_running_requests: int | None
    max_total_tokens: int | None
    schedule_policy: str
    schedule_conservativeness: float
    page_size: int
    mixed_chunk: bool
    continuous_decode_steps: int
    overlap_schedule: bool
    two_batch_overlap: bool
    custom_all_reduce: bool
    radix_cache: bool
    moe_runner: str
    moe_a2a: str
    gemm_backend: str
    sampling_backend: str
    stream_interval: int
    context_length: int
    nan_detection: bool
    decode_log_interval: int


@dataclass(frozen=True)
class Resolved:
    args: dict[str, Any]  # ServerArgs fields, as /server_info reports them
    knobs: Knobs
    log: tuple[str, ...]  # warnings the overrides print
    failure: str | None  # an override's `fail:` line: the start fails with it

    def namespace(self) -> dict[str, Any]:
        """Values health rules and overrides match on: the args, the knobs, a few hardware facts."""
        out = dict(self.args)
        out.update(dataclasses.asdict(self.knobs))
        out["cuda_graph_bs"] = list(self.knobs.cuda_graph_bs)
        return out


def _gpu_tier(gpu_mem_mb: float, tp: int) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, cuda_graph_max_bs) defaults by GPU memory (same in 0.5.6 and 0.5.23)."""
    if gpu_mem_mb < 20 * 1024:
        return 2048, 8
    if gpu_mem_mb < 35 * 1024:
        return 2048, (24 if tp < 4 else 80)
    if gpu_mem_mb < 60 * 1024:
        return 4096, (32 if tp < 4 else 160)
    if gpu_mem_mb < 160 * 1024:
        return 8192, (256 if tp < 4 else 512)
    return 16384, 512


def capture_batch_sizes(max_bs: int, no_padding: bool, append_max: bool) -> list[int]:
    """SGLang's default decode capture list for a max batch size (no speculative decoding)."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [bs for bs in sizes if bs <= max_bs]
    if append_max and max_bs not in sizes:  # 0.5.23 always captures max_bs itself
        sizes.append(max_bs)
    return sizes


def prefill_capture_tokens(max_tokens: int) -> list[int]:
    """The token counts the prefill CUDA graphs capture up to `max_tokens` (the chunk size by default):
    0.5.17's ServerArgs._generate_prefill_cuda_graph_batch_sizes (58 counts for 8192, 74 for 16384)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


PHASE_DEFAULTS = {"tc_compiler": "eager", "max_context_size": None, "full_prefill_max_req": None,
                  "full_prefill_prefix_chunk_tokens": None, "max_seq_len": None}


def graph_config_0523(v: Mapping[str, Any], profile: Profile, default_max_bs: int,
                      no_padding: bool) -> dict[str, dict[str, Any]]:
    """0.5.23's resolved `cuda_graph_config`, as /server_info shows it (every PhaseConfig field).

    Resolution writes its result here, never into the flat flags: `cuda_graph_max_bs_decode` and the other
    per-phase flags keep what was asked (64 asked with --cuda-graph-bs-decode up to 32 reads max_bs 32 here
    and 64 there). Precedence, lowest first: --disable-cuda-graph, the per-phase off switches, the per-phase
    flags, then --cuda-graph-config's JSON (sglang/srt/arg_groups/cuda_graph_hook.py,
    parse_cuda_graph_config); then the sizes (arg_groups/memory_hook.py, _handle_gpu_memory_settings): the
    decode max_bs by GPU memory when not asked, capped at --max-running-requests only then, the batch
    sizes generated from it, or max_bs = max(bs) when the sizes were given; the prefill max_bs the chunk
    size (8192 at most with MLA)."""
    decode = {"backend": "full", "max_bs": None, "bs": None, **PHASE_DEFAULTS}
    prefill = {"backend": profile.auto.get("cuda_graph_backend_prefill", "disabled"), "max_bs": None, "bs": None,
               **PHASE_DEFAULTS}
    if v.get("disable_cuda_graph"):
        decode["backend"] = prefill["backend"] = "disabled"
    if v.get("disable_prefill_cuda_graph"):
        prefill["backend"] = "disabled"
    if v.get("disable_decode_cuda_graph"):
        decode["backend"] = "disabled"
    for phase, cfg in (("decode", decode), ("prefill", prefill)):
        for key, flag in (("backend", "cuda_graph_backend_"), ("max_bs", "cuda_graph_max_bs_"),
                          ("bs", "cuda_graph_bs_")):
            if v.get(flag + phase) is not None:
                cfg[key] = v[flag + phase]
    if v.get("cuda_graph_max_seq_len_prefill") is not None:
        prefill["max_seq_len"] = v["cuda_graph_max_seq_len_prefill"]
    if v.get("cuda_graph_prefill_max_context") is not None:
        prefill["max_context_size"] = v["cuda_graph_prefill_max_context"]
    explicit = v.get("cuda_graph_config")
    if isinstance(explicit, Mapping):
        for phase, cfg in (("decode", decode), ("prefill", prefill)):
            cfg.update(explicit.get(phase) or {})

    asked_max_bs = decode["max_bs"] is not None
    if not asked_max_bs:
        decode["max_bs"] = default_max_bs
        if v.get("max_running_requests") is not None:
            decode["max_bs"] = min(decode["max_bs"], int(v["max_running_requests"]))
    if decode["bs"] is None:
        decode["bs"] = capture_batch_sizes(int(decode["max_bs"]), no_padding, append_max=True)
    else:
        decode["bs"] = [int(b) for b in decode["bs"]]
        decode["max_bs"] = max(decode["bs"])
    if prefill["max_bs"] is None:
        chunk = int(v["chunked_prefill_size"])
        prefill["max_bs"] = min(8192, chunk) if profile.model.attention == "mla" else chunk
        if v.get("max_total_tokens") is not None:
            prefill["max_bs"] = min(prefill["max_bs"], int(v["max_total_tokens"]))
    return {"decode": decode, "prefill": prefill}


def _apply_overrides(profile: Profile, values: dict[str, Any], context: Mapping[str, Any]) -> tuple[list[str], str | None]:
    log: list[str] = []
    for rule in profile.overrides:
        if not matches(rule.when, {**context, **values}):
            continue
        if rule.fail:
            return log, rule.fail
        for key, value in rule.set.items():
            values[key] = value
        if rule.log:
            log.append(rule.log.format(**values))
    return log, None


def resolve(profile: Profile, raw: Mapping[str, Any]) -> Resolved:
    version = profile.sglang_version
    hw, model = profile.hardware, profile.model
    v = dict(raw)
    # SGLang sizes mem_fraction_static before the model-specific adjustments run, so the reserve sees the
    # user's own DP-attention choice, not the one an override forces.
    raw_dp_attention = bool(raw.get("enable_dp_attention")) or int(raw.get("attn_dp_size") or 1) > 1
    context = {"sm": hw.sm, "gpu_name": hw.gpu_name, "interconnect": hw.interconnect,
               "architecture": model.architecture, "dsa": model.dsa, "sglang_version": version}
    log, failure = _apply_overrides(profile, v, context)

    tp, pp = int(v.get("tp_size") or 1), int(v.get("pp_size") or 1)
    dp, ep = int(v.get("dp_size") or 1), int(v.get("ep_size") or 1)
    gpu_mem_mb = hw.memory_per_gpu_gb * 1024
    default_chunk, default_max_bs = _gpu_tier(gpu_mem_mb, tp)

    # -- data-parallel attention --------------------------------------------------------------------------
    if version == "0.5.6":
        dp_attention = bool(v.get("enable_dp_attention"))
        attn_dp = dp if dp_attention else 1
        replicas = 1 if dp_attention else dp
    else:
        if v.get("enable_dp_attention") and int(v.get("attn_dp_size") or 1) == 1:
            v["attn_dp_size"] = dp  # the deprecated pair --dp-size N --enable-dp-attention means attn_dp N
            v["dp_size"] = dp = 1
        attn_dp = int(v.get("attn_dp_size") or 1)
        v["enable_dp_attention"] = attn_dp > 1
        replicas = dp
        dp_attention = attn_dp > 1

    if v.get("chunked_prefill_size") is None:
        v["chunked_prefill_size"] = default_chunk
    if dp_attention and version == "0.5.6":
        # 0.5.6 splits the chunk across the attention DP ranks and schedules more eagerly.
        v["chunked_prefill_size"] = max(1, v["chunked_prefill_size"] // max(1, dp)) if v["chunked_prefill_size"] > 0 else -1
        v["schedule_conservativeness"] = round(float(v.get("schedule_conservativeness", 1.0)) * 0.3, 6)

    # -- CUDA graphs ------------------------------------------------------------------------------------------
    no_padding = bool(v.get("disable_cuda_graph_padding"))
    if version == "0.5.6":
        if v.get("cuda_graph_max_bs") is None:
            v["cuda_graph_max_bs"] = default_max_bs
        if v.get("cuda_graph_bs") is None:
            v["cuda_graph_bs"] = capture_batch_sizes(int(v["cuda_graph_max_bs"]), no_padding, append_max=False)
        else:
            v["cuda_graph_max_bs"] = max(v["cuda_graph_bs"])
        graph_on = not v.get("disable_cuda_graph")
        graph_bs = list(v["cuda_graph_bs"])
        prefill_graph = False
        prefill_tokens: list[int] = []
    else:
        v["cuda_graph_config"] = graph_config_0523(v, profile, default_max_bs, no_padding)
        decode, prefill = v["cuda_graph_config"]["decode"], v["cuda_graph_config"]["prefill"]
        graph_on = decode["backend"] != "disabled"
        prefill_graph = prefill["backend"] != "disabled"
        graph_bs = sorted(set(decode["bs"]))
        prefill_tokens = []
        if prefill_graph:
            asked = prefill["bs"]
            prefill_tokens = sorted(set(asked)) if asked else prefill_capture_tokens(int(prefill["max_bs"]))
    # What the decode runner captures: the list clamped to the request pool, whose size is
    # --max-running-requests where given (base_cuda_graph_runner.get_batch_sizes_to_capture in 0.5.23,
    # cuda_graph_runner.get_batch_sizes_to_capture in 0.5.6). /server_info does not show this clamp.
    captured_bs = graph_bs
    if v.get("max_running_requests") is not None and graph_bs:
        pool = int(v["max_running_requests"])
        captured_bs = sorted({b for b in graph_bs if b <= pool} | ({pool} if max(graph_bs) > pool else set()))

    # -- mem_fraction_static: SGLang's reserve estimate (MiB) ------------------------------------------------
    if v.get("mem_fraction_static") is None:
        chunk = int(v["chunked_prefill_size"])
        max_bs_for_reserve = max(graph_bs) if graph_bs else default_max_bs
        reserved = 512.0
        reserved += max(chunk if chunk > 0 else int(v.get("max_prefill_tokens") or 16384), 2048) * 1.5
        reserved += max_bs_for_reserve * 2
        reserved += tp * pp / 8 * 1024
        if raw_dp_attention:
            reserved += max_bs_for_reserve * max(dp, attn_dp) * 3
            if max_bs_for_reserve > 300:
                reserved += max_bs_for_reserve * max(dp, attn_dp) * 1.5
        if gpu_mem_mb > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        v["mem_fraction_static"] = round((gpu_mem_mb - reserved) / gpu_mem_mb, 3)

    # -- backends the version picks when none is given --------------------------------------------------------
    if v.get("attention_backend") is None and v.get("prefill_attention_backend") is None \
            and v.get("decode_attention_backend") is None:
        v["attention_backend"] = profile.auto.get("attention_backend", "flashinfer")
    if v.get("sampling_backend") is None:
        v["sampling_backend"] = profile.auto.get("sampling_backend", "flashinfer")
    if v.get("page_size") is None:
        v["page_size"] = int(profile.auto.get("page_size", 1))
    if version != "0.5.6" and model.dsa:
        if v.get("dsa_prefill_backend") is None:
            v["dsa_prefill_backend"] = profile.auto.get("dsa_prefill_backend", "flashmla_auto")
        if v.get("dsa_decode_backend") is None:
            v["dsa_decode_backend"] = profile.auto.get("dsa_decode_backend", "flashmla_kv")
    if v.get("served_model_name") is None:
        v["served_model_name"] = v.get("model_path")
    if v.get("tokenizer_path") is None:
        v["tokenizer_path"] = v.get("model_path")
    if v.get("context_length") is None:
        context_length = model.context_length
    else:
        context_length = int(v["context_length"])

    kv_dtype = v.get("kv_cache_dtype") or "auto"
    if kv_dtype == "auto":
        kv_dtype = profile.auto.get("kv_cache_dtype", model.default_kv_dtype)
    if kv_dtype == "bf16":
        kv_dtype = "bfloat16"

    def kernel(phase_flag: str) -> str:
        name = v.get(phase_flag) or v.get("attention_backend") or profile.auto.get("attention_backend", "flashinfer")
        if name in ("nsa", "dsa"):
            key = ("nsa_" if version == "0.5.6" else "dsa_") + ("decode" if "decode" in phase_flag else "prefill") + "_backend"
            return str(v.get(key))
        return str(name)

    moe_runner = v.get("moe_runner_backend") or "auto"
    if moe_runner == "auto":
        moe_runner = profile.auto.get("moe_runner_backend", "auto")
    gemm = "auto"
    gemm_key = "fp4_gemm_runner_backend" if model.compute_dtype == "fp4" else "fp8_gemm_runner_backend"
    if gemm_key in v:
        gemm = v.get(gemm_key) or "auto"
    if gemm == "auto":
        gemm = profile.auto.get(gemm_key, "auto")

    knobs = Knobs(
        tp=tp, dp=replicas, attn_dp=attn_dp, pp=pp, ep=ep, gpus=tp * pp * replicas,
        decode_backend=kernel("decode_attention_backend"), prefill_backend=kernel("prefill_attention_backend"),
        kv_dtype=kv_dtype, cuda_graph=graph_on, cuda_graph_bs=tuple(captured_bs),
        cuda_graph_max_bs=max(captured_bs) if captured_bs else 0, cuda_graph_padding=not no_padding,
        prefill_cuda_graph=prefill_graph, prefill_graph_tokens=tuple(prefill_tokens),
        torch_compile=bool(v.get("enable_torch_compile")), torch_compile_max_bs=int(v.get("torch_compile_max_bs") or 32),
        mem_fraction=float(v["mem_fraction_static"]),
        chunked_prefill_size=int(v["chunked_prefill_size"]),
        max_prefill_tokens=int(v.get("max_prefill_tokens") or 16384),
        max_running_requests=None if v.get("max_running_requests") is None else int(v["max_running_requests"]),
        max_total_tokens=None if v.get("max_total_tokens") is None else int(v["max_total_tokens"]),
        schedule_policy=str(v.get("schedule_policy") or "fcfs"),
        schedule_conservativeness=float(v.get("schedule_conservativeness") or 1.0),
        page_size=int(v["page_size"]),
        mixed_chunk=bool(v.get("enable_mixed_chunk")),
        continuous_decode_steps=max(1, int(v.get("num_continuous_decode_steps") or 1)),
        overlap_schedule=not v.get("disable_overlap_schedule"),
        two_batch_overlap=bool(v.get("enable_two_batch_overlap")),
        custom_all_reduce=not v.get("disable_custom_all_reduce"),
        radix_cache=not v.get("disable_radix_cache"),
        moe_runner=str(moe_runner), moe_a2a=str(v.get("moe_a2a_backend") or "none"), gemm_backend=str(gemm),
        sampling_backend=str(v["sampling_backend"]),
        stream_interval=max(1, int(v.get("stream_interval") or 1)),
        context_length=context_length,
        nan_detection=bool(v.get("enable_nan_detection")),
        decode_log_interval=max(1, int(v.get("decode_log_interval") or 40)),
    )
    return Resolved(args=v, knobs=knobs, log=tuple(log), failure=failure)
