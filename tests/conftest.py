"""Fixtures for tests that run the tuner as a real process against the simulated server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from tuner._procs import group_members

REPO = Path(__file__).resolve().parent.parent

# A trial of the instant profile takes about a second: start-up, gate and probe cost nothing.
FAULT_SPACE = """
name: faults
server:
  model-path: /models/instant
  startup-timeout: 30
  stall-timeout: 3
params:
  schedule-conservativeness: {type: float, low: 0.1, high: 2.0, step: 0.01}
baseline: {schedule-conservativeness: 1.0}
gate:
  max-new-tokens: 8
  request-timeout: 10
probe:
  concurrency: [40]
  requests: 80
  input-len: 16
  output-len: 24
  warmup: 0
  request-timeout: 5
"""


class Tuner:
    """Runs `python -m tuner` in a folder of its own and reads back what it recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SIM_")}
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

    def leftovers(self) -> dict[int, list[int]]:
        """Process groups of servers the tuner recorded that still have live members."""
        out = {}
        for record in self.server_records():
            members = group_members(record["pgid"])
            if members:
                out[record["pgid"]] = members
        return out


@pytest.fixture
def tuner(tmp_path: Path):
    t = Tuner(tmp_path)
    try:
        yield t
    finally:
        # Never let a failed test leave a server behind for the next one.
        import signal

        for pgid in t.leftovers():
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
