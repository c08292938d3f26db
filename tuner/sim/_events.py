"""Opt-in record of moments in a simulated server's life (its start, a fault striking), for benchmarks
(benchmarks/failure_cost.py) and tests.

With TUNER_SIM_EVENTS=<file> the simulator appends one JSON line per kind of event, the first time it happens
in this process: {"event": ..., "t": <time.time()>, "pid": ..., **details}. "start" comes first and names the
CUDA_VISIBLE_DEVICES the process was given (tests/search/test_scaling.py checks each trial's GPUs by it). The server
log's own timestamps have one-second resolution (SGLang's format), too coarse to time how quickly the tuner
notices a fault.
"""

from __future__ import annotations

import json
import os
import time

_seen: set[str] = set()


def mark(event: str, **details: object) -> None:
    path = os.environ.get("TUNER_SIM_EVENTS")
    if not path or event in _seen:
        return
    _seen.add(event)
    # One short append per event: lines of several servers sharing the file do not interleave.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **details}) + "\n")
