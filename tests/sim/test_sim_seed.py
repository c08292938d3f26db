"""The seed deployment's story on the glm5-nvfp4-sm120 profile, end to end over real HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from tuner.sim import load_profile, predict
from .simproc import PARIS, quick_start_profile

GLM = "glm5-nvfp4-sm120"
FAST = 0.002  # start-up of ~6 simulated minutes takes ~1 s
TRTLLM = ("--tp-size", "8", "--attention-backend", "trtllm_mla")
WORKLOAD = dict(concurrency=64, input_len=970, output_len=750)


def _generate(client: httpx.Client, text: str, max_new: int = 8) -> dict:
    r = client.post("/generate", json={"text": text, "return_logprob": True, "logprob_start_len": 0,
                                       "sampling_params": {"max_new_tokens": max_new, "temperature": 0}})
    assert r.status_code == 200, r.text
    return r.json()


def _reprefill(client: httpx.Client, out: dict) -> list:
    meta = out["meta_info"]
    ids = [t[1] for t in meta["input_token_logprobs"]] + out["output_ids"]
    r = client.post("/generate", json={"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                                       "sampling_params": {"max_new_tokens": 0, "temperature": 0}})
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]["input_token_logprobs"][-len(out["output_ids"]):]


def test_default_backends_crash_at_capture(start_sim):
    sim = start_sim("--tp-size", "8", profile=GLM, scale=FAST, wait=False)
    code = sim.wait_exit(60)
    log = sim.log()
    assert code != 0
    assert "Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode for FP8 KV Cache." in log
    assert "Capture cuda graph begin. This can take up to several minutes." in log
    assert "Capture cuda graph failed: CUDA error: an illegal memory access was encountered" in log
    assert "Possible solutions:" in log and "Scheduler hit an exception: Traceback" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_flashmla_without_graphs_loads_then_nans(start_sim):
    # The requested NSA decode backend is silently replaced on SM120: /server_info says what really runs.
    sim = start_sim("--tp-size", "8", "--disable-cuda-graph", "--nsa-decode-backend", "fa3", profile=GLM, scale=FAST)
    with sim.client() as c:
        info = c.get("/server_info").json()
        assert info["nsa_decode_backend"] == "flashmla_kv" and info["page_size"] == 64
        assert info["kv_cache_dtype"] == "fp8_e4m3" and info["enable_dp_attention"] is True
        out = _generate(c, PARIS)
        lps = out["meta_info"]["output_token_logprobs"]
        assert out["output_ids"][0] != 0 and lps[0][0] is not None  # the prefill's token is fine
        assert all(t[0] is None for t in lps[1:]) and set(out["output_ids"][1:]) == {0}
        assert out["text"].startswith("Paris")  # looks right: only the logprobs give it away
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        again = _reprefill(c, out)
        assert all(t[0] is not None for t in again[1:])  # re-prefill disagrees: finite where decode was NaN


def test_trtllm_answers_and_memory_figures(start_sim):
    sim = start_sim(*TRTLLM, "--cuda-graph-max-bs", "64", "--mem-fraction-static", "0.92", profile=GLM, scale=FAST)
    log = sim.log()
    tokens = int(re.search(r"KV Cache is allocated\. #tokens: (\d+), KV size: [\d.]+ GB", log).group(1))
    assert tokens == pytest.approx(498_000, rel=0.1)
    line = re.search(r"max_total_num_tokens=(\d+), chunked_prefill_size=8192, .*available_gpu_mem=([\d.]+) GB", log)
    assert int(line.group(1)) == tokens
    assert float(line.group(2)) == pytest.approx(5.2, rel=0.1)
    assert re.search(r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=[\d.]+ GB\. avail mem=[\d.]+ GB\.", log)
    assert "The server is fired up and ready to roll!" in log
    with sim.client() as c:
        info = c.get("/server_info").json()
        assert info["max_total_num_tokens"] == tokens and info["cuda_graph_bs"][-1] == 64
        out = _generate(c, PARIS)
        assert out["text"] == "Paris" and out["meta_info"]["finish_reason"]["type"] == "stop"
        decode = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        again = [t[0] for t in _reprefill(c, out)]
        assert all(v is not None for v in decode + again)
        assert max(abs(a - b) for a, b in zip(decode, again)) < 2e-3


def test_predicted_seed_figures():
    profile = load_profile(GLM)
    at85 = predict(profile, [*TRTLLM, "--disable-cuda-graph", "--mem-fraction-static", "0.85"], 1, 100, 10)
    assert at85.kv_tokens == pytest.approx(370_000, rel=0.1)
    eager = predict(profile, [*TRTLLM, "--disable-cuda-graph", "--mem-fraction-static", "0.92"], **WORKLOAD)
    graphs = predict(profile, [*TRTLLM, "--cuda-graph-max-bs", "64", "--mem-fraction-static", "0.92"], **WORKLOAD)
    assert eager.status == graphs.status == "ok"
    assert eager.kv_tokens == pytest.approx(498_000, rel=0.1)
    assert graphs.free_mem_gb == pytest.approx(5.2, rel=0.1)
    assert eager.output_tok_s == pytest.approx(225, rel=0.1)
    assert eager.total_tok_s == pytest.approx(516, rel=0.1)
    assert graphs.output_tok_s == pytest.approx(194, rel=0.1)
    assert predict(profile, ["--tp-size", "8"], **WORKLOAD).status == "graph_capture_failed"
    assert predict(profile, ["--tp-size", "8", "--disable-cuda-graph"], **WORKLOAD).status == "nan"


async def _measure(url: str, concurrency: int, input_len: int, output_len: int) -> tuple[float, int, int]:
    """64 streaming /generate clients on raw sockets: a full HTTP client per event would eat the CPU the
    simulated server needs on a 2-core machine, and the measurement would show the client, not the server."""
    host, port = url.removeprefix("http://").split(":")
    ids = [300 + (i * 7919) % 9000 for i in range(input_len)]

    async def one(i: int) -> int:
        body = json.dumps({"input_ids": [i + 260] + ids[1:], "stream": True, "sampling_params": {
            "max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}}).encode()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        chunks: list[bytes] = []
        while not b"".join(chunks[-2:]).endswith(b"\r\n0\r\n\r\n"):
            chunk = await reader.read(1 << 16)
            assert chunk, "connection closed mid-stream"
            chunks.append(chunk)
            if len(chunks) > 64:
                del chunks[:32]
        writer.close()
        tail = b"".join(chunks)
        assert tail.startswith(b"HTTP/1.1 200") or b"data: [DONE]" in tail
        last = [e for e in tail.split(b"\n\n") if b'data: {"text"' in e][-1]
        return json.loads(last[last.index(b"data: ") + 6:])["meta_info"]["completion_tokens"]

    start = time.monotonic()
    counts = await asyncio.gather(*(one(i) for i in range(concurrency)))
    return time.monotonic() - start, sum(counts), concurrency * input_len


def test_measured_throughput_over_http_matches_the_model(start_sim, tmp_path):
    # Same physics, but a start-up of seconds instead of minutes, so the run can use a slower time scale.
    scale = 0.03
    sim = start_sim(*TRTLLM, "--disable-cuda-graph", "--mem-fraction-static", "0.92",
                    profile=quick_start_profile(tmp_path, GLM), scale=scale)
    wall, out_tokens, in_tokens = asyncio.run(_measure(sim.url, **WORKLOAD))
    assert out_tokens == 64 * 750
    simulated = wall / scale
    assert out_tokens / simulated == pytest.approx(225, rel=0.1)
    assert (out_tokens + in_tokens) / simulated == pytest.approx(516, rel=0.1)
    log = sim.log()
    assert re.search(r"Decode batch, #running-req: 64, #token: \d+, token usage: [\d.]+, cuda graph: False, "
                     r"gen throughput \(token/s\): [\d.]+, #queue-req: 0, ", log)
    assert "Prefill batch, #new-seq: " in log
