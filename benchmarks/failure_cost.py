"""Wasted restart time: how long a broken configuration holds the machine after it shows it is broken.

    python benchmarks/failure_cost.py [--repeats 3] [--only NAME ...]

For every failure the simulator can produce (its fault switches, and the GLM-5 twin's per-backend health
rules), this runs a small study of `--repeats` trials with the real tuner (`python -m tuner run`, real
processes, real HTTP) and measures, per trial, the time from the fault to the end of the trial: the
moment the trial's result is recorded, after the server's whole process group is gone. The fault's moment
comes from the simulator itself (TUNER_SIM_EVENTS: the first NaN step, the first HTTP 500, the first bad
answer, the moment it exits or starts to hang), with sub-millisecond resolution, not from SGLang's log
timestamps (whole seconds).

Beside it: what a readiness-timeout loop would have spent on the same fault. Modelled on vLLM's
benchmarks/auto_tune/auto_tune.sh: after the launch it checks `kill -0` and polls /health every 10 s for
at most 60 polls (10 minutes), then runs `vllm bench serve` and records whatever that prints. So an exit
before readiness is seen at the next 10 s poll after it (computed from this very run's offsets), a hang
costs the rest of the 10 minutes, and a fault after readiness is never seen as a failure at all: NaN,
garbage and HTTP 500s come back as a throughput figure, and a server that stops answering holds the
benchmark client until its request timeout (6 h in vLLM's benchmark client).

Faults with no visible sign (a hang, a server that stops answering) can only be ended by a timeout; their
rows show the timeout the space sets (scaled as `--simulate` scales it) rather than a reaction time; a slow
server is bounded by the probe's time budget. For faults that leave the trial healthy (children that escape
the process group, a burst of log output) the targets are nothing left running and the tuner's memory.
Every row also shows what of the study's servers was still running afterwards (process group, session,
environment marker, anything on the trial's port) and the tuner process's own peak memory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

POLL_S = 10.0  # auto_tune.sh: `sleep 10` between /health polls
POLL_LIMIT_S = 600.0  # auto_tune.sh: 60 polls, "did not start within 10 minutes"
CLIENT_TIMEOUT_S = 6 * 3600.0  # vLLM's benchmark client: aiohttp ClientTimeout(total=6 h)
TARGET_S = 2.0
MEMORY_MB = 150.0  # the tuner's own peak memory, whatever the server writes


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the failure kind the tuner must record
    event: str  # the simulator's mark for the fault's moment
    profile: str = "llama3-8b-h200"
    faults: str = ""
    fixed: dict[str, object] = field(default_factory=dict)
    visible: bool = True  # False: no sign but silence; only a timeout can end it
    # The space's timeouts where a case needs its own (None: the SPACE's), and the start-up scale it runs at.
    server: dict[str, float] = field(default_factory=dict)  # e.g. {"startup-timeout": 60, "stall-timeout": 20}
    gate: dict[str, float] | None = None  # None: SPACE's gate timeouts; {}: the tuner's defaults
    startup_scale: float | None = None
    stall_bound: bool = False  # its target: the end within stall-timeout + TARGET_S of the fault


# The GLM-5 twin's health rules: what the seed deployment really did on SM120.
_GLM = {"tp-size": 8, "trust-remote-code": True}
_FLASHMLA = {**_GLM, "attention-backend": "nsa", "nsa-decode-backend": "flashmla_kv"}

CASES = [
    Case("crash at start", "crash_on_start", "exit", faults="crash_at_start"),
    Case("OOM at graph capture", "oom", "exit", faults="oom_at_capture"),
    Case("graph capture crash (flashmla_kv + graphs)", "graph_capture_failed", "exit", profile="glm5-nvfp4-sm120",
         fixed=_FLASHMLA),
    Case("NaN at decode (flashmla_kv, no graphs)", "nan", "nan", profile="glm5-nvfp4-sm120",
         fixed={**_FLASHMLA, "disable-cuda-graph": True}),
    Case("garbage text (triton backend)", "garbage", "first_response", profile="glm5-nvfp4-sm120",
         fixed={**_GLM, "attention-backend": "triton", "disable-cuda-graph": True}),
    Case("NaN only above batch 32", "nan", "nan", faults="nan_when_batch_over=32"),
    Case("crash in the middle of the probe", "crash_under_load", "exit", faults="crash_after_requests=30"),
    Case("HTTP 500 on 10% of requests", "errors_under_load", "http_500", faults="http_500_rate=0.1"),
    Case("hang at graph capture (no log)", "startup_timeout", "hang", faults="hang_at_capture", visible=False),
    Case("silent start (no log for 30 s)", "startup_timeout", "silent_start", faults="slow_start_no_log=30",
         visible=False),
    Case("stops answering mid-probe", "errors_under_load", "frozen", faults="stop_answering_after=12",
         visible=False),
    # Seen against an SGLang look-alike written elsewhere (issue 18).
    Case("children escape the group (setsid, one keeps the port)", "none", "escaped", faults="escape_session"),
    # Issue 35: a hung /generate behind an answering /health_generate, with its settings (start-up 60 s, stall 20 s,
    # the gate's default timeouts: 600 s for the first request, 60 s for the others), unscaled.
    Case("/generate hangs, /health_generate answers (stall 20 s)", "hang", "generate_hang", profile="instant",
         faults="generate_hang", visible=False, server={"startup-timeout": 60, "stall-timeout": 20}, gate={},
         startup_scale=1.0, stall_bound=True),
    Case("NaN, request tracebacks in the log", "nan", "nan", faults="nan_when_batch_over=32,request_tracebacks"),
    Case("HTTP 500s, request tracebacks in the log", "errors_under_load", "http_500",
         faults="http_500_rate=0.1,request_tracebacks"),
    Case("in-stream error events on 20% of requests", "errors_under_load", "stream_error",
         faults="stream_error_rate=0.2"),
    Case("60 MB log burst", "none", "log_burst", faults="log_burst=60"),
    # No request finishes within the budget: the level's figure is its start, not a measurement.
    Case("slow drip (a token every 2 s)", "probe_cut", "slow_drip", faults="slow_drip=2", visible=False),
]

SPACE = """
name: failure-cost
server:
  model-path: /models/sim
  startup-timeout: {startup}
  stall-timeout: {stall}
  fixed: {fixed}
params:
  schedule-conservativeness: {{type: float, low: 0.3, high: 1.5, step: 0.01}}
gate:
  max-new-tokens: 8
{gate}probe:
  concurrency: [40]
  requests: 120
  input-len: 256
  output-len: 128
  warmup: 0
  request-timeout: 3
  time-budget: 20
"""


@dataclass
class Measured:
    case: Case
    kinds: list[str]
    fault_to_end: list[float]  # seconds, one per trial whose fault was seen
    launch_to_fault: list[float]
    stall_timeout: float | None = None
    request_timeout: float | None = None
    error: str = ""
    leftovers: int = 0  # processes of the study's servers still running after it (group, session, marker, port)
    peak_mb: float = 0.0  # the tuner process's own peak resident memory


def run_case(case: Case, repeats: int, startup_scale: float) -> Measured:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="failure_cost-") as tmp:
        folder = Path(tmp)
        # As the GLM-5 space (start-up 3600 s, stall 900 s); --simulate compresses both with the start-up.
        gate = {"first-request-timeout": 5, "request-timeout": 5} if case.gate is None else case.gate
        (folder / "space.yaml").write_text(textwrap.dedent(SPACE.format(
            fixed=json.dumps(case.fixed), startup=case.server.get("startup-timeout", 3600),
            stall=case.server.get("stall-timeout", 900), gate="".join(f"  {k}: {v}\n" for k, v in gate.items()))))
        if case.startup_scale is not None:
            startup_scale = case.startup_scale
        events = folder / "events.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SIM_")}
        env.update({"TUNER_SIM_FAULTS": case.faults, "TUNER_SIM_EVENTS": str(events),
                    "TUNER_SIM_STARTUP_SCALE": str(startup_scale), "TUNER_SIM_TIME_SCALE": "1",
                    "PYTHONPATH": str(REPO)})
        storage = f"sqlite:///{folder / 'trials.db'}"
        argv = [sys.executable, "-c", _MEASURED, "run", "--trials", str(repeats), "--space", "space.yaml",
                "--simulate", case.profile, "--storage", storage, "--workdir", "runs", "--seed", "1"]
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return Measured(case, [], [], [], error=(done.stderr.strip().splitlines() or ["?"])[-1])
        marks = _read_events(events)
        study = optuna.load_study(study_name="failure-cost", storage=storage)
        measured = Measured(case, [], [], [])
        measured.peak_mb = int(done.stderr.rsplit("PEAK_RSS_KB", 1)[1].split()[0]) / 1024
        records = [json.loads(r.read_text()) for r in (folder / "runs").glob("**/server.json")]
        from tuner.trial._procs import remains

        measured.leftovers = sum(len(remains(r)) for r in records)
        for trial in study.get_trials():
            measured.kinds.append(trial.user_attrs.get("failure_kind", "?"))
            record = folder / "runs" / "failure-cost" / f"trial-{trial.number}" / "server.json"
            if not record.exists():
                continue
            server = json.loads(record.read_text())
            fault_at = marks.get((server["pid"], case.event))
            ended_at = trial.user_attrs.get("ended_at")
            if fault_at is None or ended_at is None:
                continue
            measured.fault_to_end.append(ended_at - fault_at)
            measured.launch_to_fault.append(fault_at - server["launched_at"])
        space = _effective_timeouts(folder, case.profile, env, case.event)
        measured.stall_timeout, measured.request_timeout = space
        return measured


# The tuner run in a process that reports its own peak memory when it ends.
_MEASURED = ("import runpy, sys\nsys.argv = ['tuner', *sys.argv[1:]]\ntry:\n"
             "    runpy.run_module('tuner', run_name='__main__', alter_sys=True)\nfinally:\n"
             "    hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]\n"
             "    print('PEAK_RSS_KB', hwm, file=sys.stderr)\n")


def _read_events(path: Path) -> dict[tuple[int, str], float]:
    marks: dict[tuple[int, str], float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            mark = json.loads(line)
            marks.setdefault((mark["pid"], mark["event"]), mark["t"])
    return marks


def _effective_timeouts(folder: Path, profile: str, env: dict[str, str], event: str) -> tuple[float, float]:
    """The stall timeout the run used (`--simulate` compresses the start-up ones), and the bound on a fault
    after readiness: the gate's first-request timeout for a hang of /generate, the probe's time budget for
    a slow server, else the probe's request timeout."""
    code = ("import sys; from tuner._run import prepare; p = prepare('space.yaml', sys.argv[1], None); "
            "print(p.spec.server.stall_timeout, p.spec.probe.request_timeout, p.spec.gate.first_request_timeout, "
            "p.spec.probe.time_budget)")
    out = subprocess.run([sys.executable, "-c", code, profile], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=120)
    stall, request, first, budget = map(float, out.stdout.split())
    # A hung /generate: the gate's watch ends it at the stall-timeout, or past the request timeout once the log
    # has been quiet that long, at the first-request timeout at the latest (tuner/trial/_watch.py).
    return stall, {"generate_hang": min(stall, first), "slow_drip": budget}.get(event, request)


def readiness_loop_cost(m: Measured) -> tuple[float | None, str]:
    """Seconds auto_tune's loop would hold the machine after this fault (None: it never notices)."""
    c = m.case
    if c.event == "exit" and c.kind != "crash_under_load":
        # Seen at the next `kill -0` poll after the exit.
        waits = [math.ceil(t / POLL_S) * POLL_S - t if t > 0 else POLL_S for t in m.launch_to_fault]
        return statistics.median(waits), "next 10 s poll"
    if c.kind == "startup_timeout":
        return statistics.median(POLL_LIMIT_S - t for t in m.launch_to_fault), "rest of its 10 min"
    if c.event in ("frozen", "generate_hang"):
        return CLIENT_TIMEOUT_S, "client's 6 h timeout"
    if c.event == "slow_drip":
        # Its benchmark runs to the end: 3 waves of 40 streams, 128 tokens each at 2 s a token.
        return 3 * 128 * 2.0, "benchmark runs to its end"
    if c.event in ("escaped", "log_burst"):
        return None, "-"
    return None, "never: recorded as a result"


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.0f} h" if seconds >= 3600 else f"{seconds:.2f} s" if seconds < 60 else f"{seconds:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="trials per fault (default 3)")
    parser.add_argument("--only", nargs="*", default=None, help="run only the cases whose name contains these")
    parser.add_argument("--startup-scale", type=float, default=0.005,
                        help="TUNER_SIM_STARTUP_SCALE for the GLM-5 twin's start-up (default 0.005)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or any(w in c.name for w in args.only)]
    print(f"{len(cases)} faults x {args.repeats} trials; fault -> end of trial (result recorded, process group "
          f"gone); target <= {TARGET_S:g} s where the fault has a visible sign\n")
    header = (f"{'fault':56} {'recorded as':22} {'median':>8} {'max':>8} {'left':>5} {'peak MB':>8}   "
              f"{'readiness-timeout loop':30} {'ratio':>7}  target")
    print(header)
    print("-" * len(header))
    missed = []
    for case in cases:
        m = run_case(case, args.repeats, args.startup_scale)
        if m.error or not m.fault_to_end:
            print(f"{case.name:56} {'ERROR':22} {m.error or 'the fault was never seen'}")
            missed.append(case.name)
            continue
        kinds = sorted(set(m.kinds))
        recorded = kinds[0] if kinds == [case.kind] else "!" + "/".join(kinds)
        median, worst = statistics.median(m.fault_to_end), max(m.fault_to_end)
        loop, how = readiness_loop_cost(m)
        ratio = f"{loop / median:6.0f}x" if loop is not None and median > 0 else "-"
        if case.kind == "none":  # a healthy trial despite the fault: what counts is nothing left, memory bounded
            verdict = "met" if kinds == ["none"] and not m.leftovers and m.peak_mb < MEMORY_MB else "MISSED"
        elif case.stall_bound:
            bound = m.stall_timeout + TARGET_S
            verdict = f"{'met' if worst <= bound and kinds == [case.kind] and not m.leftovers else 'MISSED'} " \
                      f"(<= stall {m.stall_timeout:g} s + {TARGET_S:g} s)"
        elif case.visible:
            verdict = "met" if worst <= TARGET_S and kinds == [case.kind] and not m.leftovers else "MISSED"
        else:
            bound = m.stall_timeout if case.kind == "startup_timeout" else m.request_timeout
            verdict = f"n/a (timeout {bound:g} s)"
        if verdict.startswith("MISSED"):
            missed.append(case.name)
        print(f"{case.name:56} {recorded:22} {_fmt(median):>8} {_fmt(worst):>8} {m.leftovers:>5} {m.peak_mb:>8.0f}   "
              f"{_fmt(loop) + ', ' + how:30} {ratio:>7}  {verdict}")
    print()
    print("ratio: readiness-timeout loop / tuner (median). A fault the loop never notices costs it no time but "
          "records a NaN or garbage configuration as a valid, possibly winning, result.")
    if missed:
        print(f"targets missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
