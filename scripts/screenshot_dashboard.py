#!/usr/bin/env python3
"""Screenshot of `python -m tuner dashboard` for the README (a developer tool, not part of CI).

    python scripts/screenshot_dashboard.py --page '/dashboard/studies/1/trials?numbers=2'   # docs/dashboard.png
    python scripts/screenshot_dashboard.py --storage sqlite:///trials.db --workdir runs --out /tmp/mine.png

Needs headless Chromium (`apt-get install -y chromium` on Debian). Starts the dashboard on a free port of
127.0.0.1, lets Chromium render the trials page (a single-page app: it is given virtual time to fetch the
study), and always ends the dashboard again. Without --storage it runs a short study of the simulated GLM-5
server (`--simulate`, TUNER_SIM_TIME_SCALE=0.01, six trials: the baseline, then OOM, NaN under load, NaN at the
gate, garbage and one more feasible configuration; about 20 s) in a temporary folder and uses that. Trial 2 (NaN
under load) is the one shown in docs/dashboard.png.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


# Configurations of the GLM-5 twin queued after the baseline, so that the demo shows every kind of outcome
# without depending on what the sampler proposes (a sampled configuration can also hang at CUDA-graph capture,
# which costs the space's 900 s stall timeout even in a dry run).
DEMO_CONFIGS = [
    {"attention-backend": "trtllm_mla", "kv-cache-dtype": "fp8_e4m3", "mem-fraction-static": 0.93,
     "disable-cuda-graph": False, "cuda-graph-max-bs": 64, "chunked-prefill-size": 16384,
     "max-running-requests": 32, "schedule-conservativeness": 0.4, "ep-size": 4},  # OOM under load
    {"attention-backend": "flashinfer", "kv-cache-dtype": "bfloat16", "mem-fraction-static": 0.89,
     "disable-cuda-graph": True, "chunked-prefill-size": 16384, "max-running-requests": 96,
     "schedule-conservativeness": 0.4, "ep-size": 4},  # NaN under load
    {"attention-backend": "nsa", "nsa-decode-backend": "flashmla_sparse", "kv-cache-dtype": "auto",
     "mem-fraction-static": 0.89, "disable-cuda-graph": True, "chunked-prefill-size": 16384,
     "max-running-requests": 128, "schedule-conservativeness": 1.0, "ep-size": 1},  # NaN at the gate
    {"attention-backend": "triton", "kv-cache-dtype": "fp8_e4m3", "mem-fraction-static": 0.83,
     "disable-cuda-graph": False, "cuda-graph-max-bs": 16, "chunked-prefill-size": 8192,
     "max-running-requests": 32, "schedule-conservativeness": 1.2, "ep-size": 1},  # garbage text
    {"attention-backend": "trtllm_mla", "kv-cache-dtype": "bfloat16", "mem-fraction-static": 0.86,
     "disable-cuda-graph": False, "cuda-graph-max-bs": 32, "chunked-prefill-size": 16384,
     "max-running-requests": 32, "schedule-conservativeness": 1.1, "ep-size": 4},  # feasible
]


def demo_study(folder: Path) -> tuple[str, Path]:
    import optuna

    storage = f"sqlite:///{folder / 'trials.db'}"
    env = {**os.environ, "TUNER_SIM_TIME_SCALE": "0.01"}
    argv = [sys.executable, "-m", "tuner", "run", "--simulate", "--storage", storage, "--workdir", str(folder / "runs")]
    print(f"running a {1 + len(DEMO_CONFIGS)}-trial study of the GLM-5 twin in {folder} ...", file=sys.stderr)
    subprocess.run([*argv, "--trials", "1"], cwd=REPO, env=env, check=True, stdin=subprocess.DEVNULL)
    study = optuna.load_study(study_name="glm5-nvfp4-sm120", storage=storage)
    for params in DEMO_CONFIGS:
        study.enqueue_trial(params)
    subprocess.run([*argv, "--trials", str(1 + len(DEMO_CONFIGS))], cwd=REPO, env=env, check=True,
                   stdin=subprocess.DEVNULL)
    return storage, folder / "runs"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def screenshot(storage: str, workdir: Path, out: Path, page: str, size: str, budget_ms: int) -> None:
    port = free_port()
    log = tempfile.TemporaryFile()
    dashboard = subprocess.Popen([sys.executable, "-m", "tuner", "dashboard", "--host", "127.0.0.1",
                                  "--port", str(port), "--storage", storage, "--workdir", str(workdir)],
                                 cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    profile = tempfile.TemporaryDirectory(prefix="chromium-")
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if dashboard.poll() is not None:
                log.seek(0)
                raise SystemExit(f"dashboard exited with {dashboard.returncode}:\n{log.read().decode()[-3000:]}")
            try:
                if httpx.get(base + "/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("dashboard did not answer within 60 s")
            time.sleep(0.2)
        out.parent.mkdir(parents=True, exist_ok=True)
        url = base + page
        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", f"--user-data-dir={profile.name}", f"--window-size={size}",
                f"--virtual-time-budget={budget_ms}", f"--screenshot={out.resolve()}", url]
        print(f"screenshot of {url} -> {out}", file=sys.stderr)
        subprocess.run(argv, check=True, timeout=120, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not out.exists() or out.stat().st_size < 10_000:
            raise SystemExit(f"{out} is missing or nearly empty: the page did not render")
    finally:
        try:
            os.killpg(dashboard.pid, signal.SIGTERM)
            dashboard.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(dashboard.pid, signal.SIGKILL)
            dashboard.wait(timeout=10)
        log.close()
        profile.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=None, help="study storage (default: make a demo study)")
    parser.add_argument("--workdir", default="runs", help="the tuner's --workdir, where artifacts/ is")
    parser.add_argument("--page", default="/dashboard/studies/1/trials",
                        help="dashboard path (default: %(default)s; add ?numbers=N for one trial)")
    parser.add_argument("--out", default=str(REPO / "docs" / "dashboard.png"))
    parser.add_argument("--size", default="1400,900", help="window size WIDTH,HEIGHT")
    parser.add_argument("--budget-ms", type=int, default=10000, help="virtual time Chromium gives the page")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} not found: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="tuner-demo-") as tmp:
        if args.storage is None:
            storage, workdir = demo_study(Path(tmp))
        else:
            storage, workdir = args.storage, Path(args.workdir).resolve()
        screenshot(storage, workdir, Path(args.out), args.page, args.size, args.budget_ms)


if __name__ == "__main__":
    main()
