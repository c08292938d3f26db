"""The exception tree of tuner.

Everything the tuner raises on purpose derives from :class:`TunerError`. The command line maps a
:class:`UsageError` to a one-line message and exit status 2; failures of a trial are not exceptions
of this tree but :class:`tuner.TrialFailure`, which ends one trial and never the study.

    TunerError
    ├── UsageError             bad input from the person running the tuner (exit 2)
    │   ├── SpaceError         the search-space file is wrong (names the key path)
    │   ├── FlagCheckError     a flag or choice the server that will be launched does not accept
    │   ├── StorageError       the storage URL is malformed or unreachable
    │   ├── StudyMismatchError the study exists with another search space
    │   ├── NoEligibleTrialError  nothing to export or confirm
    │   └── KnowledgeError     a --learn-from source or a knowledge file that cannot be used
    └── ServerError            the server could not be driven (used inside a trial)
"""

from __future__ import annotations


class TunerError(Exception):
    """Base class of every error tuner raises on purpose."""


class UsageError(TunerError):
    """Bad input: the message names the problem and the fix."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


class SpaceError(UsageError):
    """The search-space file is malformed or inconsistent."""

    def __init__(self, path: str, problem: str, fix: str | None = None) -> None:
        self.key_path = path
        super().__init__(f"{path}: {problem}" if path else problem, fix)


class FlagCheckError(UsageError):
    """A flag or choice is not accepted by the server command that will be launched."""


class StorageError(UsageError):
    """The storage URL cannot be used."""


class StudyMismatchError(UsageError):
    """The study exists with a different search space."""


class NoEligibleTrialError(UsageError):
    """No trial qualifies for the requested command."""


class KnowledgeError(UsageError):
    """A --learn-from source (a study, a storage, a knowledge file) or a knowledge file that cannot be used."""


class ServerError(TunerError):
    """The server did not behave as an HTTP inference server should."""


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal (Ctrl-C, SIGTERM). The exit status is 128 + its number, as a shell reports a
    process the signal killed: 130 for Ctrl-C, 143 for SIGTERM, so that a supervisor can tell them apart."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
