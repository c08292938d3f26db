"""The study's context (tuner/search/_context.py): recorded by a real run against the simulator, shown by `show`, and
kept on resume where a poorer one comes along."""

from __future__ import annotations

import json

import optuna

from conftest import FAULT_SPACE
from .test_model_facts import LLAMA
from tuner.search._context import ATTR, ContextRecorder, describe
from tuner.spec._spec import parse_spec


def test_a_run_records_its_context_and_show_prints_it(tuner, tmp_path):
    model = tmp_path / "Llama-3-8B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA))
    done = tuner.run("run", "--trials", "1", "--space", str(tuner.space(FAULT_SPACE)), "--simulate", "instant",
                     "--model", str(model))
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("faults")
    context = study.user_attrs[ATTR]
    trial, = study.get_trials()
    # The version the trial read back from /server_info; the GPUs the simulator's profile pretends to be.
    assert context["schema"] == 1
    assert context["engine"] == {"name": "sglang", "version": trial.user_attrs["server_version"],
                                 "version_from": "server_info"}
    assert trial.user_attrs["server_version"] == "0.5.23"
    assert context["gpus"] == {"source": "simulator profile instant", "count": 8, "name": "NVIDIA H200",
                               "compute_capability": "9.0", "memory_gb": 139.8, "interconnect": "nvlink"}
    model_facts = context["model"]
    assert (model_facts["source"], model_facts["name"], model_facts["architecture"], model_facts["layers"],
            model_facts["kv_heads"], model_facts["params_b"]) == \
        ("config.json", "Llama-3-8B", "LlamaForCausalLM", 32, 8, 8.03)
    assert context["workload"] == {"concurrency": [40], "requests": 80, "input_len": 16, "output_len": 24,
                                   "metric": "output_throughput", "direction": "maximize"}
    # optuna-dashboard shows a study user attr as JSON cut at 1024 characters: the whole of it fits.
    assert len(json.dumps(context)) < 1024

    out = tuner.run("show", env={"COLUMNS": "250"}).stdout
    line, = [line for line in out.splitlines() if line.startswith("context: ")]
    assert line == ("context: SGLang 0.5.23 on 8x NVIDIA H200 (sm90, 139.8 GB, nvlink, simulated); model Llama 32 "
                    "layers hidden 4096 32/8 heads bfloat16 8.03B params; workload 40 concurrent, 16 in / 24 out; "
                    "objective output_throughput max")


def test_a_poorer_context_does_not_replace_a_richer_one(tmp_path):
    """A resumed run whose trial read no version back (its server crashed at start) keeps the stored context."""
    spec = parse_spec(FAULT_SPACE)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'trials.db'}")
    first = ContextRecorder(spec, profile="instant")
    first.record(study, {"server_version": None})  # the first trial crashed: the profile's version for now
    assert study.user_attrs[ATTR]["engine"]["version_from"] == "simulator profile"
    first.record(study, {"server_version": "0.5.23"})  # the next one read it back
    assert study.user_attrs[ATTR]["engine"] == {"name": "sglang", "version": "0.5.23", "version_from": "server_info"}

    resumed = ContextRecorder(spec, profile="instant")
    resumed.record(study, {"server_version": None})
    assert study.user_attrs[ATTR]["engine"]["version_from"] == "server_info"


def test_without_a_gpu_or_a_model_folder_the_context_says_so():
    spec = parse_spec(FAULT_SPACE.replace("/models/instant", "org/some-model"))
    attr = ContextRecorder(spec).collect(None).to_attr()
    assert attr["gpus"] == {"source": "none: not asked", "count": 0}
    assert attr["engine"] == {"name": "sglang", "version_from": "unknown"}
    assert describe(attr).startswith("SGLang (version unknown) on no GPU read; model unknown (none: no config.json "
                                     "at org/some-model")
