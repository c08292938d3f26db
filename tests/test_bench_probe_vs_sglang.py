"""benchmarks/probe_vs_sglang_bench.py --quick runs end to end: the simulator starts under each profile,
SGLang's own bench_serving (from .venv-sglang, as a subprocess) and the probe run on the same prompts and
count the same output tokens, the table and the verdicts are printed, and the simulators' process groups are
gone afterwards.

No timing is asserted: the figures are for a person to read. Needs SGLang's reference environment and the
tiny Llama's tokenizer (scripts/setup_sglang_ref.sh, then .venv-sglang/bin/python scripts/make_tiny_model.py
.cache/tiny-llama); without them this test is skipped, and TUNER_TEST_SGLANG_REF=1 makes that a failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from tuner.trial._procs import group_members

sys.path.insert(0, str(REPO / "benchmarks"))
from probe_vs_sglang_bench import sglang_available  # noqa: E402

MISSING = sglang_available()
pytestmark = [
    pytest.mark.skipif(MISSING is not None and not os.environ.get("TUNER_TEST_SGLANG_REF"),
                       reason=f"needs SGLang's benchmark client: {MISSING}"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pins the server and the clients to two cores"),
]


@pytest.mark.timeout(600)
def test_quick_mode_counts_the_same_tokens_as_bench_serving_and_leaves_nothing_running():
    assert MISSING is None, MISSING
    cores = sorted(os.sched_getaffinity(0))[:2]
    done = subprocess.run([sys.executable, "benchmarks/probe_vs_sglang_bench.py", "--quick", "--server-core",
                           str(cores[1]), "--client-core", str(cores[0])], cwd=REPO, capture_output=True, text=True,
                          timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    # Columns: profile, round, client, tok/s, mean TTFT, p99 TTFT, mean ITL, duration, in, out tokens, CPU.
    rows = [[c.strip() for c in line.split("  ") if c.strip()] for line in out.splitlines()
            if re.match(r"(llama3-8b-h200|instant) +0 ", line)]
    for profile, tokens in (("llama3-8b-h200", "2048"), ("instant", "4096")):
        mine = [row for row in rows if row[0] == profile]
        assert [row[2] for row in mine] == ["bench_serving", "probe", "bench_serving again"], out
        assert {row[9] for row in mine} == {tokens}, out  # every output token of 2 x concurrency x 32
    assert "target 0.97-1.03" in out and "target >= 1.0" in out
    for pgid in re.findall(r"process group (\d+)", out):
        assert group_members(int(pgid)) == []
