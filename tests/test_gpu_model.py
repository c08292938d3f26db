"""scripts/make_gpu_model.py, run for real on its `tiny` preset with the vLLM environment's torch, safetensors,
tokenizers and transformers (CI makes it; the script's real use is on the lent GPU)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import REPO

VENV_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

pytestmark = pytest.mark.skipif(not os.environ.get("TUNER_TEST_VLLM"),
                                reason="needs torch and transformers: run scripts/setup_vllm_cpu.sh, set TUNER_TEST_VLLM=1")

# transformers loads the folder as SGLang's loader would read it: config, tokenizer, safetensors shards by index.
CHECK = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
ids = tok("The capital of France is", return_tensors="pt").input_ids
logprobs = model(ids).logits[0, -1].log_softmax(-1)
print(json.dumps({"vocab": len(tok), "config_vocab": model.config.vocab_size, "std": float(logprobs.std()),
                  "decoded": tok.decode([len(tok) - 1]), "params": sum(p.numel() for p in model.parameters())}))
"""


def test_tiny_preset_makes_a_model_transformers_loads_with_spread_logits(tmp_path):
    out = tmp_path / "tiny"
    made = subprocess.run([str(VENV_PYTHON), str(REPO / "scripts" / "make_gpu_model.py"), "tiny", str(out),
                           "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"} <= set(index["weight_map"])
    checked = subprocess.run([str(VENV_PYTHON), "-c", CHECK, str(out)], capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr[-3000:]
    got = json.loads(checked.stdout.strip().splitlines()[-1])
    assert got["vocab"] == got["config_vocab"] == 4096
    assert got["decoded"].strip()  # the last id decodes to a word, not to nothing
    # std-0.02 weights over hidden 256: logits spread about sqrt(256) * 0.02 = 0.32, far from dummy weights'
    # near-ties (SGLang's --load-format dummy: every logprob -ln(vocab)).
    assert 0.15 < got["std"] < 0.6
    again = subprocess.run([str(VENV_PYTHON), str(REPO / "scripts" / "make_gpu_model.py"), "tiny", str(out),
                            "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already holds" in again.stdout  # a made folder is kept
