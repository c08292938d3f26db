"""tuner: finds the fastest launch configuration of an LLM inference server that still answers correctly.

The public names are re-exported here; the modules behind them are private.
"""

from __future__ import annotations

from ._errors import (
    FlagCheckError,
    NoEligibleTrialError,
    ServerError,
    SpaceError,
    StorageError,
    StudyMismatchError,
    TunerError,
    UsageError,
)
from ._failures import FailureKind, FailureRecord, TrialFailure
from .spec import ServerConfig, Space, Spec, load_spec, parse_spec

__version__ = "0.1.0"

__all__ = [
    "FailureKind", "FailureRecord", "FlagCheckError", "NoEligibleTrialError", "ServerConfig", "ServerError",
    "Space", "SpaceError", "Spec", "StorageError", "StudyMismatchError", "TrialFailure", "TunerError",
    "UsageError", "load_spec", "parse_spec", "__version__",
]
