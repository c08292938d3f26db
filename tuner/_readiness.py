"""Stage 3: wait until the server answers, ending the trial within about a second of a fatal sign."""

from __future__ import annotations

import concurrent.futures
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
                     cancel: threading.Event | None = None, confirm_timeout: float = 600.0) -> ReadinessResult:
    deadline = server.started + startup_timeout

    def alive() -> None:
        check_alive(server, watcher, stage="readiness", cancel=cancel)
        now = time.monotonic()
        if now > deadline:
            raise TrialFailure(FailureKind.STARTUP_TIMEOUT, f"not ready after {startup_timeout:g} s",
                               watcher.excerpt(), "readiness")
        if now - watcher.last_growth > stall_timeout:
            raise TrialFailure(FailureKind.STARTUP_TIMEOUT,
                               f"no log output for {stall_timeout:g} s (hang)", watcher.excerpt(), "readiness")

    def attempt() -> None:
        alive()
        try:
            # 5 s: SGLang's /health runs a one-token generation and sleeps a second before it answers
            # (entrypoints/http_server.py, health_generate); 2 s left too little on a loaded host.
            response = client.get(engine.ready_path, timeout=5.0)
        except httpx.HTTPError as exc:
            raise _NotReady() from exc
        if response.status_code != 200:
            raise _NotReady()
        if engine.confirm_path and _generates(client, engine.confirm_path, confirm_timeout, alive) != 200:
            raise _NotReady()

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(_NotReady),
        wait=tenacity.wait_exponential(multiplier=0.05, min=0.05, max=0.5),
        stop=tenacity.stop_never,
        reraise=True,
    )
    retrying(attempt)
    return ReadinessResult(time.monotonic() - server.started, watcher.lines_seen)


def _generates(client: httpx.Client, path: str, timeout: float, alive) -> int:
    """Status of one real generation at `path`, asked in a thread while `alive()` keeps watching the server:
    it may take a while (first-use compilation) or never end (the server died under it)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="readiness")
    try:
        future = pool.submit(httpx.get, str(client.base_url.join(path)), headers=client.headers, timeout=timeout)
        while True:
            try:
                return future.result(timeout=0.1).status_code
            except concurrent.futures.TimeoutError:
                alive()
            except httpx.HTTPError as exc:
                raise _NotReady() from exc
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a request still waiting ends with the server


def check_alive(server: ServerProcess, watcher: LogWatcher, stage: str,
                cancel: threading.Event | None = None) -> None:
    """Raise the trial's failure if the process has exited or the log names a fatal cause.

    A bare traceback in the log of a live server ends nothing: a server prints one for a single failed
    request (a client that went away) and goes on serving."""
    if cancel is not None and cancel.is_set():
        raise TrialFailure(FailureKind.INTERRUPTED, "the run was interrupted", "", stage)
    watcher.poll()
    code = server.popen.poll()
    fatal = watcher.fatal
    if code is None:
        if fatal is None or not fatal.definitive or time.monotonic() - fatal.seen_at < SETTLE_S:
            return  # alive; or let the explanation and the exit arrive
    else:
        watcher.poll()
        fatal = watcher.fatal
    raise crash_failure(watcher, stage, code)


def crash_failure(watcher: LogWatcher, stage: str, code: int | None) -> TrialFailure:
    """The failure of a server that exited with `code` (None: alive, with a definitive fatal line)."""
    fatal = watcher.fatal
    kind = fatal.kind if fatal else FailureKind.CRASH_ON_START
    if stage != "readiness" and kind is FailureKind.CRASH_ON_START:
        kind = FailureKind.CRASH_UNDER_LOAD
    what = f"server exited with code {code}" if code is not None else "fatal log line"
    cause = watcher.cause()
    message = f"{what}: {cause}" if cause else what
    return TrialFailure(kind, message[:500], watcher.excerpt(around=fatal.line if fatal else None), stage)
