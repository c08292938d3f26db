"""Process-group facts read from /proc, so that 'nothing of the trial is left' can be checked."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat and stat[1] != "Z" and int(stat[3]) == pgid:
            members.append(int(entry.name))
    return members


def start_time(pid: int) -> int | None:
    """Clock ticks since boot at which `pid` started: with the pid, it identifies one process."""
    stat = _stat(pid)
    return int(stat[20]) if stat else None


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    head, _, rest = raw.rpartition(")")
    return [head.split(" (", 1)[0], *rest.split()]


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, never the same twice in this process (parallel trials)."""
    with _ports_lock:
        while True:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port


# -- what a server may leave outside its process group ------------------------------------------------------
#
# A server's child can call setsid() (or be started in a session of its own) and so leave the group that
# teardown signals. Three ways still find it: it listens on the trial's port, it carries the trial's marker
# in its environment (children inherit it unless they clear it), or NVML lists it on the trial's GPUs.

SERVER_MARKER = "TUNER_SERVER_ID"  # environment variable set for every server the tuner launches

_TCP_LISTEN = "0A"


def port_holders(port: int) -> list[int]:
    """Pids of processes that have a listening TCP socket on `port` (any address, IPv4 or IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def marked_processes(marker: str) -> list[int]:
    """Live pids whose environment says `TUNER_SERVER_ID=<marker>`."""
    needle = f"{SERVER_MARKER}={marker}".encode()
    found = []
    for pid in _pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(pid):
            found.append(pid)
    return found


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`."""
    return [pid for pid in _pids() if (stat := _stat(pid)) and stat[1] != "Z" and int(stat[4]) == sid]


def command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return bool(stat) and stat[1] != "Z"


def _pids() -> list[int]:
    me = os.getpid()
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != me]


def session_of(pid: int) -> int | None:
    """The session id of a live (non-zombie) process, None when it is gone."""
    stat = _stat(pid)
    return int(stat[4]) if stat and stat[1] != "Z" else None


def remains(record: dict) -> list[int]:
    """What of a recorded server (its server.json) still runs: members of its process group or session,
    processes carrying its environment marker, anything listening on its port."""
    pids = {*group_members(record["pgid"]), *session_members(record["pgid"])}
    if record.get("marker"):
        pids.update(marked_processes(record["marker"]))
    if record.get("port"):
        pids.update(port_holders(record["port"]))
    return sorted(pids)
