"""scripts/gpu_sglang.sh's study control, on this machine: the functions that start and stop a study on the GPU
machine, with a stand-in `python3` in place of the tuner (the GPU machine's python3 runs the real one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_sglang.sh"

# Stands in for `python3 -m tuner run ...` there: says it started, and on SIGINT writes what the tuner would do
# (stop its server, mark the trial) and exits 130, as the tuner does.
STAND_IN = """\
import pathlib, signal, sys, time
log = pathlib.Path(sys.argv[0]).with_name("calls.log")
def interrupted(signum, frame):
    with log.open("a") as f:
        f.write("SIGINT: trial marked interrupted\\n")
    sys.exit(130)
signal.signal(signal.SIGINT, interrupted)
with log.open("a") as f:
    f.write("started " + " ".join(sys.argv[1:4]) + "\\n")
time.sleep(120)
"""


def test_stopping_a_study_reaches_the_tuner_behind_its_wrapper(tmp_path):
    """start_job runs `tuner run` inside a bash wrapper (so that `confirm` can follow it) in a session of its own;
    stop_study must interrupt the tuner itself. A SIGINT to the wrapper's pid alone never reached it: on the GPU
    the study ran on past GPU_FINISH, its last trial left running in the call's trials.db."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "python3"
    stand_in.write_text(f"#!{sys.executable}\n{STAND_IN}")
    stand_in.chmod(0o755)
    work = tmp_path / "study"
    work.mkdir()
    log = bin_dir / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    start = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; start_job "$1" 3 space.yaml /tmp/model 100',
                            "_", str(work)], env=env, capture_output=True, text=True, timeout=60)
    assert start.returncode == 0, start.stderr
    pid = int((work / "study.pid").read_text())
    try:
        while "started" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)  # waiting for the stand-in to run; nothing timed
        assert log.read_text().startswith("started -m tuner run"), log.read_text()
        stop = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; stop_study "$1"; kill -0 "$1" 2>/dev/null '
                               '&& echo running || echo ended', "_", str(pid)],
                              env=env, capture_output=True, text=True, timeout=120)
        assert stop.stdout.strip() == "ended", stop.stderr
        assert "SIGINT: trial marked interrupted" in log.read_text()
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sourcing_the_script_runs_nothing():
    done = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; type -t stop_study start_job study_done'],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["function"] * 3, done.stderr
    assert "usage" not in done.stderr
