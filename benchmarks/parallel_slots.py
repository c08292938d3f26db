"""One slot against four: `python benchmarks/parallel_slots.py [--trials 12] [--delay 0.1]`.

Runs the same study (same space, same seed) twice on an emulated 8-GPU host with `--gpus 0-7`: once with
`--parallel 1` and once with `--parallel 4`. Every configuration needs two GPUs (tp 2), so four fit at once.
Each trial is slowed to a roughly fixed length by the simulator's `response_delay` fault (a wall-clock
sleep per response, so it costs no CPU and the figure is not limited by this machine's cores). Prints the
wall time of each run, the trials each finished, and their ratio. No assertion: a figure to read.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SPACE = """
name: parallel-slots
server:
  model-path: /models/instant
  startup-timeout: 60
  stall-timeout: 30
  fixed: {tp-size: 2}
params:
  schedule-conservativeness: {type: float, low: 0.1, high: 2.0, step: 0.01}
baseline: {schedule-conservativeness: 1.0}
gate:
  max-new-tokens: 8
  request-timeout: 30
probe:
  concurrency: [40]
  requests: 80
  input-len: 16
  output-len: 24
  warmup: 0
  request-timeout: 30
"""


def run(parallel: int, trials: int, delay: float, seed: int) -> tuple[float, int, str]:
    import optuna

    with tempfile.TemporaryDirectory(prefix=f"parallel_slots-{parallel}-") as tmp:
        folder = Path(tmp)
        (folder / "space.yaml").write_text(textwrap.dedent(SPACE))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SIM_")}
        env.update({"TUNER_SIM_FAULTS": f"response_delay={delay}", "PYTHONPATH": str(REPO)})
        argv = [sys.executable, "-m", "tuner", "run", "--trials", str(trials), "--space", "space.yaml",
                "--simulate", "instant", "--gpus", "0-7", "--parallel", str(parallel), "--seed", str(seed),
                "--storage", f"sqlite:///{folder / 'trials.db'}", "--workdir", "runs"]
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            sys.exit(f"--parallel {parallel} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        study = optuna.load_study(study_name="parallel-slots", storage=f"sqlite:///{folder / 'trials.db'}")
        trials_done = [t for t in study.get_trials() if t.state.name in ("COMPLETE", "PRUNED")]
        per_trial = sorted(t.user_attrs.get("total_seconds", 0.0) for t in trials_done)
        median = per_trial[len(per_trial) // 2] if per_trial else 0.0
        return wall, len(trials_done), f"median trial {median:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--delay", type=float, default=0.1, help="response_delay per response (s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{args.trials} trials, tp 2 on 8 emulated GPUs, response_delay={args.delay}s, seed {args.seed}")
    one = run(1, args.trials, args.delay, args.seed)
    print(f"  1 slot : {one[0]:6.1f} s wall, {one[1]} trials finished, {one[2]}")
    four = run(4, args.trials, args.delay, args.seed)
    print(f"  4 slots: {four[0]:6.1f} s wall, {four[1]} trials finished, {four[2]}")
    print(f"  speed-up 1 -> 4 slots: {one[0] / four[0]:.2f}x (ideal 4x; start-up, the sampler and the storage "
          f"are serial per trial)")


if __name__ == "__main__":
    main()
