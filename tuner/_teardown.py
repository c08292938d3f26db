"""Last stage: stop the whole process group and confirm nothing of the trial remains."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._launch import ServerProcess
from ._procs import group_members, port_is_free, signal_group, start_time


@dataclass(frozen=True)
class TeardownResult:
    seconds: float
    exit_code: int | None
    killed: bool  # SIGTERM was not enough
    leftover: tuple[int, ...]  # pids still alive at the end (should be empty)
    port_free: bool


def stop_server(server: ServerProcess, grace: float = 10.0, settle: Callable[[], bool] | None = None,
                settle_timeout: float = 120.0) -> TeardownResult:
    """SIGTERM the group, wait up to `grace`, SIGKILL what is left, then wait for the port (and GPU memory)."""
    t0 = time.monotonic()
    killed = False
    if group_members(server.pgid) or server.popen.poll() is None:
        signal_group(server.pgid, signal.SIGTERM)
        if not _wait_gone(server, grace):
            killed = True
            signal_group(server.pgid, signal.SIGKILL)
            _wait_gone(server, 10.0)
    try:
        code = server.popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    port_free = _wait(lambda: port_is_free(server.host, server.port), 5.0)
    if settle is not None:
        _wait(settle, settle_timeout)
    leftover = tuple(group_members(server.pgid))
    _mark_stopped(server.record_path)
    return TeardownResult(time.monotonic() - t0, code, killed, leftover, port_free)


def _wait_gone(server: ServerProcess, timeout: float) -> bool:
    def gone() -> bool:
        server.popen.poll()  # reap the leader so it does not linger as a zombie
        return not group_members(server.pgid)
    return _wait(gone, timeout)


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _mark_stopped(record_path: Path) -> None:
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return
    record["stopped"] = True
    record_path.write_text(json.dumps(record))


def end_orphans(workdir: Path) -> list[int]:
    """End servers a previous, killed worker left running, identified by the records it wrote.

    A record is trusted only while its pid is alive with the recorded start time, so a reused pid
    is never signalled.
    """
    ended = []
    for record_path in sorted(workdir.glob("**/server.json")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("stopped"):
            continue
        pgid = int(record["pgid"])
        members = group_members(pgid)
        leader_alive = start_time(record["pid"]) == record.get("start_time") and record.get("start_time")
        if members and (leader_alive or _leader_gone_group_kept(record)):
            signal_group(pgid, signal.SIGTERM)
            if not _wait(lambda: not group_members(pgid), 10.0):
                signal_group(pgid, signal.SIGKILL)
                _wait(lambda: not group_members(pgid), 10.0)
            ended.append(pgid)
        _mark_stopped(record_path)
    return ended


def _leader_gone_group_kept(record: dict) -> bool:
    # The leader died but children stayed in its group: the group id cannot be reused while
    # any member lives, so the members are still that server's.
    return start_time(record["pid"]) is None
