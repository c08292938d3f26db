"""Stage 3: wait until the server answers, ending the trial within about a second of a fatal sign."""

from __future__ import annotations

import concurrent.futures
import signal
import textwrap
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

import httpx
import tenacity

from .._failures import CUDA_GRAPH_CAPTURE, FAILED_IN, HUNG_IN, FailureKind, TrialFailure
from ..engines import Engine
from ._launch import ServerProcess
from ._logwatch import LogWatcher
from ._tls import tls_context

# A fatal line is usually followed by the lines that explain it and by the process exiting;
# waiting this long for them gives a better failure kind without costing real time.
SETTLE_S = 0.5


@dataclass(frozen=True)
class ReadinessResult:
    seconds: float
    log_lines: int
    generated: bool = False  # readiness was a real generation (SGLang's /health_generate answered 200)


class _NotReady(Exception):
    pass


def wait_until_ready(server: ServerProcess, engine: Engine, watcher: LogWatcher, client: httpx.Client,
                     startup_timeout: float, stall_timeout: float,
                     cancel: threading.Event | None = None, generate_timeout: float = 600.0) -> ReadinessResult:
    deadline = server.started + startup_timeout
    # A 503 from the ready endpoint is the server saying it is warming up (SGLang answers so until its
    # warm-up request is done; seen for 47 s on an H100): a sign of life as good as a log line, so only the
    # start-up timeout bounds it.
    warming: list[float] = []  # when the current run of 503 answers began, and the last of them

    def alive() -> None:
        check_alive(server, watcher, stage="readiness", cancel=cancel)
        now = time.monotonic()
        if now > deadline:
            timed_out(f"not ready after {startup_timeout:g} s" + (
                f"; {engine.ready_path} answered 503 (warming up) for the last {warming[1] - warming[0]:.0f} s"
                if warming else ""))
        if now - max(watcher.last_growth, warming[-1] if warming else 0.0) > stall_timeout:
            timed_out(f"no log output for {stall_timeout:g} s (hang)")

    def timed_out(message: str) -> None:
        # A hang while capturing CUDA graphs is the capture's failure: the sampler learns it as one (it says
        # nothing of the same flags with graphs off), and the message tells the user where it stuck.
        if watcher.capturing():
            raise TrialFailure(FailureKind.STARTUP_TIMEOUT, f"{message} during CUDA graph capture",
                               watcher.excerpt(), "readiness", {HUNG_IN: CUDA_GRAPH_CAPTURE})
        raise TrialFailure(FailureKind.STARTUP_TIMEOUT, message, watcher.excerpt(), "readiness")

    def attempt() -> None:
        alive()
        if engine.ready_generates:
            status = _generates(client, engine.ready_path, generate_timeout, alive)
        else:
            try:
                status = client.get(engine.ready_path, timeout=5.0).status_code
            except httpx.HTTPError as exc:
                raise _NotReady() from exc
        if status == 503:
            now = time.monotonic()
            warming[:] = [warming[0] if warming else now, now]
        elif status != 200:
            warming.clear()
        if status != 200:
            raise _NotReady()

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(_NotReady),
        wait=tenacity.wait_exponential(multiplier=0.05, min=0.05, max=0.5),
        stop=tenacity.stop_never,
        reraise=True,
    )
    retrying(attempt)
    return ReadinessResult(time.monotonic() - server.started, watcher.lines_seen, engine.ready_generates)


def _generates(client: httpx.Client, path: str, timeout: float, alive) -> int:
    """Status of one real generation at `path`, asked in a thread while `alive()` keeps watching the server:
    it may take a while (first-use compilation) or never end (the server died under it)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="readiness")
    try:
        future = pool.submit(httpx.get, str(client.base_url.join(path)), headers=client.headers, timeout=timeout,
                             verify=tls_context())
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
    raise crash_failure(watcher, stage, code, server.signalled)


def crash_failure(watcher: LogWatcher, stage: str, code: int | None,
                  signalled: Collection[str] = ()) -> TrialFailure:
    """The failure of a server that exited with `code` (None: alive, with a definitive fatal line);
    `signalled`: the signals the tuner itself sent it."""
    fatal = watcher.fatal
    kind = fatal.kind if fatal else FailureKind.CRASH_ON_START
    if stage != "readiness" and kind is FailureKind.CRASH_ON_START:
        kind = FailureKind.CRASH_UNDER_LOAD
    what = exit_text(code, signalled, fatal is not None) if code is not None else "fatal log line"
    cause = watcher.cause()
    message = f"{cause} ({what})" if cause else what  # the cause first: a shortened message keeps it
    return TrialFailure(kind, textwrap.shorten(message, 500, placeholder=" ..."),
                        watcher.excerpt(around=fatal.line if fatal else None), stage,
                        {FAILED_IN: CUDA_GRAPH_CAPTURE} if fatal and fatal.capturing else None)


def exit_text(code: int, signalled: Collection[str] = (), fatal_logged: bool = False) -> str:
    """How the server ended, saying who sent a fatal signal: the tuner, the server itself after a fatal error
    (SGLang's kill_process_tree SIGKILLs its own tree), or someone else (for SIGKILL often the OOM killer)."""
    if code >= 0:
        return f"server exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"server ended by signal {-code}"
    if name in signalled:
        return f"server ended by the tuner's own {name}"
    if fatal_logged:
        return f"server ended itself with {name} after a fatal error"
    hint = "; the kernel's OOM killer sends it: see dmesg" if name == "SIGKILL" else ""
    return f"server killed by {name} from outside the tuner{hint}"
