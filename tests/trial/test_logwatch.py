"""The log watcher on real log files: exception lines of real traceback shapes, bounded memory in a burst."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuner._failures import FailureKind
from tuner.trial._logwatch import MAX_LINE, LogWatcher, exception_line
from tuner.engines import get_engine

JAX_CHAIN = textwrap.dedent("""\
    [2026-12-03 10:00:01] Scheduler hit an exception: Traceback (most recent call last):
      File "/venv/lib/python3.11/site-packages/sgl_jax/srt/managers/scheduler.py", line 1210, in run_scheduler_process
        scheduler = Scheduler(server_args)
    jax.errors.SimplifiedTraceback: For simplicity, JAX has removed its internal frames from the traceback of the following exception. Set JAX_TRACEBACK_FILTERING=off to include these.

    The above exception was the direct cause of the following exception:

    Traceback (most recent call last):
      File "/venv/lib/python3.11/site-packages/sgl_jax/srt/layers/attention/flashattention_backend.py", line 88, in __init__
        raise NotImplementedError("TPU version must be 4 or higher")
    NotImplementedError: TPU version must be 4 or higher
    [2026-12-03 10:00:01] Received sigquit from a child process. It usually means the child failed.
    """)

GROUP = textwrap.dedent("""\
    ERROR:    Exception in ASGI application
      + Exception Group Traceback (most recent call last):
      |   File "/venv/lib/python3.11/site-packages/starlette/_utils.py", line 76, in collapse_excgroups
      |     yield
      | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
      +-+---------------- 1 ----------------
        | Traceback (most recent call last):
        |   File "/venv/lib/python3.11/site-packages/sgl_jax/srt/entrypoints/http_server.py", line 400, in stream_results
        |     yield b"data: " + orjson.dumps(out) + b"\\n\\n"
        | TypeError: Type is not JSON serializable: numpy.float64
        +------------------------------------
    INFO:     127.0.0.1:50000 - "POST /generate HTTP/1.1" 200 OK
    """)

MULTILINE = textwrap.dedent("""\
    Traceback (most recent call last):
      File "x.py", line 1, in <module>
    torch.AcceleratorError: CUDA error: an illegal memory access was encountered
    CUDA kernel errors might be asynchronously reported at some other API call
    For debugging consider passing CUDA_LAUNCH_BLOCKING=1
    [2026-12-03 10:00:02] next record
    """)


def test_exception_line_follows_chains_and_groups():
    assert exception_line(JAX_CHAIN.splitlines()) == "NotImplementedError: TPU version must be 4 or higher"
    assert exception_line(GROUP.splitlines()[1:]) == "TypeError: Type is not JSON serializable: numpy.float64"
    assert exception_line(MULTILINE.splitlines()) == \
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_watcher_names_the_exception_and_ranks_a_bare_traceback_below_a_fatal_cause(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(GROUP)
    watcher = LogWatcher(log, get_engine("sglang"))
    watcher.poll()
    assert watcher.fatal is not None and not watcher.fatal.definitive  # a live server's request error
    assert watcher.cause() == "TypeError: Type is not JSON serializable: numpy.float64"
    with log.open("a") as f:
        f.write(JAX_CHAIN)
    watcher.poll()
    assert watcher.fatal.definitive and watcher.fatal.kind is FailureKind.CRASH_ON_START
    assert watcher.cause() == "NotImplementedError: TPU version must be 4 or higher"
    assert "NotImplementedError" in watcher.excerpt(around=watcher.fatal.line)


# The capture lines as each engine prints them: SGLang 0.5.23 and 0.5.6 (logger lines), vLLM (a tqdm bar,
# redrawn with carriage returns and ended with a newline only when done, then a logger line).
CAPTURES = {
    "sglang": ("[2026-12-05 10:00:01 TP0] Capture target decode CUDA graph begin. backend=full, "
               "num_tokens_per_req=1, avail mem=20.10 GB\n",
               "[2026-12-05 10:00:09 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=8.00 s, "
               "mem usage=0.50 GB, avail mem=19.60 GB.\n"),
    "sglang-0.5.6": ("[2026-12-05 10:00:01 TP0] Capture cuda graph begin. This can take up to several minutes. "
                     "avail mem=20.10 GB\n",
                     "[2026-12-05 10:00:09 TP0] Capture cuda graph end. Time elapsed: 8.00 s. mem usage=0.50 GB. "
                     "avail mem=19.60 GB.\n"),
    "vllm": ("\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/67 [00:00<?, ?it/s]"
             "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|####      | 27/67 [00:01<00:02]",
             "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:03<00:00]\n"
             "(EngineCore_DP0 pid=1) INFO 12-05 10:00:09 [gpu_model_runner.py:4587] Graph capturing finished in "
             "3 secs, took 0.43 GiB\n"),
}


@pytest.mark.parametrize("case", sorted(CAPTURES))
def test_watcher_knows_when_the_server_is_capturing_cuda_graphs(tmp_path, case):
    begin, end = CAPTURES[case]
    log = tmp_path / "server.log"
    log.write_text("INFO: Load weight end. mem usage=15.00 GB\n")
    watcher = LogWatcher(log, get_engine(case.split("-")[0]))
    watcher.poll()
    assert not watcher.capturing()
    with log.open("a") as f:
        f.write(begin)
    watcher.poll()
    assert watcher.capturing()  # a hang from here on is the capture's
    with log.open("a") as f:
        f.write(end + "INFO: The server is fired up and ready to roll!\n")
    watcher.poll()
    assert not watcher.capturing()


def test_a_burst_of_log_output_keeps_the_watcher_small(tmp_path):
    """60 MB of log lines plus one 20 MB line: the watcher's memory stays bounded (in a child process, so
    that its peak resident memory is its own)."""
    code = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from tuner.trial._logwatch import LogWatcher
        from tuner.engines import get_engine
        log = Path(sys.argv[1])
        watcher = LogWatcher(log, get_engine("sglang"))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with log.open("w") as f:
            for i in range(3):
                f.write(("[2026-12-03 10:00:00 TP0] Decode batch, #running-req: 64, token usage: 0.40 " * 2 + "\\n")
                        * 120_000)
                f.write("x" * 20_000_000 + "\\n")
        while watcher.poll():
            pass
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(watcher.lines_seen, max(len(line) for line in watcher.tail), (after - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "burst.log")], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    lines, longest, grown_mb = map(int, out)
    assert lines == 3 * 120_001
    assert longest == MAX_LINE
    assert grown_mb < 30, f"the watcher grew by {grown_mb} MB reading 120 MB of log"


def test_a_real_prefill_graph_capture_oom_of_sglang_0517_reads_as_oom(tmp_path):
    """SGLang 0.5.17 on an H100 (mem-fraction-static 0.96, breakable prefill graphs): the first fatal line is
    "CUDA error: the operation cannot be performed in the present state"; the cause, "CUDA error: out of
    memory", comes in the scheduler's traceback after it. The cause wins: the fix is memory, not the kernels."""
    real = (Path(__file__).parents[1] / "data" / "sglang-0.5.17-prefill-capture-oom.log").read_text()
    log = tmp_path / "server.log"
    log.write_text(real)
    watcher = LogWatcher(log, get_engine("sglang"))
    while watcher.poll():
        pass
    assert watcher.fatal is not None and watcher.fatal.kind is FailureKind.OOM
    assert "CUDA error: out of memory" in watcher.fatal.line
    # It came after "Capture target prefill CUDA graph begin": a failed capture (`failed_in`), whatever its kind.
    assert watcher.fatal.capturing
