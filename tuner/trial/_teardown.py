"""Last stage: stop the whole process group and confirm nothing of the trial remains."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._redact import redact_argv
from ._launch import ServerProcess
from ._procs import (command_line, group_members, marked_processes, port_holders, port_is_free, session_of,
                     signal_group, start_time)


@dataclass(frozen=True)
class Leftover:
    """A process of the trial found outside its process group, and how it was found."""

    pid: int
    found_by: str  # "port 30001", "environment marker", "GPU 0 (NVML)"
    command: str
    ended: bool = False

    def as_dict(self) -> dict:
        return {"pid": self.pid, "found_by": self.found_by, "command": self.command, "ended": self.ended}


def _leftover(pid: int, found_by: str) -> Leftover:
    return Leftover(pid, found_by, shlex.join(redact_argv(command_line(pid)))[:300])


@dataclass(frozen=True)
class TeardownResult:
    seconds: float
    exit_code: int | None
    killed: bool  # SIGTERM was not enough
    leftover: tuple[int, ...]  # pids still alive at the end (should be empty)
    port_free: bool
    settled: bool | None = None  # GPU memory back at its baseline (None: not checked)
    escaped: tuple[Leftover, ...] = ()  # found outside the group (port, marker, GPU) and ended


def stop_server(server: ServerProcess, grace: float = 10.0, settle: Callable[[], bool] | None = None,
                settle_timeout: float = 120.0,
                gpu_holders: Callable[[], Mapping[int, int]] | None = None) -> TeardownResult:
    """SIGTERM the group, wait up to `grace`, SIGKILL what is left; then end whatever of the trial escaped
    the group (it holds the port, carries the trial's marker, or NVML lists it on the trial's GPUs), and
    wait for the port (and GPU memory). `gpu_holders` gives pid -> GPU for processes on the trial's GPUs
    that were not there at the baseline."""
    t0 = time.monotonic()
    killed = False
    if group_members(server.pgid) or server.popen.poll() is None:
        server.signalled.add("SIGTERM")
        signal_group(server.pgid, signal.SIGTERM)
        if not _wait_gone(server, grace):
            killed = True
            server.signalled.add("SIGKILL")
            signal_group(server.pgid, signal.SIGKILL)
            _wait_gone(server, 10.0)
    try:
        code = server.popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    escaped = end_escaped(find_escaped(server.port, server.marker, server.start_ticks, gpu_holders), grace)
    port_free = _wait(lambda: port_is_free(server.host, server.port), 5.0)
    settled = _wait(settle, settle_timeout) if settle is not None else None
    leftover = sorted({*group_members(server.pgid), *(e.pid for e in escaped if not e.ended)})
    _mark_stopped(server.record_path)
    return TeardownResult(time.monotonic() - t0, code, killed, tuple(leftover), port_free, settled, escaped)


def find_escaped(port: int | None, marker: str | None, started_ticks: int | None,
                 gpu_holders: Callable[[], Mapping[int, int]] | None = None) -> list[Leftover]:
    """Processes of a server outside its group. A port or GPU holder counts only if it started after the
    server did: an older process there was not the trial's."""
    found: dict[int, Leftover] = {}
    if marker:
        for pid in marked_processes(marker):
            found[pid] = _leftover(pid, "environment marker")
    holders = [(pid, f"port {port}") for pid in port_holders(port)] if port else []
    if gpu_holders is not None:
        holders += [(pid, f"GPU {gpu} (NVML)") for pid, gpu in gpu_holders().items()]
    for pid, how in holders:
        begun = start_time(pid)
        if pid not in found and begun is not None and (started_ticks is None or begun >= started_ticks):
            found[pid] = _leftover(pid, how)
    return list(found.values())


def end_escaped(found: list[Leftover], grace: float) -> tuple[Leftover, ...]:
    """SIGTERM each, SIGKILL after `grace`; each pid is signalled only while it runs with the start time
    it had when found, so a reused pid is never hit."""
    if not found:
        return ()
    born = {e.pid: start_time(e.pid) for e in found}

    def running(pid: int) -> bool:  # alive, not a zombie, and still the process that was found
        return born[pid] is not None and start_time(pid) == born[pid] and session_of(pid) is not None

    for e in found:
        if running(e.pid):
            _signal(e.pid, signal.SIGTERM)
    if not _wait(lambda: not any(running(e.pid) for e in found), grace):
        for e in found:
            if running(e.pid):
                _signal(e.pid, signal.SIGKILL)
        _wait(lambda: not any(running(e.pid) for e in found), 10.0)
    return tuple(dataclasses.replace(e, ended=not running(e.pid)) for e in found)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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


def end_orphans(workdir: Path,
                gpu_processes: Callable[[Sequence[int]], Mapping[int, int]] | None = None) -> list[int]:
    """End servers a previous, killed worker left running, identified by the records it wrote.

    Only servers recorded under `workdir` are candidates, and of those only the ones whose worker is
    gone (its worker.json names a pid that no longer runs with the recorded start time): several live
    workers may share one folder. A server record is trusted only while its pid is alive with the
    recorded start time, so a reused pid is never signalled; nothing is ever found by process name.
    What left the server's group is found as at a trial's own teardown: by the recorded marker, port and
    GPUs (`gpu_processes` gives pid -> GPU for the compute processes NVML lists on some GPUs).
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
        ours = bool(members) and (leader_alive or _leader_gone_group_kept(record))
        if ours:
            signal_group(pgid, signal.SIGTERM)
            if not _wait(lambda: not group_members(pgid), 10.0):
                signal_group(pgid, signal.SIGKILL)
                _wait(lambda: not group_members(pgid), 10.0)
        gpus = record.get("gpu_ids")
        holders = (lambda: gpu_processes(gpus)) if gpu_processes is not None and gpus else None
        escaped = end_escaped(find_escaped(record.get("port"), record.get("marker"), record.get("start_time"),
                                           holders), 10.0)
        if ours or escaped:
            ended.append(pgid)
        _mark_stopped(record_path)
    return ended


def _leader_gone_group_kept(record: dict) -> bool:
    # The leader died but children stayed in its group: the group id cannot be reused while
    # any member lives, so the members are still that server's.
    return start_time(record["pid"]) is None
