"""Decode-time logprobs against a re-prefill of the same tokens: equal when healthy, broken when not."""

from __future__ import annotations

import httpx
import yaml

from tuner.sim._profile import PROFILE_DIR
from .simproc import PARIS

GLM = "glm5-nvfp4-sm120"
FAST = 0.002
STORY = "Write a few sentences about rivers and the cities along them."


def _decode_and_prefill(c: httpx.Client, text: str, n: int = 24, **sampling) -> tuple[dict, list, list]:
    out = c.post("/generate", json={"text": text, "return_logprob": True, "logprob_start_len": 0,
                                    "sampling_params": {"max_new_tokens": n, "temperature": 0, **sampling}}).json()
    meta = out["meta_info"]
    prompt = [t[1] for t in meta["input_token_logprobs"]]
    assert meta["input_token_logprobs"][0][0] is None  # nothing predicts the first prompt token
    again = c.post("/generate", json={"input_ids": prompt + out["output_ids"], "return_logprob": True,
                                      "logprob_start_len": 0, "sampling_params": {"max_new_tokens": 0}}).json()
    tail = again["meta_info"]["input_token_logprobs"][len(prompt):]
    assert [t[1] for t in tail] == out["output_ids"]
    return out, [t[0] for t in meta["output_token_logprobs"]], [t[0] for t in tail]


def test_healthy_decode_matches_reprefill(start_sim):
    sim = start_sim()
    with sim.client() as c:
        out, decode, prefill = _decode_and_prefill(c, STORY, ignore_eos=True)
    assert len(decode) == 24 and None not in decode + prefill
    assert sum(abs(a - b) for a, b in zip(decode, prefill)) / len(decode) < 1e-3
    assert all(0 <= t < 32000 for t in out["output_ids"])


def test_sampling_is_seeded(start_sim):
    sim = start_sim()
    body = {"text": STORY, "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, "ignore_eos": True,
                                               "sampling_seed": 7}}
    with sim.client() as c:
        first = c.post("/generate", json=body).json()["text"]
        assert c.post("/generate", json=body).json()["text"] == first
        body["sampling_params"]["sampling_seed"] = 8
        assert c.post("/generate", json=body).json()["text"] != first


def test_drift_breaks_agreement(start_sim, tmp_path):
    data = yaml.safe_load((PROFILE_DIR / "instant.yaml").read_text())
    data["health"] = [{"when": {"decode_backend": "triton"}, "effect": "logprob_drift", "value": 0.5}]
    path = tmp_path / "drifty.yaml"
    path.write_text(yaml.safe_dump(data))
    sim = start_sim("--attention-backend", "triton", profile=str(path))
    with sim.client() as c:
        out, decode, prefill = _decode_and_prefill(c, PARIS)
    assert out["text"] == "Paris"  # the text is right; only the numbers are off
    assert sum(abs(a - b) for a, b in zip(decode, prefill)) / len(decode) > 0.1


def test_garbage_backend_emits_plus_signs(start_sim):
    sim = start_sim("--tp-size", "8", "--attention-backend", "triton", "--disable-cuda-graph", profile=GLM, scale=FAST)
    with sim.client() as c:
        out, decode, _ = _decode_and_prefill(c, PARIS, n=12)
    assert out["text"] == "+" * 12 and None not in decode  # confident garbage: logprobs look fine


def test_flashmla_sparse_ends_with_nan_happened(start_sim):
    sim = start_sim("--tp-size", "8", "--kv-cache-dtype", "bf16", "--disable-cuda-graph", profile=GLM, scale=FAST)
    with sim.client() as c:
        assert c.get("/server_info").json()["nsa_decode_backend"] == "flashmla_sparse"
        out = c.post("/generate", json={"text": "Tell me something.", "return_logprob": True,
                                        "sampling_params": {"max_new_tokens": 16, "temperature": 0}}).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "NaN happened"}
    assert out["meta_info"]["completion_tokens"] == 2 and out["meta_info"]["output_token_logprobs"][1][0] is None


def test_nan_detection_056_logs_and_sanitises(start_sim):
    sim = start_sim("--tp-size", "8", "--disable-cuda-graph", "--enable-nan-detection", profile=GLM, scale=FAST)
    with sim.client() as c:
        out = c.post("/generate", json={"text": PARIS, "return_logprob": True,
                                        "sampling_params": {"max_new_tokens": 6, "temperature": 0}}).json()
    lps = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
    assert None not in lps and min(lps[1:]) < -11  # uniform after NaN -> -1e5: -log(vocab)
    assert "Detected errors during sampling! NaN in the logits." in sim.log()


def test_nan_check_0523_kills_the_server(start_sim):
    sim = start_sim(faults="nan_when_batch_over=0", env={"SGLANG_ENABLE_NAN_LOGITS_CHECK": "1"}, wait=False)
    assert sim.wait_exit(30) != 0
    log = sim.log()
    assert "NaN detected! sampler: next_token_logits" in log and "Scheduler hit an exception" in log
