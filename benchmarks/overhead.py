"""The tuner's own cost: time per trial outside the server, and peak memory over a long study.

    python benchmarks/overhead.py [--trials 200]

Runs one study of `--trials` trials (`python -m tuner run`, real processes) of the shipped generic SGLang
space (search_spaces/default.yaml, 8 parameters) against the simulated server's `instant` profile, whose
start-up, prefill and decode take no time, with a small probe. Everything the server itself costs is then
subtracted from the wall time: its start-up (the readiness stage, which includes the simulator's own
Python start), the gate's and the probe's requests (and the re-check after load). What is left is the
tuner's: asking the sampler, writing the study, launching, reading back /server_info, stopping the process
group and checking the port, recording attributes, the note and the log artifact, plus the tuner's own
start-up and the flag check against `--help`, spread over all trials.

Peak memory is the tuner process's high-water mark of resident memory (VmHWM from /proc, the servers it
starts are separate processes and not counted), sampled as each trial ends so that growth shows.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SERVER_STAGES = ("readiness", "gate", "probe", "recheck")  # the server's time, not the tuner's
TARGET_S = 0.5
TARGET_MB = 300.0

_TRIAL_LINE = re.compile(r"^trial\s+(\d+)\s")


def space_file(folder: Path) -> Path:
    space = yaml.safe_load((REPO / "search_spaces" / "default.yaml").read_text())
    space["name"] = "overhead"
    space["server"]["model-path"] = "/models/instant"
    space["probe"] = {"concurrency": [8], "requests": 16, "input-len": 16, "output-len": 8, "warmup": 0}
    space["objective"] = {"metric": "output_throughput"}
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def memory_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def run_study(folder: Path, trials: int, seed: int) -> tuple[float, dict[int, int], int]:
    """Wall seconds, VmHWM (kB) when each trial's line was printed, and the last VmHWM seen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SIM_")}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "tuner", "run", "--trials", str(trials), "--space", "space.yaml",
            "--simulate", "instant", "--seed", str(seed), "--storage", f"sqlite:///{folder / 'trials.db'}",
            "--workdir", "runs"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    at_trial: dict[int, int] = {}
    peak = [0]
    stop = threading.Event()

    def sample() -> None:  # the high-water mark just before the process exits, too
        while not stop.is_set():
            peak[0] = max(peak[0], memory_kb(proc.pid).get("VmHWM", 0))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        tail = (tail + [line])[-20:]
        match = _TRIAL_LINE.match(line)
        if match:
            at_trial[int(match.group(1))] = memory_kb(proc.pid).get("VmHWM", 0)
    code = proc.wait()
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    if code != 0:
        sys.exit(f"the study failed ({code}):\n{''.join(tail)}")
    return wall, at_trial, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        folder = Path(tmp)
        space_file(folder)
        wall, at_trial, peak_kb = run_study(folder, args.trials, args.seed)
        study = optuna.load_study(study_name="overhead", storage=f"sqlite:///{folder / 'trials.db'}")
        trials = sorted(study.get_trials(), key=lambda t: t.number)

    stage_totals: dict[str, float] = {}
    launched = [t for t in trials if "stage_seconds" in t.user_attrs and "reused_from" not in t.user_attrs
                and t.user_attrs.get("failure_kind") != "invalid_config"]
    for t in launched:
        for stage, seconds in t.user_attrs["stage_seconds"].items():
            stage_totals[stage] = stage_totals.get(stage, 0.0) + seconds
    server_s = sum(stage_totals.get(s, 0.0) for s in SERVER_STAGES)
    tuner_s = wall - server_s
    n = len(trials)
    per_trial = tuner_s / n
    # Where the tuner's time goes: its stages inside trials, the rest (sampler, storage, records) between.
    in_stages = {s: v for s, v in stage_totals.items() if s not in SERVER_STAGES}
    between = tuner_s - sum(in_stages.values())
    gaps = [b.user_attrs["started_at"] - a.user_attrs["ended_at"] for a, b in zip(trials, trials[1:])
            if "ended_at" in a.user_attrs and "started_at" in b.user_attrs]
    quarter = max(1, len(gaps) // 4)

    print(f"{n} trials ({len(launched)} launched a server; the rest reused an identical configuration or broke a "
          f"constraint) of search_spaces/default.yaml on the instant simulated server, wall {wall:.1f} s\n")
    print(f"{'':44} {'total s':>9} {'per trial s':>12}")
    print(f"{'server: start-up, gate, probe, re-check':44} {server_s:9.1f} {server_s / n:12.3f}")
    print(f"{'tuner: everything else':44} {tuner_s:9.1f} {per_trial:12.3f}")
    for stage, seconds in sorted(in_stages.items(), key=lambda kv: -kv[1]):
        print(f"{'  ' + stage:44} {seconds:9.1f} {seconds / n:12.3f}")
    print(f"{'  sampler, storage, records, start-up':44} {between:9.1f} {between / n:12.3f}")
    if gaps:
        print(f"\nbetween one trial's end and the next one's start (sampler + storage), median: first "
              f"{quarter} trials {statistics.median(gaps[:quarter]):.3f} s, last {quarter} "
              f"{statistics.median(gaps[-quarter:]):.3f} s")
    marks = [k for k in (0, 9, 49, 99, 149, 199, n - 1) if k in at_trial]
    print("tuner peak resident memory (VmHWM) after trial: " +
          ", ".join(f"{k + 1}: {at_trial[k] / 1024:.0f} MB" for k in dict.fromkeys(marks)))
    print(f"tuner peak resident memory over the study: {peak_kb / 1024:.0f} MB")
    print(f"\ntargets: overhead <= {TARGET_S} s per trial: {'met' if per_trial <= TARGET_S else 'MISSED'} "
          f"({per_trial:.3f} s); peak memory <= {TARGET_MB:.0f} MB: "
          f"{'met' if peak_kb / 1024 <= TARGET_MB else 'MISSED'} ({peak_kb / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
