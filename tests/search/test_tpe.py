"""The tuner's TPE learns the right lesson from a failure: real studies on the simulator, read back from SQLite."""

from __future__ import annotations

import hashlib
import inspect
import math

import optuna
import pytest
from optuna.samplers._tpe import sampler as tpe_module
from optuna.trial import TrialState

from conftest import REPO, instant_space
from tuner import parse_spec
from tuner._failures import failed_capturing
from tuner.search._study import make_sampler
from tuner.search._tpe import BatchLimit, CrashAwareTPE, GraphAwareOdds, GraphCover, Replicas, RunOdds
from tuner.engines import get_engine

# A server that runs out of memory at graph capture only above max batch 48 (seen from outside: after one OOM
# at 96, graphs were dropped altogether, and graphs at 48, the fastest configuration, never tried).
OOM_ABOVE_48 = {"TUNER_SIM_FAULTS": "oom_at_capture_over=48"}
MAX_BS = {
    "categorical": "{type: categorical, choices: [16, 32, 48, 64, 96, 128], when: {disable-cuda-graph: false}}",
    "int": "{type: int, low: 16, high: 128, step: 16, when: {disable-cuda-graph: false}}",
}


def _space(max_bs: str) -> str:
    params = ("  disable-cuda-graph: {type: bool}\n"
              f"  cuda-graph-max-bs-decode: {max_bs}\n"
              "  schedule-conservativeness: {type: float, low: 0.5, high: 1.5, step: 0.1}\n")
    return instant_space("oom-lesson", params=params,
                         baseline="{disable-cuda-graph: true, schedule-conservativeness: 1.0}",
                         extra="try-first:\n"
                               "  - {disable-cuda-graph: false, cuda-graph-max-bs-decode: 96, schedule-conservativeness: 1.0}\n")


def _chance(odds: RunOdds, study: optuna.Study, **params) -> float:
    space = {}
    for t in study.trials:
        space.update(t.distributions)
    return math.exp(odds.log_run({k.replace("_", "-"): v for k, v in params.items()}, space))


@pytest.mark.parametrize("kind", list(MAX_BS))
def test_an_oom_at_a_large_batch_blames_large_batches_not_graphs(tuner, kind):
    space = tuner.space(_space(MAX_BS[kind]))
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant", "--seed", "3",
                     env=OOM_ABOVE_48)
    assert done.returncode == 0, done.stderr
    study = tuner.study("oom-lesson")
    baseline, oom = study.trials
    assert baseline.user_attrs["feasible"] and oom.user_attrs["failure_kind"] == "oom", oom.user_attrs
    odds = RunOdds.learn(study.trials)
    graphs = dict(disable_cuda_graph=False, schedule_conservativeness=1.0)
    at_48 = _chance(odds, study, cuda_graph_max_bs_decode=48, **graphs)
    at_96 = _chance(odds, study, cuda_graph_max_bs_decode=96, **graphs)
    at_128 = _chance(odds, study, cuda_graph_max_bs_decode=128, **graphs)
    # Ordered: what failed at 96 is likely to fail at 128, and says less about 48.
    assert at_48 > at_96 and at_96 >= at_128, (at_48, at_96, at_128)
    # Graphs as such keep a fair chance: an OOM points at sizes first.
    assert at_48 > 0.3, at_48
    # It ran out of memory capturing graphs: with graphs off, the same flags keep every chance.
    assert oom.user_attrs["failed_in"] == "cuda_graph_capture" and failed_capturing(oom.user_attrs)
    aware = GraphAwareOdds.learn(study.trials)
    off = dict(disable_cuda_graph=True, schedule_conservativeness=1.0)
    assert _chance(aware, study, **off) == pytest.approx(_chance(RunOdds.learn([baseline]), study, **off))
    assert _chance(aware, study, cuda_graph_max_bs_decode=96, **graphs) < 0.5

    # And the search acts on it: graphs are not dropped after the OOM (seen from outside with the old model:
    # in 2 of 5 seeds, no graphs-on trial ever again). On this profile graphs change no speed, so which size
    # TPE picks next is up to its seed; the odds above are what keep graphs in play.
    more = tuner.run("run", "--trials", "14", "--space", str(space), "--simulate", "instant", "--seed", "3",
                     env=OOM_ABOVE_48)
    assert more.returncode == 0, more.stderr
    trials = tuner.study("oom-lesson").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    later = [t for t in trials[2:] if t.params.get("disable-cuda-graph") is False and "reused_from" not in t.user_attrs]
    assert later, [(t.params, t.user_attrs.get("failure_kind")) for t in trials]
    assert tuner.leftovers() == {}


def _profile_capture_fails_with(backend: str, folder, effect: str = "crash_at_capture") -> str:
    """The instant profile, with a backend whose CUDA graph capture fails or hangs (it runs with graphs off)."""
    text = (REPO / "tuner" / "sim" / "profiles" / "instant.yaml").read_text()
    health = (f"health:\n  - {{when: {{decode_backend: {backend}}}, effect: {effect},\n"
              f"     message: 'CUDA error: operation not permitted when stream is capturing'}}\n")
    assert "health: []\n" in text
    path = folder / "capture-fails.yaml"
    path.write_text(text.replace("name: instant\n", "name: capture-fails\n").replace("health: []\n", health))
    return str(path)


@pytest.mark.parametrize("effect, kind", [("crash_at_capture", "graph_capture_failed"),
                                          ("hang_at_capture", "startup_timeout")])
def test_a_failed_graph_capture_blames_the_backend_with_graphs_only(tuner, effect, kind):
    """A capture failure cannot happen with graphs off: flashinfer stays in play there (on 8 generated
    landscapes the optimum runs with graphs off a backend whose capture fails, and one failure hid it). A
    start that hangs after the capture-begin line is such a failure too."""
    params = ("  attention-backend: {type: categorical, choices: [fa3, flashinfer]}\n"
              "  disable-cuda-graph: {type: bool}\n"
              "  schedule-conservativeness: {type: float, low: 0.5, high: 1.5, step: 0.1}\n")
    space = tuner.space(instant_space(
        "capture-lesson", params=params,
        baseline="{attention-backend: fa3, disable-cuda-graph: false, schedule-conservativeness: 1.0}",
        extra="try-first:\n"
              "  - {attention-backend: flashinfer, disable-cuda-graph: false, schedule-conservativeness: 1.0}\n"))
    profile = _profile_capture_fails_with("flashinfer", tuner.folder, effect)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", profile, "--seed", "3")
    assert done.returncode == 0, done.stderr
    study = tuner.study("capture-lesson")
    baseline, failed = study.trials
    assert baseline.user_attrs["feasible"], baseline.user_attrs
    assert failed.user_attrs["failure_kind"] == kind, failed.user_attrs
    assert failed_capturing(failed.user_attrs)

    def chance(odds, backend: str, graphs_off: bool) -> float:
        return _chance(odds, study, attention_backend=backend, disable_cuda_graph=graphs_off,
                       schedule_conservativeness=1.0)

    odds = GraphAwareOdds.learn(study.trials)
    assert chance(odds, "flashinfer", graphs_off=True) > 2 * chance(odds, "flashinfer", graphs_off=False)
    assert chance(odds, "flashinfer", graphs_off=True) == pytest.approx(chance(odds, "fa3", graphs_off=True))
    # One model over all trials blamed flashinfer alike with graphs off, where it runs.
    plain = RunOdds.learn(study.trials)
    assert chance(plain, "flashinfer", graphs_off=True) < chance(odds, "flashinfer", graphs_off=True) / 2

    more = tuner.run("run", "--trials", "12", "--space", str(space), "--simulate", profile, "--seed", "3")
    assert more.returncode == 0, more.stderr
    trials = tuner.study("capture-lesson").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    runs_off = [t for t in trials if t.params["attention-backend"] == "flashinfer"
                and t.params["disable-cuda-graph"] and t.user_attrs.get("feasible")]
    capture_failures = [t for t in trials if failed_capturing(t.user_attrs)]
    seen = [(t.params, t.user_attrs.get("failure_kind")) for t in trials]
    assert runs_off, seen
    assert len(capture_failures) <= 2, seen
    assert tuner.leftovers() == {}


def test_crash_of_a_backend_blames_the_backend_not_the_sizes():
    """A NaN points at kernels: the never-run backend takes most of the blame, the never-run size little."""
    dist = {"backend": optuna.distributions.CategoricalDistribution(["a", "b"]),
            "max-bs": optuna.distributions.IntDistribution(16, 128, step=16)}

    def trial(number: int, backend: str, max_bs: int, failure: str | None) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params={"backend": backend, "max-bs": max_bs}, distributions=dist, value=None if failure else 1.0,
            state=TrialState.PRUNED if failure else TrialState.COMPLETE,
            user_attrs={"failure_kind": failure} if failure else {},
            system_attrs={"constraints": (1.0 if failure else 0.0,)})

    odds = RunOdds.learn([trial(0, "a", 32, None), trial(1, "b", 64, "nan")])
    backend_b = math.exp(odds.log_run({"backend": "b", "max-bs": 32}, dist))
    size_64 = math.exp(odds.log_run({"backend": "a", "max-bs": 64}, dist))
    assert backend_b < size_64 < 1.0


def test_a_failure_that_names_its_fix_blames_the_other_side():
    """SGLang's "Not enough memory. Please try to increase --mem-fraction-static." (a model split over too few
    GPUs): the fraction is too small, so larger fractions keep their chance, and the split keeps half of it."""
    dist = {"tp-size": optuna.distributions.CategoricalDistribution([2, 8]),
            "mem-fraction-static": optuna.distributions.FloatDistribution(0.8, 0.92, step=0.02)}

    def trial(tp: int, fraction: float, message: str | None) -> optuna.trial.FrozenTrial:
        failed = message is not None
        return optuna.trial.create_trial(
            params={"tp-size": tp, "mem-fraction-static": fraction}, distributions=dist,
            value=None if failed else 1.0, state=TrialState.PRUNED if failed else TrialState.COMPLETE,
            user_attrs={"failure_kind": "oom", "failure_message": message} if failed else {},
            system_attrs={"constraints": (1.0 if failed else 0.0,)})

    ran = [trial(8, 0.8, None), trial(8, 0.9, None)]
    message = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
               "Current value: 0.84 (server exited with code 1)")
    named = RunOdds.learn([*ran, trial(2, 0.84, message)])
    unnamed = RunOdds.learn([*ran, trial(2, 0.84, "CUDA out of memory (server exited with code 1)")])

    def chance(odds: RunOdds, tp: int, fraction: float) -> float:
        return math.exp(odds.log_run({"tp-size": tp, "mem-fraction-static": fraction}, dist))

    assert chance(named, 2, 0.92) > chance(named, 2, 0.84)
    assert chance(named, 2, 0.92) > chance(unnamed, 2, 0.92)  # the bare OOM put it all on the split
    assert chance(named, 8, 0.92) == 1.0  # above every failed fraction


def test_a_choice_that_fails_only_beyond_the_values_it_ran_with_blames_the_pair():
    """An FP8 KV cache that ran at batch 64 answers NaN at 512, where the default dtype runs: neither flag
    alone is new, so the lesson is "FP8 above 64", not every flag of the trial."""
    dist = {"kv-cache-dtype": optuna.distributions.CategoricalDistribution(["auto", "fp8_e4m3"]),
            "max-running-requests": optuna.distributions.CategoricalDistribution([32, 64, 128, 256, 512])}

    def trial(dtype: str, limit: int, failure: str | None) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params={"kv-cache-dtype": dtype, "max-running-requests": limit}, distributions=dist,
            value=None if failure else 1.0, state=TrialState.PRUNED if failure else TrialState.COMPLETE,
            user_attrs={"failure_kind": failure} if failure else {},
            system_attrs={"constraints": (1.0 if failure else 0.0,)})

    odds = RunOdds.learn([trial("fp8_e4m3", 32, None), trial("fp8_e4m3", 64, None), trial("auto", 512, None),
                          trial("fp8_e4m3", 512, "nan")])

    def chance(dtype: str, limit: int) -> float:
        return math.exp(odds.log_run({"kv-cache-dtype": dtype, "max-running-requests": limit}, dist))

    assert chance("fp8_e4m3", 512) < 0.6 * chance("fp8_e4m3", 64)  # FP8 where it never ran: half the odds
    assert chance("auto", 512) == chance("auto", 64)  # the default dtype keeps its chance at 512
    assert chance("fp8_e4m3", 64) > chance("auto", 64)  # and FP8 its own where it ran (twice, against once)


REPLICA_PARAMS = ("  tp-size: {type: categorical, choices: [1, 2, 4, 8]}\n"
                  "  dp-size: {type: categorical, choices: [1, 2, 4, 8]}\n"
                  "  schedule-conservativeness: {type: float, low: 0.5, high: 1.5, step: 0.1}\n")
REPLICA_LIMIT = "constraints:\n  - product: [tp-size, dp-size]\n    max: gpus\n"


def test_replicas_fill_the_gpus_a_layout_leaves_idle_unless_dp_attention_shares_them():
    def replicas(fixed: str) -> Replicas:
        spec = parse_spec(instant_space("replicas", params=REPLICA_PARAMS, server=f"  gpus: 8\n{fixed}",
                                        baseline="{tp-size: 8, dp-size: 1, schedule-conservativeness: 1.0}",
                                        extra=REPLICA_LIMIT))
        return Replicas.of(spec.space, get_engine(spec.engine))

    point = {"tp-size": 2, "dp-size": 1, "schedule-conservativeness": 1.0}
    assert replicas("").fill(point) == {**point, "dp-size": 4}
    assert replicas("").fill({**point, "tp-size": 8}) == {**point, "tp-size": 8}
    # With DP attention the dp ranks live on the tensor-parallel GPUs: more of them are not more servers.
    assert replicas("  fixed: {enable-dp-attention: true}\n").fill(point) == point
    # Attention-DP groups inside each replica (SGLang 0.5.23's --attn-dp-size) leave dp-size a replica count.
    assert replicas("  fixed: {attn-dp-size: 2}\n").fill(point) == {**point, "dp-size": 4}


def test_no_trial_leaves_gpus_idle_that_replicas_could_use(tuner):
    space = tuner.space(instant_space("replicas", params=REPLICA_PARAMS, server="  gpus: 8\n",
                                      baseline="{tp-size: 8, dp-size: 1, schedule-conservativeness: 1.0}",
                                      extra=REPLICA_LIMIT))
    done = tuner.run("run", "--trials", "10", "--space", str(space), "--simulate", "instant", "--seed", "3")
    assert done.returncode == 0, done.stderr
    trials = tuner.study("replicas").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    layouts = [(t.params["tp-size"], t.params["dp-size"]) for t in trials]
    assert len(layouts) == 10 and all(tp * dp == 8 for tp, dp in layouts), layouts
    assert len(set(layouts)) > 1, layouts  # the layout is still searched
    assert tuner.leftovers() == {}


# Probed at 40 concurrent requests: a server that admits 1 to 8 at once serves a fifth of that load at most.
LIMIT_PARAMS = ("  max-running-requests: {type: categorical, choices: [1, 2, 4, 8, 64, 128]}\n"
                "  schedule-conservativeness: {type: float, low: 0.5, high: 1.5, step: 0.1}\n")
LIMIT_BASELINE = "{max-running-requests: 64, schedule-conservativeness: 1.0}"


def test_a_batch_limit_below_the_load_counts_for_the_share_of_it_admitted():
    spec = parse_spec(instant_space("limit", params=LIMIT_PARAMS, baseline=LIMIT_BASELINE))
    limit = make_sampler("tpe", 0, spec)._batch_limit
    assert limit == BatchLimit("max-running-requests", "dp-size", 40)
    assert limit.log_share({"max-running-requests": 4}) == pytest.approx(math.log(4 / 40))
    assert limit.log_share({"max-running-requests": 64}) == 0.0
    assert limit.log_share({"max-running-requests": 8, "dp-size": 8}) == 0.0  # each replica admits 8
    assert limit.log_share({"schedule-conservativeness": 1.0}) == 0.0  # the engine's default limit
    # A latency objective can gain from a smaller batch: no weight there.
    latency = parse_spec(instant_space("limit", params=LIMIT_PARAMS, baseline=LIMIT_BASELINE,
                                       extra="objective: {metric: p99_tpot_ms}\n"))
    assert make_sampler("tpe", 0, latency)._batch_limit is None


def test_where_the_results_say_nothing_of_it_a_limit_below_the_load_is_seldom_proposed():
    spec = parse_spec(instant_space("limit", params=LIMIT_PARAMS, baseline=LIMIT_BASELINE))

    def below_the_load(load: int | None) -> int:
        sampler = CrashAwareTPE(seed=0, space=spec.space, engine=get_engine(spec.engine), load=load,
                                multivariate=True, constant_liar=True, n_startup_trials=6)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for _ in range(30):
            trial = study.ask()
            values = spec.space.suggest(trial)
            study.tell(trial, 1000.0 + 100.0 * values["schedule-conservativeness"])  # the limit changes nothing
        return sum(t.params["max-running-requests"] < 40 for t in study.trials)

    # Four of the six values admit at most a fifth of the load. Weighed by the share they admit, they lose
    # about a third of their proposals (13 against 20 of 30 with seed 0, 11-13 against 19-20 with seeds 0-4):
    # the weight ranks TPE's candidates, all drawn near the best trials, and here the best trials are as
    # likely to have a small limit as not.
    assert below_the_load(40) + 5 <= below_the_load(None)


# Probed at 40 concurrent requests: a graph captured up to batch 8 or 16 is never used by a decode batch of 40.
GRAPH_PARAMS = ("  disable-cuda-graph: {type: bool}\n"
                "  cuda-graph-max-bs-decode: {type: categorical, choices: [8, 16, 32, 64, 128],"
                " when: {disable-cuda-graph: false}}\n"
                "  max-running-requests: {type: categorical, choices: [16, 24, 64, 128]}\n"
                "  dp-size: {type: categorical, choices: [1, 2]}\n")
GRAPH_BASELINE = "{disable-cuda-graph: false, cuda-graph-max-bs-decode: 64, max-running-requests: 64, dp-size: 1}"
GRAPH_LIMIT = "constraints:\n  - at-most: [cuda-graph-max-bs-decode, max-running-requests]\n"


def test_a_graph_size_below_the_decode_batch_is_raised_to_cover_it():
    spec = parse_spec(instant_space("graphs", params=GRAPH_PARAMS, baseline=GRAPH_BASELINE, extra=GRAPH_LIMIT))
    cover = make_sampler("tpe", 0, spec)._graph_cover
    assert cover == GraphCover("cuda-graph-max-bs-decode", (8, 16, 32, 64, 128), "max-running-requests", "dp-size",
                               40, spec.space)
    point = {"disable-cuda-graph": False, "cuda-graph-max-bs-decode": 8, "max-running-requests": 128, "dp-size": 1}
    assert cover.cover(point) == {**point, "cuda-graph-max-bs-decode": 64}  # the smallest size of 40 or more
    assert cover.cover({**point, "dp-size": 2}) == {**point, "dp-size": 2, "cuda-graph-max-bs-decode": 32}
    assert cover.cover({**point, "max-running-requests": 16}) == {**point, "max-running-requests": 16,
                                                                  "cuda-graph-max-bs-decode": 16}
    assert cover.cover({**point, "cuda-graph-max-bs-decode": 128}) == {**point, "cuda-graph-max-bs-decode": 128}
    # A batch limit of 24 lets no listed size cover the batch within the constraint: the size stays.
    assert cover.cover({**point, "max-running-requests": 24}) == {**point, "max-running-requests": 24}
    no_graphs = {"disable-cuda-graph": True, "max-running-requests": 128, "dp-size": 1}
    assert cover.cover(no_graphs) == no_graphs
    latency = parse_spec(instant_space("graphs", params=GRAPH_PARAMS, baseline=GRAPH_BASELINE,
                                       extra=GRAPH_LIMIT + "objective: {metric: p99_tpot_ms}\n"))
    assert make_sampler("tpe", 0, latency)._graph_cover is None


def test_no_trial_captures_graphs_that_the_load_leaves_unused(tuner):
    params = GRAPH_PARAMS.replace("  dp-size: {type: categorical, choices: [1, 2]}\n", "")
    space = tuner.space(instant_space("graphs", params=params, baseline=GRAPH_BASELINE.replace(", dp-size: 1", ""),
                                      extra=GRAPH_LIMIT))
    done = tuner.run("run", "--trials", "12", "--space", str(space), "--simulate", "instant", "--seed", "1")
    assert done.returncode == 0, done.stderr
    trials = tuner.study("graphs").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    graphs = [(t.params["cuda-graph-max-bs-decode"], t.params["max-running-requests"])
              for t in trials if not t.params["disable-cuda-graph"]]
    assert len(trials) == 12 and len(graphs) >= 3, [t.params for t in trials]
    # Every captured size covers the decode batch (the 40 requests, at most the limit), but where the
    # constraint (size <= limit) leaves none that does: a limit of 24.
    assert all(size >= min(40, limit) or limit == 24 for size, limit in graphs), graphs
    assert len({size for size, _ in graphs}) > 1, graphs  # the size is still searched
    assert tuner.leftovers() == {}


def test_no_trial_breaks_a_constraint_through_a_flag_outside_the_joint_sample(tuner):
    # The graph size is active only with graphs on, so TPE draws it after the joint sample, on its own: its
    # density, drawn to the sizes that cover the load (64, 128), broke the limit of 16 or 24 that the joint
    # sample had chosen, and such a trial is wasted.
    params = GRAPH_PARAMS.replace("  dp-size: {type: categorical, choices: [1, 2]}\n", "")
    space = tuner.space(instant_space("graphs", params=params, baseline=GRAPH_BASELINE.replace(", dp-size: 1", ""),
                                      extra=GRAPH_LIMIT))
    done = tuner.run("run", "--trials", "30", "--space", str(space), "--simulate", "instant", "--seed", "3")
    assert done.returncode == 0, done.stderr
    trials = tuner.study("graphs").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    broken = [t.params for t in trials if t.user_attrs.get("failure_kind") == "invalid_config"]
    assert len(trials) == 30 and broken == [], broken
    assert tuner.leftovers() == {}


# CrashAwareTPE re-implements TPESampler._sample with two additions and calls these private parts of
# Optuna 5.0.0 (pinned in pyproject.toml). A new Optuna that changes any of them must fail here, not
# silently change what the tuner proposes: compare the new source with tuner/search/_tpe.py, then update the digest.
PRIVATE_PARTS = {
    "TPESampler._sample": "412acdfded738af3",
    "TPESampler._sample_relative": "45c7c54bec2572b4",
    "TPESampler.sample_independent": "d43d5d2fdaccb059",
    "TPESampler._get_params": "8b5a1702f0384b27",
    "TPESampler._build_parzen_estimator": "c69f0037cb2c9a49",
    "TPESampler._get_internal_repr": "7a2ee7a5ed8b0184",  # warm start: ghosts of good configurations
    "TPESampler._compute_acquisition_func": "5782c0bd917ef6d8",
    "_split_trials": "b0395b33672605d3",
}


@pytest.mark.parametrize("name", list(PRIVATE_PARTS))
def test_the_private_optuna_parts_the_sampler_relies_on_are_unchanged(name):
    owner, _, attr = name.rpartition(".")
    obj = getattr(tpe_module.TPESampler if owner else tpe_module, attr)
    digest = hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]
    assert digest == PRIVATE_PARTS[name], f"{name} changed in optuna {optuna.__version__}"
    sampler = optuna.samplers.TPESampler()
    for field in ("_random_sampler", "_rng", "_n_startup_trials", "_constant_liar", "_gamma", "_n_ei_candidates",
                  "_parzen_estimator_parameters", "_parzen_estimator_cls"):
        assert hasattr(sampler, field), field
