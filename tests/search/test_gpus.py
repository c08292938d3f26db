"""GPU discovery and memory checks. Tests that need a GPU skip where none is visible; on a GPU host they
run against NVML and real allocations (torch), and scripts/gpu_check.py runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO
from tuner.search._context import gpu_facts
from tuner._errors import UsageError
from tuner.search._gpus import GpuProbe, MemoryBaseline, check_gpu_ids, parse_gpu_list
from tuner.search._slots import NotEnoughGpus, SlotPool

PROBE = GpuProbe()
needs_gpu = pytest.mark.skipif(PROBE.backend == "none", reason=f"no GPU visible: {PROBE.reason}")
needs_no_gpu = pytest.mark.skipif(PROBE.backend != "none", reason="a GPU is visible here")


def _torch_cuda() -> bool:
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@needs_no_gpu
def test_probe_without_gpu_says_none_and_why():
    probe = GpuProbe()
    assert probe.backend == "none"
    assert "NVML" in probe.reason and "torch" in probe.reason  # both ways were tried, each says why not
    assert probe.gpus() == [] and probe.used_mib([0, 1]) == {} and probe.processes(0) == {}
    assert probe.describe().startswith("no GPU visible")
    # Nothing to compare against: never blocks a slot, and any id passes (the server will say).
    assert MemoryBaseline(probe, (0, 1)).settled((0, 1))
    check_gpu_ids(probe, (0, 7))
    # The study's context says "none" and why, rather than inventing a GPU.
    assert probe.compute_capability(0) is None and probe.nvlink_links(0) is None
    facts = gpu_facts(probe, None, None)
    assert facts.count == 0 and facts.source.startswith("none: NVML")


@pytest.mark.parametrize("text, ids", [
    ("0-3,6", (0, 1, 2, 3, 6)), ("0,1", (0, 1)), (" 2 ", (2,)), ("1-1", (1,)), ("7,0", (7, 0)), ("0-7", tuple(range(8))),
])
def test_parse_gpu_list(text, ids):
    assert parse_gpu_list(text) == ids


@pytest.mark.parametrize("text", ["", " ", ",", "0,,1", "0,", "3-1", "0,0", "0-2,1", "-1", "a", "0-", "1.5", "0-x"])
def test_parse_gpu_list_refuses(text):
    with pytest.raises(UsageError) as err:
        parse_gpu_list(text)
    assert "--gpus" in str(err.value) and "0-7" in str(err.value)


def test_slot_pool_keeps_gpus_whose_memory_is_still_held():
    """A slot comes back only when the memory check says so; until then a larger request waits."""
    held = {1}
    pool = SlotPool((0, 1), settled=lambda ids: not (set(ids) & held), poll_s=0.05)
    with pytest.raises(NotEnoughGpus):
        with pool.acquire(3):
            pass
    with pool.acquire(1) as a, pool.acquire(1) as b:
        assert {a.gpu_ids, b.gpu_ids} == {(0,), (1,)}
    assert pool.draining == (1,)  # its server is gone but its memory is not
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(2).__enter__().gpu_ids))
    waiter.start()
    time.sleep(0.3)
    assert got == []  # GPU 1 still holds memory
    held.clear()
    waiter.join(timeout=5)
    assert got == [(0, 1)] and pool.draining == ()


def test_slot_pool_wait_is_cancelled():
    pool = SlotPool((0,), poll_s=0.05)
    cancel = threading.Event()
    with pool.acquire(1):
        threading.Timer(0.2, cancel.set).start()
        with pytest.raises(KeyboardInterrupt):
            with pool.acquire(1, cancel):
                pass


@needs_no_gpu
def test_run_with_gpus_on_a_host_without_gpu_warns_and_runs(tuner):
    """Not simulated (a server command of its own) with --gpus: the probe is asked and says why not."""
    space = tuner.space(f"""
        name: probe
        server:
          command: ["{sys.executable}", "-m", "tuner.sim"]
          model-path: stand-in/instant
          startup-timeout: 30
          env: {{TUNER_SIM_PROFILE: instant}}
        params:
          schedule-conservativeness: {{type: float, low: 0.5, high: 1.5, step: 0.01}}
        gate: {{max-new-tokens: 8}}
        probe: {{concurrency: [8], requests: 8, input-len: 16, output-len: 8, warmup: 0}}
        """)
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--gpus", "0,1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning: no GPU visible (NVML" in done.stderr
    assert "GPU slots: 2 GPUs [0, 1], up to 2 trials at once" in done.stderr
    assert tuner.leftovers() == {}


@needs_no_gpu
def test_gpu_check_says_clearly_that_it_checked_nothing():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "no GPU visible" in done.stderr and "nothing was checked" in done.stderr


# -- on a GPU host --------------------------------------------------------------------------------------------

@needs_gpu
def test_probe_lists_gpus_with_memory():
    gpus = PROBE.gpus()
    assert gpus and all(g.memory_total_mib > 0 and 0 <= g.memory_used_mib <= g.memory_total_mib for g in gpus)
    assert sorted(PROBE.used_mib([g.index for g in gpus])) == [g.index for g in gpus]
    with pytest.raises(UsageError):
        check_gpu_ids(PROBE, (len(gpus) + 7,))


@needs_gpu
def test_the_study_context_reads_the_gpus_name_capability_and_links():
    gpus = PROBE.gpus()
    capability = PROBE.compute_capability(gpus[0].index)
    assert capability is not None and capability.replace(".", "").isdigit()
    links = PROBE.nvlink_links(gpus[0].index)
    assert (links is None) if PROBE.backend != "nvml" else links >= 0
    facts = gpu_facts(PROBE, [g.index for g in gpus], None)
    assert (facts.source, facts.count, facts.name, facts.compute_capability) == \
        (PROBE.backend, len(gpus), gpus[0].name, capability)
    assert facts.memory_gb == round(gpus[0].memory_total_mib / 1024, 1)


@needs_gpu
@pytest.mark.skipif(not _torch_cuda(), reason="torch with CUDA is not installed")
def test_memory_baseline_sees_a_real_allocation_come_and_go():
    baseline = MemoryBaseline(PROBE, (0,))
    code = ("import os, sys, torch; x = torch.ones(2 << 30, dtype=torch.uint8, device='cuda:0'); "
            "torch.cuda.synchronize(); print('held', flush=True); sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not baseline.settled((0,))
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 30
    while not baseline.settled((0,)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert baseline.settled((0,))


@needs_gpu
@pytest.mark.skipif(not _torch_cuda(), reason="torch with CUDA is not installed")
@pytest.mark.timeout(900)
def test_gpu_check_passes_on_this_host():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--trials", "4"],
                          capture_output=True, text=True, timeout=880)
    print(done.stdout[-5000:])
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
