"""Helpers that run the simulator as a real process, in its own process group, on a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_env(profile: str, scale: float | None, seed: int | None, faults: str | None,
            extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TUNER_SIM_PROFILE"] = profile
    for key in ("TUNER_SIM_TIME_SCALE", "TUNER_SIM_SEED", "TUNER_SIM_FAULTS", "CUDA_VISIBLE_DEVICES"):
        env.pop(key, None)
    if scale is not None:
        env["TUNER_SIM_TIME_SCALE"] = str(scale)
    if seed is not None:
        env["TUNER_SIM_SEED"] = str(seed)
    if faults:
        env["TUNER_SIM_FAULTS"] = faults
    env.update(extra or {})
    return env


def run_cli(*args: str, profile: str = "glm5-nvfp4-sm120", timeout: float = 30) -> subprocess.CompletedProcess:
    """Run the simulator's command line to completion (argument errors, --help)."""
    return subprocess.run([sys.executable, "-m", "tuner.sim", *args], env=sim_env(profile, 0.0, 0, None),
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@dataclass
class Sim:
    proc: subprocess.Popen
    port: int
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, **kw) -> httpx.Client:
        kw.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, **kw)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, condition, timeout: float, what: str, interval: float = 0.02) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(interval)  # polling a condition, not sleeping instead of one
        raise AssertionError(f"timed out waiting for {what}\n--- log ---\n{self.log()[-4000:]}")

    def wait_log(self, text: str, timeout: float = 30) -> None:
        self.wait_for(lambda: text in self.log(), timeout, repr(text))

    def wait_exit(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"process did not exit\n--- log ---\n{self.log()[-4000:]}") from None

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"simulator exited with {self.proc.returncode}\n{self.log()[-4000:]}")
            try:
                # /health runs a one-token generation after at least a (time-scaled) second, as SGLang's does.
                return httpx.get(self.url + "/health", timeout=15.0).status_code == 200
            except httpx.HTTPError:
                return False
        self.wait_for(ready, timeout, "readiness")

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class SimFactory:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.sims: list[Sim] = []

    def __call__(self, *args: str, profile: str = "instant", scale: float | None = None, seed: int | None = 0,
                 faults: str | None = None, env: dict[str, str] | None = None, wait: bool = True,
                 model_path: str = "sim/model", port: int | None = None, timeout: float = 60) -> Sim:
        port = port or free_port()
        log_path = self.tmp_path / f"sim-{len(self.sims)}-{port}.log"
        argv = [sys.executable, "-m", "tuner.sim", "--model-path", model_path, "--port", str(port), *args]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=sim_env(profile, scale, seed, faults, env), cwd=REPO,
                                    start_new_session=True)
        sim = Sim(proc=proc, port=port, log_path=log_path)
        self.sims.append(sim)
        if wait:
            sim.wait_ready(timeout)
        return sim

    def cleanup(self) -> None:
        for sim in self.sims:
            sim.kill_group()


PARIS = "What is the capital of France? Answer in one word."


def quick_start_profile(tmp_path: Path, name: str, startup_s: float = 0.05) -> str:
    """A copy of a shipped profile whose start-up phases take `startup_s` simulated seconds each: the same
    physics, so a test can use a slow time scale without waiting minutes for weights to load."""
    import yaml

    from tuner.sim._profile import PROFILE_DIR

    data = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())
    data["startup"] = {key: startup_s for key in data.get("startup", {})} or {"process_s": startup_s}
    path = tmp_path / f"{name}-quick-start.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
