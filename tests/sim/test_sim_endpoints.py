"""SGLang's HTTP API: status endpoints, /generate (plain and SSE), OpenAI-compatible routes, the API key."""

from __future__ import annotations

import json

import httpx
import pytest

from .simproc import PARIS, quick_start_profile


@pytest.fixture
def instant(start_sim):
    return start_sim()


def _sse(response: httpx.Response) -> list:
    events = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_status_endpoints(instant):
    with instant.client() as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200
        assert c.get("/ready").status_code == 200
        for path in ("/model_info", "/get_model_info"):
            info = c.get(path).json()
            assert info["model_path"] == "sim/model" and info["is_generation"] is True
        for path in ("/server_info", "/get_server_info"):
            info = c.get(path).json()
            assert info["version"] == "0.5.23" and info["tp_size"] == 1 and info["mem_fraction_static"] > 0.5
            assert info["max_total_num_tokens"] > 0 and info["internal_states"][0]["memory_usage"]["token_capacity"]
        models = c.get("/v1/models").json()
        assert models["data"][0]["id"] == "sim/model"
        assert c.post("/flush_cache").status_code == 200
        assert c.get("/no/such/path").status_code == 404
        assert c.get("/generate").status_code == 405


def test_ready_is_404_on_056(start_sim):
    sim = start_sim("--tp-size", "8", "--attention-backend", "trtllm_mla", "--cuda-graph-max-bs", "64",
                    profile="glm5-nvfp4-sm120", scale=0.002)
    with sim.client() as c:
        assert c.get("/ready").status_code == 404
        assert c.get("/server_info").json()["version"] == "0.5.6"


def test_health_is_503_while_warming_up(start_sim, tmp_path):
    # The port opens, then the warm-up generate takes a few simulated decode steps (~0.27 s each here).
    sim = start_sim("--tp-size", "8", "--attention-backend", "trtllm_mla", "--disable-cuda-graph",
                    profile=quick_start_profile(tmp_path, "glm5-nvfp4-sm120"), scale=0.5, wait=False)
    sim.wait_log("Uvicorn running on", timeout=120)
    codes = set()
    sim.wait_for(lambda: codes.add(httpx.get(sim.url + "/health", timeout=5).status_code) or 200 in codes,
                 60, "ready")
    assert 503 in codes and "The server is fired up and ready to roll!" in sim.log()


def _prefills(sim) -> int:
    return sim.log().count("Prefill batch")


def test_health_runs_a_one_token_generation_unless_turned_off(start_sim):
    # SGLang's /health and /health_generate are one handler: a generation of one token (input id 0), unless
    # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 makes /health answer at once.
    sim = start_sim()
    for path in ("/health", "/health_generate"):
        before = _prefills(sim)
        assert httpx.get(sim.url + path, timeout=10).status_code == 200
        assert _prefills(sim) == before + 1, path
    quiet = start_sim(env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"})
    before = _prefills(quiet)
    assert httpx.get(quiet.url + "/health", timeout=10).status_code == 200
    assert _prefills(quiet) == before
    assert httpx.get(quiet.url + "/health_generate", timeout=10).status_code == 200
    assert _prefills(quiet) == before + 1


def test_meta_info_fields_as_0523_sends_them(instant):
    with instant.client() as c:
        body = {"text": PARIS, "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
        events = _sse(c.post("/generate", json={**body, "stream": True}))
        whole = c.post("/generate", json=body).json()["meta_info"]
    metas = [e["meta_info"] for e in events]
    assert len(metas) == 4
    for meta in metas:
        assert meta["num_retractions"] == 0 and meta["reasoning_tokens"] == 0 and "total_retractions" not in meta
    # e2e_latency only once finished; the time the response went out only with the first one sent.
    assert ["e2e_latency" in m for m in metas] == [False, False, False, True]
    assert ["response_sent_to_client_ts" in m for m in metas] == [True, False, False, False]
    assert "e2e_latency" in whole and "response_sent_to_client_ts" in whole and "total_retractions" not in whole


def test_generate_shapes(instant):
    with instant.client() as c:
        out = c.post("/generate", json={"text": PARIS, "sampling_params": {"temperature": 0}}).json()
        assert out["text"] == "Paris"
        meta = out["meta_info"]
        for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency"):
            assert key in meta
        assert meta["finish_reason"] == {"type": "stop", "matched": 1}
        batch = c.post("/generate", json={"text": [PARIS, "What is 2 + 3? Answer with a number."],
                                          "sampling_params": {"temperature": 0}}).json()
        assert [b["text"] for b in batch] == ["Paris", "5"]
        ids = c.post("/generate", json={"input_ids": [5, 6, 7], "sampling_params": {
            "max_new_tokens": 5, "temperature": 0, "ignore_eos": True}}).json()
        assert len(ids["output_ids"]) == 5 and ids["meta_info"]["finish_reason"]["type"] == "length"
        bad = c.post("/generate", json={"sampling_params": {}})
        assert bad.status_code == 400 and "Either text, input_ids" in bad.json()["error"]["message"]


def test_generate_stream(instant):
    with instant.client() as c:
        r = c.post("/generate", json={"text": "Tell me a story.", "stream": True, "return_logprob": True,
                                      "sampling_params": {"max_new_tokens": 20, "temperature": 0,
                                                          "ignore_eos": True}})
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse(r)
        assert len(events) == 20
        texts = [e["text"] for e in events]
        assert all(texts[i + 1].startswith(texts[i]) for i in range(len(texts) - 1))  # cumulative
        last = events[-1]
        assert len(last["meta_info"]["output_token_logprobs"]) == 20 and last["meta_info"]["input_token_logprobs"] == []
        assert last["meta_info"]["finish_reason"]["type"] == "length" and events[0]["meta_info"]["finish_reason"] is None
        # Same prompt again: greedy is deterministic and the radix cache reports the shared prefix.
        again = c.post("/generate", json={"text": "Tell me a story.", "sampling_params": {
            "max_new_tokens": 20, "temperature": 0, "ignore_eos": True}}).json()
        assert again["text"] == last["text"]


def test_radix_cache_and_flush(instant):
    prompt = " ".join(f"word{i}" for i in range(100))
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    with instant.client() as c:
        assert c.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 0
        assert c.post("/generate", json=body).json()["meta_info"]["cached_tokens"] >= 64
        assert c.post("/flush_cache").status_code == 200
        assert c.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 0


def test_completions(instant):
    with instant.client() as c:
        out = c.post("/v1/completions", json={"model": "x", "prompt": PARIS, "max_tokens": 8, "temperature": 0,
                                              "logprobs": 2}).json()
        choice = out["choices"][0]
        assert choice["text"] == "Paris" and choice["finish_reason"] == "stop"
        assert out["usage"]["completion_tokens"] == 2 and out["usage"]["prompt_tokens"] > 0
        assert len(choice["logprobs"]["token_logprobs"]) == 2 and len(choice["logprobs"]["top_logprobs"][0]) == 2
        echo = c.post("/v1/completions", json={"prompt": "one two three", "max_tokens": 0, "echo": True,
                                               "logprobs": 1, "temperature": 0}).json()
        lps = echo["choices"][0]["logprobs"]["token_logprobs"]
        assert echo["choices"][0]["text"] == "one two three" and lps[0] is None and None not in lps[1:]
        r = c.post("/v1/completions", json={"prompt": "Go on.", "max_tokens": 12, "ignore_eos": True,
                                            "stream": True, "stream_options": {"include_usage": True}})
        chunks = _sse(r)
        assert "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"]) != ""
        assert chunks[-1]["usage"]["completion_tokens"] == 12


def test_chat_completions(instant):
    with instant.client() as c:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PARIS}]
        out = c.post("/v1/chat/completions", json={"model": "x", "messages": messages, "temperature": 0,
                                                   "max_tokens": 16, "logprobs": True, "top_logprobs": 2}).json()
        choice = out["choices"][0]
        assert choice["message"]["content"] == "Paris" and choice["finish_reason"] == "stop"
        assert choice["logprobs"]["content"][0]["token"] == "Paris"
        assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "What is 12 * 3?"}],
                                                 "temperature": 0, "stream": True})
        chunks = _sse(r)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == "36"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_api_key(start_sim):
    sim = start_sim("--api-key", "sekret")
    with sim.client() as c:
        assert c.get("/health").status_code == 200  # health stays open, as in SGLang
        assert c.post("/generate", json={"text": "x"}).status_code == 401
        assert c.post("/v1/completions", json={"prompt": "x"}).json() == {"error": "Unauthorized"}
        assert c.get("/server_info").status_code == 401
        auth = {"Authorization": "Bearer sekret"}
        assert c.post("/generate", json={"text": PARIS, "sampling_params": {"temperature": 0}},
                      headers=auth).json()["text"] == "Paris"
        assert c.get("/v1/models", headers=auth).status_code == 200
