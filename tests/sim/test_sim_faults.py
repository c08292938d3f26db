"""Every TUNER_SIM_FAULTS switch, and the GPU-count check of CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import os
import signal
import socket
import time

import httpx
import pytest

from .simproc import PARIS

GLM = "glm5-nvfp4-sm120"
FAST = 0.002


def _gen(client: httpx.Client, text: str = PARIS, **kw) -> httpx.Response:
    return client.post("/generate", json={"text": text, "return_logprob": True,
                                          "sampling_params": {"max_new_tokens": 8, "temperature": 0, **kw}})


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_ignore_sigterm(start_sim):
    sim = start_sim(faults="ignore_sigterm")
    os.kill(sim.proc.pid, signal.SIGTERM)
    with sim.client() as c:
        assert _gen(c).status_code == 200  # served after the signal arrived
    assert sim.alive()


def test_child_holds_port_until_the_group_dies(start_sim):
    sim = start_sim(faults="child_holds_port")
    os.kill(sim.proc.pid, signal.SIGKILL)  # only the parent, as a careless launcher would
    sim.wait_exit(10)
    assert _port_accepts(sim.port)  # the child still holds a listening socket
    os.killpg(sim.proc.pid, signal.SIGKILL)
    sim.wait_for(lambda: not _port_accepts(sim.port), 10, "the port to be released")


def test_stop_answering_after(start_sim):
    sim = start_sim(faults="stop_answering_after=2")
    with sim.client(timeout=1.0) as c:
        assert _gen(c).status_code == 200
        assert _gen(c).status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            _gen(c)
        with pytest.raises(httpx.ReadTimeout):
            c.get("/health")
    assert sim.alive() and _port_accepts(sim.port)


def test_http_500_rate_is_seeded(start_sim):
    def statuses(seed: int) -> list[int]:
        sim = start_sim(faults="http_500_rate=0.5", seed=seed)
        with sim.client() as c:
            return [_gen(c).status_code for _ in range(16)]
    first = statuses(3)
    assert set(first) == {200, 500}
    assert statuses(3) == first


def test_slow_start_no_log(start_sim):
    sim = start_sim(faults="slow_start_no_log=1.5", wait=False)
    assert sim.log() == ""
    sim.wait_for(lambda: sim.log() != "", 30, "the first log line")
    assert time.monotonic() - sim.started >= 1.4
    sim.wait_ready()


def test_crash_at_start(start_sim):
    sim = start_sim(faults="crash_at_start", wait=False)
    assert sim.wait_exit(30) != 0
    log = sim.log()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "NCCL error" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_crash_after_requests(start_sim):
    sim = start_sim(faults="crash_after_requests=3")
    with sim.client() as c:
        for _ in range(3):
            assert _gen(c).status_code == 200
        with pytest.raises(httpx.HTTPError):
            _gen(c)
    assert sim.wait_exit(10) != 0
    log = sim.log()
    assert "Scheduler hit an exception: Traceback" in log
    assert "CUDA error: an illegal memory access was encountered" in log
    assert "SIGQUIT received. signum=3" in log


def test_hang_at_capture(start_sim):
    sim = start_sim(faults="hang_at_capture", wait=False)
    sim.wait_log("Capture target decode CUDA graph begin. backend=full")
    assert sim.alive() and not _port_accepts(sim.port)
    assert "fired up" not in sim.log()


def test_oom_at_capture(start_sim):
    sim = start_sim("--tp-size", "8", "--attention-backend", "trtllm_mla", "--cuda-graph-max-bs", "64",
                    profile=GLM, scale=FAST, faults="oom_at_capture", wait=False)
    assert sim.wait_exit(30) != 0
    log = sim.log()
    assert "Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory." in log
    assert "Possible solutions:\n1. set --mem-fraction-static to a smaller value" in log


def test_oom_at_capture_over_only_above_its_batch_size(start_sim):
    args = ("--tp-size", "8", "--attention-backend", "trtllm_mla")
    big = start_sim(*args, "--cuda-graph-max-bs", "64", profile=GLM, scale=FAST, faults="oom_at_capture_over=48",
                    wait=False)
    assert big.wait_exit(30) != 0
    assert "Capture cuda graph failed: torch.OutOfMemoryError" in big.log()
    small = start_sim(*args, "--cuda-graph-max-bs", "48", profile=GLM, scale=FAST, faults="oom_at_capture_over=48")
    assert small.alive() and "Capture cuda graph end" in small.log()


def test_nan_when_batch_over(start_sim):
    sim = start_sim(faults="nan_when_batch_over=2")
    with sim.client() as c:
        alone = _gen(c).json()
        assert all(t[0] is not None for t in alone["meta_info"]["output_token_logprobs"])
        body = {"text": [f"Tell me about item {i}." for i in range(6)], "return_logprob": True,
                "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}}
        crowd = c.post("/generate", json=body).json()
    assert any(t[0] is None for out in crowd for t in out["meta_info"]["output_token_logprobs"])
    assert any(0 in out["output_ids"] for out in crowd)


def test_response_delay(start_sim):
    sim = start_sim(faults="response_delay=0.5")
    with sim.client() as c:
        started = time.monotonic()
        assert _gen(c).status_code == 200
        assert time.monotonic() - started >= 0.5


def test_unknown_fault_is_refused(start_sim):
    sim = start_sim(faults="no_such_fault", wait=False)
    assert sim.wait_exit(10) == 2
    assert "unknown fault 'no_such_fault'" in sim.log()


def test_not_enough_gpus(start_sim):
    sim = start_sim("--tp-size", "8", profile=GLM, scale=FAST, env={"CUDA_VISIBLE_DEVICES": "0,1"}, wait=False)
    assert sim.wait_exit(30) != 0
    log = sim.log()
    assert "CUDA error: invalid device ordinal" in log and "needs 8 GPUs" in log
    assert "Scheduler hit an exception" in log


def test_generate_hang_keeps_health_generate_answering(start_sim):
    sim = start_sim(faults="generate_hang")
    with sim.client(timeout=1.0) as c:
        assert c.get("/health_generate").status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            _gen(c)
        assert c.get("/health_generate").status_code == 200  # still, with the hung request in flight
    assert sim.alive()


def test_warmup_503_is_silent_with_log_level_http_warning(start_sim):
    """SGLang's /health_generate answers 503 until its warm-up is done; with `--log-level-http warning` uvicorn
    prints no access lines, so nothing at all shows in the log meanwhile."""
    sim = start_sim("--log-level-http", "warning", faults="warmup_503=1.5", wait=False)
    statuses = []

    def answered() -> bool:
        try:
            statuses.append(httpx.get(sim.url + "/health_generate", timeout=5.0).status_code)
        except httpx.HTTPError:
            return False
        return statuses[-1] == 200
    sim.wait_for(answered, 30, "/health_generate to answer 200", interval=0.1)
    assert statuses.count(503) >= 3 and set(statuses) == {503, 200}, statuses
    log = sim.log()
    assert "HTTP/1.1" not in log and "Uvicorn running" not in log and "fired up and ready" in log


def test_warmup_503_answers_show_in_the_access_log_by_default(start_sim):
    sim = start_sim(faults="warmup_503=0.5", wait=False)
    sim.wait_ready()
    assert '"GET /health HTTP/1.1" 503' in sim.log()


def test_slow_exit(start_sim):
    sim = start_sim(faults="slow_exit=1")
    sent = time.monotonic()
    os.kill(sim.proc.pid, signal.SIGTERM)
    sim.wait_log("Shutting down")
    assert sim.alive()
    assert sim.wait_exit(10) == 0
    assert time.monotonic() - sent >= 1.0
