"""Everything a simulated server start decides before serving: resolved args, memory, health, speed, failures.

Shared by the HTTP server and `predict()`, so both fail the same way at the same stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ._model import (Health, MemoryPlan, PerfModel, Phases, evaluate_health, noise_factor, plan_memory,
                     startup_phases)
from ._profile import Profile
from ._resolve import Resolved, resolve


@dataclass(frozen=True)
class StartFailure:
    kind: str  # a Prediction status: crash_on_start | oom | graph_capture_failed | startup_timeout
    stage: str  # args | devices | load | kernels | kv | capture
    exc_line: str  # the last line of the traceback SGLang prints


@dataclass(frozen=True)
class Setup:
    profile: Profile
    resolved: Resolved
    memory: MemoryPlan
    health: Health
    perf: PerfModel
    phases: Phases
    failure: StartFailure | None
    speed_factor: float


def seed_material(seed: int, values: Mapping[str, Any], nonce: str = "") -> str:
    """Noise seed of one start: the seed, the configuration and (for unseeded runs) a per-start nonce."""
    relevant = {k: v for k, v in values.items() if k not in ("host", "port", "api_key", "random_seed")}
    return f"{seed}|{json.dumps(relevant, sort_keys=True, default=str)}|{nonce}"


def make_setup(profile: Profile, values: Mapping[str, Any], *, seed: int = 0, nonce: str = "",
               visible_gpus: int | None = None, extra_nan_batch: int | None = None) -> Setup:
    resolved = resolve(profile, values)
    knobs = resolved.knobs
    memory = plan_memory(profile, knobs)
    health = evaluate_health(profile, resolved.namespace(), extra_nan_batch=extra_nan_batch)
    factor = noise_factor(profile, seed_material(seed, values, nonce))
    perf = PerfModel(profile, knobs, speed_factor=factor)
    phases = startup_phases(profile, knobs)
    available = profile.hardware.gpu_count if visible_gpus is None else min(visible_gpus, profile.hardware.gpu_count)

    failure: StartFailure | None = None
    if resolved.failure:
        failure = StartFailure("crash_on_start", "args", resolved.failure)
    elif knobs.gpus > available:
        failure = StartFailure("crash_on_start", "devices",
                               "torch.AcceleratorError: CUDA error: invalid device ordinal\n"
                               "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                               "stacktrace below might be incorrect.\nFor debugging consider passing "
                               "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                               f"assertions.\n(needs {knobs.gpus} GPUs: tp {knobs.tp} x pp {knobs.pp} x dp {knobs.dp};"
                               f" {available} visible)")
    elif memory.failure == "oom_at_load":
        failure = StartFailure("oom", "load", memory.failure_line or "")
    elif health.start_failure:
        failure = StartFailure("crash_on_start", "kernels", health.start_failure)
    elif memory.failure == "not_enough_memory":
        failure = StartFailure("oom", "kv", memory.failure_line or "")
    elif health.capture == "crash":
        # Capture starts with the largest batch size, so a kernel that cannot be captured fails at once,
        # before the graphs have used up any memory.
        failure = StartFailure("graph_capture_failed", "capture",
                               "Exception: Capture cuda graph failed: " + (health.capture_message or
                                                                          "CUDA error: operation not permitted when "
                                                                          "stream is capturing"))
    elif memory.failure == "oom_at_capture":
        failure = StartFailure("oom", "capture", "Exception: Capture cuda graph failed: " + (memory.failure_line or ""))
    elif health.capture == "hang":
        failure = StartFailure("startup_timeout", "capture", "")
    return Setup(profile=profile, resolved=resolved, memory=memory, health=health, perf=perf, phases=phases,
                 failure=failure, speed_factor=factor)
