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
from tuner.search._study import _initialise, make_sampler
from tuner.search._warm import (HALF_LIFE, KERNEL_WEIGHT, MAX_WEIGHT, MEMORY_WEIGHT, PARTS, SCALE_POWER,
                                UNTRIED_WEIGHT, Ghost, Prior, adapt, fit_memory, lesson_weight, scale_memory,
                                similarity, warm_start, weight_lesson)
from tuner.spec._spec import parse_spec

EVERY_PART = frozenset(PARTS)  # run --carry all: by default neither OOM lessons nor configurations carry
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


def test_a_suspicion_weighs_what_its_blame_says_as_a_fact_does():
    """How a lesson reads (a one-trial lesson "may" fail) changes nothing of what a later study is told: its weight
    is its blame's."""
    once = Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120, trials=(7,), ran_fine=0)
    shared = Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120, count=2, blame=1.0, trials=(5, 9), ran_fine=0)
    fact = Lesson({"attention-backend": "d"}, FailureKind.NAN, SM120, count=3, blame=3.0, trials=(2, 3, 4), ran_fine=0)
    assert once.suspected and shared.suspected and not fact.suspected
    assert lesson_weight(once, SM120) == lesson_weight(shared, SM120) == KERNEL_WEIGHT
    assert lesson_weight(fact, SM120) == min(MAX_WEIGHT, 3 * KERNEL_WEIGHT)


def test_memory_failures_carry_to_any_gpu_where_the_model_and_memory_are_known():
    oom = Lesson({"cuda-graph-max-bs": {"at-least": 128}}, FailureKind.OOM, SM120)
    assert lesson_weight(oom, _with(SM120, gpus={"compute_capability": "9.0"})) == MEMORY_WEIGHT
    assert lesson_weight(oom, _with(SM120, model={"params_b": 8.0})) == MEMORY_WEIGHT  # its bounds move instead
    assert lesson_weight(oom, _with(SM120, engine={"version": "0.5.23"})) == MEMORY_WEIGHT
    assert lesson_weight(oom, _with(SM120, model={"params_b": None})) == 0  # no size: nothing to scale it by
    assert lesson_weight(oom, _with(SM120, engine={"name": "vllm"})) == 0


def test_a_tensor_parallel_size_that_ran_out_of_memory_warns_of_larger_ones_for_a_heavier_model():
    light = _with(SM120, model={"params_b": 372.0})  # half of GLM-5's 744B
    oom = Lesson({"tp-size": 1}, FailureKind.OOM, light)
    heavier = scale_memory(oom, SM120)
    assert heavier.values == {"tp-size": {"at-most": 2}} and heavier.scaled_from == {"tp-size": 1}
    assert heavier.matches({"tp-size": 2}) and not heavier.matches({"tp-size": 4})
    assert heavier.reads() == ("`tp-size: <= 2` may run out of memory here, as `tp-size: 1` did with GLM-5 (372B) on "
                               "8x 95.6 GB, SGLang 0.5.6 (1 failed trial)")
    # Twice the memory per GPU holds twice the weights: the same sizes as for the lighter model on the smaller GPUs.
    assert scale_memory(oom, _with(SM120, gpus={"memory_gb": 191.2})).values == {"tp-size": {"at-most": 1}}
    lighter = scale_memory(Lesson({"tp-size": {"at-most": 2}}, FailureKind.OOM, SM120), light)
    assert lighter.values == {"tp-size": {"at-most": 1}}  # half as heavy: tp 2 holds it
    far_lighter = scale_memory(oom, _with(SM120, model={"params_b": 100.0}))
    assert not far_lighter.matches({"tp-size": 1})  # even one GPU holds it


def test_memory_bounds_move_with_weights_per_gpu_over_memory_per_gpu():
    light = _with(SM120, model={"params_b": 186.0})  # a quarter of GLM-5's 744B
    ratio = 4 ** SCALE_POWER  # how much sooner GLM-5 runs out of memory
    learnt = Lesson({"attention-backend": "b", "cuda-graph-max-bs": {"at-least": 128}}, FailureKind.OOM, light,
                    capture=True)
    moved = scale_memory(learnt, SM120)  # heavier per GPU: runs out from a smaller graph size
    assert moved.values == {"attention-backend": "b", "cuda-graph-max-bs": {"at-least": pytest.approx(128 / ratio)}}
    assert moved.capture and moved.kind == FailureKind.OOM
    assert moved.matches({"attention-backend": "b", "cuda-graph-max-bs": 64 if ratio >= 2 else 128})
    # Four times as many GPUs share the weights: each holds what it held, the bound stays.
    assert scale_memory(learnt, _with(SM120, gpus={"count": 32})).values == learnt.values
    too_little = Lesson({"mem-fraction-static": {"at-most": 0.2}}, FailureKind.OOM, light)  # no room for a KV pool
    assert scale_memory(too_little, SM120).values == {"mem-fraction-static": {"at-most": pytest.approx(0.2 * ratio)}}
    too_much = Lesson({"mem-fraction-static": {"at-least": 0.9}}, FailureKind.OOM, light)  # no room for graphs
    assert scale_memory(too_much, SM120).values == {
        "mem-fraction-static": {"at-least": pytest.approx(1 - 0.1 * ratio)}}
    assert scale_memory(too_much, light) is too_much  # the same model and GPUs: as learnt
    assert scale_memory(too_much, _with(SM120, model={"params_b": None})) is too_much  # no size to scale by


def test_a_warm_start_tells_the_sampler_the_moved_memory_bounds():
    light = _with(SM120, model={"params_b": 186.0})
    oom = Lesson({"cuda-graph-max-bs": {"at-least": 128}}, FailureKind.OOM, light)
    warm = warm_start([Knowledge("study 'light'", (oom,), context=light)], SPEC.space, SM120, EVERY_PART)
    (carried,) = warm.prior.lessons
    assert carried.lesson.values == scale_memory(oom, SM120).values and carried.weight == MEMORY_WEIGHT
    assert warm.used[0].told == (carried.lesson.reads(),) and "as `cuda-graph-max-bs: >= 128` did" in \
        warm.used[0].told[0]

    class Own:
        def log_run(self, params, space):
            return 0.0

    odds = warm.prior.odds(Own(), [])
    assert odds.log_run({"cuda-graph-max-bs": 128}, {}) == pytest.approx(-math.log1p(MEMORY_WEIGHT))
    assert odds.log_run({"cuda-graph-max-bs": 16}, {}) == 0.0


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
    warm = warm_start([best("near", SM120, "b", "c", "a"), best("far", other_gpu, "d"), told], SPEC.space, SM120,
                      EVERY_PART)
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
    # 38B in bf16 takes 79.5% of one 95.6 GB GPU; 152B on 4 of them as much.
    light, here = _with(SM120, model={"params_b": 38.0}), _with(SM120, model={"params_b": 152.0})
    best = {"attention-backend": "b", "cuda-graph-max-bs": 32, "schedule-conservativeness": 0.8, "tp-size": 1}
    assert fit_memory(best, spec.space, light, here)["tp-size"] == 4  # 4x as heavy: tp 1 -> 4
    assert fit_memory(best, spec.space, here, light) == best  # lighter here: as it was
    assert fit_memory(best, spec.space, light, SM120) is None  # GLM-5 in bf16: no size holds it
    # 3x as heavy at tp 4 would want tp 12: the largest size that still holds the weights (8: 78% of each GPU).
    lighter, heavier = _with(SM120, model={"params_b": 100.0}), _with(SM120, model={"params_b": 300.0})
    assert fit_memory({**best, "tp-size": 4}, spec.space, lighter, heavier)["tp-size"] == 8
    fixed = {k: v for k, v in best.items() if k != "tp-size"}
    assert fit_memory(fixed, SPEC.space, light, here) == fixed  # the space fixes the split: nothing to adapt
    source = Knowledge("study 'light'", good=(GoodConfig(best, light, 0, "light", 0),), context=light)
    warm = warm_start([source], spec.space, here, EVERY_PART)
    assert [params["tp-size"] for params, _ in warm.first] == [4] and warm.used[0].unfit == 0
    too_heavy = warm_start([source], spec.space, SM120, EVERY_PART)  # no size holds GLM-5 in bf16: said, not tried
    light_use, = [u for u in too_heavy.used if u.source == "study 'light'"]
    assert too_heavy.first == () and light_use.unfit == 1
    assert warm_start([source], spec.space, here).first == ()  # by default no configuration carries


def test_before_any_trial_the_models_size_warns_of_the_tensor_parallel_sizes_too_small_to_hold_it():
    """Llama 70B in bf16 on 44.4 GB GPUs: at tp 2 its weights take 159% of each GPU, at tp 4 80% (HOLDS)."""
    tp = "  tp-size: {type: categorical, choices: [1, 2, 4, 8]}\n"
    spec = parse_spec(instant_space("tp", params=PARAMS + tp, baseline="{attention-backend: a, cuda-graph-max-bs: 64, "
                                                                      "schedule-conservativeness: 1.0, tp-size: 8}"))
    l40s = _with(SM120, gpus={"memory_gb": 44.4}, model={"params_b": 70.6, "architecture": "LlamaForCausalLM"})
    lesson = weight_lesson(spec.space, l40s)
    assert lesson.values == {"tp-size": {"at-most": 2}} and lesson.kind == FailureKind.OOM
    assert lesson.matches({"tp-size": 2}) and not lesson.matches({"tp-size": 4})
    fp8 = _with(l40s, model={"quantization": "fp8"})  # half the bytes: tp 2 holds it
    assert weight_lesson(spec.space, fp8).values == {"tp-size": {"at-most": 1}}
    assert weight_lesson(spec.space, _with(l40s, model={"params_b": 8.0})) is None  # every size holds it
    assert weight_lesson(spec.space, _with(l40s, gpus={"memory_gb": None})) is None  # nothing to weigh it by
    assert weight_lesson(SPEC.space, l40s) is None  # the space does not vary the split
    staged = parse_spec(instant_space("pp", params=PARAMS + tp + "  pp-size: {type: categorical, choices: [1, 2]}\n",
                                      baseline="{attention-backend: a, cuda-graph-max-bs: 64, "
                                               "schedule-conservativeness: 1.0, tp-size: 8, pp-size: 1}"))
    assert weight_lesson(staged.space, l40s) is None  # pipeline stages split the weights too

    # A study with nothing to learn from is told it, and says so; one run at tp 2 voids it.
    warm = warm_start([], spec.space, l40s)
    assert warm.first == () and warm.prior.carried == 0
    assert [(u.source, u.lessons) for u in warm.used] == [("the model's size", 1)]
    assert warm.used[0].told == ("`tp-size: <= 2` is likely to run out of memory (at 2 the weights take 159% of "
                                 "each GPU's memory)",)
    assert [w for _, w in warm.prior.live([])] == [MAX_WEIGHT]
    ran = optuna.trial.create_trial(params={"tp-size": 2}, distributions={
        "tp-size": optuna.distributions.CategoricalDistribution([1, 2, 4, 8])}, value=1.0)
    assert warm.prior.live([ran]) == []


def _trial(params: dict, failed: bool = False) -> optuna.trial.FrozenTrial:
    dist = {"attention-backend": optuna.distributions.CategoricalDistribution(["a", "b", "c", "d"])}
    return optuna.trial.create_trial(params=params, distributions=dist, value=None if failed else 1.0,
                                     state=TrialState.PRUNED if failed else TrialState.COMPLETE,
                                     user_attrs={"failure_kind": "nan"} if failed else {},
                                     system_attrs={"constraints": (1.0 if failed else 0.0,)})


def test_a_choice_no_study_on_these_kernels_ran_is_drawn_less_until_this_study_runs_it():
    """A backend no earlier study on the same GPU architecture and engine version ran may crash here: it counts
    as UNTRIED_WEIGHT failed trials, fading as lessons do; one that ran there, or here, counts as nothing."""
    source = Knowledge("study 'near'", context=SM120, ran={"attention-backend": ("a", "b")})
    prior = warm_start([source], SPEC.space, SM120, EVERY_PART).prior
    assert prior.ran == {"attention-backend": frozenset({"a", "b"})}
    assert warm_start([source], SPEC.space, SM120).prior.ran == {}  # by default (crash lessons only): not carried
    other_version = _with(SM120, engine={"version": "0.5.23"})
    assert warm_start([source], SPEC.space, other_version, EVERY_PART).prior.ran == {}  # other kernels: nothing said

    class Own:
        def log_run(self, params, space):
            return 0.0

    untried = -math.log1p(UNTRIED_WEIGHT)
    odds = prior.odds(Own(), [])
    assert odds.log_run({"attention-backend": "b"}, {}) == 0.0
    assert odds.log_run({"attention-backend": "c"}, {}) == pytest.approx(untried)
    ran_c = prior.odds(Own(), [_trial({"attention-backend": "c"})])
    assert ran_c.log_run({"attention-backend": "c"}, {}) == 0.0
    later = prior.odds(Own(), [_trial({"attention-backend": "a"})] * HALF_LIFE)
    assert later.log_run({"attention-backend": "d"}, {}) == pytest.approx(-math.log1p(UNTRIED_WEIGHT / 2))


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


def test_after_carried_configurations_every_startup_trial_explores_around_the_best_so_far():
    """Cold, every other startup trial draws all flags at random; warm-started with good configurations, none
    does: each changes at most two flags of the best trial so far."""
    flags = [f"flag-{i}" for i in range(6)]
    spec = parse_spec(instant_space("wide", params="".join(f"  {f}: {{type: categorical, choices: [a, b, c, d]}}\n"
                                                           for f in flags),
                                    baseline="{" + ", ".join(f"{f}: a" for f in flags) + "}"))

    def changed_most(prior: Prior | None, seed: int) -> int:
        study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", seed, spec, prior))
        _initialise(study, spec, "tpe")
        most = 0

        def throughput(trial: optuna.Trial) -> float:
            nonlocal most
            values = spec.space.suggest(trial)
            done = [t for t in study.trials if t.state == TrialState.COMPLETE]
            if done:
                best = max(done, key=lambda t: t.value)
                most = max(most, sum(values[f] != best.params[f] for f in flags))
            return sum(values[f] == "b" for f in flags) + 0.1 * sum(values[f] == "c" for f in flags)

        study.optimize(throughput, n_trials=6)  # the baseline and five startup trials
        return most

    for seed in range(3):
        assert changed_most(Prior(carried=1, around=True), seed) <= 2
        assert changed_most(None, seed) >= 3
