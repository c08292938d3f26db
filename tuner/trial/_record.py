"""Stage 8: what a trial leaves in the study — values, constraint, user attrs, note and log artifact.

Everything a person needs to judge a trial goes into user attrs and the note as well as the
constraint, because optuna-dashboard 0.21 does not display constraints set with set_constraint.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from .._redact import Redactor, redact_env, redact_flags
from ..spec import Spec
from ._ratesearch import slo_text
from ._trial import TrialResult

FEASIBILITY = "failure"  # constraint key: > 0 means the trial must not win


def trial_attrs(result: TrialResult, spec: Spec, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "config_key": result.config.key(),
        "flags": redact_flags(result.config.flags),
        "env": redact_env(result.config.env),
        "launch_command": shlex.join(result.argv),
        "model_path": spec.server.model_path,
        "engine": spec.engine,
        "stage_seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        "total_seconds": round(sum(result.seconds.values()), 3),
        "server_version": result.version,
        "overrides": result.overrides,
        "effective_args": _effective(result),
    }
    startup = startup_breakdown(result)
    if startup:
        attrs["startup_breakdown"] = startup
    failure = result.failure
    attrs["failure_kind"] = failure.kind.value if failure else "none"
    if failure:
        attrs["failure_message"] = failure.message
        attrs["failure_stage"] = failure.stage
        attrs["failure_evidence"] = failure.evidence[-3000:]
        attrs.update(failure.attrs)
    if result.stopped_early:
        attrs["stopped_early"] = "pruner stopped the probe: slower than earlier trials at the same point"
    if result.gate:
        attrs["gate_checks"] = list(result.gate.checks)
        attrs["gate_answers"] = {p: t[:200] for p, t in result.gate.answers.items()}
        if result.gate.skipped:
            attrs["gate_skipped"] = dict(result.gate.skipped)
        if result.gate.max_logprob_diff is not None:
            attrs["gate_max_logprob_diff"] = round(result.gate.max_logprob_diff, 6)
        figures = dict(result.gate.figures)
        if result.recheck is not None:
            figures.update({f"after-load {k}": v for k, v in result.recheck.figures.items()})
        if figures:
            # Each self-comparison's measured figure: what a study on real kernels sets the tolerances from.
            attrs["gate_figures"] = figures
        if result.gate.divergences:
            attrs["gate_near_ties"] = [{"position": d.position, "margin": round(d.margin, 4)}
                                       for d in result.gate.divergences]
    if result.probe:
        level = result.probe.level(spec.objective.concurrency)
        attrs.update({k: _round(v) for k, v in level.as_dict().items()})
        attrs["levels"] = [{k: _round(v) for k, v in m.as_dict().items()} for m in result.probe.levels]
        attrs["probe_lengths"] = result.probe.lengths
        if result.probe.rate_search is not None:
            attrs["rate_search"] = result.probe.rate_search.as_dict()
            attrs["max_rate_under_slo"] = result.probe.rate_search.rate
    if result.teardown:
        attrs["teardown_killed"] = result.teardown.killed
        attrs["teardown_leftover_pids"] = list(result.teardown.leftover)
        attrs["teardown_leftovers"] = [e.as_dict() for e in result.teardown.escaped]
        attrs["teardown_port_free"] = result.teardown.port_free
    if extra:
        attrs.update(extra)
    return attrs


def startup_breakdown(result: TrialResult) -> dict[str, float]:
    """Where the start-up went, from the server's own `startup_time` in /server_info (SGLang 0.5.17 and later
    log the same figures as "Engine startup timings (s): ..."): weight load, KV cache allocation, CUDA graph
    capture per phase, the rest of the engine's start (JIT of kernels built at start-up, memory profiling),
    and what the tuner waited beyond the engine: the import of the server's modules and the warm-up
    generation, where flashinfer and SGLang JIT-compile their kernels."""
    timings = result.server_info.get("startup_time")
    if not isinstance(timings, Mapping) or "scheduler_e2e" not in timings:
        return {}
    graphs = timings.get("cuda_graph") if isinstance(timings.get("cuda_graph"), Mapping) else {}
    parts = {"weight_load": timings.get("load_weight") or 0.0,
             "kv_cache_allocation": timings.get("kv_cache_allocation") or 0.0,
             **{f"cuda_graph_{phase}": seconds for phase, seconds in graphs.items() if seconds}}
    out = {k: round(float(v), 2) for k, v in parts.items()}
    out["other_engine_init"] = round(max(0.0, float(timings["scheduler_e2e"]) - sum(parts.values())), 2)
    waited = result.seconds.get("launch", 0.0) + result.seconds.get("readiness", 0.0)
    engine = timings.get("tokenizer_e2e") or timings["scheduler_e2e"]
    out["imports_and_warmup"] = round(max(0.0, waited - float(engine)), 2)
    return out


def _effective(result: TrialResult) -> dict[str, Any]:
    info = result.server_info
    keys = {flag.replace("-", "_") for flag in result.config.flags}
    keys |= {"mem_fraction_static", "max_total_num_tokens", "attention_backend", "cuda_graph_max_bs",
             "chunked_prefill_size", "max_running_requests", "tp_size", "dp_size", "page_size",
             "cuda_graph_config", "attn_dp_size", "enable_dp_attention", "memory_usage"}
    return redact_flags({k: info[k] for k in sorted(keys) if k in info})


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def note_markdown(result: TrialResult, attrs: Mapping[str, Any], feasible: bool) -> str:
    """A short note for the dashboard: what was tried, what happened, the log lines that prove it."""
    tried = ", ".join(f"`{k}={v}`" for k, v in sorted(attrs["flags"].items())) or "(defaults)"
    blocks = [f"### Trial {result.number}: " + ("feasible" if feasible else f"**infeasible** ({attrs['failure_kind']})"),
              f"**Tried:** {tried}"]
    if attrs.get("env"):
        blocks.append("**Env:** " + ", ".join(f"`{k}={v}`" for k, v in sorted(attrs["env"].items())))
    if "reused_from" in attrs:
        blocks.append(f"**Reused** the result of trial {attrs['reused_from']} (same server configuration).")
    if result.failure:
        blocks.append(f"**What happened:** {result.failure.kind.value} in stage `{result.failure.stage}`: "
                      f"{result.failure.message}")
        if result.failure.evidence:
            blocks.append(f"```\n{result.failure.evidence[-1500:]}\n```")
    elif result.stopped_early:
        blocks.append("**What happened:** stopped early by the pruner (slower than earlier trials).")
    elif result.probe:
        blocks.append(f"**What happened:** gate passed ({', '.join(attrs.get('gate_checks', []))}); "
                      f"output {attrs.get('output_throughput', 0):.1f} tok/s, total "
                      f"{attrs.get('total_throughput', 0):.1f} tok/s, p99 TTFT {attrs.get('p99_ttft_ms', 0):.0f} ms, "
                      f"p99 ITL {attrs.get('p99_itl_ms', 0):.1f} ms.")
        for check, why in attrs.get("gate_skipped", {}).items():
            blocks.append(f"**Check skipped:** {check}: {why}")
        if attrs.get("slo_violations"):
            blocks.append(f"**SLO violated:** {', '.join(attrs['slo_violations'])}")
        search = result.probe.rate_search
        if search is not None:
            blocks.append(f"**Highest rate under the SLO:** {search.rate:.3g} requests/s "
                          f"({slo_text(search.spec.slo_ms)} for {search.spec.attainment:.1%} of requests; "
                          f"search ended: {search.stopped}, {search.seconds:.0f} s)")
            blocks.append(f"```\n{search.table()}\n```")
    if result.overrides:
        blocks.append("**Server changed:** " + ", ".join(f"`{k}`: asked {v['asked']}, got {v['got']}"
                                                         for k, v in result.overrides.items()))
    blocks.append("**Time:** " + ", ".join(f"{k} {v:.1f}s" for k, v in attrs["stage_seconds"].items()))
    # Markdown joins lines of one paragraph: a blank line between blocks keeps each on its own.
    return "\n\n".join(blocks)


def save_note(trial: optuna.Trial, markdown: str) -> None:
    _dashboard_save_note()(trial, markdown)


@functools.cache
def _dashboard_save_note() -> Callable[[optuna.Trial, str], None]:
    """optuna_dashboard's save_note, imported lazily (the package is heavy) and without scikit-learn:
    importing the package imports optuna.importance, whose fANOVA takes scikit-learn where it is installed
    (as in most ML environments): 80 MB of the tuner's memory for a function that writes notes."""
    hidden = "sklearn" not in sys.modules
    if hidden:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # `import sklearn` raises ImportError
    try:
        from optuna_dashboard import save_note as dashboard_save_note
    finally:
        if hidden:
            del sys.modules["sklearn"]
    return dashboard_save_note


def store_log(result: TrialResult, redactor: Redactor, cap_mb: float) -> None:
    """Rewrite the server log as the one copy kept of it: secret values masked (servers print their own
    arguments), and past `cap_mb`, its head and its tail with the cut marked. Streamed, so that a log of
    any size costs a block of memory; written aside and moved in place, so that it is never half-written."""
    path = result.log_path
    if path is None or not path.exists():
        return
    cap = int(cap_mb * (1 << 20))
    size = path.stat().st_size
    tmp = path.with_name(path.name + ".tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        if size <= cap:
            redactor.copy(src, dst, size)
        else:
            half = max((cap - len(_cut_marker(size, cap_mb))) // 2, 0)  # the marker of a longer cut is no shorter
            # Cut where no part of a secret can be left unmasked: at a line's end (no secret spans one), or
            # inside a very long line with a secret's length dropped on each side of the cut; both cuts fall
            # inside the cap, so that head, marker and tail together never exceed it.
            margin = redactor.longest
            head = _line_end_before(src, half) or max(half - margin, 0)
            tail = _line_end(src, size - half) or size - half + margin
            src.seek(0)
            redactor.copy(src, dst, head)
            dst.write(_cut_marker(tail - head, cap_mb))
            src.seek(tail)
            redactor.copy(src, dst, size - tail)
    os.replace(tmp, path)


def _cut_marker(cut: int, cap_mb: float) -> bytes:
    return (f"\n[tuner: {cut:,} bytes of this log cut here; the log kept per trial is capped "
            f"at server.log-cap-mb: {cap_mb:g}]\n").encode()


def _line_end_before(f: Any, at: int, within: int = 1 << 16) -> int | None:
    """The offset just past the last newline in the `within` bytes before `at`; None where there is none."""
    start = max(at - within, 0)
    f.seek(start)
    block = f.read(at - start)
    nl = block.rfind(b"\n")
    return start + nl + 1 if nl >= 0 else None


def _line_end(f: Any, at: int, within: int = 1 << 16) -> int | None:
    """The offset just past the first newline in `within` bytes from `at`; None where there is none."""
    f.seek(at)
    block = f.read(within)
    nl = block.find(b"\n")
    return at + nl + 1 if nl >= 0 else None


def upload_log(trial: optuna.Trial, result: TrialResult, store: Any) -> None:
    if result.log_path is None or not result.log_path.exists():
        return
    from optuna.artifacts import upload_artifact

    upload_artifact(artifact_store=store, file_path=str(result.log_path), study_or_trial=trial,
                    mimetype="text/plain")
