"""Stage 3: wait until the server answers, ending the trial within about a second of a fatal sign."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx
import tenacity

from ._failures import FailureKind, TrialFailure
from ._launch import ServerProcess
from ._logwatch import LogWatcher
from .engines import Engine

# A fatal line is usually followed by the lines that explain it and by the process exiting;
# waiting this long for them gives a better failure kind without costing real time.
SETTLE_S = 0.5


@dataclass(frozen=True)
class ReadinessResult:
    seconds: float
    log_lines: int


class _NotReady(Exception):
    pass


def wait_until_ready(server: ServerProcess, engine: Engine, watcher: LogWatcher, client: httpx.Client,
                     startup_timeout: float, stall_timeout: float,
                     cancel: threading.Event | None = None) -> ReadinessResult:
    deadline = server.started + startup_timeout

    def attempt() -> None:
        check_alive(server, watcher, stage="readiness", cancel=cancel)
        now = time.monotonic()
        if now > deadline:
            raise TrialFailure(FailureKind.STARTUP_TIMEOUT, f"not ready after {startup_timeout:g} s",
                               watcher.excerpt(), "readiness")
        if now - watcher.last_growth > stall_timeout:
            raise TrialFailure(FailureKind.STARTUP_TIMEOUT,
                               f"no log output for {stall_timeout:g} s (hang)", watcher.excerpt(), "readiness")
        try:
            response = client.get(engine.ready_path, timeout=2.0)
        except httpx.HTTPError as exc:
            raise _NotReady() from exc
        if response.status_code != 200:
            raise _NotReady()

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(_NotReady),
        wait=tenacity.wait_exponential(multiplier=0.05, min=0.05, max=0.5),
        stop=tenacity.stop_never,
        reraise=True,
    )
    retrying(attempt)
    return ReadinessResult(time.monotonic() - server.started, watcher.lines_seen)


def check_alive(server: ServerProcess, watcher: LogWatcher, stage: str,
                cancel: threading.Event | None = None) -> None:
    """Raise the trial's failure if the process has exited or the log shows a fatal line."""
    if cancel is not None and cancel.is_set():
        raise TrialFailure(FailureKind.INTERRUPTED, "the run was interrupted", "", stage)
    watcher.poll()
    code = server.popen.poll()
    if watcher.fatal is not None and code is None and time.monotonic() - watcher.fatal.seen_at < SETTLE_S:
        return  # let the explanation and the exit arrive
    if watcher.fatal is None and code is None:
        return
    if code is not None:
        watcher.poll()
    kind = watcher.fatal.kind if watcher.fatal else FailureKind.CRASH_ON_START
    if stage != "readiness" and kind is FailureKind.CRASH_ON_START:
        kind = FailureKind.CRASH_UNDER_LOAD
    what = f"server exited with code {code}" if code is not None else "fatal log line"
    line = watcher.fatal.line if watcher.fatal else ""
    message = f"{what}: {line.strip()}" if line else what
    raise TrialFailure(kind, message[:500], watcher.excerpt(around=line or None), stage)
