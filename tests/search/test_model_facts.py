"""tuner/search/_model_facts.py: a model folder's config.json read as the study's context records it."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.search._model_facts import read_model_facts

# Llama-3-8B's config.json, as Hugging Face ships it (the keys the facts come from, and a few that do not count).
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
         "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 500000.0}
# A DeepSeek-V3-shaped MoE in FP8: latent attention, 256 routed experts (n_routed_experts), 3 dense layers first.
MOE = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
       "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
       "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1,
       "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
       "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "dtype": "bfloat16",
       "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}


def folder(tmp_path: Path, config: dict, index_bytes: int | None = None) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if index_bytes is not None:
        (tmp_path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": index_bytes}, "weight_map": {}}))
    return str(tmp_path)


def test_a_dense_llama_counts_its_parameters_from_the_safetensors_index(tmp_path):
    facts = read_model_facts(folder(tmp_path, LLAMA, index_bytes=16_060_522_496))
    assert (facts.source, facts.architecture, facts.layers, facts.hidden_size) == \
        ("config.json", "LlamaForCausalLM", 32, 4096)
    assert (facts.heads, facts.kv_heads, facts.experts, facts.quantization, facts.dtype) == \
        (32, 8, None, None, "bfloat16")
    assert facts.params_b == 8.03 and facts.params_from == "safetensors total_size / 2"


def test_without_an_index_the_shapes_give_the_size(tmp_path):
    facts = read_model_facts(folder(tmp_path, LLAMA))
    assert facts.params_b == 8.03 and facts.params_from == "shapes"  # Llama-3-8B: 8.03B


def test_a_quantized_moe_names_its_experts_and_method_and_is_sized_from_shapes(tmp_path):
    # A quantized index's bytes are no parameter count (FP8 here: 1 byte, plus scales): the shapes are used.
    facts = read_model_facts(folder(tmp_path, MOE, index_bytes=688_586_727_753))
    assert (facts.architecture, facts.layers, facts.experts, facts.experts_per_token) == \
        ("DeepseekV3ForCausalLM", 61, 256, 8)
    assert (facts.quantization, facts.dtype, facts.kv_heads) == ("fp8", "bfloat16", 128)
    assert facts.params_from == "shapes"
    assert 660 < facts.params_b < 690  # DeepSeek-V3: 671B without its multi-token-prediction layer


def test_mixtral_and_qwen_spell_their_expert_counts_otherwise():
    from tuner.search._model_facts import facts_from_config

    assert facts_from_config({"num_local_experts": 8, "num_experts_per_tok": 2}).experts == 8
    assert facts_from_config({"num_experts": 128, "num_experts_per_tok": 8}).experts_per_token == 8


def test_a_model_id_or_a_folder_without_config_is_said_to_be_unread(tmp_path):
    facts = read_model_facts("meta-llama/Llama-3-8B")
    assert not facts.known and facts.source.startswith("none: no config.json at meta-llama/Llama-3-8B")
    (tmp_path / "config.json").write_text("{not json")
    assert read_model_facts(str(tmp_path)).source.startswith("none: ") and "is not JSON" in \
        read_model_facts(str(tmp_path)).source
