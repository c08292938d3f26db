"""scripts/sglang_faults: the fault plugin that plants bugs in real SGLang for the gate to catch (issue 46).

Planted into real SGLang 0.5.17's modules (its reference environment, scripts/setup_sglang_ref.sh; no GPU): each
wrapper is driven with real tensors there (tests/_fault_plugin_ref.py). Inert without TUNER_FAULT; an unknown
fault stops the process with one line; a shadowed sitecustomize still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

PLUGIN = REPO / "scripts" / "sglang_faults"
REF_PYTHON = REPO / ".venv-sglang0517" / "bin" / "python"


def _python(python, fault: str | None, code: str, extra_path: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_FAULT", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGIN), extra_path) if p)
    if fault is not None:
        env["TUNER_FAULT"] = fault
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=REPO)


needs_ref = pytest.mark.skipif(
    not REF_PYTHON.exists() and os.environ.get("TUNER_TEST_SGLANG_REF") != "1",
    reason="needs SGLang 0.5.17's reference environment: SGLANG_VERSION=0.5.17 bash scripts/setup_sglang_ref.sh")


def _ref(fault: str) -> dict:
    done = _python(REF_PYTHON, fault, open(REPO / "tests" / "_fault_plugin_ref.py").read())
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"tuner-fault[" in done.stderr and f"{fault} planted in" in done.stderr  # the server log says so
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_ref
@pytest.mark.parametrize("fault, batch_from, effect", [("nan-decode-batch8", 8, "nan"), ("batch-slot", 4, "rows")])
def test_logit_faults_fire_in_decode_from_their_batch_size_only(fault, batch_from, effect):
    seen = _ref(fault)
    assert seen.pop("planted")
    for key, got in seen.items():
        mode, batch = key.split("-")
        assert got == (effect if mode == "decode" and int(batch) >= batch_from else "same"), key


@needs_ref
def test_decode_positions_run_one_too_far_and_prefill_is_left_alone():
    seen = _ref("decode-position")
    assert seen == {"planted": True, "decode": [6, 10], "extend": [5, 9]}


@needs_ref
def test_chunk_kv_shifts_the_values_of_a_continued_chunk_only():
    seen = _ref("chunk-kv")
    assert seen["planted"] and seen["returned"] == "out" and seen["chunk"] is None
    assert seen["batch_has_pool"] is False  # 0.5.17's pool is the backend's: the plugin reads it there
    # Slots 8-11 (the second sequence, continuing after 2,048 cached tokens) each hold their predecessor's
    # value; the new sequence's slots 0-2 and every other slot are untouched.
    assert seen["values"] == [0, 1, 2, 3, 4, 5, 6, 7, 11, 8, 9, 10]


def test_without_a_fault_nothing_is_patched_and_a_shadowed_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = '1'\n")
    code = ("import os, sys; print(os.environ.get('SHADOWED_RAN'), "
            "any('PatchAfterImport' in type(f).__name__ for f in sys.meta_path))")
    for fault in (None, "none"):
        done = _python(sys.executable, fault, code, str(tmp_path))
        assert done.returncode == 0 and done.stdout.split() == ["1", "False"] and not done.stderr, done.stderr
    planted = _python(sys.executable, "batch-slot", code, str(tmp_path))
    assert planted.stdout.split() == ["1", "True"]


def test_an_unknown_fault_stops_the_process_with_one_line_naming_the_faults():
    done = _python(sys.executable, "nan-everywhere", "print('served')")
    assert done.returncode != 0 and "served" not in done.stdout
    line, = done.stderr.strip().splitlines()
    assert "unknown fault 'nan-everywhere' in TUNER_FAULT" in line and "batch-slot" in line and "none" in line


def test_a_dry_run_of_the_known_answer_faults_space_passes_the_healthy_and_fails_every_fault(tuner):
    """The simulator plants the same faults by TUNER_FAULT (tuner/sim/_faults.py PLANTED): the space's healthy
    trials pass every check and each fault fails its trial at the gate, as the GPU study should show."""
    folder = tuner.folder / "known-answer"
    made = subprocess.run([sys.executable, str(REPO / "scripts" / "make_known_answer_model.py"), str(folder),
                           "--tokenizer-only"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    space = REPO / "search_spaces" / "sglang-0.5.17-h100-known-answer-faults.yaml"
    done = tuner.run("run", "--trials", "8", "--space", str(space), "--simulate", "--model", str(folder),
                     env={"TUNER_SIM_TIME_SCALE": "0.03", "TUNER_SIM_STARTUP_SCALE": "0.002"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = tuner.study("sglang-0.5.17-h100-known-answer-faults").trials
    healthy = [t.user_attrs["failure_kind"] for t in trials if t.params["TUNER_FAULT"] == "none"]
    assert healthy == ["none"] * 4  # the baseline, triton, torch_native, flashinfer without graphs
    kinds = {t.params["TUNER_FAULT"]: t.user_attrs["failure_kind"] for t in trials}
    assert kinds["nan-decode-batch8"] == "nan", kinds
    for fault in ("decode-position", "chunk-kv", "batch-slot"):
        assert kinds[fault] in ("inconsistent_logprobs", "wrong_answer"), (fault, kinds)
