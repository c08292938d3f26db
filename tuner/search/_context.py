"""A study's context: the engine and version, the GPUs, the model and the workload it was tuned for.

Recorded once per study as the user attr `context` (a JSON dict, `schema: 1`), from what the run can read
without asking anyone: the version the server reports in /server_info, NVML, the model folder's config.json
and the space. Later studies with a matching context can then start from this one's failures (issue 36).

Under --simulate there is no GPU to ask: the GPUs and, where the model folder has no config.json, the model are
those the simulator's profile pretends to be, and `source` says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna

from ..spec import Spec
from ..versions import ServerVersion
from ._gpus import GpuProbe
from ._model_facts import ModelFacts, read_model_facts

ATTR = "context"
SCHEMA = 1
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


@dataclass(frozen=True)
class EngineFacts:
    name: str  # the space's engine: sglang, vllm
    version: str | None
    version_from: str  # "server_info" (a trial read it back), "package" (the server's Python), "simulator profile"

    def to_attr(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class GpuFacts:
    source: str  # "nvml", "torch", "simulator profile NAME", or "none: why"
    count: int = 0
    name: str | None = None  # of the first GPU; `mixed` says when they differ
    compute_capability: str | None = None  # "9.0"
    memory_gb: float | None = None  # per GPU, GiB
    interconnect: str | None = None  # nvlink | pcie, where it could be read
    mixed: bool = False

    @property
    def known(self) -> bool:
        return self.count > 0

    def to_attr(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and not (k == "mixed" and not v)}


@dataclass(frozen=True)
class WorkloadFacts:
    concurrency: list[int]
    requests: int
    input_len: int
    output_len: int
    metric: str
    direction: str
    dataset: str | None = None  # a file's name; None: random prompts of the lengths above
    shared_prefix: bool = False
    rates: list[float] | None = None  # a rate sweep's request rates
    slo: dict[str, float] | None = None
    second_metric: str | None = None
    second_direction: str | None = None

    def to_attr(self) -> dict[str, Any]:
        # Left out where unset (None), off, or empty; a 0 stays.
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False and v != [] and v != {}}


@dataclass(frozen=True)
class StudyContext:
    engine: EngineFacts
    gpus: GpuFacts
    model: ModelFacts
    workload: WorkloadFacts

    def to_attr(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "engine": self.engine.to_attr(), "gpus": self.gpus.to_attr(),
                "model": self.model.to_attr(), "workload": self.workload.to_attr()}


def richness(attr: Mapping[str, Any] | None) -> int:
    """How much a stored context knows: a later one replaces it only if it knows more (a resumed run must not
    trade a version read back from a server for one guessed before any server started)."""
    if not isinstance(attr, Mapping):
        return -1
    version_from = (attr.get("engine") or {}).get("version_from")
    score = {"server_info": 2, "package": 1, "simulator profile": 1}.get(version_from, 0)
    score += bool((attr.get("gpus") or {}).get("count"))
    score += bool({"architecture", "layers"} & set(attr.get("model") or {}))
    return score


def workload_facts(spec: Spec) -> WorkloadFacts:
    probe, objective = spec.probe, spec.objective
    return WorkloadFacts(
        concurrency=list(probe.concurrency), requests=probe.requests, input_len=probe.input_len,
        output_len=probe.output_len, metric=objective.metric, direction=objective.direction,
        dataset=probe.dataset.rsplit("/", 1)[-1] if probe.dataset else None,
        shared_prefix=probe.shared_prefix is not None, rates=list(probe.rates) or None,
        slo=dict(objective.slo) or None, second_metric=objective.second_metric,
        second_direction=objective.second_direction if objective.second_metric else None)


def gpu_facts(probe: GpuProbe | None, gpu_ids: Sequence[int] | None, profile: str | None) -> GpuFacts:
    """The GPUs the study's trials may use (`gpu_ids`; None: every one visible)."""
    if profile is not None:
        from ..sim import load_profile

        simulated = load_profile(profile)
        hw = simulated.hardware
        return GpuFacts(f"simulator profile {simulated.name}", hw.gpu_count, hw.gpu_name,
                        f"{hw.sm // 10}.{hw.sm % 10}", round(hw.memory_per_gpu_gb, 1), hw.interconnect)
    if probe is None or probe.backend == "none":
        # Shortened: the dashboard shows the whole context only within 1024 characters.
        return GpuFacts(f"none: {probe.reason[:160] if probe else 'not asked'}")
    gpus = [g for g in probe.gpus() if gpu_ids is None or g.index in gpu_ids]
    if not gpus:
        return GpuFacts(f"none: {probe.backend} sees none of GPUs {list(gpu_ids or [])}")
    first = gpus[0]
    links = probe.nvlink_links(first.index) if len(gpus) > 1 else None  # one GPU talks to nobody
    return GpuFacts(probe.backend, len(gpus), first.name, probe.compute_capability(first.index),
                    round(first.memory_total_mib / 1024, 1),
                    None if links is None else ("nvlink" if links else "pcie"),
                    mixed=len({(g.name, g.memory_total_mib) for g in gpus}) > 1)


def model_facts(model_path: str, profile: str | None) -> ModelFacts:
    facts = read_model_facts(model_path)
    if facts.known or profile is None:
        return facts
    # A simulated study without a model folder: the model the simulator pretends to serve.
    from ..sim import load_profile

    p = load_profile(profile)
    m = p.model
    return ModelFacts(f"simulator profile {p.name}", name=m.name, architecture=m.architecture, layers=m.layers,
                      hidden_size=m.hidden_size, kv_heads=m.kv_heads if m.attention == "mha" else None,
                      experts=m.moe.experts if m.moe else None, experts_per_token=m.moe.top_k if m.moe else None,
                      quantization=m.quantization, dtype=m.dtype.removeprefix("torch."), params_b=m.params_b,
                      params_from="simulator profile")


def engine_facts(engine: str, read_back: str | None, asked: ServerVersion | None, profile: str | None) -> EngineFacts:
    """`read_back`: the version a trial read from the server; `asked`: the one its Python gave before the run."""
    if read_back:
        return EngineFacts(engine, read_back, "server_info")
    if asked is not None and asked.version:
        return EngineFacts(engine, asked.version, "package")
    if profile is not None:
        from ..versions import profile_version

        return EngineFacts(engine, profile_version(profile), "simulator profile")
    return EngineFacts(engine, None, "unknown")


@dataclass
class ContextRecorder:
    """Writes the study's context after a trial ends, until one with the version read back from a server is
    stored. The facts that need no server (GPUs, model, workload) are read once."""

    spec: Spec
    profile: str | None = None  # the simulator's profile, when simulated
    probe: GpuProbe | None = None
    gpu_ids: Sequence[int] | None = None
    asked_version: ServerVersion | None = None
    _fixed: tuple[GpuFacts, ModelFacts, WorkloadFacts] | None = field(default=None, init=False, repr=False)
    _done: bool = field(default=False, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)  # parallel trials

    def collect(self, read_back: str | None) -> StudyContext:
        if self._fixed is None:
            self._fixed = (gpu_facts(self.probe, self.gpu_ids, self.profile),
                           model_facts(self.spec.server.model_path, self.profile), workload_facts(self.spec))
        engine = engine_facts(self.spec.engine, read_back, self.asked_version, self.profile)
        return StudyContext(engine, *self._fixed)

    def record(self, study: optuna.Study, trial_attrs: Mapping[str, Any]) -> None:
        with self._lock:
            if self._done:
                return
            new = self.collect(trial_attrs.get("server_version")).to_attr()
            stored = study.user_attrs.get(ATTR)
            if richness(new) > richness(stored):
                study.set_user_attr(ATTR, new)
            kept = new if richness(new) > richness(stored) else stored
            # Once a server's own version is stored, later trials can add nothing.
            self._done = (kept.get("engine") or {}).get("version_from") == "server_info"

    def after(self, on_trial_end: Callable[[optuna.Trial, dict[str, Any]], None]):
        """`on_trial_end` with the context recorded first; a failure to record is logged, never the run's."""
        def both(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
            try:
                self.record(trial.study, attrs)
            except Exception as exc:  # the context is a record for later studies: this one goes on without it
                logging.getLogger("tuner").warning("tuner: study context not recorded (%s: %s)",
                                                   type(exc).__name__, exc)
            on_trial_end(trial, attrs)
        return both


def describe(attr: Mapping[str, Any]) -> str:
    """One line for `show`: 'SGLang 0.5.23 on 8x NVIDIA H200 (sm90, 139.8 GB, nvlink); model ...; workload ...'."""
    engine, gpus = attr.get("engine") or {}, attr.get("gpus") or {}
    model, work = attr.get("model") or {}, attr.get("workload") or {}
    name = ENGINE_NAMES.get(engine.get("name"), engine.get("name") or "engine")
    text = f"{name} {engine.get('version') or '(version unknown)'}"
    text += f" on {describe_gpus(gpus)}" if gpus.get("count") else " on no GPU read"
    parts = [text, "model " + _model_text(model)]
    if work:
        lengths = f"{work.get('input_len')} in / {work.get('output_len')} out"
        levels = "/".join(map(str, work.get("concurrency", [])))
        parts.append(f"workload {levels} concurrent, {lengths}" + (f" ({work['dataset']})" if work.get("dataset")
                                                                     else ""))
        objective = f"objective {work.get('metric')} {'max' if work.get('direction') == 'maximize' else 'min'}"
        if work.get("second_metric"):
            objective += f", {work['second_metric']} {'max' if work.get('second_direction') == 'maximize' else 'min'}"
        if work.get("slo"):
            objective += " (SLO " + ", ".join(f"{k} <= {v:g}" for k, v in work["slo"].items()) + ")"
        parts.append(objective)
    return "; ".join(parts)


def describe_gpus(gpus: Mapping[str, Any]) -> str | None:
    """'8x NVIDIA H200 (sm90, 139.8 GB, nvlink)', from the context's gpus; None where none was read. `show` and
    best.yaml's header both say it so."""
    if not gpus.get("count"):
        return None
    cc = gpus.get("compute_capability")
    details = [f"sm{cc.replace('.', '')}" if cc else None,
               f"{gpus['memory_gb']} GB" if gpus.get("memory_gb") else None, gpus.get("interconnect"),
               "mixed" if gpus.get("mixed") else None,
               "simulated" if str(gpus.get("source", "")).startswith("simulator") else None]
    shown = ", ".join(d for d in details if d)
    return f"{gpus['count']}x {gpus.get('name') or 'GPU'}" + (f" ({shown})" if shown else "")


def _model_text(m: Mapping[str, Any]) -> str:
    if not ({"architecture", "layers"} & set(m)):
        return f"unknown ({m.get('source', 'not read')})"
    arch = str(m.get("architecture") or m.get("name") or "?").removesuffix("ForCausalLM")
    bits = [arch, f"{m['layers']} layers" if m.get("layers") else None,
            f"hidden {m['hidden_size']}" if m.get("hidden_size") else None,
            f"{m['heads']}/{m['kv_heads']} heads" if m.get("heads") and m.get("kv_heads") else None,
            f"{m['experts']} experts" + (f" (top {m['experts_per_token']})" if m.get("experts_per_token") else "")
            if m.get("experts") else None,
            m.get("quantization"), m.get("dtype"),
            f"{m['params_b']:g}B params" if m.get("params_b") else None]
    return " ".join(b for b in bits if b)
