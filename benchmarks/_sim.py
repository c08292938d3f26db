"""The simulated SGLang server (`python -m tuner.sim`) as the benchmarks start it: pinned to one core,
in its own process group through the tuner's own launch, with a chosen profile."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tuner.trial._procs import free_port

REPO = Path(__file__).resolve().parents[1]


def start_sim(workdir: Path, core: int, profile: str, model: str, startup_scale: float | None = None):
    """`model` is what --model-path names (the served name); `startup_scale` compresses only the simulated
    start-up (weights, graph capture), never the speed of serving."""
    from tuner.trial._launch import LaunchRequest, launch

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SIM_")}
    env.update(PYTHONPATH=str(REPO), TUNER_SIM_PROFILE=profile, TUNER_SIM_SEED="0")
    if startup_scale is not None:
        env["TUNER_SIM_STARTUP_SCALE"] = str(startup_scale)
    # taskset in the argv, not sched_setaffinity afterwards: every thread the server starts is pinned.
    argv = ["taskset", "-c", str(core), sys.executable, "-m", "tuner.sim", "--model-path", model,
            "--port", str(port)]
    return launch(LaunchRequest(argv=argv, env=env, workdir=workdir, host="127.0.0.1", port=port))
