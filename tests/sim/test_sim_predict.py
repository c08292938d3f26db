"""The pure-Python API: the same physics as the server, usable over a grid."""

from __future__ import annotations

import pytest

from tuner.sim import Prediction, load_profile, predict, shipped_profiles

GLM = ["--tp-size", "8", "--attention-backend", "trtllm_mla"]


def test_shipped_profiles_load():
    assert set(shipped_profiles()) >= {"glm5-nvfp4-sm120", "llama3-8b-h200", "llama3-70b-8xh200", "instant"}
    for name in shipped_profiles():
        assert load_profile(name).name == name


def test_argv_and_dict_agree():
    profile = load_profile("llama3-8b-h200")
    a = predict(profile, ["--max-running-requests", "64"], 32, 500, 200)
    b = predict(profile, {"max_running_requests": 64}, 32, 500, 200)
    assert isinstance(a, Prediction) and a.status == "ok"
    assert a.output_tok_s == b.output_tok_s and a.kv_tokens == b.kv_tokens
    assert predict(profile, ["--no-such-flag"], 1, 10, 10).status == "invalid_args"
    with pytest.raises(ValueError):
        predict(profile, {"nsa_decode_backend": "fa3"}, 1, 10, 10)  # not a 0.5.23 flag


def test_noise_is_seeded():
    profile = load_profile("llama3-8b-h200")
    one = predict(profile, [], 16, 500, 100, noise=True, seed=1)
    assert predict(profile, [], 16, 500, 100, noise=True, seed=1).output_tok_s == one.output_tok_s
    assert predict(profile, [], 16, 500, 100, noise=True, seed=2).output_tok_s != one.output_tok_s


def test_small_dense_model_wants_cuda_graphs_and_big_batches():
    profile = load_profile("llama3-8b-h200")
    graphs = predict(profile, [], 1, 500, 200)
    eager = predict(profile, ["--disable-decode-cuda-graph"], 1, 500, 200)
    assert graphs.output_tok_s > 1.25 * eager.output_tok_s
    capped = predict(profile, ["--max-running-requests", "32"], 256, 500, 200)
    free = predict(profile, [], 256, 500, 200)
    assert free.output_tok_s > 1.5 * capped.output_tok_s and capped.ttft_s > free.ttft_s


def test_70b_tp_versus_dp():
    profile = load_profile("llama3-70b-8xh200")
    assert predict(profile, ["--tp-size", "1"], 1, 100, 10).message.startswith("RuntimeError: Not enough memory.")
    tp8 = predict(profile, ["--tp-size", "8"], 1, 1000, 200)
    tp2 = predict(profile, ["--tp-size", "2", "--dp-size", "4"], 1, 1000, 200)
    assert tp8.itl_s < tp2.itl_s  # latency: shard the weights as wide as possible
    tp8 = predict(profile, ["--tp-size", "8"], 512, 1000, 200)
    dp = predict(profile, ["--tp-size", "4", "--dp-size", "2"], 512, 1000, 200)
    assert dp.output_tok_s > tp8.output_tok_s  # throughput: less all-reduce per token
    nccl = predict(profile, ["--tp-size", "8", "--disable-custom-all-reduce"], 1, 1000, 200)
    assert nccl.itl_s > predict(profile, ["--tp-size", "8"], 1, 1000, 200).itl_s


def test_glm5_failure_kinds():
    profile = load_profile("glm5-nvfp4-sm120")
    work = dict(concurrency=64, input_len=970, output_len=750)
    assert predict(profile, ["--tp-size", "8"], **work).status == "graph_capture_failed"
    assert predict(profile, GLM, **work).status == "oom"  # 52 graphs up to bs 512 do not fit
    assert predict(profile, [*GLM, "--cuda-graph-max-bs", "128"], **work).status == "startup_timeout"
    over = predict(profile, [*GLM, "--disable-cuda-graph", "--mem-fraction-static", "0.97"], **work)
    assert over.status == "oom" and "CUDA out of memory" in over.message  # OOM under load, not at start
    assert predict(profile, [*GLM, "--disable-cuda-graph", "--tp-size", "4"], **work).status == "oom"
    assert predict(profile, ["--tp-size", "8", "--attention-backend", "fa3"], **work).status == "crash_on_start"
    assert predict(profile, ["--tp-size", "8", "--attention-backend", "triton", "--disable-cuda-graph"],
                   **work).status == "garbage"
    flashinfer = predict(profile, ["--tp-size", "8", "--attention-backend", "flashinfer", "--disable-cuda-graph"],
                         concurrency=8, input_len=100, output_len=20)
    assert flashinfer.status == "ok"  # NaN only shows above 16 running requests
    assert predict(profile, ["--tp-size", "8", "--attention-backend", "flashinfer", "--disable-cuda-graph"],
                   **work).status == "nan"


def test_stream_rate_floor(start_sim):
    """The instant profile streams fast to one client (benchmarks/sim_stream_rate.py prints the rate)."""
    import time

    import httpx
    sim = start_sim()
    body = {"prompt": "Go.", "max_tokens": 5000, "ignore_eos": True, "stream": True, "temperature": 0}
    with httpx.Client(base_url=sim.url, timeout=60) as c:
        started = time.monotonic()
        n = 0
        with c.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                n += line.startswith("data: {")
        rate = 5000 / (time.monotonic() - started)
    print(f"instant profile, one client, /v1/completions stream: {rate:,.0f} tokens/s ({n} events)")
    assert rate > 2000  # loose floor; the benchmark measures the real figure
