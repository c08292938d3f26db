"""One trial, top to bottom: launch, readiness, effective arguments, gate, probe, re-check, teardown.

Each stage is its own module; this one only strings them together, times them, and turns whatever
goes wrong into a :class:`FailureRecord`. The server is always stopped, whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .._failures import FailureKind, FailureRecord, ProbeStopped, TrialFailure
from .._redact import redact_argv
from ..engines import Engine
from ..spec import ServerConfig, Spec
from ._gate import GateResult, gate_shape, run_gate
from ._launch import LaunchRequest, ServerProcess, launch
from ._tls import tls_context
from ._logwatch import LogWatcher
from ._probe import ProbeResult, run_probe
from ._readiness import SETTLE_S, check_alive, wait_until_ready
from ._teardown import TeardownResult, stop_server
from ._tokens import PromptTokens
from ._watch import Limits, Watch


@dataclass(frozen=True)
class TrialPlan:
    number: int
    config: ServerConfig
    workdir: Path
    port: int
    gpu_ids: tuple[int, ...] | None = None
    reference: Mapping[str, list[int]] | None = None  # the baseline's greedy token ids
    reference_diffs: Mapping[str, float] | None = None  # its decode vs re-prefill differences, same precision


@dataclass
class TrialContext:
    """What stays the same for every trial of a study."""

    spec: Spec
    engine: Engine
    command: tuple[str, ...]
    api_key: str | None = None
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    on_stage: Callable[[int, str], None] = lambda number, stage: None
    # Reports intermediate throughput; returns True when the pruner says stop.
    on_progress: Callable[[int, float], bool] | None = None
    # On a GPU host: True once the GPUs a trial used are back to their memory baseline.
    gpus_settled: Callable[[tuple[int, ...]], bool] | None = None
    # On a GPU host: pid -> GPU of compute processes on these GPUs that were not there at the baseline.
    gpu_holders: Callable[[tuple[int, ...]], Mapping[int, int]] | None = None
    # Set when the run is interrupted: every stage of every running trial stops at its next check.
    cancel: threading.Event = field(default_factory=threading.Event)
    # The model's tokenizer, read once per run: probe lengths are then tokens, else words.
    tokens: PromptTokens | None = None


@dataclass
class TrialResult:
    number: int
    config: ServerConfig
    argv: list[str] = field(default_factory=list)  # redacted
    failure: FailureRecord | None = None
    stopped_early: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)  # flag -> {"asked": ..., "got": ...}
    version: str | None = None
    gate: GateResult | None = None
    recheck: GateResult | None = None  # the after-load re-check
    probe: ProbeResult | None = None
    teardown: TeardownResult | None = None
    log_path: Path | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.stopped_early and self.probe is not None


def run_trial(ctx: TrialContext, plan: TrialPlan) -> TrialResult:
    spec, engine = ctx.spec, ctx.engine
    result = TrialResult(plan.number, plan.config)
    argv = engine.argv(ctx.command, spec.server.model_path, spec.server.host, plan.port,
                       plan.config.flags, ctx.api_key)
    result.argv = redact_argv(argv)
    env = {**ctx.base_env, **plan.config.env}
    if plan.gpu_ids is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, plan.gpu_ids))
        # The slot's GPU numbers are NVML's, which count by PCI bus; CUDA counts fastest first unless told.
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    headers = {"Authorization": f"Bearer {ctx.api_key}"} if ctx.api_key else {}
    server: ServerProcess | None = None

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        ctx.on_stage(plan.number, name)
        t0 = time.monotonic()
        try:
            yield
        finally:
            result.seconds[name] = result.seconds.get(name, 0.0) + time.monotonic() - t0

    try:
        with stage("launch"):
            server = launch(LaunchRequest(argv, env, plan.workdir, spec.server.host, plan.port, plan.gpu_ids))
        result.log_path = server.log_path
        watcher = LogWatcher(server.log_path, engine)
        with httpx.Client(base_url=server.base_url, headers=headers, verify=tls_context(),
                          timeout=httpx.Timeout(spec.gate.request_timeout, connect=5.0)) as client:
            with stage("readiness"):
                ready = wait_until_ready(server, engine, watcher, client, spec.server.startup_timeout,
                                         spec.server.stall_timeout, ctx.cancel, spec.gate.first_request_timeout)
            stall = spec.server.stall_timeout

            def watch(name: str) -> Watch:
                # Every request to the live server is watched: its exit, an interrupt, and silence end the wait.
                return Watch(lambda: check_alive(server, watcher, name, ctx.cancel), lambda: watcher.last_growth, name)

            with stage("server_info"), _explained(server, watcher, "server_info"):
                limits = Limits(spec.gate.request_timeout, spec.gate.request_timeout, stall)
                client.timeout = httpx.Timeout(limits.http_timeout, connect=5.0)
                watch("server_info").run(lambda: _read_back(engine, client, plan.config, result), limits,
                                         "server_info request")
            vocab = result.server_info.get("vocab_size")
            shape = gate_shape(result.server_info, spec.probe.concurrency, spec.gate)
            with stage("gate"), _explained(server, watcher, "gate"):
                result.gate = run_gate(client, engine, spec.gate, reference=plan.reference,
                                       reference_diffs=plan.reference_diffs, vocab_size=vocab,
                                       watch=watch("gate"), stall_timeout=stall, generated=ready.generated,
                                       shape=shape)
                check_alive(server, watcher, "gate", ctx.cancel)
            with stage("probe"), _explained(server, watcher, "probe"):
                result.probe = run_probe(server.base_url, headers, engine, spec.probe,
                                         alive=lambda: check_alive(server, watcher, "probe", ctx.cancel),
                                         objective_level=spec.objective.concurrency,
                                         on_progress=ctx.on_progress,
                                         check_text=spec.gate.enabled("degenerate-text"),
                                         rate_search=spec.objective.rate_search, tokens=ctx.tokens)
            if spec.gate.recheck_after_load:
                with stage("recheck"), _explained(server, watcher, "recheck"):
                    result.recheck = run_gate(client, engine, spec.gate, stage="recheck", vocab_size=vocab,
                                              quick=True, watch=watch("recheck"), stall_timeout=stall, shape=shape)
                    check_alive(server, watcher, "recheck", ctx.cancel)
    except TrialFailure as failure:
        result.failure = FailureRecord.from_exception(failure)
    except ProbeStopped:
        result.stopped_early = True
    finally:
        if server is not None:
            with stage("teardown"):
                settle = holders = None
                if plan.gpu_ids:
                    settle = (lambda: ctx.gpus_settled(plan.gpu_ids)) if ctx.gpus_settled else None
                    holders = (lambda: ctx.gpu_holders(plan.gpu_ids)) if ctx.gpu_holders else None
                result.teardown = stop_server(server, settle=settle, gpu_holders=holders)
    return result


@contextlib.contextmanager
def _explained(server: ServerProcess, watcher: LogWatcher, stage: str) -> Iterator[None]:
    """When a request fails, the real cause is often that the server died: report that instead.

    Direct evidence stands otherwise: a verdict of the stage (NaN, HTTP 500s, a hang) is replaced only by
    an exit or a log line that names a fatal cause. A traceback the live server printed meanwhile (often
    for the very requests the tuner closed at the first NaN) is shown beside the verdict."""
    try:
        yield
    except (TrialFailure, httpx.HTTPError) as exc:
        # Wait briefly for an exit or a fatal line; check_alive raises once either has settled.
        quiet_until = time.monotonic() + SETTLE_S
        while time.monotonic() < quiet_until or (watcher.fatal is not None and watcher.fatal.definitive):
            check_alive(server, watcher, stage)
            time.sleep(0.02)
        if isinstance(exc, TrialFailure):
            if watcher.fatal is not None:  # a traceback of a live server: evidence, not the verdict
                exc.message += f" (the server's log shows: {watcher.cause()[:200]})"
                exc.evidence = "\n".join(filter(None, [exc.evidence, watcher.excerpt(around=watcher.fatal.line)]))
            raise
        raise TrialFailure(FailureKind.CRASH_UNDER_LOAD if stage != "server_info" else FailureKind.CRASH_ON_START,
                           f"request failed: {type(exc).__name__}: {exc}"[:300], watcher.excerpt(), stage) from exc


def _read_back(engine: Engine, client: httpx.Client, config: ServerConfig, result: TrialResult) -> None:
    info = engine.server_info(client)
    result.server_info = info
    result.version = engine.version(info)
    got = engine.effective_flags(info, config.flags)
    for flag, asked in config.flags.items():
        if flag in got and not _same(asked, got[flag]):
            result.overrides[flag] = {"asked": asked, "got": got[flag]}


def _same(asked: Any, got: Any) -> bool:
    if isinstance(asked, bool) or isinstance(got, bool):
        return bool(asked) == bool(got)
    if isinstance(asked, (int, float)) and isinstance(got, (int, float)):
        return abs(float(asked) - float(got)) < 1e-9
    if isinstance(asked, (list, tuple)) and isinstance(got, (list, tuple)):
        return list(map(str, asked)) == list(map(str, got))
    return str(asked) == str(got)
