"""Reads a server's log as it grows and spots the lines that mean the server is done for."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from ._failures import FailureKind
from .engines import Engine

# When several fatal lines appear (a traceback, then the OOM that caused it), the most specific wins.
_RANK = {FailureKind.OOM: 0, FailureKind.GRAPH_CAPTURE_FAILED: 1, FailureKind.NAN: 2,
         FailureKind.CRASH_ON_START: 3}


@dataclass(frozen=True)
class FatalSign:
    kind: FailureKind
    line: str
    seen_at: float  # time.monotonic()


class LogWatcher:
    def __init__(self, path: Path, engine: Engine, keep: int = 400) -> None:
        self.path = path
        self.engine = engine
        self._offset = 0
        self._partial = b""
        self.tail: deque[str] = deque(maxlen=keep)
        self.lines_seen = 0
        self.last_growth = time.monotonic()
        self.fatal: FatalSign | None = None

    def poll(self) -> list[str]:
        """New complete lines since the last call; updates `fatal` and `last_growth`."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        if not chunk:
            return []
        self._offset += len(chunk)
        self.last_growth = time.monotonic()
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        lines = [raw.decode("utf-8", "replace").rstrip("\r") for raw in complete]
        for line in lines:
            self.lines_seen += 1
            self.tail.append(line)
            kind = self.engine.classify_log_line(line)
            if kind is not None and (self.fatal is None or _RANK.get(kind, 9) < _RANK.get(self.fatal.kind, 9)):
                self.fatal = FatalSign(kind, line, self.fatal.seen_at if self.fatal else time.monotonic())
        return lines

    def excerpt(self, around: str | None = None, lines: int = 30) -> str:
        """The last lines of the log, or the lines around the first that contains `around`."""
        tail = list(self.tail)
        if around:
            for i, line in enumerate(tail):
                if around in line:
                    return "\n".join(tail[max(0, i - 5): i + lines - 5])
        return "\n".join(tail[-lines:])

    def contains(self, needle: str) -> bool:
        return any(needle in line for line in self.tail)
