#!/usr/bin/env python3
"""One command for a real GPU host: do the tuner's GPU slots hold on real hardware?

    python scripts/gpu_check.py                 # --gpus 0,1 on a host with two or more GPUs, else --gpus 0
    python scripts/gpu_check.py --gpus 0-3 --trials 8 --mib 8192

It runs `python -m tuner run --gpus ...` with a stand-in server: this same script in `--serve` mode, which
allocates real GPU memory with torch on every GPU it is given through CUDA_VISIBLE_DEVICES, holds it, and
then runs the simulated SGLang server (tuner.sim) in the same process, so the memory lives exactly as long
as the server process. While the tuner runs, it samples NVML every 50 ms and checks:

  1. each trial's memory shows up only on the GPUs its slot was given (by pid where NVML reports the
     server's pid, otherwise by GPU: a GPU that no trial holds stays at its baseline);
  2. no GPU ever carries more than one trial's memory;
  3. it SIGKILLs one stand-in while its memory is held; the slot must not be handed to the next trial
     until NVML shows that memory released;
  4. at the end every server is gone and every GPU is back at its baseline.

It prints what NVML saw at each step and exits 0 when every check passed, 1 when one failed, and 2 when
nothing could be checked (no GPU, no NVML, no torch with CUDA). Needs nvidia-ml-py and torch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOLERANCE_MIB = 512  # what the tuner's MemoryBaseline allows above the baseline
SAMPLE_S = 0.05


# -- the stand-in server ----------------------------------------------------------------------------------

def serve(argv: list[str]) -> None:
    """Allocate and hold GPU memory on every visible GPU, then be the simulated SGLang server."""
    from tuner.sim._main import main as sim_main

    if "--help" in argv or "-h" in argv:
        sim_main(argv)  # the tuner reads the server's --help first: no GPU work for that
        return
    import torch

    mib = int(os.environ.get("GPU_CHECK_MIB", "4096"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    held = []
    for i in range(torch.cuda.device_count()):
        held.append(torch.ones(mib << 20, dtype=torch.uint8, device=f"cuda:{i}"))  # touched: really resident
    torch.cuda.synchronize()
    print(f"gpu_check stand-in pid {os.getpid()}: holding {mib} MiB on each of {len(held)} GPU(s), "
          f"CUDA_VISIBLE_DEVICES={visible}", flush=True)
    globals()["_HELD"] = held  # alive until the process ends
    sim_main(argv)


# -- the checker -------------------------------------------------------------------------------------------

@dataclass
class Sample:
    t: float
    used: dict[int, int]  # GPU index -> MiB used
    pids: dict[int, dict[int, int]]  # GPU index -> {pid: MiB}


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> bool:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}", flush=True)
        if not ok:
            self.failures.append(what)
        return ok


def log(start: float, text: str) -> None:
    print(f"[{time.time() - start:7.2f}s] {text}", flush=True)


def nvml_sample(nvml, handles: dict[int, object]) -> Sample:
    used, pids = {}, {}
    for i, h in handles.items():
        used[i] = nvml.nvmlDeviceGetMemoryInfo(h).used >> 20
        try:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception:
            procs = []
        pids[i] = {p.pid: (p.usedGpuMemory or 0) >> 20 for p in procs}
    return Sample(time.time(), used, pids)


def preflight() -> tuple[object, dict[int, object]] | None:
    from tuner.search._gpus import GpuProbe

    probe = GpuProbe()
    if probe.backend == "none":
        print(f"gpu_check: no GPU visible ({probe.reason}).\n"
              "gpu_check: nothing was checked. Run this on a GPU host with nvidia-ml-py and torch installed "
              "(pip install nvidia-ml-py torch).", file=sys.stderr)
        return None
    if probe.backend != "nvml":
        print(f"gpu_check: NVML is needed to see per-GPU memory and processes ({probe.reason}); "
              "pip install nvidia-ml-py. Nothing was checked.", file=sys.stderr)
        return None
    code = ("import torch,sys; ok=torch.cuda.is_available(); print(torch.__version__, torch.version.cuda, "
            "torch.cuda.device_count() if ok else 0); sys.exit(0 if ok else 1)")
    torch_check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if torch_check.returncode != 0:
        print("gpu_check: the stand-in needs torch with CUDA: "
              f"{(torch_check.stdout + torch_check.stderr).strip()[-500:] or 'torch is not installed'}. "
              "Nothing was checked.", file=sys.stderr)
        return None
    print(f"gpu_check: torch {torch_check.stdout.strip()}; {probe.describe()}")
    nvml = probe._nvml
    handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())}
    return nvml, handles


def space_text(mib: int, trials: int) -> str:
    return textwrap.dedent(f"""
        name: gpu-check
        server:
          command: [{json.dumps(sys.executable)}, {json.dumps(str(Path(__file__).resolve()))}, "--serve"]
          model-path: stand-in/instant
          startup-timeout: 300
          stall-timeout: 120
          env: {{TUNER_SIM_PROFILE: instant, GPU_CHECK_MIB: "{mib}"}}
        params:
          schedule-conservativeness: {{type: float, low: 0.1, high: 2.0, step: 0.01}}
        baseline: {{schedule-conservativeness: 1.0}}
        gate:
          max-new-tokens: 8
          request-timeout: 60
        probe:
          concurrency: [16]
          requests: 48
          input-len: 16
          output-len: 24
          warmup: 0
          request-timeout: 60
        """)


def server_records(runs: Path) -> dict[int, dict]:
    out = {}
    for path in runs.glob("**/trial-*/server.json"):
        try:
            out[int(path.parent.name.split("-")[1])] = json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:  # before argparse: the server's flags are not ours to parse
        serve(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default=None, help="GPUs for the tuner (default: 0,1, or 0 on one GPU)")
    parser.add_argument("--trials", type=int, default=None, help="trials in all (default: 3 per slot, at least 4)")
    parser.add_argument("--mib", type=int, default=4096, help="MiB each stand-in holds per GPU (default 4096)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    found = preflight()
    if found is None:
        return 2
    nvml, handles = found
    from tuner.search._gpus import parse_gpu_list

    gpus = parse_gpu_list(args.gpus or ("0,1" if len(handles) >= 2 else "0"))
    missing = [g for g in gpus if g not in handles]
    if missing:
        print(f"gpu_check: GPU(s) {missing} do not exist here (NVML sees {sorted(handles)})", file=sys.stderr)
        return 2
    trials = args.trials or max(4, 3 * len(gpus))
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    (work / "space.yaml").write_text(space_text(args.mib, trials))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONUNBUFFERED": "1", "TUNER_SIM_FAULTS": "response_delay=0.2",
           # CUDA numbers GPUs fastest first unless told otherwise; NVML by PCI bus. Make them agree.
           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    start = time.time()
    baseline = nvml_sample(nvml, handles)
    log(start, "baseline: " + ", ".join(f"GPU{i} {m} MiB" for i, m in baseline.used.items()))
    argv = [sys.executable, "-m", "tuner", "run", "--trials", str(trials), "--space", "space.yaml",
            "--storage", "sqlite:///gpu_check.db", "--gpus", ",".join(map(str, gpus)), "--workdir", "runs"]
    log(start, "running: " + " ".join(argv[1:]) + f"   (in {work})")
    tuner = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    out_lines: list[str] = []
    reader = threading.Thread(target=lambda: out_lines.extend(tuner.stdout), daemon=True)
    reader.start()

    samples: list[Sample] = []
    killed: dict = {}
    last_shown: dict[int, int] = dict(baseline.used)
    runs = work / "runs"
    try:
        deadline = time.time() + 900
        while tuner.poll() is None and time.time() < deadline:
            s = nvml_sample(nvml, handles)
            samples.append(s)
            changed = [i for i in s.used if abs(s.used[i] - last_shown[i]) >= 256]
            if changed:
                log(start, "NVML: " + ", ".join(
                    f"GPU{i} {s.used[i]} MiB ({s.used[i] - baseline.used[i]:+d})"
                    + (f" pids {s.pids[i]}" if s.pids[i] else "") for i in changed))
                for i in changed:
                    last_shown[i] = s.used[i]
            if not killed:
                records = server_records(runs)
                candidates = sorted(n for n in records if n >= 1 and not records[n].get("stopped")
                                    and alive(records[n]["pid"]))
                for n in candidates:
                    record = records[n]
                    try:
                        raw = Path(f"/proc/{record['pid']}/environ").read_bytes().decode(errors="replace")
                        cvd = dict(x.split("=", 1) for x in raw.split("\0") if "=" in x).get("CUDA_VISIBLE_DEVICES")
                    except OSError:
                        continue
                    its = parse_gpu_list(cvd) if cvd else ()
                    if its and all(s.used[g] >= baseline.used[g] + args.mib * 0.9 for g in its):
                        os.kill(record["pid"], signal.SIGKILL)
                        killed = {"trial": n, "pid": record["pid"], "gpus": its, "t": time.time()}
                        log(start, f"SIGKILL stand-in of trial {n} (pid {record['pid']}, GPUs {list(its)}) "
                                   f"while NVML shows its memory: " + ", ".join(f"GPU{g} {s.used[g]} MiB" for g in its))
                        break
            time.sleep(SAMPLE_S)
        if tuner.poll() is None:
            print("gpu_check: the tuner did not finish in 15 minutes; stopping it", file=sys.stderr)
            os.killpg(tuner.pid, signal.SIGTERM)
            tuner.wait(timeout=60)
    finally:
        if tuner.poll() is None:
            os.killpg(tuner.pid, signal.SIGKILL)
            tuner.wait()
        reader.join(timeout=5)
    time.sleep(0.5)
    final = nvml_sample(nvml, handles)
    samples.append(final)
    print("---- tuner output (last 40 lines) ----")
    print("".join(out_lines[-40:]).rstrip())
    print("---- checks ----")
    report = Report()
    report.check(tuner.returncode == 0, f"the tuner finished (exit code {tuner.returncode})")
    result = analyse(work, baseline, samples, killed, gpus, args.mib, report, start)
    report.check(all(final.used[i] <= baseline.used[i] + TOLERANCE_MIB for i in gpus),
                 "at the end every GPU is back at its baseline: "
                 + ", ".join(f"GPU{i} {final.used[i]} MiB (baseline {baseline.used[i]})" for i in gpus))
    leftover = [r["pid"] for r in server_records(runs).values() if alive(r["pid"])]
    report.check(not leftover, f"no stand-in server is left running ({leftover or 'none'})")
    for note in report.notes:
        print(f"  note: {note}")
    if report.failures or not args.keep:
        print(f"work folder: {work}" + ("" if args.keep else " (kept: --keep, or a check failed)"
                                         if report.failures else ""))
    if not report.failures and not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: {'FAILED: ' + '; '.join(report.failures) if report.failures else 'all checks passed'}"
          f" ({result} trials analysed)")
    return 1 if report.failures else 0


def analyse(work: Path, baseline: Sample, samples: list[Sample], killed: dict, gpus: tuple[int, ...], mib: int,
            report: Report, start: float) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name="gpu-check", storage=f"sqlite:///{work / 'gpu_check.db'}")
    except Exception as exc:
        report.check(False, f"the study was recorded ({type(exc).__name__}: {exc})")
        return 0
    trials = [t for t in study.get_trials() if t.user_attrs.get("slot_acquired_at") and t.user_attrs.get("gpu_ids")]
    records = server_records(work / "runs")
    report.check(len(trials) >= 2, f"trials ran on slots: {len(trials)}")
    print("  trial  GPUs    slot held (s since start)   peak MiB above baseline per GPU while held   outcome")
    for t in trials:
        a, b = t.user_attrs["slot_acquired_at"], t.user_attrs.get("slot_released_at") or t.datetime_complete.timestamp()
        during = [s for s in samples if a <= s.t <= b]
        peak = {g: max((s.used[g] - baseline.used[g] for s in during), default=0) for g in gpus}
        print(f"  {t.number:>5}  {','.join(map(str, t.user_attrs['gpu_ids'])):<7} {a - start:7.2f} .. {b - start:7.2f}"
              f"        {peak}   {t.state.name} {t.user_attrs.get('failure_kind', '')}")

    def holders(time_: float) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {g: [] for g in gpus}
        for t in trials:
            a = t.user_attrs["slot_acquired_at"]
            b = t.user_attrs.get("slot_released_at") or t.datetime_complete.timestamp()
            if a <= time_ <= b:
                for g in t.user_attrs["gpu_ids"]:
                    out.setdefault(g, []).append(t.number)
        return out

    # 1. Memory only on the trial's own GPUs: by pid where NVML reports our pids.
    pid_of = {n: r["pid"] for n, r in records.items()}
    gpus_of = {t.number: set(t.user_attrs["gpu_ids"]) for t in trials}
    seen_pids = {pid for s in samples for g in s.pids for pid in s.pids[g]}
    ours = {n: p for n, p in pid_of.items() if p in seen_pids}
    if ours:
        wrong = sorted({(n, g) for s in samples for g in s.pids for n, p in ours.items()
                        if p in s.pids[g] and n in gpus_of and g not in gpus_of[n]})
        report.check(not wrong, f"by pid ({len(ours)} stand-ins seen in NVML's process lists): each held memory "
                                f"only on its own GPUs" + (f"; wrong: {wrong}" if wrong else ""))
    else:
        report.notes.append("NVML reports no pid of ours (a container's pid namespace): checked per GPU instead")
    # 1b/2. Per GPU: memory above the baseline only while a trial holds that GPU, and never two trials' worth.
    stray, double = [], []
    margin = 0.5  # seconds around slot edges: a server's memory may still be freed just after release
    for s in samples:
        now = holders(s.t)
        near = {g: holders(s.t - margin)[g] + holders(s.t + margin)[g] for g in gpus}
        for g in gpus:
            extra = s.used[g] - baseline.used[g]
            if extra > TOLERANCE_MIB and not now[g] and not near[g] and not (killed and g in killed["gpus"]
                                                                             and s.t < killed["t"] + 30):
                stray.append((round(s.t - start, 2), g, extra))
            if extra > 1.5 * mib + TOLERANCE_MIB:
                double.append((round(s.t - start, 2), g, extra))
    report.check(not stray, "per GPU: memory above the baseline only on GPUs a trial holds"
                 + (f"; stray (time, GPU, MiB): {stray[:5]}" if stray else ""))
    report.check(not double, "no GPU ever carried more than one trial's memory"
                 + (f"; (time, GPU, MiB): {double[:5]}" if double else ""))
    used_ok = [t.number for t in trials if any(
        s.used[g] - baseline.used[g] >= 0.9 * mib for s in samples
        for g in t.user_attrs["gpu_ids"] if t.user_attrs["slot_acquired_at"] <= s.t)]
    report.check(len(used_ok) >= min(2, len(trials)), f"stand-ins really held memory on their GPUs ({len(used_ok)} trials)")

    # 3. After the SIGKILL: the slot waits for NVML to show the memory released.
    if not report.check(bool(killed), "a stand-in was killed with SIGKILL while holding its memory"):
        return len(trials)
    g_set = set(killed["gpus"])
    after = [s for s in samples if s.t >= killed["t"]]
    low = next((s for s in after if all(s.used[g] <= baseline.used[g] + TOLERANCE_MIB for g in g_set)), None)
    last_high = max((s.t for s in after if low is None or s.t < low.t), default=killed["t"])
    if low is not None:
        log(start, f"NVML: memory of the killed trial {killed['trial']} released within "
                   f"{low.t - killed['t']:.2f} s of the SIGKILL: " + ", ".join(f"GPU{g} {low.used[g]} MiB" for g in g_set))
    report.check(low is not None, "NVML showed the killed stand-in's memory released")
    nxt = sorted((t for t in trials if t.user_attrs["slot_acquired_at"] > killed["t"] and
                  g_set & set(t.user_attrs["gpu_ids"])), key=lambda t: t.user_attrs["slot_acquired_at"])
    if not nxt:
        report.notes.append("no trial took the killed trial's GPUs afterwards (too few trials left)")
        return len(trials)
    handed = nxt[0].user_attrs["slot_acquired_at"]
    log(start, f"slot of the killed trial handed to trial {nxt[0].number} at {handed - start:.2f}s; last NVML sample "
               f"still showing the memory at {last_high - start:.2f}s")
    report.check(handed >= last_high, f"the killed trial's GPUs {sorted(g_set)} were handed out again only after "
                                      f"NVML showed them released (trial {nxt[0].number})")
    return len(trials)


if __name__ == "__main__":
    sys.exit(main())
