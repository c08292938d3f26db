"""Smoke test of benchmarks/rate_search.py: its quick mode runs the search and both sweeps and prints the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.solo  # real-time rates: run alone (README test command)
def test_quick_mode_prints_the_table() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "rate_search.py"), "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    for row in ("| tuner rate search |", "| linear sweep (vllm bench sweep) |", "| slow sweep (the truth) |"):
        assert row in done.stdout, done.stdout
    assert "within 5% of the capacity:" in done.stdout
