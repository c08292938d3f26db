"""Failure kinds: the one vocabulary for how a trial can go wrong, used by every stage."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class FailureKind(str, enum.Enum):
    # Launch and readiness.
    CRASH_ON_START = "crash_on_start"
    OOM = "oom"
    GRAPH_CAPTURE_FAILED = "graph_capture_failed"
    STARTUP_TIMEOUT = "startup_timeout"
    # A request reached the server, which never answered it (while it may still answer /health).
    HANG = "hang"
    # Correctness gate.
    NAN = "nan"
    WRONG_ANSWER = "wrong_answer"
    GARBAGE = "garbage"
    INCONSISTENT_LOGPROBS = "inconsistent_logprobs"
    # Under load.
    CRASH_UNDER_LOAD = "crash_under_load"
    ERRORS_UNDER_LOAD = "errors_under_load"
    SLO_VIOLATION = "slo_violation"
    # The objective's level hit its share of probe.time-budget before enough requests finished (`enough_finished`):
    # its figure is mostly the start of the level, not a measurement. Blamed on the configuration: one that
    # cannot finish a wave in the budget is far slower than the ones that do, and infeasible ranks it below
    # every measured trial, where it belongs. Not carried (`carries`): too slow is relative to a budget and a
    # workload, not a kernel's failure.
    PROBE_CUT = "probe_cut"
    # max_rate_under_slo: no tested rate met the SLO attainment (the message names the closest seen).
    SLO_UNREACHABLE = "slo_unreachable"
    # Not the configuration's fault: never taught to the sampler as a bad region.
    INVALID_CONFIG = "invalid_config"
    INTERRUPTED = "interrupted"
    WORKER_DIED = "worker_died"
    # The probe could not send at the rate asked for (open-loop levels): the client's limit, not the server's.
    CLIENT_TOO_SLOW = "client_too_slow"

    @property
    def blames_config(self) -> bool:
        """Whether the sampler should learn to avoid the configuration that produced it."""
        return self not in (FailureKind.INTERRUPTED, FailureKind.WORKER_DIED, FailureKind.CLIENT_TOO_SLOW)

    @property
    def is_correctness(self) -> bool:
        return self in _CORRECTNESS

    @property
    def carries(self) -> str | None:
        """How a failure of this kind carries over to other studies (tuner/search/_warm.py): KERNEL ones to studies on
        the same GPU architecture and engine version, whatever the model (a kernel that produces NaN on SM120
        does so for every model it runs); MEMORY ones to any GPU, counted by how heavy the model is for its
        memory; None: not carried (a timeout, an SLO, errors under load say more of the workload than of the
        flags). A start that hung during CUDA graph capture is a kernel's failure too: `carries_trial` says so."""
        if self in _KERNEL:
            return KERNEL
        return MEMORY if self == FailureKind.OOM else None


_CORRECTNESS = frozenset(
    {FailureKind.NAN, FailureKind.WRONG_ANSWER, FailureKind.GARBAGE, FailureKind.INCONSISTENT_LOGPROBS}
)

KERNEL = "kernel"
MEMORY = "memory"
_KERNEL = frozenset({FailureKind.CRASH_ON_START, FailureKind.GRAPH_CAPTURE_FAILED, FailureKind.HANG, FailureKind.NAN,
                     FailureKind.WRONG_ANSWER, FailureKind.GARBAGE, FailureKind.INCONSISTENT_LOGPROBS,
                     FailureKind.CRASH_UNDER_LOAD})

# Trial attributes of a failed start, where the log says (CUDA_GRAPH_CAPTURE: between the engine's
# capture-begin line and its end): where a start that timed out hung; where a server that crashed died (an
# out-of-memory error while capturing is classed OOM, yet only a configuration that captures can meet it).
HUNG_IN = "hung_in"
FAILED_IN = "failed_in"
CUDA_GRAPH_CAPTURE = "cuda_graph_capture"


def failed_capturing(attrs: Mapping[str, Any]) -> bool:
    """Whether a trial's attributes say its CUDA graph capture failed: an exception (out of memory included),
    or a hang."""
    return (attrs.get("failure_kind") == FailureKind.GRAPH_CAPTURE_FAILED.value
            or CUDA_GRAPH_CAPTURE in (attrs.get(HUNG_IN), attrs.get(FAILED_IN)))


def carries_trial(attrs: Mapping[str, Any]) -> str | None:
    """How a failed trial's lesson carries over (`FailureKind.carries`), from its attributes: a failed capture
    as a kernel's failure, unless it ran out of memory."""
    if failed_capturing(attrs) and attrs.get("failure_kind") != FailureKind.OOM.value:
        return KERNEL
    try:
        return FailureKind(attrs.get("failure_kind")).carries
    except ValueError:
        return None


def enough_finished(concurrency: int, requests: int) -> int:
    """How many of a closed-loop level's requests must finish before a level cut at its time budget is a
    measurement: one wave of its concurrency, or half its requests where that is fewer; never none.

    Tokens still streaming at the cut count, so the figure covers everything the server did until then. A closed
    loop of C streams starts with C prefills at once: until a wave has finished, what was counted is mostly that
    start (prefill, queueing, the first decode steps), and says how the server starts, not how fast it serves.
    Once a wave has finished, every stream has turned over once and the figure is the server's pace. Half the
    requests is the bar where the level has less than two waves (a level of one wave cut at 127 of 128 is fair)."""
    wave = concurrency if concurrency > 0 else requests
    return max(1, min(wave, math.ceil(requests / 2)))


def cut_short(level: Mapping[str, Any], requests: int | None = None) -> bool:
    """Whether a probe level's figures (LevelMetrics.as_dict) say it was cut at its time budget before enough
    requests finished. `requests`: the level's count where its figures do not hold it (recorded before they did);
    without either, one wave of its concurrency is the bar."""
    if not level.get("cut"):
        return False
    n = level.get("requests") or requests
    concurrency = int(level.get("concurrency") or 0)
    need = enough_finished(concurrency, int(n)) if n else max(1, concurrency)
    return int(level.get("completed") or 0) < need


def measured(attrs: Mapping[str, Any], requests: int | None = None) -> bool:
    """Whether a trial's objective figure is a measurement of its configuration: not a PROBE_CUT, nor (recorded
    before that kind) a trial whose objective level, kept in its top-level attributes, was cut short. Under
    max_rate_under_slo the objective is the rate search's, which judges its own cut steps."""
    if attrs.get("failure_kind") == FailureKind.PROBE_CUT.value:
        return False
    return "rate_search" in attrs or not cut_short(attrs, requests)


class TrialFailure(Exception):
    """Ends one trial: what went wrong, in which stage, and the evidence for it."""

    def __init__(self, kind: FailureKind, message: str, evidence: str = "", stage: str = "",
                 attrs: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind
        self.message = message
        self.evidence = evidence
        self.stage = stage
        self.attrs = dict(attrs or {})  # figures measured before the failure, kept as trial attributes


class ProbeStopped(Exception):
    """The pruner stopped the probe early: the trial was slower than others, not broken."""


@dataclass(frozen=True)
class FailureRecord:
    kind: FailureKind
    message: str
    evidence: str
    stage: str
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_exception(cls, exc: TrialFailure) -> FailureRecord:
        return cls(exc.kind, exc.message, exc.evidence, exc.stage, exc.attrs)
