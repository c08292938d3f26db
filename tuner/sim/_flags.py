"""The command-line flags of each emulated SGLang version, as data.

Names, choices, defaults and help texts were read from the real wheels (0.5.6: `sglang/srt/server_args.py`;
0.5.23: `sglang/srt/arg_groups/fields/*.py`, `choices.py` and `server_args.py`). Only the flags a launch tuner
touches are listed; `_args.py` turns a table into an `argparse` parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]  # option strings, first one is the "main" spelling as in SGLang
    field: str  # the ServerArgs field the value lands in
    kind: str = "store"  # store | store_true | deprecated_store_true
    type: str = "str"  # str | int | float | human_int | cuda_graph_backend
    default: Any = None
    choices: tuple[Any, ...] | None = None
    nargs: str | None = None
    help: str = ""
    required: bool = False
    new_flag: str | None = None  # what a deprecated flag's warning points to
    set_dest: bool = False  # pass dest=field (0.5.23 anchors dest to the field name)


# -- choices shared by name --------------------------------------------------------------------------------

_ATTN_056 = ("triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer",
             "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx",
             "ascend", "intel_xpu")
_NSA_056 = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter")
_MOE_RUNNER_056 = ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
                   "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass")

_ATTN_0523 = ("triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
              "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
              "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
              "ascend", "intel_xpu")
_DSA_PREFILL_0523 = ("flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto",
                     "flashinfer_sparse_mla", "triton_sparse_mla", "fa3", "tilelang", "triton", "aiter", "trtllm",
                     "intel_xpu")
_DSA_DECODE_0523 = tuple(c for c in _DSA_PREFILL_0523 if c != "triton_sparse_mla")
_MOE_RUNNER_0523 = ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
                    "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
                    "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming", "experimental_sgl_marlin",
                    "lora_cutedsl", "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu")
_MOE_A2A_0523 = ("none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                 "deepep_v2", "pplx", "ascend_tp", "flashinfer_megamoe")
_FP8_GEMM_0523 = ("auto", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_deepgemm",
                  "flashinfer_cutedsl", "cutlass", "triton", "aiter")
_FP4_GEMM_0523 = ("auto", "flashinfer_cudnn", "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_trtllm",
                  "marlin")
_KV_DTYPE_056 = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
_KV_DTYPE_0523 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
_POLICY_056 = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")
_POLICY_0523 = _POLICY_056 + ("routing-key", "hrrn", "shortest-prefill-first")

_HRI = ("\n\nSupports standard SI suffixes (k, M, G, T) and IEC suffixes\n    (Ki, Mi, Gi, Ti). Suffixes are "
        "case-sensitive.\n\n    Decimals are allowed for SI suffixes only.\n\n    Examples:\n        '1k' -> 1000"
        "      '1M' -> 1000000    '25.6k' -> 25600\n        '1Ki' -> 1024     '1Mi' -> 1048576\n    ")

# -- help texts (identical in both versions unless noted) ---------------------------------------------------

H = {
    "model_path": "The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    "tokenizer_path": "The path of the tokenizer.",
    "host": "The host of the HTTP server.",
    "port": "The port of the HTTP server.",
    "api_key": "Set API key of the server. It is also used in the OpenAI API compatible server.",
    "trust_remote_code": "Whether or not to allow for custom models defined on the Hub in their own modeling files.",
    "context_length": "The model's maximum context length. Defaults to None (will use the value from the model's "
                      "config.json instead).",
    "served_model_name": "Override the model name returned by the v1/models endpoint in OpenAI API server.",
    "random_seed": "The random seed.",
    "log_level": "The logging level of all loggers.",
    "mem_fraction_static": "The fraction of the memory used for static allocation (model weights and KV cache "
                           "memory pool). Use a smaller value if you see out-of-memory errors.",
    "max_running_requests": "The maximum number of running requests.",
    "max_total_tokens": "The maximum number of tokens in the memory pool. If not specified, it will be "
                        "automatically calculated based on the memory usage fraction. This option is typically "
                        "used for development and debugging purposes.",
    "chunked_prefill_size": "The maximum number of tokens in a chunk for the chunked prefill. Setting this to -1 "
                            "means disabling chunked prefill.",
    "max_prefill_tokens": "The maximum number of tokens in a prefill batch. The real bound will be the maximum of "
                          "this value and the model's maximum context length.",
    "schedule_policy": "The scheduling policy of the requests.",
    "schedule_conservativeness": "How conservative the schedule policy is. A larger value means more conservative "
                                 "scheduling. Use a larger value if you see requests being retracted frequently.",
    "page_size": "The number of tokens in a page.",
    "kv_cache_dtype": 'Data type for kv cache storage. "auto" will use model data type. "bf16" or "bfloat16" for '
                      'BF16 KV cache. "fp8_e5m2" and "fp8_e4m3" are supported for CUDA 11.8+. "fp4_e2m1" (only '
                      'mxfp4) is supported for CUDA 12.8+ and PyTorch 2.8.0+',
    "enable_mixed_chunk": "Enabling mixing prefill and decode in a batch when using chunked prefill.",
    "num_continuous_decode_steps": "Run multiple continuous decoding steps to reduce scheduling overhead. This can "
                                   "potentially increase throughput but may also increase time-to-first-token "
                                   "latency. The default value is 1, meaning only run one decoding step at a time.",
    "tp_size": "The tensor parallelism size.",
    "dp_size": "The data parallelism size.",
    "ep_size": "The expert parallelism size.",
    "pp_size": "The pipeline parallelism size.",
    "attention_backend": "Choose the kernels for attention layers.",
    "prefill_attention_backend": "Choose the kernels for prefill attention layers (have priority over "
                                 "--attention-backend).",
    "decode_attention_backend": "Choose the kernels for decode attention layers (have priority over "
                                "--attention-backend).",
    "sampling_backend": "Choose the kernels for sampling layers.",
    "moe_a2a_backend": "Choose the backend for MoE A2A.",
    "moe_runner_backend": "Choose the runner backend for MoE.",
    "disable_radix_cache": "Disable RadixAttention for prefix caching.",
    "disable_overlap_schedule": "Disable the overlap scheduler, which overlaps the CPU scheduler with GPU model "
                                "worker.",
    "enable_two_batch_overlap": "Enabling two micro batches to overlap.",
    "disable_custom_all_reduce": "Disable the custom all-reduce kernel and fall back to NCCL.",
    "stream_interval": "The interval (or buffer size) for streaming in terms of the token length. A smaller value "
                       "makes streaming smoother, while a larger value makes the throughput higher",
    "skip_server_warmup": "If set, skip warmup.",
    "watchdog_timeout": "Set watchdog timeout in seconds. If a forward batch takes longer than this, the server "
                        "will crash to prevent hanging.",
    "enable_torch_compile": "Optimize the model with torch.compile. Experimental feature.",
    "torch_compile_max_bs": "Set the maximum batch size when using torch compile.",
    "disable_cuda_graph_padding": "Disable cuda graph when padding is needed. Still uses cuda graph when padding "
                                  "is not needed.",
    "decode_log_interval": "The log interval of decode batch.",
    "config": "Read CLI options from a config file. Must be a YAML file with configuration options.",
}


def _s(names, field, **kw) -> FlagSpec:
    kw.setdefault("help", H.get(field, ""))
    return FlagSpec(names=tuple(names), field=field, **kw)


# -- 0.5.6 --------------------------------------------------------------------------------------------------

FLAGS_0_5_6: tuple[FlagSpec, ...] = (
    _s(["--model-path", "--model"], "model_path", required=True),
    _s(["--tokenizer-path"], "tokenizer_path"),
    _s(["--trust-remote-code"], "trust_remote_code", kind="store_true", default=False),
    _s(["--context-length"], "context_length", type="int"),
    _s(["--host"], "host", default="127.0.0.1"),
    _s(["--port"], "port", type="int", default=30000),
    _s(["--skip-server-warmup"], "skip_server_warmup", kind="store_true", default=False),
    _s(["--kv-cache-dtype"], "kv_cache_dtype", default="auto", choices=_KV_DTYPE_056),
    _s(["--mem-fraction-static"], "mem_fraction_static", type="float"),
    _s(["--max-running-requests"], "max_running_requests", type="int"),
    _s(["--max-total-tokens"], "max_total_tokens", type="int"),
    _s(["--chunked-prefill-size"], "chunked_prefill_size", type="int"),
    _s(["--max-prefill-tokens"], "max_prefill_tokens", type="int", default=16384),
    _s(["--schedule-policy"], "schedule_policy", default="fcfs", choices=_POLICY_056),
    _s(["--schedule-conservativeness"], "schedule_conservativeness", type="float", default=1.0),
    _s(["--page-size"], "page_size", type="int"),
    _s(["--tensor-parallel-size", "--tp-size"], "tp_size", type="int", default=1),
    _s(["--pipeline-parallel-size", "--pp-size"], "pp_size", type="int", default=1),
    _s(["--stream-interval"], "stream_interval", type="int", default=1),
    _s(["--random-seed"], "random_seed", type="int"),
    _s(["--watchdog-timeout"], "watchdog_timeout", type="float", default=300),
    _s(["--log-level"], "log_level", default="info"),
    _s(["--decode-log-interval"], "decode_log_interval", type="int", default=40),
    _s(["--api-key"], "api_key"),
    _s(["--served-model-name"], "served_model_name"),
    _s(["--data-parallel-size", "--dp-size"], "dp_size", type="int", default=1),
    _s(["--attention-backend"], "attention_backend", choices=_ATTN_056),
    _s(["--prefill-attention-backend"], "prefill_attention_backend", choices=_ATTN_056),
    _s(["--decode-attention-backend"], "decode_attention_backend", choices=_ATTN_056),
    _s(["--sampling-backend"], "sampling_backend", choices=("flashinfer", "pytorch", "ascend")),
    _s(["--nsa-prefill-backend"], "nsa_prefill_backend", default="flashmla_sparse", choices=_NSA_056, help=""),
    _s(["--nsa-decode-backend"], "nsa_decode_backend", default="fa3", choices=_NSA_056, help=""),
    _s(["--expert-parallel-size", "--ep-size", "--ep"], "ep_size", type="int", default=1),
    _s(["--moe-a2a-backend"], "moe_a2a_backend", default="none",
       choices=("none", "deepep", "mooncake", "ascend_fuseep")),
    _s(["--moe-runner-backend"], "moe_runner_backend", default="auto", choices=_MOE_RUNNER_056),
    _s(["--disable-radix-cache"], "disable_radix_cache", kind="store_true", default=False),
    _s(["--cuda-graph-max-bs"], "cuda_graph_max_bs", type="int",
       help="Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this "
            "value."),
    _s(["--cuda-graph-bs"], "cuda_graph_bs", type="int", nargs="+",
       help="Set the list of batch sizes for cuda graph."),
    _s(["--disable-cuda-graph"], "disable_cuda_graph", kind="store_true", default=False, help="Disable cuda graph."),
    _s(["--disable-cuda-graph-padding"], "disable_cuda_graph_padding", kind="store_true", default=False),
    _s(["--disable-custom-all-reduce"], "disable_custom_all_reduce", kind="store_true", default=False),
    _s(["--disable-overlap-schedule"], "disable_overlap_schedule", kind="store_true", default=False),
    _s(["--enable-mixed-chunk"], "enable_mixed_chunk", kind="store_true", default=False),
    _s(["--enable-dp-attention"], "enable_dp_attention", kind="store_true", default=False,
       help="Enabling data parallelism for attention and tensor parallelism for FFN. The dp size should be equal "
            "to the tp size. Currently DeepSeek-V2 and Qwen 2/3 MoE models are supported."),
    _s(["--enable-two-batch-overlap"], "enable_two_batch_overlap", kind="store_true", default=False),
    _s(["--enable-torch-compile"], "enable_torch_compile", kind="store_true", default=False),
    _s(["--torch-compile-max-bs"], "torch_compile_max_bs", type="int", default=32),
    _s(["--enable-nan-detection"], "enable_nan_detection", kind="store_true", default=False,
       help="Enable the NaN detection for debugging purposes."),
    _s(["--num-continuous-decode-steps"], "num_continuous_decode_steps", type="int", default=1),
    _s(["--config"], "config"),
)

# -- 0.5.23 -------------------------------------------------------------------------------------------------

_H23 = dict(H)
_H23.update({
    "dp_size": "The number of data-parallel replicas of the model.",
    "kv_cache_dtype": 'Data type for kv cache storage. "auto" will use model data type. "bf16" or "bfloat16" for '
                      'BF16 KV cache. "fp8_e5m2" and "fp8_e4m3" are supported for CUDA 11.8+. "mxfp8" is supported '
                      'by the FA4 backend. "nvfp4" selects the NVFP4 FP4 E2M1 KV cache recipe; "fp4_mx_block16" '
                      "selects the MX-style block-size-16 FP4 E2M1 KV cache recipe. Both require CUDA 12.8+ and "
                      "PyTorch 2.8.0+",
    "decode_log_interval": "The log and metrics reporting interval (in decode iterations) for decode batches.",
    "max_prefill_tokens": H["max_prefill_tokens"] + _HRI,
    "max_total_tokens": H["max_total_tokens"] + _HRI,
    "context_length": H["context_length"] + _HRI,
})


def _t(names, field, **kw) -> FlagSpec:
    kw.setdefault("help", _H23.get(field, ""))
    return FlagSpec(names=tuple(names), field=field, **kw)


FLAGS_0_5_23: tuple[FlagSpec, ...] = (
    _t(["--model-path", "--model"], "model_path", required=True),
    _t(["--tokenizer-path"], "tokenizer_path"),
    _t(["--trust-remote-code"], "trust_remote_code", kind="store_true", default=False),
    _t(["--context-length"], "context_length", type="human_int"),
    _t(["--host"], "host", default="127.0.0.1"),
    _t(["--port"], "port", type="int", default=30000),
    _t(["--skip-server-warmup"], "skip_server_warmup", kind="store_true", default=False),
    _t(["--kv-cache-dtype"], "kv_cache_dtype", default="auto", choices=_KV_DTYPE_0523),
    _t(["--mem-fraction-static"], "mem_fraction_static", type="float"),
    _t(["--max-running-requests"], "max_running_requests", type="int"),
    _t(["--max-total-tokens"], "max_total_tokens", type="human_int"),
    _t(["--chunked-prefill-size"], "chunked_prefill_size", type="int"),
    _t(["--max-prefill-tokens"], "max_prefill_tokens", type="human_int", default=16384),
    _t(["--schedule-policy"], "schedule_policy", default="fcfs", choices=_POLICY_0523),
    _t(["--schedule-conservativeness"], "schedule_conservativeness", type="float", default=1.0),
    _t(["--page-size"], "page_size", type="int"),
    _t(["--enable-mixed-chunk"], "enable_mixed_chunk", kind="store_true", default=False),
    _t(["--num-continuous-decode-steps"], "num_continuous_decode_steps", type="int", default=1),
    _t(["--tp-size", "--tensor-parallel-size"], "tp_size", type="int", default=1),
    _t(["--pp-size", "--pipeline-parallel-size"], "pp_size", type="int", default=1),
    _t(["--dp-size", "--data-parallel-size"], "dp_size", type="int", default=1),
    _t(["--attn-dp-size", "--attention-data-parallel-size"], "attn_dp_size", type="int", default=1,
       help="The attention data parallelism size: the number of data-parallel attention groups inside the TP "
            "group, one scheduler each, while the FFN stays tensor parallel."),
    _t(["--ep-size", "--expert-parallel-size", "--ep"], "ep_size", type="int", default=1),
    _t(["--moe-a2a-backend"], "moe_a2a_backend", default="none", choices=_MOE_A2A_0523),
    _t(["--moe-runner-backend"], "moe_runner_backend", default="auto", choices=_MOE_RUNNER_0523),
    _t(["--stream-interval"], "stream_interval", type="int", default=1),
    _t(["--random-seed"], "random_seed", type="int"),
    _t(["--watchdog-timeout"], "watchdog_timeout", type="float", default=300),
    _t(["--log-level"], "log_level", default="info"),
    _t(["--decode-log-interval"], "decode_log_interval", type="int", default=40),
    _t(["--api-key"], "api_key"),
    _t(["--served-model-name"], "served_model_name"),
    _t(["--attention-backend"], "attention_backend", choices=_ATTN_0523),
    _t(["--prefill-attention-backend"], "prefill_attention_backend", choices=_ATTN_0523),
    _t(["--decode-attention-backend"], "decode_attention_backend", choices=_ATTN_0523),
    _t(["--fp8-gemm-backend"], "fp8_gemm_runner_backend", default="auto", choices=_FP8_GEMM_0523, set_dest=True,
       help="Choose the runner backend for Blockwise FP8 GEMM operations. Options: 'auto' (default, auto-selects "
            "based on hardware; MXFP8 dense picks flashinfer_cutedsl on SM100/SM103 and FlashInfer CUTLASS on other "
            "supported Blackwell GPUs), 'deep_gemm' (JIT-compiled; enabled by default on NVIDIA Hopper (SM90) and "
            "Blackwell (SM100) when DeepGEMM is installed), 'flashinfer_trtllm' (optimal for Blackwell and "
            "low-latency), 'flashinfer_cutlass' (FlashInfer CUTLASS groupwise FP8 GEMM), 'flashinfer_cutedsl' "
            "(FlashInfer CuTe DSL MXFP8 GEMM on SM100/SM103), 'flashinfer_deepgemm' (Hopper SM90 only; uses swapAB "
            "optimization for small M dimensions in decoding), 'cutlass' (optimal for SM120 GPUs), 'triton' "
            "(fallback, widely compatible), 'aiter' (ROCm only). "),
    _t(["--fp4-gemm-backend"], "fp4_gemm_runner_backend", default="auto", choices=_FP4_GEMM_0523, set_dest=True,
       help="Choose the runner backend for NVFP4 GEMM operations. Options: 'auto' (default; selects "
            "flashinfer_cutedsl on SM100, marlin on SM80-SM90, flashinfer_cutlass otherwise (including SM120)), "
            "'flashinfer_cutlass' (FlashInfer CUTLASS backend), 'flashinfer_cudnn' (FlashInfer cuDNN backend, "
            "optimal on CUDA 13+ with cuDNN 9.15+), 'flashinfer_cutedsl' (FlashInfer CuTe DSL backend), "
            "'flashinfer_trtllm' (FlashInfer TensorRT-LLM backend, requires different weight preparation with "
            "shuffling), 'marlin' (weight-only W4A16 fallback for SM80+). "),
    _t(["--dsa-prefill-backend"], "dsa_prefill_backend", choices=_DSA_PREFILL_0523,
       help="DSA (DeepSeek Sparse Attention) prefill backend. If not specified, auto-detects based on hardware and "
            "kv_cache_dtype."),
    _t(["--dsa-decode-backend"], "dsa_decode_backend", choices=_DSA_DECODE_0523,
       help="DSA (DeepSeek Sparse Attention) decode backend. If not specified, auto-detects based on hardware and "
            "kv_cache_dtype."),
    _t(["--disable-radix-cache"], "disable_radix_cache", kind="store_true", default=False),
    _t(["--cuda-graph-max-bs-decode"], "cuda_graph_max_bs_decode", type="int",
       help="Maximum batch size captured for the decode cuda graph."),
    _t(["--cuda-graph-max-bs-prefill"], "cuda_graph_max_bs_prefill", type="int",
       help="Maximum batch size captured for the prefill cuda graph."),
    _t(["--cuda-graph-bs-decode"], "cuda_graph_bs_decode", type="int", nargs="+",
       help="Explicit list of batch sizes to capture for the decode cuda graph."),
    _t(["--cuda-graph-bs-prefill"], "cuda_graph_bs_prefill", type="int", nargs="+",
       help="Explicit list of batch sizes to capture for the prefill cuda graph."),
    _t(["--cuda-graph-backend-decode"], "cuda_graph_backend_decode", type="cuda_graph_backend",
       choices=("full", "breakable", "disabled"),
       help="Backend for the decode phase. Folds into cuda_graph_config[decode].backend."),
    _t(["--cuda-graph-backend-prefill"], "cuda_graph_backend_prefill", type="cuda_graph_backend",
       choices=("full", "breakable", "disabled"),
       help="Backend for the prefill phase. Folds into cuda_graph_config[prefill].backend."),
    _t(["--disable-decode-cuda-graph"], "disable_decode_cuda_graph", kind="store_true", default=False,
       help="Disable the decode-phase CUDA graph. Convenience for --cuda-graph-backend-decode=disabled."),
    _t(["--disable-prefill-cuda-graph"], "disable_prefill_cuda_graph", kind="store_true", default=False,
       help="Disable the prefill-phase CUDA graph. Convenience for --cuda-graph-backend-prefill=disabled."),
    _t(["--disable-cuda-graph-padding"], "disable_cuda_graph_padding", kind="store_true", default=False),
    _t(["--disable-custom-all-reduce"], "disable_custom_all_reduce", kind="store_true", default=False),
    _t(["--disable-overlap-schedule"], "disable_overlap_schedule", kind="store_true", default=False),
    _t(["--enable-two-batch-overlap"], "enable_two_batch_overlap", kind="store_true", default=False),
    _t(["--enable-torch-compile"], "enable_torch_compile", kind="store_true", default=False),
    _t(["--torch-compile-max-bs"], "torch_compile_max_bs", type="int", default=32),
    # Registered by hand after the dataclass fields in 0.5.23, hence last:
    _t(["--sampling-backend"], "sampling_backend", choices=("flashinfer", "pytorch", "ascend", "intel_xpu")),
    _t(["--config"], "config"),
    _t(["--disable-cuda-graph"], "disable_cuda_graph", kind="deprecated_store_true", default=False,
       new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
       help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead."),
    _t(["--enable-dp-attention"], "enable_dp_attention", kind="deprecated_store_true", default=False,
       new_flag="--attn-dp-size <dp-size>",
       help="Deprecated. Use --attn-dp-size <dp-size> instead of --dp-size <dp-size> --enable-dp-attention."),
)

TABLES: dict[str, tuple[FlagSpec, ...]] = {"0.5.6": FLAGS_0_5_6, "0.5.23": FLAGS_0_5_23}

# What `argparse` shows as the program name: 0.5.6 builds `ArgumentParser()` (so the script's file name),
# 0.5.23 passes prog="sglang serve".
PROGS: dict[str, str] = {"0.5.6": "launch_server.py", "0.5.23": "sglang serve"}


def table(version: str) -> tuple[FlagSpec, ...]:
    try:
        return TABLES[version]
    except KeyError:
        raise ValueError(f"unsupported sglang_version {version!r}; the simulator emulates "
                         f"{', '.join(sorted(TABLES))}") from None
