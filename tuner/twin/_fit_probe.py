"""The eager launch cost, judged on whole probes: a decode step's launches against the level's throughput.

The logs' eager decode intervals give one value of kernel_launch_us; the completed probes without decode graphs
give another (the level also spends time outside the forwards: tokenizing, HTTP, which the simulator does not
model, and which this value takes in). The fit keeps the one that predicts the completed probes best.
"""

from __future__ import annotations

import statistics

from ..engines import flag_argv
from ..sim import PerfModel, Profile, predict
from ._fidelity import Workload
from ._fit import Fitted, Kept, spans, tidy, with_value
from ._study import Trial


def _tok_s(profile: Profile, trial: Trial, work: Workload) -> float:
    p = predict(profile, flag_argv(trial.flags), work.concurrency, work.input_len, work.output_len,
                num_requests=work.requests)
    return p.output_tok_s if p.status == "ok" else 0.0


def _probe_error(profile: Profile, done: list[Trial], work: Workload) -> float:
    return statistics.median(abs(_tok_s(profile, t, work) - t.tok_s) / t.tok_s for t in done)


def _solve_launch(profile: Profile, trial: Trial, work: Workload) -> float | None:
    """kernel_launch_us at which the predicted probe matches the real one: secant steps on 1 / tok/s, which
    grows about linearly with the step time."""
    def inverse(x: float) -> float:
        return 1.0 / max(_tok_s(with_value(profile, "hardware", "kernel_launch_us", x), trial, work), 1e-9)

    target = 1.0 / trial.tok_s
    x0, x1 = 0.0, 20.0
    y0, y1 = inverse(x0), inverse(x1)
    for _ in range(6):
        if y1 == y0:
            break
        x0, y0, x1 = x1, y1, max(0.0, x1 + (target - y1) * (x1 - x0) / (y1 - y0))
        y1 = inverse(x1)
        if abs(y1 - target) < 1e-4 * target:
            break
    return x1 if abs(y1 - target) < 0.01 * target else None


def choose_launch(profile: Profile, found: Fitted | Kept, trials: list[Trial], work: Workload) -> tuple[Profile, Fitted | Kept]:
    """The logs' value or the whole probes', whichever predicts the completed trials better."""
    done = [t for t in trials if t.tok_s]
    eager = [t for t in done if not PerfModel(profile, t.knobs).graph_size_for(work.concurrency)
             and profile.performance.attention_backends.get(t.knobs.decode_backend, 1.0) == 1.0
             and not profile.performance.attention_seq_us.get(t.knobs.decode_backend)]
    solved = [(t.number, x) for t in eager if (x := _solve_launch(profile, t, work)) is not None]
    if not solved:
        return profile, found
    value = tidy(statistics.median(x for _, x in solved))
    probes = with_value(profile, "hardware", "kernel_launch_us", value)
    probe_error = _probe_error(probes, done, work)
    base = profile.hardware.kernel_launch_us if isinstance(found, Kept) else found.base
    if isinstance(found, Fitted) and _probe_error(profile, done, work) <= probe_error:
        return profile, found  # the logs' value predicts the probes as well
    why = f"whole probes without decode graphs (output tok/s); they predict the completed trials " \
          f"{spans(t.number for t in done)} at a median |error| {probe_error:.1%}"
    if isinstance(found, Fitted):
        why += f", the eager decode steps' {found.value:g} us at {_probe_error(profile, done, work):.1%}"
    lo, hi = min(x for _, x in solved), max(x for _, x in solved)
    return probes, Fitted("hardware", "kernel_launch_us", value, base, why, tuple(n for n, _ in solved), len(solved),
                          f"per-trial values {lo:.1f}-{hi:.1f}")
