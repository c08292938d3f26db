"""Failure kinds: the one vocabulary for how a trial can go wrong, used by every stage."""

from __future__ import annotations

import enum
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
