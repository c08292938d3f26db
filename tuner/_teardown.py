"""Last stage: stop the whole process group and confirm nothing of the trial remains."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
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
    settled: bool | None = None  # GPU memory back at its baseline (None: not checked)


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
    settled = _wait(settle, settle_timeout) if settle is not None else None
    leftover = tuple(group_members(server.pgid))
    _mark_stopped(server.record_path)
    return TeardownResult(time.monotonic() - t0, code, killed, leftover, port_free, settled)


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


# -- who ran a trial: the worker record next to server.json -----------------------------------------------

WORKER_RECORD = "worker.json"


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def this_worker() -> dict:
    """What identifies this worker process: host, boot, pid and the pid's start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": pid, "start_time": start_time(pid)}


def owner_alive(record: dict) -> bool | None:
    """Whether the worker that wrote `record` still runs: True, False, or None where this host cannot
    tell (another host sharing the folder). A pid is trusted only with its recorded start time."""
    if record.get("host") != socket.gethostname():
        return None
    if record.get("boot_id") and record.get("boot_id") != boot_id():
        return False  # the host rebooted since: nothing of that worker runs
    recorded = record.get("start_time")
    return recorded is not None and start_time(int(record["pid"])) == recorded


def write_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def read_record(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def end_orphans(workdir: Path) -> list[int]:
    """End servers a previous, killed worker left running, identified by the records it wrote.

    Only servers recorded under `workdir` are candidates, and of those only the ones whose worker is
    gone (its worker.json names a pid that no longer runs with the recorded start time): several live
    workers may share one folder. A server record is trusted only while its pid is alive with the
    recorded start time, so a reused pid is never signalled; nothing is ever found by process name.
    """
    ended = []
    for record_path in sorted(workdir.glob("**/server.json")):
        record = read_record(record_path)
        if record is None or record.get("stopped"):
            continue
        owner = read_record(record_path.with_name(WORKER_RECORD))
        if owner is not None:
            alive = owner_alive(owner)
            if alive is None:
                continue  # written on another host: not ours to judge or signal
            if alive:
                continue  # a live worker's server (several workers share this folder)
            if owner.get("boot_id") and owner.get("boot_id") != boot_id():
                _mark_stopped(record_path)  # rebooted since: the pids mean nothing now
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
