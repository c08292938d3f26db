"""GPU slots: several trials at once on disjoint GPU subsets of one host.

A slot is handed to the next trial only after the previous server's processes are gone and, on a
GPU host, its GPUs' memory is back to the baseline (teardown waits for both before release).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotGrant:
    gpu_ids: tuple[int, ...]
    waited: float


class NotEnoughGpus(Exception):
    def __init__(self, needed: int, available: int) -> None:
        super().__init__(f"needs {needed} GPUs, the tuner was given {available}")
        self.needed = needed
        self.available = available


class SlotPool:
    def __init__(self, gpu_ids: tuple[int, ...]) -> None:
        self.gpu_ids = gpu_ids
        self._free = list(gpu_ids)
        self._cond = threading.Condition()

    @contextmanager
    def acquire(self, n: int, cancel: threading.Event | None = None) -> Iterator[SlotGrant]:
        if n > len(self.gpu_ids):
            raise NotEnoughGpus(n, len(self.gpu_ids))
        t0 = time.monotonic()
        with self._cond:
            while len(self._free) < n:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt("cancelled while waiting for GPUs")
                self._cond.wait(timeout=0.5)
            # Lowest ids first, so that a trial's GPUs stay together where possible.
            self._free.sort()
            taken = tuple(self._free[:n])
            del self._free[:n]
        try:
            yield SlotGrant(taken, time.monotonic() - t0)
        finally:
            with self._cond:
                self._free.extend(taken)
                self._cond.notify_all()
