"""Stage 2: start the server from an argv list, in its own process group, logging to a file."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import UsageError
from .._redact import redact_argv
from ._procs import SERVER_MARKER, start_time


@dataclass(frozen=True)
class LaunchRequest:
    argv: Sequence[str]
    env: Mapping[str, str]  # the whole environment of the server
    workdir: Path
    host: str
    port: int
    gpu_ids: tuple[int, ...] | None = None


@dataclass
class ServerProcess:
    popen: subprocess.Popen
    pgid: int
    host: str
    port: int
    log_path: Path
    record_path: Path
    started: float  # time.monotonic()
    marker: str = ""  # the value of SERVER_MARKER in the server's environment
    start_ticks: int | None = None  # the leader's start time (see _procs.start_time)
    signalled: set[str] = field(default_factory=set)  # signals the tuner sent it (names): who ended it

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


RECORD_NAME = "server.json"


def launch(request: LaunchRequest) -> ServerProcess:
    request.workdir.mkdir(parents=True, exist_ok=True)
    # Inherited by every process the server starts, so that one that leaves the process group is still found.
    marker = uuid.uuid4().hex
    log_path = request.workdir / "server.log"
    with open(log_path, "ab") as log:
        try:
            popen = subprocess.Popen(list(request.argv), stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env={**request.env, SERVER_MARKER: marker}, cwd=request.workdir,
                                     start_new_session=True)
        except FileNotFoundError:
            raise UsageError(f"server command not found: {request.argv[0]}",
                             "fix server.command in the space file (or pass --server-python), or install the "
                             "engine") from None
        except PermissionError:
            raise UsageError(f"server command is not executable: {request.argv[0]}",
                             "fix server.command in the space file (or pass --server-python)") from None
    # Recorded so that a worker restarted after being killed can end what it left running,
    # and only that: pid plus start time identify the process even if the pid is reused.
    ticks = start_time(popen.pid)
    record = {"pid": popen.pid, "pgid": popen.pid, "start_time": ticks, "marker": marker,
              "argv": redact_argv(request.argv), "port": request.port, "launched_at": time.time(),
              "gpu_ids": list(request.gpu_ids) if request.gpu_ids is not None else None}
    record_path = request.workdir / RECORD_NAME
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, record_path)
    return ServerProcess(popen, popen.pid, request.host, request.port, log_path, record_path, time.monotonic(),
                         marker, ticks)
