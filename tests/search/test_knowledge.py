"""What a study's failures teach (tuner/search/_knowledge.py): the values that explain them, its best configurations,
and the knowledge file written and read back."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tuner._errors import KnowledgeError
from tuner._failures import FailureKind
from tuner.search._knowledge import Lesson, knowledge_of_trials, read_knowledge, render

SM120 = {"engine": {"name": "sglang", "version": "0.5.6"},
         "gpus": {"name": "RTX PRO 6000", "compute_capability": "12.0", "count": 8, "memory_gb": 95.6},
         "model": {"name": "GLM-5", "params_b": 744.0}, "workload": {"metric": "output_throughput"}}
DIST = {"attention-backend": optuna.distributions.CategoricalDistribution(["trtllm_mla", "nsa", "flashinfer"]),
        "disable-cuda-graph": optuna.distributions.CategoricalDistribution([False, True]),
        "cuda-graph-max-bs": optuna.distributions.CategoricalDistribution([16, 32, 64, 128])}


def _trial(number: int, backend: str, graphs_off: bool, max_bs: int, failure: str | None = None,
           message: str = "", value: float = 1.0) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        params={"attention-backend": backend, "disable-cuda-graph": graphs_off, "cuda-graph-max-bs": max_bs},
        distributions=DIST, value=None if failure else value,
        state=TrialState.PRUNED if failure else TrialState.COMPLETE,
        user_attrs={"failure_kind": failure, "failure_message": message} if failure else {"feasible": True},
        system_attrs={"constraints": (1.0 if failure else 0.0,)})
    trial.number = number
    return trial


TRIALS = [
    _trial(0, "trtllm_mla", False, 64, value=100.0),
    # nsa fails with graphs on (at capture) and off (NaN); graphs off failed only with nsa.
    _trial(1, "nsa", False, 64, "graph_capture_failed", "Exception: Capture cuda graph failed: illegal memory access"),
    _trial(2, "nsa", True, 64, "nan", "logprob of output token 1 is NaN or inf (null)\nmore lines"),
    _trial(3, "nsa", True, 32, "nan", "logprob of output token 1 is NaN or inf (null)"),
    _trial(4, "trtllm_mla", False, 128, "oom", "torch.OutOfMemoryError: CUDA out of memory"),
    _trial(5, "trtllm_mla", False, 32, value=120.0),
    _trial(6, "trtllm_mla", False, 16, value=110.0),
    _trial(7, "trtllm_mla", False, 32, "interrupted"),  # no configuration's fault: nothing learnt
]


def test_a_studys_failures_are_explained_by_the_values_that_failed_in_other_company_too():
    knowledge = knowledge_of_trials("glm5", TRIALS, SM120, maximize=True)
    got = {(lesson.kind.value, lesson.capture, str(lesson.values)): (lesson.count, lesson.blame, lesson.trials,
                                                                      lesson.ran_fine, lesson.suspected)
           for lesson in knowledge.lessons}
    assert got == {  # one failure is a suspicion; two that point at nsa alone, a fact
        ("graph_capture_failed", True, "{'attention-backend': 'nsa'}"): (1, 1.0, (1,), 0, True),
        ("nan", False, "{'attention-backend': 'nsa'}"): (2, 2.0, (2, 3), 0, False),
        ("oom", False, "{'cuda-graph-max-bs': {'at-least': 128}}"): (1, 1.0, (4,), 0, True),
    }
    nan = next(lesson for lesson in knowledge.lessons if lesson.kind == FailureKind.NAN)
    assert nan.evidence == "logprob of output token 1 is NaN or inf (null)"  # the first line of the first failure
    assert "workload" not in nan.context and nan.context["gpus"]["compute_capability"] == "12.0"
    assert [(g.trial, g.rank) for g in knowledge.good] == [(5, 0), (6, 1), (0, 2)]  # best first
    assert knowledge.good[0].context["workload"] == {"metric": "output_throughput"}
    # The choices that ran: nsa only failed, graphs off only failed; sizes are amounts, not kernels.
    assert knowledge.ran == {"attention-backend": ("trtllm_mla",), "disable-cuda-graph": (False,)}


def test_a_lesson_reads_as_a_sentence_and_matches_what_it_says():
    flashmla = Lesson({"nsa-decode-backend": "flashmla_sparse"}, FailureKind.NAN, SM120, count=3, blame=3.0,
                      trials=(2, 3, 4), ran_fine=0)
    assert not flashmla.suspected
    assert flashmla.reads() == ("`nsa-decode-backend: flashmla_sparse` gives NaN on SM120 with SGLang 0.5.6 "
                                "(3 failed trials: 2, 3, 4; none ran fine with it)")
    oom = Lesson({"cuda-graph-max-bs": {"at-least": 96}}, FailureKind.OOM, SM120, count=2, blame=2.0, trials=(4, 6))
    assert oom.reads() == ("`cuda-graph-max-bs: >= 96` runs out of memory with GLM-5 (744B) on 8x 95.6 GB, "
                           "SGLang 0.5.6 (2 failed trials: 4, 6)")  # read from a file that did not say what ran fine
    assert oom.matches({"cuda-graph-max-bs": 128}) and not oom.matches({"cuda-graph-max-bs": 64})
    capture = Lesson({"attention-backend": "nsa"}, FailureKind.GRAPH_CAPTURE_FAILED, SM120, capture=True)
    assert capture.matches({"attention-backend": "nsa", "disable-cuda-graph": False})
    assert not capture.matches({"attention-backend": "nsa", "disable-cuda-graph": True})  # no capture, no lesson
    switch = Lesson({"enable-x": True}, FailureKind.NAN, SM120)
    assert not switch.matches({"enable-x": 1})  # a switch is not a size


@pytest.mark.parametrize("lesson, reads", [
    # One failure: a suspicion.
    (Lesson({"chunked-prefill-size": {"at-least": 16384}}, FailureKind.STARTUP_TIMEOUT, SM120, trials=(7,),
            capture=True, ran_fine=0),
     "`chunked-prefill-size: >= 16384` may hang at start capturing CUDA graphs on SM120 with SGLang 0.5.6 "
     "(1 failed trial: 7; none ran fine with it)"),
    # Two failures, but another value failed with it each time: either may be the cause.
    (Lesson({"max-running-requests": {"at-least": 128}}, FailureKind.CRASH_ON_START, SM120, count=2, blame=1.0,
            trials=(5, 9), ran_fine=0),
     "`max-running-requests: >= 128` may crash at start on SM120 with SGLang 0.5.6 (2 failed trials: 5, 9, blamed "
     "with 1 other value; none ran fine with it)"),
    # Three failures, yet a trial ran fine with it.
    (Lesson({"mem-fraction-static": {"at-most": 0.8}}, FailureKind.OOM, SM120, count=3, blame=3.0, trials=(1, 2, 8),
            ran_fine=1),
     "`mem-fraction-static: <= 0.8` may run out of memory with GLM-5 (744B) on 8x 95.6 GB, SGLang 0.5.6 "
     "(3 failed trials: 1, 2, 8; 1 ran fine with it)"),
])
def test_a_lesson_on_thin_evidence_reads_as_a_suspicion(lesson, reads):
    assert lesson.suspected and lesson.reads() == reads
    assert lesson.to_entry()["suspected"] is True and lesson.to_entry()["reads"] == reads


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_file_reads_back_what_was_written(tmp_path, suffix):
    knowledge = knowledge_of_trials("glm5", TRIALS, SM120, maximize=True)
    path = tmp_path / f"k{suffix}"
    path.write_text(render(knowledge, suffix.lstrip("."), "python -m tuner knowledge export --out k"))
    back = read_knowledge(path)
    assert back.source == str(path) and back.good == ()  # a file carries failures and what ran, no configurations
    assert back.lessons == knowledge.lessons
    # What ran, and on what: the GPUs and engine version say where a value that ran there runs (not the model).
    assert back.ran == knowledge.ran == {"attention-backend": ("trtllm_mla",), "disable-cuda-graph": (False,)}
    assert back.context == {"engine": SM120["engine"], "gpus": SM120["gpus"]}
    if suffix == ".yaml":
        text = path.read_text()
        assert text.startswith("# What the failures of study 'glm5' showed")
        assert "&id" not in text  # every entry's context written out, not as an alias
        nan = yaml.safe_load(text)["entries"][1]
        assert nan["reads"] == ("`attention-backend: nsa` gives NaN on SM120 with SGLang 0.5.6 (2 failed trials: 2, 3; "
                                "none ran fine with it)")
        assert "suspected" not in nan and nan["ran_fine"] == 0


@pytest.mark.parametrize("entry, problem", [
    ("- 3", "entries[0] must be a mapping"),
    ("- {kind: nan, context: {engine: {name: sglang}}}", "entries[0].values must name at least one flag"),
    ("- {values: {x: {above: 3}}, kind: nan, context: {engine: {name: sglang}}}",
     "entries[0].values.x: a range is {at-least: N} or {at-most: N}"),
    ("- {values: {x: [1, 2]}, kind: nan, context: {engine: {name: sglang}}}",
     "entries[0].values.x: [1, 2] is neither a value nor a range"),
    ("- {values: {x: 1}, kind: nan, context: {gpus: {}}}", "entries[0].context must name the engine at least"),
    ("- {values: {x: 1}, kind: nan, count: 0, context: {engine: {name: sglang}}}",
     "entries[0].count must be a whole number of trials (1 or more), got 0"),
    ("- {values: {x: 1}, kind: nan, count: 1, blame: 2, context: {engine: {name: sglang}}}",
     "entries[0].blame must be a number in (0, count], got 2"),
    ("- {values: {x: 1}, kind: nan, trials: 3, context: {engine: {name: sglang}}}",
     "entries[0].trials must be a list of trial numbers"),
    ("- {values: {x: 1}, kind: nan, capture: yes please, context: {engine: {name: sglang}}}",
     "entries[0].capture must be true or false"),
    ("- {values: {x: 1}, kind: nan, ran_fine: -1, context: {engine: {name: sglang}}}",
     "entries[0].ran_fine must be a whole number of trials (0 or more), got -1"),
])
def test_a_wrong_entry_is_named_with_its_fix(tmp_path, entry, problem):
    path = tmp_path / "k.yaml"
    path.write_text(f"format: tuner-knowledge\nschema: 1\nentries:\n{entry}\n")
    with pytest.raises(KnowledgeError) as raised:
        read_knowledge(path)
    assert str(raised.value).startswith(f"{path}: {problem}")
    assert "\n" not in str(raised.value)


def test_a_schema_1_file_reads_without_what_ran_and_a_wrong_ran_section_is_named_with_its_fix(tmp_path):
    entry = "- {values: {x: 1}, kind: nan, context: {engine: {name: sglang}}}"
    old = tmp_path / "old.yaml"
    old.write_text(f"format: tuner-knowledge\nschema: 1\nentries:\n{entry}\n")
    back = read_knowledge(old)
    assert (len(back.lessons), back.ran, back.context) == (1, {}, {})
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"format: tuner-knowledge\nschema: 2\nentries:\n{entry}\n"
                   "ran: {context: {engine: {name: sglang}}, values: {attention-backend: fa3}}\n")
    with pytest.raises(KnowledgeError) as raised:
        read_knowledge(bad)
    assert str(raised.value).startswith(f"{bad}: ran.values.attention-backend must be a list of backend names or "
                                        "true/false; write ran: {context:")


def test_a_study_passes_on_its_best_configuration_of_each_backend_before_a_second_of_one():
    trials = [_trial(0, "trtllm_mla", False, 64, value=100.0), _trial(1, "trtllm_mla", False, 32, value=99.0),
              _trial(2, "trtllm_mla", False, 16, value=98.0), _trial(3, "flashinfer", False, 64, value=90.0),
              _trial(4, "flashinfer", True, 64, value=80.0)]
    good = knowledge_of_trials("glm5", trials, SM120, maximize=True).good
    # Trials 1 and 2 differ from 0 only in an amount; 3 and 4 each name another choice.
    assert [(g.trial, g.rank) for g in good] == [(0, 0), (3, 1), (4, 2)]
