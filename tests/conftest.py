"""Fixtures for tests that run the tuner as a real process against the simulated server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from sim.simproc import SimFactory
from tuner.trial._procs import remains as remains_of

REPO = Path(__file__).resolve().parent.parent

STEPPED = "  schedule-conservativeness: {type: float, low: 0.1, high: 2.0, step: 0.01}\n"


def instant_space(name: str, *, params: str = STEPPED, baseline: str = "{schedule-conservativeness: 1.0}",
                  model: str = "/models/instant", server: str = "", stall_timeout: float = 3,
                  concurrency: int = 40, requests: int = 80, input_len: int = 16, output_len: int = 24,
                  probe_timeout: float = 5, extra: str = "") -> str:
    """A space file for the simulator. `params`, `server` (more lines of the server section) and `extra`
    (more sections) are YAML lines as they stand in the file."""
    return f"""
name: {name}
server:
  model-path: {model}
  startup-timeout: 30
  stall-timeout: {stall_timeout}
{server}params:
{params}baseline: {baseline}
gate:
  max-new-tokens: 8
  request-timeout: 10
probe:
  concurrency: [{concurrency}]
  requests: {requests}
  input-len: {input_len}
  output-len: {output_len}
  warmup: 0
  request-timeout: {probe_timeout}
{extra}"""


# A trial of the instant profile takes about a second: start-up, gate and probe cost nothing.
FAULT_SPACE = instant_space("faults")


class Tuner:
    """Runs `python -m tuner` in a folder of its own and reads back what it recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # No terminal width from the test runner (pytest-xdist's workers have COLUMNS=80): the progress lines
        # the tests read are written for no terminal, unless a test passes COLUMNS itself.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("TUNER_SIM_") and k not in ("COLUMNS", "LINES")}
        self.env["PYTHONUNBUFFERED"] = "1"
        (folder / "search_spaces").symlink_to(REPO / "search_spaces")

    def space(self, text: str, name: str = "space.yaml") -> Path:
        path = self.folder / name
        path.write_text(textwrap.dedent(text))
        return path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tuner", *args]

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), cwd=self.folder, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), cwd=self.folder, env={**self.env, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def storage(self) -> str:
        return f"sqlite:///{self.folder / 'trials.db'}"

    def study(self, name: str) -> optuna.Study:
        return optuna.load_study(study_name=name, storage=self.storage)

    def server_records(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((self.folder / "runs").glob("**/server.json"))]

    def end_leftovers(self) -> None:
        """Never let a failed test leave a server behind for the next one."""
        for pids in self.leftovers().values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def leftovers(self) -> dict[int, list[int]]:
        """For each server the tuner recorded (by group id), what of it still runs: members of its process
        group or session, processes carrying its environment marker, anything listening on its port."""
        return {record["pgid"]: pids for record in self.server_records() if (pids := remains_of(record))}


@pytest.fixture
def tuner(tmp_path: Path):
    t = Tuner(tmp_path)
    try:
        yield t
    finally:
        t.end_leftovers()


@pytest.fixture
def start_sim(tmp_path: Path):
    """Starts simulators (tests/sim/simproc.py) and always kills their process groups afterwards."""
    factory = SimFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()
