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
