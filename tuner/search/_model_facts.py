"""What a model folder's `config.json` says about the model: its shape, experts, quantization and size.

A study's context (tuner/search/_context.py) records these so that failures learnt on one model can be carried to
studies of models of the same shape. Only the folder is read, never the weights: a safetensors index's
`total_size` is the one figure taken from outside config.json, as it is a few bytes of JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Bytes per parameter of the dtypes config.json names (`torch_dtype`, or `dtype` in newer transformers).
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float8_e4m3fn": 1, "int8": 1}
# Where configs keep the expert count: Qwen-MoE `num_experts`, DeepSeek/GLM `n_routed_experts`, Mixtral
# `num_local_experts`.
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


@dataclass(frozen=True)
class ModelFacts:
    source: str  # "config.json", "simulator profile NAME", or "none: why"
    name: str | None = None  # the folder's name (or the profile's model)
    architecture: str | None = None
    layers: int | None = None
    hidden_size: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    experts: int | None = None  # routed experts; None for a dense model
    experts_per_token: int | None = None
    quantization: str | None = None  # quantization_config.quant_method
    dtype: str | None = None
    params_b: float | None = None  # billions
    params_from: str | None = None  # how params_b was found (config, safetensors index, shapes)

    @property
    def known(self) -> bool:
        return self.architecture is not None or self.layers is not None

    def to_attr(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def read_model_facts(model_path: str) -> ModelFacts:
    """The facts of the model in `model_path` (a folder with config.json); an id such as org/name, or a folder
    without config.json, gives an honest "none" (the tuner downloads nothing to find out)."""
    folder = Path(model_path).expanduser()
    try:
        config = json.loads((folder / "config.json").read_text())
    except OSError as exc:
        return ModelFacts(f"none: no config.json at {model_path} ({type(exc).__name__})", name=folder.name or None)
    except ValueError as exc:
        return ModelFacts(f"none: {folder / 'config.json'} is not JSON ({exc})", name=folder.name or None)
    if not isinstance(config, Mapping):
        return ModelFacts(f"none: {folder / 'config.json'} is not a JSON object", name=folder.name or None)
    return facts_from_config(config, folder.name or None, _index_total_size(folder))


def facts_from_config(config: Mapping[str, Any], name: str | None = None,
                      weights_bytes: int | None = None) -> ModelFacts:
    """`weights_bytes`: the safetensors index's total_size, where the folder has one."""
    # Multimodal configs keep the language model's shape in text_config; its own keys come first.
    text = {**config, **config.get("text_config", {})} if isinstance(config.get("text_config"), Mapping) else config
    architectures = config.get("architectures") or []
    quant = config.get("quantization_config")
    quantization = quant.get("quant_method") if isinstance(quant, Mapping) else None
    dtype = _dtype(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype"))
    experts = next((text[k] for k in EXPERT_KEYS if isinstance(text.get(k), int) and text[k] > 0), None)
    heads = _int(text.get("num_attention_heads"))
    params, how = _params(text, experts, dtype, quantization, weights_bytes)
    return ModelFacts(
        "config.json", name=name,
        architecture=(architectures[0] if architectures else config.get("model_type")),
        layers=_int(text.get("num_hidden_layers")), hidden_size=_int(text.get("hidden_size")),
        heads=heads, kv_heads=_int(text.get("num_key_value_heads")) or heads,
        experts=experts, experts_per_token=_int(text.get("num_experts_per_tok")) if experts else None,
        quantization=quantization, dtype=dtype,
        params_b=None if params is None else round(params / 1e9, 2), params_from=how)


def _params(c: Mapping[str, Any], experts: int | None, dtype: str | None, quantization: str | None,
            weights_bytes: int | None) -> tuple[float | None, str | None]:
    for key in ("num_parameters", "n_params", "num_params"):
        if isinstance(c.get(key), (int, float)) and c[key] > 0:
            return float(c[key]), f"config {key}"
    # The index's bytes over the dtype's width counts parameters exactly for unquantized weights; quantized ones
    # pack several per byte (and keep scales), so there the shapes are the better guess.
    if weights_bytes and quantization is None and dtype in DTYPE_BYTES:
        width = DTYPE_BYTES[dtype]
        return weights_bytes / width, f"safetensors total_size / {width}"
    shapes = _params_from_shapes(c, experts)
    if shapes is not None:
        # Embeddings, attention and MLP/experts per layer; norms and biases are left out (well under 1%).
        return shapes, "shapes"
    return None, None


def _params_from_shapes(c: Mapping[str, Any], experts: int | None) -> float | None:
    hidden, layers, vocab = _int(c.get("hidden_size")), _int(c.get("num_hidden_layers")), _int(c.get("vocab_size"))
    heads = _int(c.get("num_attention_heads"))
    if not (hidden and layers and vocab and heads):
        return None
    kv_heads = _int(c.get("num_key_value_heads")) or heads
    if c.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek V2/V3, GLM-5): low-rank Q and KV
        nope, rope = _int(c.get("qk_nope_head_dim")) or 128, _int(c.get("qk_rope_head_dim")) or 64
        v_dim, kv_rank, q_rank = _int(c.get("v_head_dim")) or 128, int(c["kv_lora_rank"]), _int(c.get("q_lora_rank"))
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        attention = q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    else:
        head_dim = _int(c.get("head_dim")) or hidden // heads
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q, o; k, v
    dense_mlp = 3 * hidden * (_int(c.get("intermediate_size")) or 4 * hidden)  # gate, up, down
    if experts:
        expert_size = _int(c.get("moe_intermediate_size")) or _int(c.get("intermediate_size")) or 4 * hidden
        shared = _int(c.get("n_shared_experts")) or 0
        shared_size = _int(c.get("shared_expert_intermediate_size")) or shared * expert_size
        moe_mlp = 3 * hidden * expert_size * experts + 3 * hidden * shared_size + hidden * experts  # + router
        dense_layers = min(layers, _int(c.get("first_k_dense_replace")) or 0)
        mlp = dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp
    else:
        mlp = layers * dense_mlp
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    return float(layers * attention + mlp + embeddings)


def _index_total_size(folder: Path) -> int | None:
    try:
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        size = index["metadata"]["total_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(size) if isinstance(size, (int, float)) and size > 0 else None


def _dtype(value: Any) -> str | None:
    return value.removeprefix("torch.") if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
