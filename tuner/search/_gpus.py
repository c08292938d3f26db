"""GPU discovery and memory checks: NVML (nvidia-ml-py) first, torch as a fallback, a clear 'none' otherwise.

Both libraries are optional and imported only when asked, so a CPU-only host never loads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .._errors import UsageError


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int


class GpuProbe:
    """Reads GPU memory through NVML, or torch where NVML is missing."""

    def __init__(self) -> None:
        self.backend = "none"
        self.reason = ""
        self._nvml = None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() > 0:
                self._nvml = pynvml
                self.backend = "nvml"
                return
            self.reason = "NVML sees no GPU"
        except Exception as exc:  # no library, no driver, or no GPU: try the next way
            self.reason = f"NVML unavailable ({type(exc).__name__}: {exc})"
        try:
            import torch

            if torch.cuda.is_available():
                # Note: reading memory through torch opens a CUDA context (some hundred MiB) on every GPU
                # it reads, in the tuner's own process; install nvidia-ml-py to avoid that.
                self.backend = "torch"
                self.reason = self.reason + "; using torch instead"
                return
            self.reason += "; torch sees no CUDA device"
        except Exception as exc:
            self.reason += f"; torch unavailable ({type(exc).__name__})"

    def gpus(self) -> list[GPU]:
        if self.backend == "nvml":
            n = self._nvml.nvmlDeviceGetCount()
            return [self._nvml_gpu(i) for i in range(n)]
        if self.backend == "torch":
            import torch

            out = []
            for i in range(torch.cuda.device_count()):
                free, total = torch.cuda.mem_get_info(i)
                out.append(GPU(i, torch.cuda.get_device_name(i), total >> 20, (total - free) >> 20))
            return out
        return []

    def _nvml_gpu(self, i: int) -> GPU:
        h = self._nvml.nvmlDeviceGetHandleByIndex(i)
        name = self._nvml.nvmlDeviceGetName(h)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
        return GPU(i, name.decode() if isinstance(name, bytes) else name, mem.total >> 20, mem.used >> 20)

    def compute_capability(self, index: int) -> str | None:
        """'9.0' for a Hopper GPU; None where it cannot be read."""
        try:
            if self.backend == "nvml":
                h = self._nvml.nvmlDeviceGetHandleByIndex(index)
                major, minor = self._nvml.nvmlDeviceGetCudaComputeCapability(h)
            elif self.backend == "torch":
                import torch

                major, minor = torch.cuda.get_device_capability(index)
            else:
                return None
        except Exception:  # an old driver or library: the fact is left out, not the run
            return None
        return f"{major}.{minor}"

    def nvlink_links(self, index: int) -> int | None:
        """How many of the GPU's NVLink links are up (0: none, the GPUs talk over PCIe); None where NVML cannot
        tell. One cheap NVML call per link, so read once per study, not per trial."""
        if self.backend != "nvml":
            return None
        nvml = self._nvml
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            return None
        up = 0
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                up += nvml.nvmlDeviceGetNvLinkState(h, link) == getattr(nvml, "NVML_FEATURE_ENABLED", 1)
            except Exception:  # NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT past the GPU's last link
                break
        return up

    def describe(self) -> str:
        if self.backend == "none":
            return f"no GPU visible: {self.reason}"
        return f"{self.backend}: " + ", ".join(f"{g.index} {g.name} {g.memory_used_mib}/{g.memory_total_mib} MiB"
                                              for g in self.gpus())

    def used_mib(self, indices: Iterable[int]) -> dict[int, int]:
        by_index = {g.index: g.memory_used_mib for g in self.gpus()}
        return {i: by_index[i] for i in indices if i in by_index}

    def processes(self, index: int) -> dict[int, int]:
        """pid -> MiB used on one GPU (NVML only; {} elsewhere)."""
        if self.backend != "nvml":
            return {}
        h = self._nvml.nvmlDeviceGetHandleByIndex(index)
        procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(h)
        return {p.pid: (p.usedGpuMemory or 0) >> 20 for p in procs}

    def holders(self, indices: Iterable[int]) -> dict[int, int]:
        """pid -> GPU index of the compute processes on these GPUs."""
        return {pid: i for i in indices for pid in self.processes(i)}


class MemoryBaseline:
    """The memory each GPU used before the tuner started anything; a slot is free again only at it."""

    def __init__(self, probe: GpuProbe, indices: Sequence[int], tolerance_mib: int = 512) -> None:
        self.probe = probe
        self.tolerance = tolerance_mib
        self.baseline: Mapping[int, int] = probe.used_mib(indices)
        self.processes_at_start = {i: set(probe.processes(i)) for i in indices}

    def settled(self, indices: Iterable[int]) -> bool:
        now = self.probe.used_mib(indices)
        return all(now.get(i, 0) <= self.baseline.get(i, 0) + self.tolerance for i in indices)

    def new_processes(self, indices: Iterable[int]) -> dict[int, int]:
        """pid -> GPU index for compute processes on these GPUs that were not there at the baseline."""
        return {pid: i for i in indices for pid in self.probe.processes(i)
                if pid not in self.processes_at_start.get(i, ())}


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """'0-3,6' -> (0, 1, 2, 3, 6)."""
    out: list[int] = []
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise UsageError(f"--gpus {text!r} has an empty item", "write e.g. --gpus 0-7 or --gpus 0,1")
    try:
        for part in parts:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise UsageError(f"--gpus {text!r} is not a GPU list", "write e.g. --gpus 0-7 or --gpus 0,1") from None
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise UsageError(f"--gpus {text!r} is empty, repeats a GPU or is negative", "write e.g. --gpus 0-7")
    return tuple(out)


def check_gpu_ids(probe: GpuProbe, gpu_ids: Sequence[int]) -> None:
    """Refuse GPU ids the host does not have (where the probe can tell)."""
    if probe.backend == "none":
        return
    present = {g.index for g in probe.gpus()}
    missing = [i for i in gpu_ids if i not in present]
    if missing:
        raise UsageError(f"--gpus names GPU(s) {missing}, but this host has {sorted(present)}",
                         f"write e.g. --gpus {_span(sorted(present))}" if present else "check nvidia-smi")


def _span(ids: list[int]) -> str:
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
