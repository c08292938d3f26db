"""/server_info as SGLang 0.5.23 serves it: the resolved CUDA-graph settings in `cuda_graph_config`, the flat
per-phase flags as asked, and the engine's read-back taking the truth from where the server puts it."""

from __future__ import annotations

import re

from tuner.engines import get_engine

PHASE_KEYS = {"backend", "max_bs", "bs", "tc_compiler", "max_context_size", "full_prefill_max_req",
              "full_prefill_prefix_chunk_tokens", "max_seq_len"}


def _captured(log: str) -> list[int]:
    """The batch sizes of 0.5.23's capture-end log line."""
    return [int(b) for b in re.search(r"decode CUDA graph end\. bs=\[([\d, ]+)\]", log).group(1).split(",")]


def test_resolved_graph_sizes_are_in_cuda_graph_config_and_the_flat_flags_keep_the_ask(start_sim):
    sizes = ["1", "2", "4", "8", "16", "32"]
    sim = start_sim("--cuda-graph-max-bs-decode", "64", "--cuda-graph-bs-decode", *sizes)
    info = sim.client().get("/server_info").json()
    assert info["cuda_graph_max_bs_decode"] == 64 and info["cuda_graph_bs_decode"] == [1, 2, 4, 8, 16, 32]
    decode, prefill = info["cuda_graph_config"]["decode"], info["cuda_graph_config"]["prefill"]
    assert set(decode) == set(prefill) == PHASE_KEYS
    assert decode["backend"] == "full" and decode["max_bs"] == 32 and decode["bs"] == [1, 2, 4, 8, 16, 32]
    assert prefill["max_bs"] == info["chunked_prefill_size"]
    # The trial's read-back reports the override: 64 asked, 32 got.
    asked = {"cuda-graph-max-bs-decode": 64, "cuda-graph-bs-decode": [1, 2, 4, 8, 16, 32],
             "disable-decode-cuda-graph": False}
    got = get_engine("sglang").effective_flags(info, asked)
    assert got == {"cuda-graph-max-bs-decode": 32, "cuda-graph-bs-decode": [1, 2, 4, 8, 16, 32],
                   "disable-decode-cuda-graph": False}


def test_default_decode_max_bs_is_capped_by_max_running_requests(start_sim):
    sim = start_sim("--max-running-requests", "20")
    info = sim.client().get("/server_info").json()
    decode = info["cuda_graph_config"]["decode"]
    assert info["cuda_graph_max_bs_decode"] is None
    assert decode["max_bs"] == 20 and decode["bs"] == [1, 2, 4, 8, 12, 16, 20]
    assert _captured(sim.log()) == [1, 2, 4, 8, 12, 16, 20]


def test_an_asked_max_bs_is_kept_but_capture_stops_at_the_request_pool(start_sim):
    sim = start_sim("--cuda-graph-max-bs-decode", "64", "--max-running-requests", "30")
    info = sim.client().get("/server_info").json()
    assert info["cuda_graph_config"]["decode"]["max_bs"] == 64  # resolution does not cap an asked size
    assert _captured(sim.log())[-2:] == [24, 30]  # the runner clamps to the pool and adds its size


def test_explicit_cuda_graph_config_json_wins_and_disable_reads_back(start_sim):
    sim = start_sim("--cuda-graph-max-bs-decode", "64", "--cuda-graph-config", '{"decode": {"backend": "disabled"}}')
    info = sim.client().get("/server_info").json()
    assert info["cuda_graph_config"]["decode"]["backend"] == "disabled"
    got = get_engine("sglang").effective_flags(info, {"disable-decode-cuda-graph": False})
    assert got == {"disable-decode-cuda-graph": True}


def test_server_info_and_model_info_carry_0523s_fields(start_sim):
    sim = start_sim("--max-running-requests", "16")
    with sim.client() as c:
        info = c.get("/server_info").json()
        model = c.get("/model_info").json()
    assert info["launch_command"].split()[-2:] == ["--max-running-requests", "16"]
    assert info["status"] == "ready" and info["version"] == "0.5.23" and info["frontend"] == "python"
    assert set(info["startup_time"]) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph"}
    assert info["startup_time"]["cuda_graph"]["decode"] >= 0 and "kv_events" in info
    assert model["served_model_name"] == "sim/model" and model["tokenizer_path"] == "sim/model"
    assert model["model_type"] == "llama" and model["architectures"] == ["LlamaForCausalLM"]
    assert {"load_format", "reasoning_parser", "tool_call_parser", "disaggregation_mode"} <= set(model)


def test_model_info_reads_the_model_folders_config(start_sim, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}')
    sim = start_sim(model_path=str(tmp_path))
    model = sim.client().get("/model_info").json()
    assert model["model_type"] == "qwen3" and model["architectures"] == ["Qwen3ForCausalLM"]


def test_056_keeps_its_own_shapes(start_sim):
    sim = start_sim("--tp-size", "8", "--attention-backend", "trtllm_mla", "--cuda-graph-max-bs", "64",
                    profile="glm5-nvfp4-sm120", scale=0.002)
    with sim.client() as c:
        info = c.get("/server_info").json()
        model = c.get("/model_info").json()
    assert info["status"] == "ready" and info["cuda_graph_max_bs"] == 64
    assert "launch_command" not in info and "startup_time" not in info and "cuda_graph_config" not in info
    assert "model_type" not in model and "served_model_name" not in model
