"""Reads a server's log as it grows and spots the lines that mean the server is done for.

Memory stays bounded whatever the server writes: the log is read in chunks of at most `CHUNK` bytes, a
line is kept to `MAX_LINE` characters, and only a tail of lines plus the lines around the first fatal
sign are kept (the whole log stays on disk).
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .._failures import FailureKind
from ..engines import Engine

CHUNK = 1 << 20  # bytes read at once
POLL_BYTES = 8 << 20  # at most this much per poll(), so one call never blocks for long during a burst
MAX_LINE = 2000  # characters kept of one line
_AFTER = 400  # lines kept after a fatal sign, to find the exception line that ends its traceback

# When several fatal lines appear (a traceback, then the OOM that caused it), the most specific wins.
_RANK = {FailureKind.OOM: 0, FailureKind.GRAPH_CAPTURE_FAILED: 1, FailureKind.NAN: 2,
         FailureKind.CRASH_ON_START: 3}


@dataclass(frozen=True)
class FatalSign:
    kind: FailureKind
    line: str
    seen_at: float  # time.monotonic()
    # True: the line names a fatal cause (OOM, an illegal memory access, a dead scheduler) and ends the
    # trial even while the process lives. False: a bare traceback, which a live server also prints for one
    # failed request; it explains an exit, but is only evidence beside a verdict otherwise.
    definitive: bool = True
    capturing: bool = False  # seen between the engine's capture-begin line and its end


class LogWatcher:
    def __init__(self, path: Path, engine: Engine, keep: int = 400) -> None:
        self.path = path
        self.engine = engine
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside a line longer than MAX_LINE: drop bytes up to its end
        self.tail: deque[str] = deque(maxlen=keep)
        self.lines_seen = 0
        self.last_growth = time.monotonic()
        self.fatal: FatalSign | None = None
        self._before: list[str] = []  # the lines before the fatal sign
        self._after: list[str] = []  # the lines from the fatal sign on
        self._capture_begin = re.compile(engine.capture_begin) if engine.capture_begin else None
        self._capture_end = re.compile(engine.capture_end) if engine.capture_end else None
        self._capturing = False

    def poll(self) -> int:
        """Reads what the log gained (up to POLL_BYTES); updates `fatal` and `last_growth`. Returns the
        number of bytes read (0: caught up)."""
        read = 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                budget = POLL_BYTES
                while budget > 0:
                    chunk = f.read(min(CHUNK, budget))
                    if not chunk:
                        break
                    budget -= len(chunk)
                    self._offset += len(chunk)
                    read += len(chunk)
                    self._feed(chunk)
        except FileNotFoundError:
            return 0
        return read

    def _feed(self, chunk: bytes) -> None:
        self.last_growth = time.monotonic()
        parts = chunk.split(b"\n")
        for part in parts[:-1]:
            self._append(part)
            self._line(self._partial.decode("utf-8", "replace").rstrip("\r")[:MAX_LINE])
            self._partial, self._skipping = b"", False
        self._append(parts[-1])

    def _append(self, part: bytes) -> None:
        if not self._skipping:
            self._partial += part
            if len(self._partial) > MAX_LINE * 4:  # bytes: up to 4 a character
                self._partial, self._skipping = self._partial[:MAX_LINE * 4], True

    def _line(self, line: str) -> None:
        self.lines_seen += 1
        if self._capture_begin is not None and "raph" in line:  # (G|g)raph: most lines never reach the regexes
            if self._capture_begin.search(line):
                self._capturing = True
            elif self._capture_end is not None and self._capture_end.search(line):
                self._capturing = False
        if self.fatal is not None and len(self._after) < _AFTER:
            self._after.append(line)
        found = self.engine.classify_log_line(line)
        if found is not None:
            kind, definitive = found
            if self.fatal is None or _stronger(kind, definitive, self.fatal):
                seen_at = time.monotonic()
                if self.fatal is not None and self.fatal.definitive == definitive:
                    seen_at = self.fatal.seen_at  # the same sign, better named: do not wait again
                if self.fatal is None or definitive and not self.fatal.definitive:
                    self._before, self._after = list(self.tail)[-5:], [line]
                self.fatal = FatalSign(kind, line, seen_at, definitive, self._capturing)
        self.tail.append(line)

    def cause(self) -> str:
        """What the fatal sign says went wrong: the exception line that ends its traceback where the sign is
        a traceback's first line (not "Traceback (most recent call last):"), else the sign's own line."""
        if self.fatal is None:
            return ""
        line = self.fatal.line.strip()
        if "Traceback (most recent call last)" in line or line.endswith("Traceback"):
            found = exception_line(self._after)
            if found:
                return found
        return line

    def excerpt(self, around: str | None = None, lines: int = 30) -> str:
        """The lines around the fatal sign (up to and including its exception line), else the last lines."""
        if around and self.fatal is not None and around in self.fatal.line:
            after = self._after[:lines - 5]
            cause = self.cause()
            if cause and cause != self.fatal.line.strip() and not any(cause in a for a in after):
                # A long traceback: keep its start and the lines up to the exception that ends it.
                upto = next((i for i, a in enumerate(self._after) if cause in a), len(self._after) - 1)
                after = after[:10] + ["[...]"] + self._after[max(10, upto - (lines - 20)): upto + 3]
            return "\n".join(self._before + after)
        return "\n".join(list(self.tail)[-lines:])

    def capturing(self) -> bool:
        """Whether the server's last word is that it began capturing CUDA graphs (and not that it finished);
        a progress bar's line, still unended, counts."""
        if self._capturing:
            return True
        return self._capture_begin is not None and bool(
            self._capture_begin.search(self._partial.decode("utf-8", "replace")))

    def contains(self, needle: str) -> bool:
        return any(needle in line for line in self.tail)


def _stronger(kind: FailureKind, definitive: bool, than: FatalSign) -> bool:
    if definitive != than.definitive:
        return definitive
    return _RANK.get(kind, 9) < _RANK.get(than.kind, 9)


# -- the exception line of a traceback ------------------------------------------------------------------------

_GROUP_PREFIX = re.compile(r"^\s*\| ?")  # exception groups indent each sub-traceback behind "| "
_SEPARATOR = re.compile(r"^\s*[+|][-+| 0-9.]*$|^\s*\+-")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# An exception's class (module path in lower case, a CamelCase name that says it is one), then its message.
_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z][a-z0-9]\w*(?:Error|Exception|Interrupt|Exit|Warning|Traceback"
                        r"|Failure|Fault|Timeout|Iteration)(?::\s.*)?$")
_NOT_A_CAUSE = ("jax.errors.SimplifiedTraceback", "ExceptionGroup", "BaseExceptionGroup")


def exception_line(lines: list[str]) -> str | None:
    """The last exception line of the traceback at the start of `lines`, following chained tracebacks
    ("The above exception was the direct cause ...") and exception groups; None when none shows."""
    found = None
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        if "Traceback (most recent call last)" in raw or _SEPARATOR.match(raw):
            continue
        body = _GROUP_PREFIX.sub("", raw) if raw.lstrip().startswith("|") else raw
        if not body.strip() or body[:1].isspace() or body.lstrip().startswith("^") or body.startswith(_CHAINED):
            continue  # frames, code, carets, blank lines, chaining
        if _EXCEPTION.match(body.strip()):
            if not body.startswith(_NOT_A_CAUSE):
                found = body.strip()
            continue
        if found is not None:
            # More lines of the exception's message, or the traceback ended: it goes on only if a chained
            # traceback follows soon.
            ahead = lines[i:i + 12]
            if not any(a.lstrip("| ").startswith(_CHAINED) or "Traceback (most recent call last)" in a
                       for a in ahead):
                break
    return found
