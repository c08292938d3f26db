"""`run --learn-from` and `knowledge export` through the command line: real tuner processes, real simulated servers,
real SQLite studies (tuner/search/_learn.py, tuner/search/_warm.py, tuner/search/_knowledge.py)."""

from __future__ import annotations

import optuna
import pytest
import yaml

from conftest import REPO, instant_space

SIM_FAST = {"TUNER_SIM_TIME_SCALE": "0.03", "TUNER_SIM_STARTUP_SCALE": "0.002"}
GLM5_SPACE = REPO / "search_spaces" / "glm5-nvfp4-sm120.yaml"
SPACE_70B = REPO / "search_spaces" / "llama3-70b-8xh200.yaml"
SHIPPED = REPO / "search_spaces" / "knowledge" / "glm5-nvfp4-sm120.yaml"
# On SM120 with SGLang 0.5.6 only trtllm_mla runs: nsa (flashmla_*) answers NaN or crashes capturing, flashinfer
# answers NaN at batch 64, triton garbage (tuner/sim/profiles/glm5-nvfp4-sm120.yaml).
BROKEN = {"nsa", "flashinfer", "triton"}
FIRST = 6  # trials of the GLM-5 studies compared
DEFAULT_CARRY = "carrying crashes (--carry all adds oom, untried, configs, around)"  # the run's first line, by default


def _other_model_on_the_same_gpu(tuner) -> tuple[str, str]:
    """A DeepSeek-V3.2-shaped model on the twin's GPUs and SGLang (the same kernels, so the same broken backends),
    and a space for it that tries the seed story's backends first: (profile file, space file)."""
    profile = yaml.safe_load((REPO / "tuner" / "sim" / "profiles" / "glm5-nvfp4-sm120.yaml").read_text())
    profile["name"] = "dsv32-nvfp4-sm120"
    profile["model"].update(name="DeepSeek-V3.2-NVFP4", architecture="DeepseekV32ForCausalLM", params_b=671,
                            active_params_b=37, weight_gb_sharded=420.0, layers=61, hidden_size=7168)
    profile_path = tuner.space(yaml.safe_dump(profile, sort_keys=False), "dsv32-profile.yaml")
    space = yaml.safe_load(GLM5_SPACE.read_text())
    space["name"] = "dsv32"
    baseline = space["baseline"]
    graphs_off = {**{k: v for k, v in baseline.items() if k != "cuda-graph-max-bs"}, "disable-cuda-graph": True}
    space["try-first"] = [{**graphs_off, "attention-backend": "nsa", "nsa-decode-backend": "flashmla_sparse"},
                          {**baseline, "attention-backend": "nsa", "nsa-decode-backend": "flashmla_kv"},
                          {**baseline, "attention-backend": "flashinfer"}, {**baseline, "attention-backend": "triton"}]
    return str(profile_path), str(tuner.space(yaml.safe_dump(space, sort_keys=False), "dsv32.yaml"))


def _backends(study) -> list[str]:
    return [t.params["attention-backend"] for t in sorted(study.get_trials(), key=lambda t: t.number)]


@pytest.mark.timeout(900)
def test_a_second_glm5_study_skips_the_backends_another_model_on_the_same_gpu_found_broken(tuner):
    profile, space = _other_model_on_the_same_gpu(tuner)
    first = tuner.run("run", "--trials", "6", "--simulate", profile, "--space", space, env=SIM_FAST)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "learning from" not in first.stderr  # nothing earlier in the storage

    # What its failures showed, as a file.
    export = tuner.run("knowledge", "export", "--study", "dsv32", "--out", "dsv32.yaml")
    assert export.returncode == 0, export.stderr
    document = yaml.safe_load((tuner.folder / "dsv32.yaml").read_text())
    assert (document["format"], document["schema"]) == ("tuner-knowledge", 2)
    # What ran and passed the gate on these GPUs and this engine version: not the backends that failed it.
    assert document["ran"]["values"]["attention-backend"] == ["trtllm_mla"]
    assert document["ran"]["context"]["engine"]["version"] == "0.5.6" and "model" not in document["ran"]["context"]
    entries = {(e["values"].get("attention-backend"), e["kind"]): e for e in document["entries"]}
    nan = entries["nsa", "nan"]
    assert nan["trials"][0] == 1 and nan["count"] == len(nan["trials"]) and nan["study"] == "dsv32"
    # Its sentence counts its evidence; from one failure it is a suspicion.
    count, trials = nan["count"], ", ".join(map(str, nan["trials"]))
    said = "may give NaN" if count == 1 else "gives NaN"
    assert nan["reads"] == (f"`attention-backend: nsa` {said} on SM120 with SGLang 0.5.6 ({count} failed "
                            f"trial{'s' if count > 1 else ''}: {trials}; none ran fine with it)")
    assert nan.get("suspected", False) is (count == 1)
    assert nan["evidence"].startswith("logprob of output token 1 is NaN")
    assert nan["context"]["engine"]["version"] == "0.5.6"
    assert nan["context"]["gpus"]["compute_capability"] == "12.0"
    assert nan["context"]["model"]["name"] == "DeepSeek-V3.2-NVFP4"
    assert entries["nsa", "graph_capture_failed"]["capture"] is True
    assert entries["flashinfer", "nan"]["trials"][0] == 3
    assert entries["triton", "garbage"]["trials"][0] == 4
    # Graphs off failed only together with nsa: nsa, which failed with graphs on too, takes the blame alone.
    assert not [e for e in document["entries"] if e["values"].get("disable-cuda-graph") is True]
    assert export.stderr.splitlines()[0] == f"study 'dsv32' (sqlite:///trials.db): {len(entries)} entries written to " \
                                            "dsv32.yaml"

    # The same GLM-5 study twice, with the same seed: cold (in a storage of its own), then learning from this
    # storage's studies on the same engine and GPU, by default.
    cold = tuner.run("run", "--trials", str(FIRST), "--simulate", "--storage", "sqlite:///cold.db", env=SIM_FAST)
    assert cold.returncode == 0, cold.stderr[-3000:]
    assert "learning from" not in cold.stderr
    warm = tuner.run("run", "--trials", str(FIRST), "--simulate", "--study", "glm5-warm", env=SIM_FAST)
    assert warm.returncode == 0, warm.stderr[-3000:]
    said = warm.stderr.splitlines()[0]
    assert said.startswith("learning from 1 earlier study of this storage on the same engine and GPU: study 'dsv32' "
                           "("), said
    # By default only crash lessons carry: no configuration.
    assert said.endswith(f"lessons); {DEFAULT_CARRY} (--learn-from none starts cold)"), said
    cold_study = optuna.load_study(study_name="glm5-nvfp4-sm120", storage=f"sqlite:///{tuner.folder / 'cold.db'}")
    cold_backends, warm_backends = _backends(cold_study), _backends(tuner.study("glm5-warm"))
    assert BROKEN & set(cold_backends), cold_backends  # cold, the search meets a broken backend early
    assert not BROKEN & set(warm_backends), warm_backends  # warm, from its first trial on it does not
    warm_study = tuner.study("glm5-warm")
    assert not [t.number for t in warm_study.trials if "learned_from" in t.user_attrs]
    assert "carried from" not in warm.stderr
    learned = warm_study.user_attrs["learned"]
    assert learned["default"] is True and [s["source"] for s in learned["sources"]] == ["study 'dsv32'"]
    assert learned["carry"] == ["crashes"] and learned["sources"][0]["first"] == 0

    # Resumed, it learns the same again.
    more = tuner.run("run", "--trials", str(FIRST + 1), "--simulate", "--study", "glm5-warm", env=SIM_FAST)
    assert more.returncode == 0, more.stderr[-3000:]
    lessons = learned["sources"][0]["lessons"]
    assert more.stderr.splitlines()[0] == ("learning from 1 earlier study of this storage on the same engine and GPU: "
                                           f"study 'dsv32' ({lessons} lessons); {DEFAULT_CARRY} (--learn-from none "
                                           "starts cold)")
    assert tuner.study("glm5-warm").user_attrs["learned"]["sources"][0]["first"] == 0

    # Asked to, it carries dsv32's winner too: tried right after the baseline, and the last screen says what it took.
    carried = tuner.run("run", "--trials", "3", "--simulate", "--study", "glm5-carried", "--learn-from", "dsv32",
                        "--carry", "all", env=SIM_FAST)
    assert carried.returncode == 0, carried.stderr[-3000:]
    said = carried.stderr.splitlines()[0]
    assert said.startswith("learning from study 'dsv32' (") and said.endswith(
        "lessons, 1 configuration to try first); carrying crashes, oom, untried, configs, around"), said
    carried_study = tuner.study("glm5-carried")
    assert carried_study.trials[1].user_attrs["learned_from"] == "study 'dsv32'"
    assert carried_study.trials[1].params["attention-backend"] == "trtllm_mla"
    won = carried_study.best_trial.number == 1
    assert ("carried from study 'dsv32': trial 1 (1 restart); "
            + ("trial 1, carried, is the winner" if won else "none of them is the winner")) in carried.stderr
    show = tuner.run("show", "--study", "glm5-carried", env={"COLUMNS": "250"})
    line, = [line for line in show.stdout.splitlines() if line.startswith("learned: ")]
    lessons = carried_study.user_attrs["learned"]["sources"][0]["lessons"]
    assert line == f"learned: {lessons} lessons from study 'dsv32', its configurations tried as trial 1"
    assert tuner.leftovers() == {}


@pytest.mark.timeout(600)
def test_a_carried_configuration_that_cannot_hold_the_next_model_is_not_tried(tuner):
    """An 8B model's study on 8 H200s ran as 8 replicas (tp 1, dp 8). The next study, Llama 70B on the same GPUs,
    asks for every part (--carry all): no tp size keeps 8 replicas of the 70B model within 8 GPUs, so none of the
    8B study's configurations is tried, and the run's first line says why. By default none would be carried."""
    profile = yaml.safe_load((REPO / "tuner" / "sim" / "profiles" / "llama3-70b-8xh200.yaml").read_text())
    profile["name"] = "llama3-8b-8xh200"
    profile["model"].update(name="Llama-3.1-8B-Instruct", params_b=8.03, active_params_b=8.03, weight_gb_sharded=15.0,
                            layers=32, hidden_size=4096)
    space = yaml.safe_load(SPACE_70B.read_text())
    space.update(name="llama3-8b-dp8", baseline={**space["baseline"], "tp-size": 1, "dp-size": 8})
    space["params"].update({"tp-size": {"type": "categorical", "choices": [1]},
                            "dp-size": {"type": "categorical", "choices": [8]}})
    small = tuner.run("run", "--trials", "3", "--simulate", str(tuner.space(yaml.safe_dump(profile), "8b.yaml")),
                      "--space", str(tuner.space(yaml.safe_dump(space, sort_keys=False), "8b-space.yaml")),
                      env=SIM_FAST)
    assert small.returncode == 0, small.stderr[-3000:]
    assert [t for t in tuner.study("llama3-8b-dp8").get_trials() if t.value is not None]  # a best to carry

    big = tuner.run("run", "--trials", "3", "--simulate", "llama3-70b-8xh200", "--space", str(SPACE_70B),
                    "--carry", "all", env=SIM_FAST)
    assert big.returncode == 0, big.stderr[-3000:]
    said = big.stderr.splitlines()[0]
    source, = [s for s in tuner.study("llama3-70b-8xh200").user_attrs["learned"]["sources"]
               if s["source"] == "study 'llama3-8b-dp8'"]
    unfit = source["unfit"]
    assert unfit >= 1 and source["first"] == 0, source
    assert (f"study 'llama3-8b-dp8' ({source['lessons']} lesson{'' if source['lessons'] == 1 else 's'}, {unfit} "
            f"configuration{'' if unfit == 1 else 's'} left out: no tensor-parallel size of this space holds this "
            "model with them)") in said, said
    assert not [t.number for t in tuner.study("llama3-70b-8xh200").trials if "learned_from" in t.user_attrs]
    assert "carried from" not in big.stderr
    assert tuner.leftovers() == {}


@pytest.mark.timeout(600)
def test_the_shipped_knowledge_is_used_and_a_lesson_this_study_contradicts_does_not_stop_the_value(tuner):
    """From the shipped file plus a wrong entry (trtllm_mla, the one backend that runs, said to give NaN): the
    baseline runs trtllm_mla, which voids the entry, and the study goes on with it; the broken backends the file
    names stay untried."""
    knowledge = yaml.safe_load(SHIPPED.read_text())
    nan = next(e for e in knowledge["entries"] if e["values"] == {"attention-backend": "nsa"} and e["kind"] == "nan")
    knowledge["entries"].append({**nan, "values": {"attention-backend": "trtllm_mla"}, "reads": "wrong"})
    path = tuner.space(yaml.safe_dump(knowledge, sort_keys=False), "told.yaml")
    done = tuner.run("run", "--trials", str(FIRST), "--simulate", "--learn-from", str(path), env=SIM_FAST)
    assert done.returncode == 0, done.stderr[-3000:]
    lessons = len(knowledge["entries"])
    said = done.stderr.splitlines()[0]
    assert said == f"learning from {path} ({lessons} lessons); {DEFAULT_CARRY}", done.stderr[:500]
    study = tuner.study("glm5-nvfp4-sm120")
    assert _backends(study) == ["trtllm_mla"] * FIRST
    source, = study.user_attrs["learned"]["sources"]
    assert (source["source"], source["lessons"], source["first"]) == (str(path), lessons, 0)
    assert "`attention-backend: trtllm_mla` gives NaN on SM120 with SGLang 0.5.6 (3 failed trials: 2, 3, 4)" in \
        source["told"]
    assert study.user_attrs["learned"]["default"] is False


KNOWN = ("format: tuner-knowledge\nschema: 1\nentries:\n- values: {attention-backend: triton}\n  kind: {kind}\n"
         "  context: {engine: {name: sglang, version: 0.5.6}, gpus: {compute_capability: '12.0'}}\n")
BAD_SOURCES = {
    "nosuch": ("--learn-from nosuch: no study of that name in sqlite:///trials.db, and no such file; pass a knowledge "
               "file (.yaml or .json) or a storage URL (sqlite:///other.db#study)"),
    "missing.yaml": ("knowledge file missing.yaml does not exist; pass a file 'python -m tuner knowledge export' "
                     "wrote, a study name or a storage URL"),
    "none missing.yaml": ("--learn-from none starts cold, and cannot be given with other sources; pass either 'none' "
                          "or the sources to learn from"),
    "sqlite:///other.db": ("--learn-from sqlite:///other.db: no study in sqlite:///other.db: the file other.db does "
                           "not exist; pass a storage URL that holds a study, e.g. sqlite:///other.db#study"),
    "broken.yaml": "knowledge file broken.yaml is not YAML at line 2; pass a file 'python -m tuner knowledge export' "
                   "wrote",
    "broken.json": "knowledge file broken.json is not JSON; pass a file 'python -m tuner knowledge export' wrote",
    "space.yaml": ("space.yaml is not a tuner knowledge file (no 'format: tuner-knowledge'); pass a file 'python -m "
                   "tuner knowledge export' wrote"),
    "newer.yaml": ("newer.yaml: schema 3 is not one this tuner reads (1, 2); export it again with this tuner's "
                   "'knowledge export'"),
    "kind.yaml": ("kind.yaml: entries[0].kind: 'nann' is not a failure kind; use one of crash_on_start, "
                  "crash_under_load, garbage, graph_capture_failed, hang, inconsistent_logprobs, nan, oom, wrong_answer"),
    "slo.yaml": "slo.yaml: entries[0].kind: slo_violation failures are not carried to other studies; drop the entry",
}


@pytest.mark.parametrize("source", list(BAD_SOURCES))
def test_a_source_that_cannot_be_learnt_from_is_one_line_and_nothing_is_written(tuner, source):
    space = tuner.space(instant_space("bad-source"))
    tuner.space("x: [\n", "broken.yaml")
    tuner.space("{\"format\": ", "broken.json")
    tuner.space(KNOWN.replace("{kind}", "nan").replace("schema: 1", "schema: 3"), "newer.yaml")
    tuner.space(KNOWN.replace("{kind}", "nann"), "kind.yaml")
    tuner.space(KNOWN.replace("{kind}", "slo_violation"), "slo.yaml")
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant", "--learn-from",
                     *source.split())
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: {BAD_SOURCES[source]}"]
    assert not (tuner.folder / "trials.db").exists() and not (tuner.folder / "runs").exists()


def test_a_study_without_a_context_is_refused_as_a_source_and_for_export(tuner):
    """A study from before contexts were recorded cannot be matched to another: both commands say so in one line."""
    old = optuna.create_study(study_name="old", storage=tuner.storage)
    old.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    space = tuner.space(instant_space("new"))
    run = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant", "--learn-from", "old")
    export = tuner.run("knowledge", "export", "--study", "old", "--out", "old.yaml")
    fix = ("study 'old' has no recorded context (it ran before the tuner recorded one), so nothing it learnt can be "
           "matched to another study; add one trial to it with this tuner (run --study old --trials N+1), or leave "
           "it out")
    for done in (run, export):
        assert done.returncode == 2 and done.stderr.splitlines() == [f"error: {fix}"], done.stderr
    assert [s.study_name for s in optuna.get_all_study_summaries(tuner.storage)] == ["old"]
    assert not (tuner.folder / "old.yaml").exists()


def test_a_cold_study_is_told_which_tensor_parallel_sizes_cannot_hold_its_model(tuner):
    """Llama 70B in bf16 (141 GB) on 141 GB H200s: at tp 1 the weights fill the GPU. With nothing to learn from,
    the run says so, records it, and its first trials leave tp 1 alone."""
    space = REPO / "search_spaces" / "llama3-70b-8xh200.yaml"
    done = tuner.run("run", "--trials", "4", "--space", str(space), "--simulate", "llama3-70b-8xh200",
                     "--learn-from", "none", env=SIM_FAST)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("the model's size:")]
    assert said == ["the model's size: `tp-size: <= 1` is likely to run out of memory (at 1 the weights take 101% "
                    "of each GPU's memory)"], done.stderr
    study = tuner.study("llama3-70b-8xh200")
    assert [s["source"] for s in study.user_attrs["learned"]["sources"]] == ["the model's size"]
    assert all(t.params["tp-size"] > 1 for t in study.get_trials())
