"""The problems of benchmarks/search_efficiency.py: a profile's (or a generated landscape's) space,
workload and the simulator's verdict on a configuration; the landscape sets and the constants the parts share."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # GPSampler's torch: one thread per process on a shared machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


import _landscapes  # noqa: E402
from tuner._failures import CUDA_GRAPH_CAPTURE, FAILED_IN, HUNG_IN, FailureKind  # noqa: E402
from tuner.trial._probe import LevelMetrics  # noqa: E402
from tuner.spec._space import ServerConfig, Space  # noqa: E402
from tuner.spec._spec import Spec, load_spec  # noqa: E402
from tuner.engines._base import flag_argv  # noqa: E402
from tuner.sim._predict import Prediction, predict  # noqa: E402
from tuner.sim import server_values as sim_values  # noqa: E402
from tuner.sim._setup import make_setup  # noqa: E402
from tuner.sim._profile import Profile, load_profile  # noqa: E402



PROFILES_DIR = REPO / "tuner" / "sim" / "profiles"
SPACES_DIR = REPO / "search_spaces"
CACHE_DIR = REPO / ".cache" / "search_efficiency"
STRATEGIES = ("tpe", "random", "random-valid", "gp", "smac", "nevergrad", "grid")
LABELS = {"tpe": "tpe (tuner default)", "random": "random", "random-valid": "random, valid only",
          "gp": "gp (Optuna GPSampler)", "smac": "smac (SMAC3 RF)", "nevergrad": "nevergrad (NGOpt)",
          "grid": "tiered grid"}
TARGET = 0.98  # "reached": the pick's true value is at least this share of the optimum
EXHAUSTIVE_MAX = 20_000  # valid grid points up to which the optimum is found by evaluating every one
OPTIMUM_METHOD = "v2"  # bump when the optimum search changes: old cache files are then ignored
# Generated landscapes are many: their optimum search enumerates fewer points.
GENERATED_EXHAUSTIVE_MAX = 3_000
# Generated landscapes by generator seed. Sampler variants are chosen on `train` and `validation` only; `test` is
# run once, at the end, to report the chosen sampler (README: its figures and date). Seeds 0-89 and 1000-1049
# were the sets before 2026-12-06: run again and again while choosing samplers, they test nothing any more.
LANDSCAPE_SETS = {"train": range(2000, 2040), "validation": range(3000, 3020), "test": range(7000, 7030)}
WARMUP_TRIALS = 10  # the crash/NaN share is counted after this many trials

# What predict() says went wrong, as the failure kind the tuner's stages would record.
STATUS_KINDS = {
    "invalid_args": FailureKind.CRASH_ON_START,  # the server exits on its argument error
    "crash_on_start": FailureKind.CRASH_ON_START,
    "oom": FailureKind.OOM,
    "graph_capture_failed": FailureKind.GRAPH_CAPTURE_FAILED,
    "startup_timeout": FailureKind.STARTUP_TIMEOUT,
    "nan": FailureKind.NAN,
    "garbage": FailureKind.GARBAGE,
    "logprob_drift": FailureKind.INCONSISTENT_LOGPROBS,
    "crash_under_load": FailureKind.CRASH_UNDER_LOAD,
}
FREE_KINDS = ("invalid_config", "reused")  # trials that launch nothing




# -- one profile: its space, its workload, and the simulator's verdict on a configuration ----------------------

@dataclasses.dataclass(frozen=True)
class Measurement:
    failure: FailureKind | None
    message: str = ""
    level: LevelMetrics | None = None
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the failure's, as the tuner records


class Problem:
    """A simulator profile with its shipped space: measure a configuration (noisy) or judge it (noiseless)."""

    def __init__(self, name: str, intermittent: float = 0.0, paths: tuple[Path, Path] | None = None) -> None:
        """`paths`: (profile, space) of a landscape written elsewhere (benchmarks/transfer.py's families)."""
        self.name = name
        self.intermittent = intermittent
        self.profile_path, self.space_path = paths or landscape_paths(name)
        self.generated = paths is not None or is_generated(name)
        self.profile: Profile = load_profile(self.profile_path)
        self.spec: Spec = load_spec(self.space_path)
        probe, objective = self.spec.probe, self.spec.objective
        self.concurrency = objective.concurrency or max(probe.concurrency)
        self.metric = objective.metric
        self.maximize = objective.direction == "maximize"
        self._true: dict[str, float | None] = {}
        self._startup: dict[str, float] = {}

    @property
    def space(self) -> Space:
        return self.spec.space

    def measure(self, config: ServerConfig, noise_seed: int | None) -> Measurement:
        """What one server start with this configuration would record (noise_seed None: noiseless)."""
        if self._flaky(config) and (noise_seed is None or random.Random(noise_seed).random() < 0.5):
            return Measurement(FailureKind.CRASH_UNDER_LOAD, "crashed under load on this start (intermittent)")
        probe = self.spec.probe
        p = predict(self.profile, flag_argv(config.flags), self.concurrency, probe.input_len, probe.output_len,
                    num_requests=probe.requests, seed=noise_seed or 0, noise=noise_seed is not None)
        if p.status == "startup_timeout" and p.stage == "capture":
            # Readiness names a hang after the capture-begin line (tuner/trial/_readiness.py).
            return Measurement(FailureKind.STARTUP_TIMEOUT, "no log output (hang) during CUDA graph capture",
                               attrs={HUNG_IN: CUDA_GRAPH_CAPTURE})
        if p.status != "ok":
            # Readiness names a crash after the capture-begin line (tuner/trial/_readiness.py, crash_failure).
            where = {FAILED_IN: CUDA_GRAPH_CAPTURE} if p.stage == "capture" else {}
            return Measurement(STATUS_KINDS.get(p.status, FailureKind.CRASH_ON_START), p.message or p.status,
                               attrs=where)
        return Measurement(None, level=self._level(p))

    def gpu_seconds(self, config: ServerConfig, m: Measurement) -> float:
        """What one start of this configuration costs the user in GPU-seconds: the start-up model's phases up to
        where it failed or got ready (startup_phases: process, distributed init, weight load, KV allocation,
        graph capture, torch.compile), then the probe's own duration, times the GPUs the study holds."""
        seconds = self._startup_s(config)
        if m.level is not None:
            seconds += m.level.duration
        return seconds * (self.spec.server.gpus or self.profile.hardware.gpu_count)

    def _startup_s(self, config: ServerConfig) -> float:
        key = config.key()
        if key not in self._startup:
            self._startup[key] = self._startup_phase_s(config)
        return self._startup[key]

    def _startup_phase_s(self, config: ServerConfig) -> float:
        ph = self.profile.startup
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                values = sim_values(self.profile, flag_argv(config.flags))
        except SystemExit:
            return ph.process_s  # the argument error ends the process at once
        setup = make_setup(self.profile, values)
        p = setup.phases
        if setup.failure is None:
            return p.total_s
        if setup.failure.kind == "startup_timeout":
            return self.spec.server.startup_timeout  # a hang is noticed at the tuner's start-up timeout
        # Where each stage's failure ends the start (load and capture fail half-way on average).
        up_to = {"args": p.process_s, "devices": p.process_s + p.init_distributed_s,
                 "load": p.process_s + p.init_distributed_s + p.weight_load_s / 2,
                 "kernels": p.process_s + p.init_distributed_s + p.weight_load_s,
                 "kv": p.process_s + p.init_distributed_s + p.weight_load_s + p.kv_alloc_s,
                 "capture": p.process_s + p.init_distributed_s + p.weight_load_s + p.kv_alloc_s + p.capture_s / 2}
        return up_to.get(setup.failure.stage, p.total_s)

    def _flaky(self, config: ServerConfig) -> bool:
        if not self.intermittent or (self.space.baseline and config.key() == self._baseline_key()):
            return False
        digest = hashlib.sha256(config.key().encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.intermittent

    @functools.cache
    def _baseline_key(self) -> str:
        return self.space.config(self.space.baseline).key()

    def _level(self, p: Prediction) -> LevelMetrics:
        probe = self.spec.probe
        n = probe.requests
        out_tokens = n * probe.output_len
        duration = out_tokens / p.output_tok_s if p.output_tok_s > 0 else float("inf")
        # predict() gives means only; with identical requests in a closed loop the percentiles are close to them.
        latency = {}
        for stat in ("mean", "median", "p90", "p99"):
            latency.update({f"{stat}_ttft_ms": p.ttft_s * 1000, f"{stat}_itl_ms": p.itl_s * 1000,
                            f"{stat}_tpot_ms": p.itl_s * 1000, f"{stat}_e2e_latency_ms": p.e2e_s * 1000})
        return LevelMetrics(concurrency=self.concurrency, duration=duration, completed=n, errors=0,
                            total_input_tokens=n * probe.input_len, total_output_tokens=out_tokens,
                            request_throughput=n / duration, output_throughput=p.output_tok_s,
                            total_throughput=p.total_tok_s, latency_ms=latency)

    def value(self, m: Measurement) -> float | None:
        return None if m.level is None else m.level.metric(self.metric)

    def true_value(self, config: ServerConfig) -> float | None:
        """The noiseless objective of a configuration, None if it fails (cached by configuration)."""
        key = config.key()
        if key not in self._true:
            self._true[key] = self.value(self.measure(config, None))
        return self._true[key]

    def point_value(self, values: Mapping[str, Any]) -> float | None:
        if self.space.violations(values):
            return None
        return self.true_value(self.space.config(values))

    def better(self, a: float | None, b: float | None) -> bool:
        if a is None:
            return False
        if b is None:
            return True
        return a > b if self.maximize else a < b

    def share(self, value: float | None, optimum: float) -> float:
        """How close a value is to the optimum, as a fraction (1.0 = the optimum)."""
        if value is None:
            return 0.0
        return value / optimum if self.maximize else optimum / value


def is_generated(name: str) -> bool:
    return name.startswith("gen-")


def landscape_paths(name: str) -> tuple[Path, Path]:
    """(profile, space) of a shipped profile, or of a generated landscape `gen-SEED` (written on first use)."""
    if is_generated(name):
        return _landscapes.write_landscape(int(name.removeprefix("gen-")))
    return PROFILES_DIR / f"{name}.yaml", SPACES_DIR / f"{name}.yaml"


def landscape_seeds(which: str) -> range:
    """The generator seeds of a named set, or of a range spelled FIRST-LAST (both included)."""
    if which in LANDSCAPE_SETS:
        return LANDSCAPE_SETS[which]
    first, _, last = which.partition("-")
    if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
        raise ValueError(f"--landscapes {which!r}: name a set ({', '.join(LANDSCAPE_SETS)}, all, shipped) or a range "
                         "of generator seeds such as 1030-1049")
    return range(int(first), int(last) + 1)


def generated_names(which: str, count: int | None = None, offset: int = 0) -> list[str]:
    """The generated landscapes of a set (`all`: train and validation, never test) or a seed range: from its
    `offset`-th, at most `count` of them."""
    sets = ["train", "validation"] if which == "all" else [] if which == "shipped" else [which]
    return [_landscapes.landscape_name(seed) for s in sets
            for seed in list(landscape_seeds(s))[offset:None if count is None else offset + count]]


def skip_reason(name: str) -> str | None:
    """Why a profile cannot be benchmarked, or None."""
    profile_path, space_path = landscape_paths(name)
    if not space_path.exists():
        return f"no shipped space (search_spaces/{name}.yaml does not exist)"
    profile = load_profile(profile_path)
    if profile.time_scale == 0 or not profile.hardware.hbm_bandwidth_gbs:
        return "every configuration is infinitely fast (no step time): there is no optimum to find"
    spec = load_spec(space_path)
    if spec.objective.second_metric:
        return "a two-objective space: 'the optimum' is a Pareto front, not one value"
    if spec.engine != "sglang":
        return f"engine {spec.engine}: the simulator speaks SGLang only"
    return None
