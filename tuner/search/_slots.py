"""GPU slots: several trials at once on disjoint GPU subsets of one host.

A slot is handed to the next trial only after the previous server's processes are gone and, on a
GPU host, its GPUs' memory is back to the baseline. Teardown waits for both before it returns; the
pool checks the memory once more when the GPUs come back, and keeps GPUs whose memory is still held
(a server that outlived its teardown's wait, a driver slow to free a killed process's memory) out of
circulation until the check passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger("tuner.slots")


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
    def __init__(self, gpu_ids: tuple[int, ...],
                 settled: Callable[[tuple[int, ...]], bool] | None = None, poll_s: float = 0.5) -> None:
        self.gpu_ids = gpu_ids
        self._free = list(gpu_ids)
        self._draining: list[int] = []  # returned, but their memory is not back at the baseline yet
        self._settled = settled
        self._poll_s = poll_s
        self._cond = threading.Condition()

    @property
    def draining(self) -> tuple[int, ...]:
        with self._cond:
            return tuple(self._draining)

    def _drain(self) -> None:
        """Move GPUs whose memory has come back from draining to free (called with the lock held)."""
        if not self._draining or self._settled is None:
            return
        back = [i for i in self._draining if self._is_settled((i,))]
        if back:
            self._draining = [i for i in self._draining if i not in back]
            self._free.extend(back)
            log.info("tuner: GPUs %s are free again (memory back at its baseline)", back)

    def _is_settled(self, ids: tuple[int, ...]) -> bool:
        try:
            return bool(self._settled(ids)) if self._settled is not None else True
        except Exception as exc:  # a failing probe must not hand out GPUs it could not check
            log.warning("tuner: could not read GPU memory of %s (%s); keeping them out", ids, exc)
            return False

    @contextmanager
    def acquire(self, n: int, cancel: threading.Event | None = None) -> Iterator[SlotGrant]:
        if n > len(self.gpu_ids):
            raise NotEnoughGpus(n, len(self.gpu_ids))
        t0 = time.monotonic()
        with self._cond:
            while True:
                self._drain()
                if len(self._free) >= n:
                    break
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt("cancelled while waiting for GPUs")
                self._cond.wait(timeout=self._poll_s)
            # Lowest ids first, so that a trial's GPUs stay together where possible.
            self._free.sort()
            taken = tuple(self._free[:n])
            del self._free[:n]
        try:
            yield SlotGrant(taken, time.monotonic() - t0)
        finally:
            with self._cond:
                if self._is_settled(taken):
                    self._free.extend(taken)
                else:
                    log.warning("tuner: GPUs %s still hold memory after their server stopped; "
                                "they are handed out again once it is released", list(taken))
                    self._draining.extend(taken)
                self._cond.notify_all()
