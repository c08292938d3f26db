"""How fast the simulated server streams to ONE client: `python benchmarks/sim_stream_rate.py`.

Starts `python -m tuner.sim` with the `instant` profile (no simulated time passes), streams one long request
and prints tokens per second, for /v1/completions (delta text) and /generate (SGLang's cumulative events).
The client reads raw bytes from a socket so that the figure is the server's, not an HTTP client's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream(port: int, path: str, body: dict) -> tuple[float, int]:
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (path.encode(), len(payload), payload))
        events, tail = 0, b""
        while not tail.endswith(b"\r\n0\r\n\r\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("connection closed mid-stream")
            events += chunk.count(b"data: {")
            tail = (tail[-16:] + chunk)[-32:]
        return time.monotonic() - started, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=50_000)
    parser.add_argument("--generate-tokens", type=int, default=2_000,
                        help="/generate events carry all text so far, so use a shorter request there")
    args = parser.parse_args()
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), TUNER_SIM_PROFILE="instant", TUNER_SIM_SEED="0")
    proc = subprocess.Popen([sys.executable, "-m", "tuner.sim", "--model-path", "bench", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        stream(port, "/v1/completions", {"prompt": "warm up", "max_tokens": 100, "ignore_eos": True, "stream": True})
        cpu0 = _cpu(proc.pid)
        wall, events = stream(port, "/v1/completions", {"prompt": "Go.", "max_tokens": args.tokens,
                                                          "ignore_eos": True, "stream": True, "temperature": 0})
        cpu = _cpu(proc.pid) - cpu0
        print(f"/v1/completions stream: {args.tokens / wall:,.0f} tokens/s to one client "
              f"({events} events, server CPU {cpu / wall:.0%} of one core)")
        wall, events = stream(port, "/generate", {"text": "Go.", "stream": True, "sampling_params": {
            "max_new_tokens": args.generate_tokens, "temperature": 0, "ignore_eos": True}})
        print(f"/generate stream ({args.generate_tokens} tokens, cumulative events): "
              f"{args.generate_tokens / wall:,.0f} tokens/s")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
