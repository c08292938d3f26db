"""Warm start: what earlier studies' knowledge tells a new one before its first trial, with no server needed.

    warm = warm_start(knowledges, spec.space, context)   # Knowledge from tuner/search/_knowledge.py; context: the attr
    sampler = make_sampler("tpe", seed, spec, prior=warm.prior)
    _initialise(study, spec, "tpe", first=warm.first)     # the baseline, then warm.first, then try-first

What carries over, and how much:
- **Lessons** (failing values): a kernel's failure (NaN, garbage, a crash at start or at capture, a refused shape)
  only to a study on the same GPU architecture (compute capability) and engine version, whatever the model; an
  out-of-memory one (at load, at capture, a KV pool too small) to any GPU, its bounds moved to this study's
  model and GPUs (`scale_memory`): a tensor-parallel size by how heavy the model is for one GPU's memory
  (`tp-size: 1` that ran out of memory warns `tp-size <= 2` for a model twice as heavy), every other bound by
  its weights per GPU over the memory per GPU (`memory_pressure`). A carried lesson counts as KERNEL_WEIGHT
  (MEMORY_WEIGHT) failed trials of this study per failure it took the blame of, at most MAX_WEIGHT, halving every
  HALF_LIFE trials this study finishes.
- **Good configurations**: each earlier study's best ones (its best of each backend and switch setting first),
  from the same engine on the same GPU architecture only, adapted to this space (flags it lacks dropped, values
  snapped to its grid, the flags it adds as the baseline has them; a lighter model's tensor-parallel size raised
  to hold this model's weights, or the configuration dropped: `fit_memory`), tried right after the baseline (at
  most MAX_FIRST, the most similar first: `similarity`). The startup trials after them all explore around the
  best so far (tuner/search/_tpe.py). They may also weigh in TPE's density of good configurations
  (GHOST_WEIGHT, off for now).
- **What ran**: the choice values (backends, switches) each earlier study on the same GPU architecture and engine
  version ran. A value none of them ran, nor this study, counts as UNTRIED_WEIGHT failed trials: a kernel never
  seen running here is likelier to crash than one that was.
- **The model's size**, whatever the sources: the tensor-parallel sizes too small to hold its weights
  (more than HOLDS of each GPU's memory) are told to run out of memory, as one lesson (`weight_lesson`). On the
  training families, local moves from a working size to one too small were 7 of 17 early failures.

Never a ban: a lesson only lowers the chance a proposal is drawn (to 1 / (1 + its weight), to TPE's power of
risk aversion), and one trial of this study that ran with its values voids it; TPE's own trials outweigh the
ghosts as they accumulate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from optuna.trial import FrozenTrial

from .._failures import KERNEL, MEMORY, FailureKind
from ..spec import Param, Space
from ._blame import is_number, violation
from ._knowledge import AT_LEAST, AT_MOST, GoodConfig, Knowledge, Lesson

KERNEL_WEIGHT = 20.0  # failed trials of this study that one kernel failure on the same GPU and version counts as
MEMORY_WEIGHT = 20.0  # and one out-of-memory failure, its bounds moved to this model and GPUs
MAX_WEIGHT = 20.0
HALF_LIFE = 8  # this study's finished trials after which a carried lesson counts half as much
# How far a memory bound other than the tensor-parallel size moves with the ratio of weights per GPU over memory
# per GPU (this study's over the lesson's): ratio ** SCALE_POWER. Under 1: graphs and activations grow with a
# model's width, more slowly than its weights. On training family 0 (benchmarks/transfer.py --families 0-0, 4
# seeds), MEMORY_WEIGHT 8 -> 20 and SCALE_POWER 1 -> 0.5: warm from 1 19.5 -> 19 restarts to 98% (cold 20),
# crash/NaN in the first 10 13.1% -> 12.5% (cold 21.9%), warm from 3 24.5 -> 20.5; before scaling, 31 and 16%.
SCALE_POWER = 0.5
# In TPE's density of good configurations, per carried configuration, times similarity. Off: on the training
# families (benchmarks/transfer.py --families 0-3 --seeds 2) 0 did as well as 0.5 from the same GPU architecture
# (restarts to 98% 28.5 both, crash/NaN 12.8% vs 13.4%), and 0 beat 0.5 from any GPU on families 0-1.
GHOST_WEIGHT = 0.0
RANK_DECAY = 0.7  # a study's second-best configuration counts this much of its best, the third this squared
MAX_FIRST = 3  # configurations tried right after the baseline
# Failed trials of this study that a choice value (a backend, a switch) counts as while no earlier study on these
# kernels (GPU architecture, engine version) nor this one ran it, fading as lessons do. On the training families
# (benchmarks/transfer.py --families train --seeds 2), warm from 1: 0 -> 1 took restarts to 98% from 12 to 11.5 and
# crash/NaN in the first 10 from 12.2% to 9.7% (0.5: 13 and 10.3%); warm from 3 reached 98% in 46 of 64 runs, not 51.
UNTRIED_WEIGHT = 1.0
HOLDS = 0.8  # a tensor-parallel size holds a model whose weights take at most this share of each GPU's memory
MAX_TOLD = 8  # lessons per source the study's `learned` attr spells out
TP_FLAGS = ("tp-size", "tensor-parallel-size")  # the flag that splits the weights over GPUs (SGLang, vLLM)
PP_FLAGS = ("pp-size", "pipeline-parallel-size")
WEIGHTS_SOURCE = "the model's size"  # what a study learns before its first trial (weight_lesson)
# The share of GPU memory the engine takes for weights, KV and graphs (SGLang, vLLM): too low, the weights leave
# no KV pool; too high, nothing is left to capture graphs in.
FRACTION_FLAGS = ("mem-fraction-static", "gpu-memory-utilization")

# Bytes per parameter of quantized weights (quant_method in config.json), else the dtype's width.
_QUANT_BYTES = {"modelopt_fp4": 0.5625, "nvfp4": 0.5625, "fp4": 0.5625, "mxfp4": 0.5625, "awq": 0.5, "gptq": 0.5,
                "bitsandbytes": 0.5, "fp8": 1.0, "modelopt": 1.0, "fbgemm_fp8": 1.0, "compressed-tensors": 1.0}
_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


# What a warm start can carry, each measured alone against cold in docs/learning.md ("What each part does").
# `run --carry` picks them; DEFAULT_PARTS is what runs without it.
PARTS = {
    "crashes": "kernel failures (NaN, garbage, a crash at start or capture) on the same GPU architecture and version",
    "oom": "out-of-memory failures, their bounds moved to this model and GPUs",
    "untried": "values that no earlier study on these kernels ran are drawn less",
    "configs": "earlier studies' best configurations, tried right after the baseline",
    "around": "with carried configurations, every startup trial explores around the best so far",
}
# Each part alone against cold on the training families 0-3 (benchmarks/transfer.py --split, docs/learning.md):
# restarts to 98% of the optimum as a ratio of cold's, and the worst family's gap in restarts.
MEASURED = {"crashes": "0.88x cold's restarts, worst family +0.5", "oom": "1.20x, worst family +4",
            "untried": "0.73x, worst family +1", "configs": "0.95x, worst family +7",
            "around": "0.73x, worst family +8.5"}
# Crash lessons only (issue 47's fallback). Crashes and untried values, the parts that never cost a training family
# over 3 restarts, took one fresh family (4400-4405) 7 over cold; an OOM bound learnt on another model misleads as
# often as it helps, and carried configurations and the search around them cost up to 7 and 8.5 restarts where the
# next model differs in size, GPUs or workload (docs/learning.md).
DEFAULT_PARTS = frozenset({"crashes"})


def parse_parts(text: str) -> frozenset[str]:
    """`run --carry`'s value: part names joined by commas, `all`, or `default`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return frozenset(PARTS)
    if names == ["default"]:
        return DEFAULT_PARTS
    wrong = [n for n in names if n not in PARTS]
    if wrong or not names:
        raise ValueError(f"--carry {text!r}: unknown part {wrong[0]!r}" if wrong else "--carry: no part named")
    return frozenset(names)


@dataclass(frozen=True)
class CarriedLesson:
    lesson: Lesson
    weight: float  # failed trials of this study it counts as at the start


@dataclass(frozen=True)
class Ghost:
    params: Mapping[str, Any]
    weight: float  # of one trial in TPE's density of good configurations


@dataclass(frozen=True)
class Prior:
    """What the sampler is told: lessons that lower the chance a proposal runs, ghosts of good configurations."""

    lessons: tuple[CarriedLesson, ...] = ()
    ghosts: tuple[Ghost, ...] = ()
    carried: int = 0  # good configurations carried over (tried first, or ghosts)
    around: bool = False  # every startup trial explores around the best so far (the `around` part)
    ran: Mapping[str, frozenset] = field(default_factory=dict)  # choice values that ran on these kernels

    def odds(self, own: Any, finished: Sequence[FrozenTrial]) -> ToldOdds:
        """The study's own run odds (GraphAwareOdds) times what the lessons still say, given its trials so far."""
        ran = {name: set(values) for name, values in self.ran.items()}
        for t in _ran_here(finished):  # what this study ran counts as tried too
            for name, value in t.params.items():
                if name in ran:
                    ran[name].add(value)
        return ToldOdds(own, self.live(finished), ran, UNTRIED_WEIGHT * _decay(finished))

    def live(self, finished: Sequence[FrozenTrial]) -> list[tuple[Lesson, float]]:
        """Each lesson no trial of this study has contradicted, with its weight after decay. A trial that ran
        with a lesson's values contradicts it: this study's own measurement wins."""
        ran = _ran_here(finished)
        return [(c.lesson, c.weight * _decay(finished)) for c in self.lessons
                if not any(c.lesson.matches(t.params) for t in ran)]


def _ran_here(finished: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """This study's trials that ran and passed the gate (an invalid configuration never ran)."""
    return [t for t in finished if violation(t) <= 0
            and t.user_attrs.get("failure_kind") != FailureKind.INVALID_CONFIG]


def _decay(finished: Sequence[FrozenTrial]) -> float:
    """What a carried lesson still weighs after this study's finished trials: half every HALF_LIFE."""
    return 0.5 ** (len(finished) / HALF_LIFE)


class ToldOdds:
    """P(runs | flags): the study's own odds, times what the lessons it has not contradicted still say."""

    def __init__(self, own: Any, live: Sequence[tuple[Lesson, float]], ran: Mapping[str, set] | None = None,
                 untried: float = 0.0) -> None:
        self._own = own
        self._live = live
        self._ran = ran or {}
        self._untried = untried

    def log_run(self, params: Mapping[str, Any], search_space: Mapping[str, Any]) -> float:
        """The own odds plus the strongest lesson that matches: log 1 / (1 + weight); and, per choice value no
        earlier study on these kernels nor this one ran, log 1 / (1 + untried)."""
        told = min((-math.log1p(w) for lesson, w in self._live if lesson.matches(params)), default=0.0)
        new = sum(1 for name, value in params.items() if isinstance(value, (str, bool)) and self._ran.get(name)
                  and value not in self._ran[name])
        return self._own.log_run(params, search_space) + told - new * math.log1p(self._untried)


@dataclass(frozen=True)
class SourceUse:
    """What one source gave this study: for the run's line, the study's `learned` attr and `show`."""

    source: str
    lessons: int  # carried (their flags in this space, their context matching)
    first: int  # configurations tried right after the baseline
    similarity: float | None  # of a study's context to this one's; None for a file
    told: tuple[str, ...] = ()  # the carried lessons as they read, strongest first
    unfit: int = 0  # good configurations left out: no tensor-parallel size of this space holds this model with them


@dataclass(frozen=True)
class WarmStart:
    first: tuple[tuple[dict[str, Any], str], ...]  # (configuration, its source), to run after the baseline
    prior: Prior
    used: tuple[SourceUse, ...]
    parts: frozenset[str] = DEFAULT_PARTS  # what was carried (PARTS)

    def to_attr(self) -> dict[str, Any]:
        return {"carry": [p for p in PARTS if p in self.parts], "sources": [{"source": u.source, "lessons": u.lessons, "first": u.first,
                             **({"similarity": round(u.similarity, 2)} if u.similarity is not None else {}),
                             **({"told": list(u.told[:MAX_TOLD])} if u.told else {}),
                             **({"unfit": u.unfit} if u.unfit else {})}
                            for u in self.used]}

    def resumed(self) -> WarmStart:
        """For a study that exists: its first trials are behind it, only the prior applies."""
        return WarmStart((), self.prior, tuple(replace(u, first=0) for u in self.used), self.parts)


def warm_start(knowledge: Sequence[Knowledge], space: Space, context: Mapping[str, Any],
               parts: frozenset[str] = DEFAULT_PARTS) -> WarmStart:
    """What the knowledge tells a study of `space` in `context` (the context attr: engine, gpus, model,
    workload; tuner/search/_context.py), of the PARTS named in `parts`. What the model's size says
    (weight_lesson) holds whatever is carried: it is this study's own."""
    carried: list[CarriedLesson] = []
    told: dict[str, list[CarriedLesson]] = {}
    weights = weight_lesson(space, context)
    if weights is not None:
        carried.append(CarriedLesson(weights, MAX_WEIGHT))
    wanted = {KERNEL: "crashes" in parts, MEMORY: "oom" in parts}
    for k in knowledge:
        for lesson in k.lessons:
            if not wanted.get(lesson.carries):
                continue
            weight = lesson_weight(lesson, context)
            if weight > 0 and lesson.carries == MEMORY:
                lesson = scale_memory(lesson, context)
            if weight > 0 and all(name in space.params for name in lesson.values):
                carried.append(CarriedLesson(lesson, weight))
                told.setdefault(k.source, []).append(carried[-1])
    candidates: list[tuple[float, GoodConfig, Knowledge]] = []
    similar: dict[str, float] = {}
    for k in knowledge:
        # Only a study of the same engine on the same GPU architecture passes its good configurations on: on other
        # GPUs a kernel may crash or lose, and what won there misleads the first trials and TPE's density alike.
        if k.good:
            similar[k.source] = similarity(k.context, context)
        if k.good and _same_architecture(k.context, context):
            candidates += [(similar[k.source] * RANK_DECAY ** g.rank, g, k) for g in k.good]
    candidates.sort(key=lambda c: -c[0])
    ran: dict[str, set] = {}
    for k in knowledge:  # what ran on these kernels (the same GPU architecture and engine version)
        if _same_kernels(k.context, context):
            for name, values in k.ran.items():
                ran.setdefault(name, set()).update(values)
    first: list[tuple[dict[str, Any], str]] = []
    ghosts: list[Ghost] = []
    carried_good: list[dict[str, Any]] = []
    seen = [dict(space.baseline)] if space.baseline is not None else []
    unfit: dict[str, int] = {}
    for score, good, k in candidates:
        adapted = adapt(good.params, space) if score > 0 else None
        params = fit_memory(adapted, space, k.context, context)
        if adapted is not None and params is None:
            unfit[k.source] = unfit.get(k.source, 0) + 1
        if params is None or params in carried_good:
            continue
        carried_good.append(params)
        if GHOST_WEIGHT > 0:
            ghosts.append(Ghost(params, GHOST_WEIGHT * score))
        told_to_fail = any(c.lesson.matches(params) for c in carried)
        if "configs" in parts and len(first) < MAX_FIRST and params not in seen and not told_to_fail:
            first.append((params, k.source))
            seen.append(params)
    used = tuple(SourceUse(k.source, len(told.get(k.source, [])), sum(s == k.source for _, s in first),
                           similar.get(k.source), tuple(c.lesson.reads() for c in sorted(
                               told.get(k.source, []), key=lambda c: -c.weight)),
                           unfit.get(k.source, 0) if "configs" in parts else 0)
                 for k in knowledge)
    if weights is not None:
        used = (SourceUse(WEIGHTS_SOURCE, 1, 0, None, (f"`{weights.reads_values()}` is likely to run out of memory "
                                                        f"({weights.evidence})",)), *used)
    told_ran = {name: frozenset(v) for name, v in ran.items() if name in space.params} \
        if UNTRIED_WEIGHT and "untried" in parts else {}
    around = "around" in parts and bool(carried_good)
    return WarmStart(tuple(first), Prior(tuple(carried), tuple(ghosts), len(carried_good), around=around, ran=told_ran),
                     used, frozenset(parts))


def weight_lesson(space: Space, context: Mapping[str, Any]) -> Lesson | None:
    """What the model's size says before any trial: the tensor-parallel sizes whose share of the weights takes more
    than HOLDS of a GPU's memory run out of memory (at load, or with no room left for a KV pool). None where the
    context lacks the model's size or the GPUs' memory, the space does not vary the size, or every size holds."""
    heavy = _weights_per_gpu(context)
    name = next((n for n in TP_FLAGS if n in space.params and space.params[n].sampled), None)
    # Pipeline stages split the weights too: a size alone no longer says how much each GPU holds.
    if heavy is None or name is None or any(n in space.params for n in PP_FLAGS):
        return None
    short = [v for v in space.params[name].grid() if is_number(v) and heavy / v > HOLDS]
    if not short:
        return None
    return Lesson({name: {AT_MOST: max(short)}}, FailureKind.OOM, dict(context),
                  evidence=f"at {max(short)} the weights take {heavy / max(short):.0%} of each GPU's memory")


def _same_architecture(source: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    """The same engine on GPUs of the same compute capability."""
    engine, theirs = target.get("engine") or {}, source.get("engine") or {}
    arch, their_arch = ((c.get("gpus") or {}).get("compute_capability") for c in (target, source))
    return bool(engine.get("name")) and engine.get("name") == theirs.get("name") and bool(arch) and \
        str(arch) == str(their_arch)


def _same_kernels(source: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    """The same engine and version on GPUs of the same compute capability: a kernel that ran there runs here."""
    version, theirs = ((c.get("engine") or {}).get("version") for c in (target, source))
    return _same_architecture(source, target) and bool(version) and version == theirs


def lesson_weight(lesson: Lesson, context: Mapping[str, Any]) -> float:
    """Failed trials of this study that the lesson counts as at its start; 0 where it does not carry."""
    source = lesson.context
    engine, their_engine = context.get("engine") or {}, source.get("engine") or {}
    if not engine.get("name") or engine.get("name") != their_engine.get("name"):
        return 0.0
    if lesson.carries == KERNEL:
        return min(MAX_WEIGHT, KERNEL_WEIGHT * lesson.blame) if _same_kernels(source, context) else 0.0
    if lesson.carries == MEMORY:  # its bounds move with the model and GPUs (scale_memory), not its weight
        known = memory_pressure(context) is not None and memory_pressure(source) is not None
        return min(MAX_WEIGHT, MEMORY_WEIGHT * lesson.blame) if known else 0.0
    return 0.0


def scale_memory(lesson: Lesson, target: Mapping[str, Any]) -> Lesson:
    """An out-of-memory lesson with its bounds moved from the context it was learnt in to `target`'s.

    - A tensor-parallel size that ran out of memory (it, or at most it) by how heavy the model is for one GPU's
      memory (`_weights_per_gpu`): at most 1 becomes at most 2 for a model twice as heavy on GPUs as big, and
      matches no size for a model half as heavy (it fits where the other did not).
    - Every other bound by `ratio` = (weights per GPU over memory per GPU here, over there) ** SCALE_POWER: what
      ran out of memory from too little (at most: a memory fraction that left no KV pool) by ratio; from too much
      (at least: graph sizes, running requests, a memory fraction that left no room for graphs) by 1 / ratio, a
      memory fraction's free share (1 - fraction) by ratio. A heavier model runs out sooner.
    - A single value of any other flag, and a choice, as they were.
    Unchanged where either context lacks the model's size or the GPUs' memory."""
    source = lesson.context
    ours, theirs = memory_pressure(target), memory_pressure(source)
    heavy, their_heavy = _weights_per_gpu(target), _weights_per_gpu(source)
    if not (ours and theirs and heavy and their_heavy):
        return lesson
    ratio = (ours / theirs) ** SCALE_POWER
    values: dict[str, Any] = {}
    for name, want in lesson.values.items():
        side, bound = next(iter(want.items())) if isinstance(want, Mapping) else (None, want)
        if not is_number(bound):
            values[name] = want
        elif name in TP_FLAGS and side != AT_LEAST:
            values[name] = {AT_MOST: _bound(bound * heavy / their_heavy)}
        elif side == AT_MOST:
            values[name] = {AT_MOST: _bound(bound * ratio)}
        elif side == AT_LEAST and name in FRACTION_FLAGS:
            values[name] = {AT_LEAST: _bound(1 - (1 - bound) * ratio)}
        elif side == AT_LEAST:
            values[name] = {AT_LEAST: _bound(bound / ratio)}
        else:
            values[name] = want
    return lesson if values == dict(lesson.values) else replace(lesson, values=values, scaled_from=lesson.values)


def _bound(value: float) -> float | int:
    """A moved bound without float noise (2.0000000001 -> 2): at-most 2 must still match a size of 2."""
    value = round(value, 6)
    return int(value) if value == int(value) else value


def fit_memory(params: dict[str, Any] | None, space: Space, source: Mapping[str, Any],
               target: Mapping[str, Any]) -> dict[str, Any] | None:
    """A good configuration of a lighter model (for one GPU's memory) made to fit this one: its tensor-parallel
    size raised by how much heavier this model is per GPU, to the nearest size this space offers (a model twice
    as heavy at tp 1 runs out of memory where the lighter one fit; at tp 2 it holds what the lighter held at tp 1).
    Where no size is that large, the largest one whose share of the weights takes at most HOLDS of a GPU's memory
    (the lighter model's headroom is then lost, not the configuration). None where no size holds the weights;
    unchanged where this model is no heavier or the space has no such flag."""
    ours, theirs = _weights_per_gpu(target), _weights_per_gpu(source)
    if params is None or ours is None or theirs is None or ours <= theirs:
        return params
    name = next((n for n in TP_FLAGS if n in params), None)
    if name is None:  # the space fixes how the weights are split: nothing to adapt (OOM lessons still warn)
        return params
    sizes = sorted(v for v in space.params[name].grid() if isinstance(v, int) and v >= params[name])
    roomy = [v for v in sizes if v >= params[name] * ours / theirs]
    holding = [v for v in sizes if ours / v <= HOLDS]
    if not (roomy or holding):
        return None
    fitted = {**params, name: roomy[0] if roomy else holding[-1]}
    return None if space.violations(fitted) else fitted


def _weights_per_gpu(context: Mapping[str, Any]) -> float | None:
    """The model's weights over one GPU's memory (GB per GB)."""
    pressure, count = memory_pressure(context), (context.get("gpus") or {}).get("count")
    return pressure * count if pressure is not None else None


def memory_pressure(context: Mapping[str, Any]) -> float | None:
    """The model's weights over all its GPUs' memory (GB per GB): what an out-of-memory failure scales with."""
    model, gpus = context.get("model") or {}, context.get("gpus") or {}
    params, count, memory = model.get("params_b"), gpus.get("count"), gpus.get("memory_gb")
    if not (params and count and memory):
        return None
    width = _QUANT_BYTES.get(str(model.get("quantization") or "").lower()) or _DTYPE_BYTES.get(
        str(model.get("dtype") or ""), 2.0)
    return params * width / (count * memory)


def similarity(source: Mapping[str, Any], target: Mapping[str, Any]) -> float:
    """How alike two contexts are for a configuration to carry, in [0, 1]: 0 across engines; then a factor each
    for the engine version (0.7 when it differs), the GPUs (same name and count 1, same compute capability 0.6,
    else 0.3), the model (another architecture 0.6, times the fourth root of the smaller size over the larger)
    and the objective (another metric or direction 0.3)."""
    engine, theirs = target.get("engine") or {}, source.get("engine") or {}
    if not engine.get("name") or engine.get("name") != theirs.get("name"):
        return 0.0
    score = 1.0 if engine.get("version") and engine.get("version") == theirs.get("version") else 0.7
    gpus, their_gpus = target.get("gpus") or {}, source.get("gpus") or {}
    if gpus.get("name") and (gpus.get("name"), gpus.get("count")) == (their_gpus.get("name"), their_gpus.get("count")):
        score *= 1.0
    elif gpus.get("compute_capability") and gpus.get("compute_capability") == their_gpus.get("compute_capability"):
        score *= 0.6
    else:
        score *= 0.3
    model, their_model = target.get("model") or {}, source.get("model") or {}
    if not model.get("architecture") or model.get("architecture") != their_model.get("architecture"):
        score *= 0.6
    sizes = model.get("params_b"), their_model.get("params_b")
    if all(isinstance(s, (int, float)) and s > 0 for s in sizes):
        score *= (min(sizes) / max(sizes)) ** 0.25
    work, their_work = target.get("workload") or {}, source.get("workload") or {}
    if (work.get("metric"), work.get("direction")) != (their_work.get("metric"), their_work.get("direction")):
        score *= 0.3
    return score


_UNSET = object()


def adapt(params: Mapping[str, Any], space: Space) -> dict[str, Any] | None:
    """A configuration of another space in this one: flags this space lacks dropped, values snapped to its grid
    or range, the flags it adds (or whose value it cannot take) as its baseline has them, else their first value.
    None where the result breaks one of its constraints."""
    fallback = space.baseline or {}
    out: dict[str, Any] = {}
    for name in space.order:
        p = space.params[name]
        if not p.sampled or not space.active(p, out):
            continue
        value = _snap(p, params[name]) if name in params else _UNSET
        if value is _UNSET:
            value = fallback[name] if name in fallback and p.contains(fallback[name]) else p.grid()[0]
        out[name] = value
    return None if space.violations(out) else out


def _snap(p: Param, value: Any) -> Any:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if p.type == "bool":
        return value if isinstance(value, bool) else _UNSET
    if p.type == "categorical":
        if any(c is value or (c == value and type(c) is type(value)) for c in p.choices):
            return value
        numeric = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if number and len(numeric) == len(p.choices):
            return min(numeric, key=lambda c: (abs(c - value), c))
        return _UNSET
    if not number:
        return _UNSET
    value = min(max(value, p.low), p.high)
    if p.step:
        steps = min(round((value - p.low) / p.step), math.floor((p.high - p.low) / p.step + 1e-9))
        value = p.low + steps * p.step
    if p.type == "int":
        return int(round(value))
    return p.tidy(float(value))
