"""`predict()`: what a simulated server would measure for one configuration and workload, without HTTP.

It runs the very scheduler the server runs, on a virtual clock: `concurrency` clients each send a request of
`input_len` prompt tokens and `output_len` output tokens (EOS ignored), and send the next one when it finishes,
until `num_requests` are done. Throughput is tokens over the makespan, as `sglang.bench_serving` computes it.
"""

from __future__ import annotations

import contextlib
import heapq
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..flags import defaults, parse_argv
from ._engine import Crash, Req, Scheduler
from ._profile import Profile, load_profile
from ._setup import Setup, make_setup

PROGRESS_EVERY = 10  # thousandths, as tuner/trial/_probe.py reports


@dataclass(frozen=True)
class Prediction:
    status: str  # ok | invalid_args | crash_on_start | oom | graph_capture_failed | startup_timeout | nan |
    #              garbage | logprob_drift | crash_under_load
    output_tok_s: float = 0.0
    total_tok_s: float = 0.0
    ttft_s: float = 0.0  # mean time to first token
    itl_s: float = 0.0  # mean inter-token latency
    e2e_s: float = 0.0  # mean request latency
    kv_tokens: int = 0  # max_total_num_tokens per scheduler
    free_mem_gb: float = 0.0  # per GPU after CUDA-graph capture
    startup_s: float = 0.0  # simulated seconds until "The server is fired up and ready to roll!"
    max_batch: int = 0
    message: str = ""  # the exception line a failing server prints
    stage: str = ""  # where a start failed: args | devices | load | kernels | kv | capture
    # (thousandths of the output tokens, output tok/s so far) at every PROGRESS_EVERY thousandths: what the
    # tuner's probe reports to the pruner, so a trial stopped at step s compares with progress at s.
    progress: tuple[tuple[int, float], ...] = field(default=(), repr=False)
    resolved: dict[str, Any] = field(default_factory=dict, repr=False)


def server_values(profile: Profile, args: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    if isinstance(args, Mapping):
        values = defaults(profile.sglang_version)
        values["model_path"] = "sim-model"
        unknown = [k for k in args if k not in values and k != "cuda_graph_config"]
        if unknown:
            raise ValueError(f"not a {profile.sglang_version} flag: {', '.join(sorted(unknown))}")
        values.update(args)
        return values
    argv = list(args)
    if "--model-path" not in argv and "--model" not in argv:
        argv = ["--model-path", "sim-model", *argv]
    return parse_argv(argv, profile.sglang_version)


def predict(profile: Profile | str | Path, args: Mapping[str, Any] | Sequence[str], concurrency: int,
            input_len: int, output_len: int, *, num_requests: int | None = None, seed: int = 0,
            noise: bool = False) -> Prediction:
    """Simulate `concurrency` closed-loop clients against one server start.

    `args` is a dict of flag values under SGLang's field names (tp_size, mem_fraction_static, ...) or an argv
    list as for launch_server. Noise is off unless `noise=True`; then it is the noise a server started with
    TUNER_SIM_SEED=`seed` draws, so the two agree.
    """
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            values = server_values(profile, args)
    except SystemExit:
        return Prediction(status="invalid_args", message=errors.getvalue().strip())
    if noise:
        setup = make_setup(profile, values, seed=seed)
    else:
        setup = make_setup(_noiseless(profile), values, seed=seed)
    memory = setup.memory
    base = dict(kv_tokens=memory.kv_tokens, free_mem_gb=round(memory.avail_after_capture_gb, 3),
                resolved=dict(setup.resolved.args))
    if setup.failure is not None:
        return Prediction(status=setup.failure.kind, message=setup.failure.exc_line, stage=setup.failure.stage,
                          **base)
    return _run(setup, concurrency, input_len, output_len, num_requests or concurrency, base)


def _noiseless(profile: Profile) -> Profile:
    from dataclasses import replace
    return replace(profile, noise=replace(profile.noise, relative=0.0))


def _run(setup: Setup, concurrency: int, input_len: int, output_len: int, num_requests: int,
         base: dict[str, Any]) -> Prediction:
    knobs = setup.resolved.knobs
    replicas = [Scheduler(setup.profile, knobs, setup.perf, setup.memory, setup.health) for _ in range(knobs.dp)]
    clocks = [0.0] * len(replicas)
    # Closed loop: a client sends its next request when its previous one finishes; requests go to the
    # replicas round-robin, like SGLang's data-parallel controller.
    sent = 0
    done: list[Req] = []
    arrivals: list[tuple[float, int]] = []  # (time, sequence) of requests to send

    def send(at: float) -> None:
        nonlocal sent
        if sent >= num_requests:
            return
        heapq.heappush(arrivals, (at, sent))
        sent += 1

    for _ in range(min(concurrency, num_requests)):
        send(0.0)
    startup = setup.phases.total_s
    expected = num_requests * output_len
    progress: list[tuple[int, float]] = []
    try:
        while True:
            # Advance the replica whose clock is furthest behind, after delivering the arrivals up to then.
            busy = [k for k, s in enumerate(replicas) if not s.idle]
            if busy:
                now = min(clocks[k] for k in busy)
            elif arrivals:
                now = arrivals[0][0]
            else:
                break
            while arrivals and arrivals[0][0] <= now:
                at, seq = heapq.heappop(arrivals)
                r = seq % len(replicas)
                clocks[r] = max(clocks[r], at)
                replicas[r].submit(Req(str(seq), input_len, output_len, arrival=at))
            busy = [k for k, s in enumerate(replicas) if not s.idle]
            i = min(busy, key=lambda k: clocks[k])
            sched = replicas[i]
            batch = sched.next_batch()
            if batch is None:  # waiting but nothing admissible yet cannot happen without running work
                break
            clocks[i] += batch.duration
            for req in sched.complete(batch, clocks[i]):
                done.append(req)
                send(clocks[i])
            generated = sum(s.stats.generated for s in replicas)
            share = min(1000, 1000 * generated // max(1, expected)) // PROGRESS_EVERY * PROGRESS_EVERY
            if share and (not progress or share > progress[-1][0]) and clocks[i] > 0:
                progress.append((share, generated / clocks[i]))
    except Crash as crash:
        return Prediction(status=crash.kind, message=crash.exc_line, startup_s=startup, **base)

    finished = [r for r in done if not r.aborted]
    if not finished:
        return Prediction(status="crash_under_load", message="no request finished", startup_s=startup, **base)
    makespan = max(r.finished_at or 0.0 for r in finished) - min(r.arrival for r in finished)
    out_tokens = sum(r.n_out for r in finished)
    in_tokens = sum(r.prompt_len for r in finished)
    ttft = sum((r.first_token_at or r.finished_at or 0.0) - r.arrival for r in finished) / len(finished)
    itls = [((r.finished_at or 0.0) - (r.first_token_at or 0.0)) / (r.n_out - 1) for r in finished if r.n_out > 1]
    e2e = sum((r.finished_at or 0.0) - r.arrival for r in finished) / len(finished)
    health = setup.health
    nan_tokens = sum(s.stats.nan_tokens for s in replicas)
    if nan_tokens:
        status = "nan"
    elif health.garbage:
        status = "garbage"
    elif health.logprob_drift or health.decode_position_error:
        status = "logprob_drift"
    else:
        status = "ok"
    rate = 1.0 / makespan if makespan > 0 else float("inf")
    return Prediction(status=status, output_tok_s=out_tokens * rate, total_tok_s=(in_tokens + out_tokens) * rate,
                      ttft_s=ttft, itl_s=sum(itls) / len(itls) if itls else 0.0, e2e_s=e2e, startup_s=startup,
                      max_batch=max(s.stats.max_decode_batch for s in replicas), progress=tuple(progress), **base)
