"""Warm start without a server (tuner/search/_warm.py): what carries to which context, configurations adapted to another
space, and the sampler told of failures and good configurations, driven in-process."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from conftest import instant_space
from tuner._failures import FailureKind
from tuner.search._knowledge import GoodConfig, Knowledge, Lesson
from tuner.spec._spec import parse_spec
from tuner.search._study import _initialise, make_sampler
from tuner.search._warm import (HALF_LIFE, KERNEL_WEIGHT, Ghost, Prior, adapt, fit_memory, lesson_weight, similarity,
                                warm_start)

SM120 = {"engine": {"name": "sglang", "version": "0.5.6"},
         "gpus": {"name": "RTX PRO 6000", "compute_capability": "12.0", "count": 8, "memory_gb": 95.6},
         "model": {"name": "GLM-5", "architecture": "GlmMoeDsaForCausalLM", "params_b": 744.0, "dtype": "bfloat16"},
         "workload": {"metric": "output_throughput", "direction": "maximize"}}
PARAMS = ("  attention-backend: {type: categorical, choices: [a, b, c, d]}\n"
          "  cuda-graph-max-bs: {type: categorical, choices: [16, 32, 64, 128]}\n"
          "  schedule-conservativeness: {type: float, low: 0.5, high: 1.5, step: 0.1}\n")
SPEC = parse_spec(instant_space("warm", params=PARAMS, baseline="{attention-backend: a, cuda-graph-max-bs: 64, "
                                                              "schedule-conservativeness: 1.0}",
                                extra="constraints:\n  - forbid: {attention-backend: c, cuda-graph-max-bs: 128}\n"))


def _with(context: dict, **changes: dict) -> dict:
    return {key: {**value, **changes.get(key, {})} for key, value in context.items()}


def test_kernel_failures_carry_to_the_same_gpu_architecture_and_version_whatever_the_model():
    nan = Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120)
    llama = _with(SM120, model={"name": "Llama", "architecture": "LlamaForCausalLM", "params_b": 8.0})
    assert lesson_weight(nan, llama) == KERNEL_WEIGHT
    assert lesson_weight(nan, _with(SM120, engine={"version": "0.5.23"})) == 0
    assert lesson_weight(nan, _with(SM120, gpus={"compute_capability": "9.0"})) == 0
    assert lesson_weight(nan, _with(SM120, engine={"name": "vllm"})) == 0


def test_memory_failures_carry_scaled_by_how_heavy_the_model_is_for_its_memory():
    oom = Lesson({"cuda-graph-max-bs": {"at-least": 128}}, FailureKind.OOM, SM120)
    full = lesson_weight(oom, _with(SM120, gpus={"compute_capability": "9.0"}))  # another GPU: memory alone counts
    assert full > 0
    assert lesson_weight(oom, _with(SM120, model={"params_b": 900.0})) == full  # heavier: at least as likely
    assert lesson_weight(oom, _with(SM120, model={"params_b": 558.0})) == pytest.approx(0.75 * full)
    assert lesson_weight(oom, _with(SM120, gpus={"memory_gb": 141.0, "count": 8}, model={"params_b": 744.0})) \
        == pytest.approx(full * 95.6 / 141.0)
    assert lesson_weight(oom, _with(SM120, model={"params_b": 300.0})) == 0  # less than half as heavy


def test_a_configuration_of_another_space_is_adapted_to_this_one():
    # A flag this space lacks dropped, a size snapped to the nearest choice, a float to its step, a missing flag
    # as the baseline has it, a choice this space lacks as the baseline has it.
    assert adapt({"attention-backend": "b", "cuda-graph-max-bs": 48, "schedule-conservativeness": 1.234,
                  "chunked-prefill-size": 4096}, SPEC.space) == \
        {"attention-backend": "b", "cuda-graph-max-bs": 32, "schedule-conservativeness": 1.2}
    assert adapt({"attention-backend": "z", "schedule-conservativeness": 9}, SPEC.space) == \
        {"attention-backend": "a", "cuda-graph-max-bs": 64, "schedule-conservativeness": 1.5}
    assert adapt({"attention-backend": "c", "cuda-graph-max-bs": 256}, SPEC.space) is None  # forbidden here


def test_good_configurations_of_the_same_gpu_architecture_run_first_others_do_not():
    def best(study: str, context: dict, *backends: str) -> Knowledge:
        good = tuple(GoodConfig({"attention-backend": b, "cuda-graph-max-bs": 32, "schedule-conservativeness": 0.8},
                                context, rank, study, rank) for rank, b in enumerate(backends))
        return Knowledge(f"study '{study}'", good=good, context=context)

    other_gpu = _with(SM120, gpus={"name": "H200", "compute_capability": "9.0"})
    told = Knowledge("file", (Lesson({"attention-backend": "c"}, FailureKind.NAN, SM120),))
    warm = warm_start([best("near", SM120, "b", "c", "a"), best("far", other_gpu, "d"), told], SPEC.space, SM120)
    # The near study's best three, less the one the file says fails here; none from another GPU architecture.
    assert [params["attention-backend"] for params, _ in warm.first] == ["b", "a"]
    assert {source for _, source in warm.first} == {"study 'near'"}
    assert similarity(other_gpu, SM120) == pytest.approx(0.3) and similarity(SM120, SM120) == 1.0
    assert warm.prior.ghosts == ()  # GHOST_WEIGHT is off: other models' best misled TPE on the training families
    assert [(u.source, u.lessons, u.first) for u in warm.used] == \
        [("study 'near'", 0, 2), ("study 'far'", 0, 0), ("file", 1, 0)]


def test_a_good_configuration_of_a_lighter_model_runs_here_on_as_many_more_gpus_as_this_model_is_heavier():
    spec = parse_spec(instant_space("tp", params=PARAMS + "  tp-size: {type: categorical, choices: [1, 2, 4, 8]}\n",
                                    baseline="{attention-backend: a, cuda-graph-max-bs: 64, "
                                             "schedule-conservativeness: 1.0, tp-size: 8}"))
    light = _with(SM120, model={"params_b": 200.0})
    best = {"attention-backend": "b", "cuda-graph-max-bs": 32, "schedule-conservativeness": 0.8, "tp-size": 1}
    assert fit_memory(best, spec.space, light, SM120)["tp-size"] == 4  # 3.7x as heavy: tp 1 -> 4
    assert fit_memory(best, spec.space, SM120, light) == best  # lighter here: as it was
    assert fit_memory({**best, "tp-size": 4}, spec.space, light, SM120) is None  # no size holds it
    fixed = {k: v for k, v in best.items() if k != "tp-size"}
    assert fit_memory(fixed, SPEC.space, light, SM120) == fixed  # the space fixes the split: nothing to adapt
    warm = warm_start([Knowledge("study 'light'", good=(GoodConfig(best, light, 0, "light", 0),), context=light)],
                      spec.space, SM120)
    assert [params["tp-size"] for params, _ in warm.first] == [4]


def _trial(params: dict, failed: bool = False) -> optuna.trial.FrozenTrial:
    dist = {"attention-backend": optuna.distributions.CategoricalDistribution(["a", "b", "c", "d"])}
    return optuna.trial.create_trial(params=params, distributions=dist, value=None if failed else 1.0,
                                     state=TrialState.PRUNED if failed else TrialState.COMPLETE,
                                     user_attrs={"failure_kind": "nan"} if failed else {},
                                     system_attrs={"constraints": (1.0 if failed else 0.0,)})


def test_a_lesson_fades_with_this_studys_trials_and_one_run_that_contradicts_it_voids_it():
    prior = warm_start([Knowledge("file", (Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120),))],
                       SPEC.space, SM120).prior
    fresh = prior.live([])
    assert [w for _, w in fresh] == [KERNEL_WEIGHT]
    later = prior.live([_trial({"attention-backend": "a"})] * HALF_LIFE)
    assert [w for _, w in later] == [KERNEL_WEIGHT / 2]
    assert prior.live([_trial({"attention-backend": "d"}, failed=True)]) != []  # a failure here agrees with it
    assert prior.live([_trial({"attention-backend": "d"})]) == []  # a run here outweighs it

    class Own:
        def log_run(self, params, space):
            return 0.0

    odds = prior.odds(Own(), [])
    assert odds.log_run({"attention-backend": "d"}, {}) == pytest.approx(-math.log(1 + KERNEL_WEIGHT))
    assert odds.log_run({"attention-backend": "a"}, {}) == 0.0


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_value_told_to_fail_is_avoided_early_and_found_later_where_it_is_the_best():
    """Never a ban: the wrong lesson keeps `d` out of the first trials; TPE tries it once the lesson has faded,
    and from then on this study's own measurement wins. (It costs: cold, these seeds find `d` by trial 9.)"""
    told = Knowledge("file", (Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120, count=2, blame=2.0),))
    for seed in range(3):
        warm = warm_start([told], SPEC.space, SM120)
        study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", seed, SPEC, warm.prior))
        _initialise(study, SPEC, "tpe")

        def throughput(trial: optuna.Trial) -> float:
            values = SPEC.space.suggest(trial)
            return (2.0 if values["attention-backend"] == "d" else 1.0) + 0.1 * values["schedule-conservativeness"]

        study.optimize(throughput, n_trials=80)
        backends = "".join(t.params["attention-backend"] for t in study.trials)
        first_d = backends.find("d")
        assert 10 <= first_d < 60, backends
        assert backends[first_d:].count("d") > 0.5 * len(backends[first_d:]), backends
        assert study.best_params["attention-backend"] == "d"


def test_ghosts_of_good_configurations_raise_tpes_density_where_they_were():
    # warm_start makes none while GHOST_WEIGHT is off; the sampler still takes a prior that has them.
    told = Prior(ghosts=(Ghost({"attention-backend": "c", "cuda-graph-max-bs": 16, "schedule-conservativeness": 0.6},
                                0.5),))
    study = optuna.create_study(direction="maximize")
    for backend in ("a", "b"):  # two trials away from the ghost
        study.enqueue_trial({"attention-backend": backend, "cuda-graph-max-bs": 128, "schedule-conservativeness": 1.4})
    study.optimize(lambda t: float(len(SPEC.space.suggest(t))), n_trials=2)
    space = {name: dist for name, dist in study.trials[0].distributions.items()}
    densities = []
    for prior in (None, told):
        sampler = make_sampler("tpe", 0, SPEC, prior)
        below = sampler._build_parzen_estimator(study, space, study.trials[:2], handle_below=True)
        ghost = {name: np.array([dist.to_internal_repr(told.ghosts[0].params[name])])
                 for name, dist in space.items()}
        densities.append(below.log_pdf(ghost)[0])
    assert densities[1] > densities[0] + 1.0
