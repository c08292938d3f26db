"""Signals end the server fast and leave nothing behind."""

from __future__ import annotations

import os
import signal
import time

import pytest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_within_a_second(start_sim, sig):
    sim = start_sim()
    started = time.monotonic()
    os.kill(sim.proc.pid, sig)
    code = sim.wait_exit(5)
    assert time.monotonic() - started < 1.0
    assert code == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(sim.proc.pid, 0)  # the whole process group is gone


def test_sigterm_during_startup(start_sim):
    sim = start_sim("--tp-size", "8", profile="glm5-nvfp4-sm120", scale=0.1, wait=False)
    sim.wait_log("Load weight begin.")
    started = time.monotonic()
    os.kill(sim.proc.pid, signal.SIGTERM)
    sim.wait_exit(5)
    assert time.monotonic() - started < 1.0
