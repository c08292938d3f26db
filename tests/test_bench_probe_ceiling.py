"""benchmarks/probe_ceiling.py --quick runs end to end: the simulator and vLLM's benchmark client start,
the table and the verdict are printed, and the simulator's process group is gone afterwards.

No timing is asserted: the figures are for a person to read. Needs vLLM's environment for its client
(.ci/run sets it up and sets TUNER_TEST_VLLM=1; elsewhere this test is skipped) and two cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from tuner.trial._procs import group_members

pytestmark = [
    pytest.mark.skipif(not os.environ.get("TUNER_TEST_VLLM"),
                       reason="needs vLLM's benchmark client: run scripts/setup_vllm_cpu.sh and "
                              "scripts/make_tiny_model.py, set TUNER_TEST_VLLM=1"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pins the server and the clients to two cores"),
]


@pytest.mark.timeout(600)
def test_quick_mode_prints_both_clients_and_leaves_nothing_running():
    cores = sorted(os.sched_getaffinity(0))[:2]
    done = subprocess.run([sys.executable, "benchmarks/probe_ceiling.py", "--quick", "--server-core", str(cores[1]),
                           "--client-core", str(cores[0])], cwd=REPO, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    rows = [line for line in out.splitlines() if line.startswith("0 ")]
    assert any("probe (vllm engine)" in row for row in rows) and any("vllm bench serve" in row for row in rows), out
    # Both clients were given the same workload and counted all of it: 64 requests x 64 tokens.
    assert all(" 4096 " in row for row in rows), out
    assert "target >= 1.0" in out
    pgid = int(re.search(r"process group (\d+)", out).group(1))
    assert group_members(pgid) == []
