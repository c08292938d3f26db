"""One request to a live server, watched while it runs: not only its own timeout ends the wait.

A server can take a request and never answer it while its health endpoint still answers (a hung
scheduler). An HTTP timeout alone then costs the whole timeout, and the gate's first request has a long one
(`first-request-timeout`, for first-use compilation). Here the request runs in a thread while the caller
watches the server: its exit or a fatal log line, an interrupt, and silence end the wait early. The
server's log is the sign of work: a server compiling or loading logs as it goes; a hung one says nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .._failures import FailureKind, TrialFailure

T = TypeVar("T")

POLL_S = 0.1  # how often the server is looked at while a request runs


@dataclass(frozen=True)
class Limits:
    """How long one request may wait for its answer."""

    timeout: float  # past this, the request waits on only while the server's log keeps growing
    cap: float  # never longer than this, however busy the log
    stall: float | None  # no answer and no log output for this long: a hang (None: not applied)

    @property
    def http_timeout(self) -> float:
        """The HTTP client's own timeout: later than the watch's verdict, which says more."""
        return self.cap + 5.0


@dataclass(frozen=True)
class Watch:
    alive: Callable[[], None]  # raises the trial's failure: the server exited or logged a fatal line, or an interrupt
    last_output: Callable[[], float]  # time.monotonic() of the log's last growth, as of the last alive()
    stage: str

    def run(self, call: Callable[[], T], limits: Limits, what: str) -> T:
        """call() in a thread; its value or exception, or TrialFailure(HANG) once `limits` say it hung.

        A request given up on is left to its thread (a daemon), which ends when the server is torn down
        and its connection with it."""
        box: dict[str, object] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the watching thread
                box["error"] = exc
            finally:
                done.set()

        sent = time.monotonic()
        threading.Thread(target=target, name=f"request-{what}", daemon=True).start()
        while not done.wait(POLL_S):
            self.alive()
            verdict = hung(limits, sent, self.last_output(), time.monotonic())
            if verdict:
                raise TrialFailure(FailureKind.HANG, f"{what}: {verdict}; the server took it and never answered",
                                   "", self.stage, {"hang_waited_s": round(time.monotonic() - sent, 3)})
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]


def hung(limits: Limits, sent: float, last_output: float, now: float) -> str | None:
    """Why a request sent at `sent`, with no answer at `now`, is a hang; None while it may still come.

    Past `timeout` the log must keep growing: a hang once it has been quiet for `timeout` too."""
    waited = now - sent
    quiet = now - max(sent, last_output)
    if limits.stall is not None and quiet >= limits.stall:
        return f"no response and no log output for {limits.stall:g} s (stall-timeout)"
    if waited >= limits.cap:
        return f"not answered after {waited:.1f} s (timeout {limits.cap:g} s)"
    if waited >= limits.timeout and quiet >= limits.timeout:
        return (f"not answered after {waited:.1f} s, and no log output for the last {quiet:.1f} s "
                f"(request-timeout {limits.timeout:g} s)")
    return None
