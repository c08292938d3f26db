"""The search-space file as a whole: server, parameters, baseline, gate, probe and objective.

`load_spec(path)` reads and validates it; every error names the key path and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .._errors import SpaceError
from ._datasets import load_rows
from ._schema import Section, check_type, did_you_mean
from ._space import Space, parse_constraints, parse_params
from ._traces import TRACE_FORMATS, TraceError, load_trace

ENGINES = ("sglang", "vllm")
SLO_METRICS = ("ttft", "tpot", "e2el")  # SGLang's goodput SLOs (tuner/trial/_goodput.py)
GATE_CHECKS = ("known-answer", "finite-logprobs", "degenerate-text", "logprob-consistency",
               "determinism", "baseline-agreement", "batch-consistency", "long-context-consistency")
# The tolerances a space may only loosen through `gate.loosen` (stated, logged, recorded): for each, larger
# is looser. The gate as shipped is the gate that runs.
LOOSENABLE = ("logprob-tolerance", "logprob-excess-tolerance", "agreement-tie-tolerance",
              "batch-logprob-tolerance", "long-context-logprob-tolerance")
METRICS = ("output_throughput", "total_throughput", "request_throughput",
           "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
           "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "median_itl_ms", "p90_itl_ms", "p99_itl_ms",
           "mean_e2e_latency_ms", "median_e2e_latency_ms", "p90_e2e_latency_ms", "p99_e2e_latency_ms")


@dataclass(frozen=True)
class ServerSpec:
    command: tuple[str, ...] | None  # None: the engine's default
    model_path: str
    host: str = "127.0.0.1"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = 1800.0
    stall_timeout: float = 600.0
    gpus: int | None = None
    api_key_env: str | None = None
    log_cap_mb: float = 16.0  # the server log kept per trial: past this, its head and tail with the cut marked


@dataclass(frozen=True)
class GatePrompt:
    prompt: str
    expect: str | None = None


@dataclass(frozen=True)
class GateSpec:
    prompts: tuple[GatePrompt, ...]
    max_new_tokens: int = 16
    checks: tuple[str, ...] = GATE_CHECKS
    # Real SGLang 0.5.17 on an H100 (flashinfer, bf16, std-0.02 weights) gave 0.055 on every healthy trial:
    # 0.05 failed them all (docs/gpu-sglang-0517/). sglang-jax on an H200 needed 0.1 as well.
    logprob_tolerance: float = 0.1
    # How far a trial's worst prompt may exceed the baseline's worst prompt, where both run at the same precision
    # (dtype, KV-cache dtype, quantization). Healthy bf16 kernels on an H100 stayed within 0.004 of each other
    # (0.051-0.055), though on one prompt triton and flashinfer differed by 0.023; sglang-jax's decode-position
    # bug, planted back, added 0.073. None: off.
    logprob_excess_tolerance: float | None = 0.02
    agreement_tokens: int | None = None  # None: the whole greedy output
    # Where greedy output first leaves the baseline's, the two tokens' logprobs on this server may differ by
    # this much (a near-tie that kernels rounding differently decide either way); more is a wrong answer.
    # Real SGLang 0.5.17 on an H100: triton and torch_native left flashinfer's output on all 3 prompts, by
    # |0.03-0.19| (bf16 steps of 0.031 there); 0.5 leaves room for the larger logits of trained models.
    agreement_tie_tolerance: float = 0.5
    # PROVISIONAL, not yet measured on real kernels: mean |logprob| of a prompt decoded alone vs inside a full
    # batch of other prompts, and decode vs re-prefill over a prompt longer than a prefill chunk. Both start
    # from the single-prompt decode vs re-prefill distribution (0.051-0.055 on bf16 kernels, tolerance 0.1);
    # each trial records its figure (`gate_figures`) so that a GPU study gives the real distribution.
    batch_logprob_tolerance: float = 0.1
    long_context_logprob_tolerance: float = 0.1
    # The largest batch batch-consistency sends: the gate stays a few seconds long.
    max_batch: int = 64
    recheck_after_load: bool = True
    # The first request of a fresh server may wait out first-use compilation (JIT kernels, torch.compile,
    # autotuning); every later one answers in seconds on a healthy server, so a short timeout ends a hang.
    first_request_timeout: float = 600.0
    request_timeout: float = 60.0
    # Tolerances this space loosens past the defaults, and why: {key: value, "why": text}; logged and recorded.
    loosened: Mapping[str, Any] = field(default_factory=dict)

    def enabled(self, check: str) -> bool:
        return check in self.checks


@dataclass(frozen=True)
class SharedPrefix:
    """bench_serving's generated-shared-prefix workload: a few long system prompts shared by many requests."""

    groups: int = 4
    system_prompt_len: int = 2048
    question_len: int = 128


@dataclass(frozen=True)
class TraceSpec:
    """A request trace replayed at its arrival times divided by `scale` (tuner/spec/_traces.py)."""

    path: str
    format: str = "jsonl"  # mooncake, azure or jsonl
    scale: float = 1.0  # 2: twice as fast
    limit: int | None = None  # the first rows only


@dataclass(frozen=True)
class ProbeSpec:
    concurrency: tuple[int, ...] = (64,)
    requests: int = 128
    input_len: int = 1024
    output_len: int = 256
    len_jitter: float = 0.0
    warmup: int = 2
    seed: int = 0
    dataset: str | None = None
    dataset_format: str = "jsonl"  # or sharegpt (tuner/spec/_datasets.py)
    shared_prefix: SharedPrefix | None = None
    request_timeout: float = 600.0
    max_error_rate: float = 0.0
    # Output tokens of each request of the untimed check wave (0: none); see tuner/trial/_probe.py.
    check_tokens: int = 32
    # Seconds the whole probe may take; each level (the check wave too) gets an equal share of what is left
    # and is cut at its end, its figures taken over what streamed until then.
    time_budget: float = 1800.0
    # False: every trial's probe runs to its end (figures comparable across all trials) instead of stopping
    # once it is behind the best trials at the same point.
    prune: bool = True
    # Open-loop levels (requests/s), run after the concurrency levels; see tuner/trial/_arrivals.py.
    rates: tuple[float, ...] = ()
    burstiness: float = 1.0
    max_in_flight: int | None = None
    # An open-loop level whose 90th percentile of send lateness is above this fails as client_too_slow.
    max_send_lateness: float = 0.05
    # A trace replayed as one more open-loop level, and the rate search's arrivals (its time axis scaled).
    trace: TraceSpec | None = None


@dataclass(frozen=True)
class RateSearchSpec:
    slo_ms: Mapping[str, float]  # SGLang's goodput SLOs: ttft, tpot, e2el (tuner/trial/_goodput.py)
    attainment: float = 0.99
    precision: float = 0.05  # stop when the lowest failing rate <= (1 + precision) x the highest passing
    budget: float = 600.0  # seconds for the whole search, per trial
    seconds_per_rate: float = 30.0


@dataclass(frozen=True)
class Objective:
    metric: str = "output_throughput"
    direction: str = "maximize"
    concurrency: int | None = None  # which level counts; None: the highest
    slo: Mapping[str, float] = field(default_factory=dict)
    second_metric: str | None = None
    second_direction: str = "minimize"
    rate_search: RateSearchSpec | None = None  # metric max_rate_under_slo

    @property
    def names(self) -> list[str]:
        return [self.metric] + ([self.second_metric] if self.second_metric else [])

    @property
    def directions(self) -> list[str]:
        return [self.direction] + ([self.second_direction] if self.second_metric else [])


@dataclass(frozen=True)
class Spec:
    name: str
    engine: str
    server: ServerSpec
    space: Space
    gate: GateSpec
    probe: ProbeSpec
    objective: Objective
    source: str = ""  # the file's text, stored with the study so a changed space is noticed
    try_first: tuple[Mapping[str, Any], ...] = ()  # run right after the baseline
    sim_profile: str | None = None  # the simulator profile `--simulate` uses for this space
    sglang_version: str | None = None  # the SGLang version whose flags the space is written in


DEFAULT_GATE_PROMPTS = (
    GatePrompt("What is the capital of France? Answer in one word.", "Paris"),
    GatePrompt("What is 2 + 3? Answer with a number.", "5"),
)


def load_spec(path: str | Path) -> Spec:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpaceError("", f"space file {path} does not exist", "pass --space with an existing file") from None
    except OSError as exc:
        raise SpaceError("", f"cannot read space file {path}: {exc.strerror}", "check the path") from None
    return parse_spec(text, str(path))


def parse_spec(text: str, origin: str = "<space>", recorded: bool = False) -> Spec:
    """`recorded`: a study's stored space, read back as it ran (a tolerance it loosened before `gate.loosen`
    existed is read as stated, not refused)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # PyYAML finds an unclosed bracket or quote on the line after it (its problem mark): the line to fix is
        # where the construct began (its context mark), and the line it was found on follows in brackets.
        found = getattr(exc, "problem_mark", None)
        began = getattr(exc, "context_mark", None) or found
        where = f" at line {began.line + 1}, column {began.column + 1}" if began else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        if getattr(exc, "context", None) and began is not found:
            problem = f"{exc.context}, {problem}" + (f" (on line {found.line + 1})" if found else "")
        raise SpaceError("", f"{origin} is not valid YAML{where}: {problem}",
                         "fix the YAML syntax (indentation, colons, quotes)") from None
    if data is None:
        raise SpaceError("", f"{origin} is empty", "write a space file (see search_spaces/default.yaml)")
    top = Section(data, "")
    name = top.get("name", str)
    if not name.strip():
        raise SpaceError("name", "is empty", "give the study a name")
    engine = top.get("engine", str, "sglang")
    if engine not in ENGINES:
        raise SpaceError("engine", f"unknown engine '{engine}'",
                         did_you_mean(engine, ENGINES) or f"use one of {', '.join(ENGINES)}")
    server = _parse_server(top.section("server", required=True))
    params_section = top.section("params", required=True)
    if not params_section.data:
        raise SpaceError("params", "is empty: there is nothing to search", "list at least one parameter")
    params = parse_params(params_section, server.fixed)
    constraints = parse_constraints(top.get("constraints", list, []), "constraints")
    baseline = top.get("baseline", dict, None)
    space = Space(params, constraints, server.fixed, server.env, server.gpus, baseline)
    space.check_satisfiable()
    space.check_baseline()
    try_first = top.get("try-first", list, [])
    for i, point in enumerate(try_first):
        Section(point, f"try-first[{i}]")  # a mapping, or say so
        space.check_point(point, f"try-first[{i}]")
    gate = _parse_gate(top.section("gate"), recorded)
    probe = _parse_probe(top.section("probe"))
    objective = _parse_objective(top.section("objective"), probe)
    sim_profile = top.get("sim-profile", str, None)
    sglang_version = _parse_sglang_version(top, engine)
    top.done(allowed=["help", "description"])
    return Spec(name, engine, server, space, gate, probe, objective, text, tuple(try_first), sim_profile,
                sglang_version)


def _parse_sglang_version(top: Section, engine: str) -> str | None:
    """`sglang-version: "0.5.6"`: which SGLang's flag names the space uses, so that `check` can say when the
    server is another one (and `space upgrade` knows what it rewrites from)."""
    raw = top.data.get("sglang-version")
    if isinstance(raw, float):  # 0.6 unquoted is a number to YAML; 0.5.6 is a string already
        raise SpaceError("sglang-version", f"must be a string, got the number {raw}", f'quote it: "{raw}"')
    version = top.get("sglang-version", str, None)
    if version is None:
        return None
    if engine != "sglang":
        raise SpaceError("sglang-version", f"is for SGLang spaces, and this one is engine: {engine}", "drop it")
    if not all(part.isdigit() for part in version.split(".")[:2]) or version.count(".") < 1:
        raise SpaceError("sglang-version", f"'{version}' is not a version", 'write it as SGLang does, e.g. "0.5.23"')
    return version


def _parse_server(s: Section) -> ServerSpec:
    command = s.get("command", list, None)
    if command is not None:
        if not command:
            raise SpaceError(s.child("command"), "is empty", "give the server command as an argv list")
        for i, part in enumerate(command):
            check_type(part, str, f"{s.child('command')}[{i}]")
        command = tuple(command)
    fixed = dict(s.get("fixed", dict, {}))
    for key in fixed:
        if str(key).startswith("-"):
            raise SpaceError(f"{s.child('fixed')}.{key}", "flag names are written without leading dashes",
                             f"write '{str(key).lstrip('-')}:'")
        if key in ("host", "port", "model-path", "api-key"):
            raise SpaceError(f"{s.child('fixed')}.{key}", "is set by the tuner, not as a fixed flag",
                             f"use server.{key}" if key != "port" else "remove it: the tuner picks a free port")
    env = {str(k): str(v) for k, v in s.get("env", dict, {}).items()}
    spec = ServerSpec(
        command=command,
        model_path=s.get("model-path", str),
        host=s.get("host", str, "127.0.0.1"),
        fixed=fixed,
        env=env,
        startup_timeout=s.get("startup-timeout", float, 1800.0),
        stall_timeout=s.get("stall-timeout", float, 600.0),
        gpus=s.get("gpus", int, None),
        api_key_env=s.get("api-key-env", str, None),
        log_cap_mb=s.get("log-cap-mb", float, 16.0),
    )
    for key in ("startup-timeout", "stall-timeout", "log-cap-mb"):
        if s.data.get(key) is not None and s.data[key] <= 0:
            raise SpaceError(s.child(key), "must be positive", "give seconds > 0")
    s.done()
    return spec


def _parse_loosen(s: Section, recorded: bool = False) -> dict[str, Any]:
    """A tolerance looser than the shipped default only where `gate.loosen` states it, with a reason: a gate
    loosened quietly so that trials pass is a gate that no longer says what ran."""
    raw = s.get("loosen", dict, None) or {}
    where = s.child("loosen")
    for key, value in raw.items():
        if key != "why" and key not in LOOSENABLE:
            raise SpaceError(f"{where}.{key}", f"unknown tolerance '{key}'",
                             did_you_mean(str(key), LOOSENABLE) or f"use some of {', '.join(LOOSENABLE)}")
        if key != "why" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise SpaceError(f"{where}.{key}", "must be a number", "give the looser tolerance")
    if raw and not str(raw.get("why") or "").strip():
        raise SpaceError(where, "has no 'why'", "say why this space needs a looser gate (it is logged and recorded)")
    for key in LOOSENABLE:
        default = getattr(GateSpec, key.replace("-", "_"))
        if key in raw:
            if s.data.get(key) is not None:
                raise SpaceError(s.child(key), "is set twice (here and in gate.loosen)", "keep the one in gate.loosen")
            if default is not None and raw[key] <= default:
                raise SpaceError(f"{where}.{key}", f"{raw[key]} is not looser than the default {default}",
                                 f"set it as gate.{key} instead")
            continue
        value = s.data.get(key)
        if value is None or default is None:
            continue
        if value > default and recorded:
            raw.update({key: value, "why": raw.get("why") or "recorded by a study before gate.loosen existed"})
        elif value > default:
            raise SpaceError(s.child(key), f"{value} is looser than the shipped default {default}",
                             f"state it as gate.loosen: {{{key}: {value}, why: \"...\"}} (logged and recorded), "
                             "or keep the default")
    return dict(raw)


def _parse_gate(s: Section, recorded: bool = False) -> GateSpec:
    raw = s.get("prompts", list, None)
    prompts = DEFAULT_GATE_PROMPTS
    if raw is not None:
        if not raw:
            raise SpaceError(s.child("prompts"), "is empty", "list at least one prompt")
        parsed = []
        for i, item in enumerate(raw):
            p = Section(item, f"{s.child('prompts')}[{i}]")
            parsed.append(GatePrompt(p.get("prompt", str), p.get("expect", str, None)))
            p.done()
        prompts = tuple(parsed)
    # Every check by default; known-answer only where some prompt has an answer to know (named in `checks:`
    # without one, it is an error below).
    default = [c for c in GATE_CHECKS if c != "known-answer" or any(p.expect for p in prompts)]
    checks = s.get("checks", list, default)
    loosened = _parse_loosen(s, recorded)

    def tolerance(key: str) -> float:
        value = s.get(key, float, getattr(GateSpec, key.replace("-", "_")))
        return loosened.get(key, value)

    for i, c in enumerate(checks):
        if c not in GATE_CHECKS:
            raise SpaceError(f"{s.child('checks')}[{i}]", f"unknown check '{c}'",
                             did_you_mean(str(c), GATE_CHECKS) or f"use some of {', '.join(GATE_CHECKS)}")
    gate = GateSpec(prompts=prompts, max_new_tokens=s.get("max-new-tokens", int, 16), checks=tuple(checks),
                    logprob_tolerance=tolerance("logprob-tolerance"),
                    logprob_excess_tolerance=tolerance("logprob-excess-tolerance"),
                    agreement_tokens=s.get("agreement-tokens", int, None),
                    agreement_tie_tolerance=tolerance("agreement-tie-tolerance"),
                    batch_logprob_tolerance=tolerance("batch-logprob-tolerance"),
                    long_context_logprob_tolerance=tolerance("long-context-logprob-tolerance"),
                    max_batch=s.get("max-batch", int, GateSpec.max_batch),
                    recheck_after_load=s.get("recheck-after-load", bool, True),
                    first_request_timeout=s.get("first-request-timeout", float, 600.0),
                    request_timeout=s.get("request-timeout", float, 60.0),
                    loosened=loosened)
    if gate.max_batch < 2:
        raise SpaceError(s.child("max-batch"), "must be at least 2", "a batch of one compares nothing")
    for key in ("first-request-timeout", "request-timeout"):
        if s.data.get(key) is not None and s.data[key] <= 0:
            raise SpaceError(s.child(key), "must be positive", "give seconds > 0")
    if gate.max_new_tokens < 1:
        raise SpaceError(s.child("max-new-tokens"), "must be at least 1", "give a positive token count")
    if "known-answer" in checks and not any(p.expect for p in prompts):
        raise SpaceError(s.child("checks"), "known-answer is enabled but no prompt has 'expect'",
                         "add 'expect:' to a prompt or drop known-answer from gate.checks")
    s.done()
    return gate


def _parse_probe(s: Section) -> ProbeSpec:
    conc = s.get("concurrency", (list, int), [64])
    conc = [conc] if isinstance(conc, int) else conc
    for i, c in enumerate(conc):
        check_type(c, int, f"{s.child('concurrency')}[{i}]")
        if c < 1:
            raise SpaceError(f"{s.child('concurrency')}[{i}]", "must be at least 1", "give a positive concurrency")
    if not conc:
        raise SpaceError(s.child("concurrency"), "is empty", "give at least one concurrency level")
    rates = s.get("rates", list, [])
    for i, r in enumerate(rates):
        if check_type(r, float, f"{s.child('rates')}[{i}]") <= 0:
            raise SpaceError(f"{s.child('rates')}[{i}]", "must be positive", "give requests per second > 0")
    probe = ProbeSpec(
        concurrency=tuple(conc), requests=s.get("requests", int, 128), input_len=s.get("input-len", int, 1024),
        output_len=s.get("output-len", int, 256), len_jitter=s.get("len-jitter", float, 0.0),
        warmup=s.get("warmup", int, 2), seed=s.get("seed", int, 0), dataset=s.get("dataset", str, None),
        request_timeout=s.get("request-timeout", float, 600.0),
        max_error_rate=s.get("max-error-rate", float, 0.0), check_tokens=s.get("check-tokens", int, 32),
        time_budget=s.get("time-budget", float, 1800.0), rates=tuple(float(r) for r in rates),
        burstiness=s.get("burstiness", float, 1.0), max_in_flight=s.get("max-in-flight", int, None),
        max_send_lateness=s.get("max-send-lateness", float, 0.05),
        dataset_format=s.get("dataset-format", str, "jsonl"), shared_prefix=_parse_shared_prefix(s),
        prune=s.get("prune", bool, True), trace=_parse_trace(s))
    for key, value in (("requests", probe.requests), ("input-len", probe.input_len),
                       ("output-len", probe.output_len)):
        if value < 1:
            raise SpaceError(s.child(key), "must be at least 1", "give a positive number")
    if probe.time_budget <= 0:
        raise SpaceError(s.child("time-budget"), "must be positive", "give seconds > 0, e.g. 1800")
    if probe.burstiness <= 0:
        raise SpaceError(s.child("burstiness"), "must be positive", "give 1 for Poisson arrivals, < 1 for burstier")
    if probe.max_in_flight is not None and probe.max_in_flight < 1:
        raise SpaceError(s.child("max-in-flight"), "must be at least 1", "give a positive cap or leave it out")
    if probe.max_send_lateness <= 0:
        raise SpaceError(s.child("max-send-lateness"), "must be positive", "give seconds > 0, e.g. 0.05")
    if probe.check_tokens < 0:
        raise SpaceError(s.child("check-tokens"), "must not be negative", "give 32, say, or 0 for no check wave")
    if not 0 <= probe.len_jitter < 1:
        raise SpaceError(s.child("len-jitter"), "must be in [0, 1)", "give a fraction such as 0.5")
    if probe.dataset_format not in DATASET_FORMATS:
        raise SpaceError(s.child("dataset-format"), f"unknown format '{probe.dataset_format}'",
                         did_you_mean(probe.dataset_format, DATASET_FORMATS) or "use jsonl or sharegpt")
    if probe.dataset:
        if probe.shared_prefix:
            raise SpaceError(s.child("shared-prefix"), "cannot be used with probe.dataset",
                             "drop one of them: the shared-prefix workload makes its own prompts")
        _check_dataset(probe, s.child("dataset"))
    if probe.trace and (probe.dataset or probe.shared_prefix):
        other = "dataset" if probe.dataset else "shared-prefix"
        raise SpaceError(s.child("trace"), f"cannot be used with probe.{other}",
                         "drop one of them: a trace gives the prompts' lengths and prefixes itself")
    s.done()
    return probe


def _parse_trace(s: Section) -> TraceSpec | None:
    """`trace: {path, format, scale, limit}`; the file is read now, so a bad row is refused before launch."""
    if s.data.get("trace") is None:
        s.get("trace", dict, None)  # known key, left out or null
        return None
    t = s.section("trace")
    trace = TraceSpec(t.get("path", str), t.get("format", str, "jsonl"), t.get("scale", float, 1.0),
                      t.get("limit", int, None))
    if trace.format not in TRACE_FORMATS:
        raise SpaceError(t.child("format"), f"unknown trace format '{trace.format}'",
                         did_you_mean(trace.format, TRACE_FORMATS) or f"use one of {', '.join(TRACE_FORMATS)}")
    if trace.scale <= 0:
        raise SpaceError(t.child("scale"), "must be positive", "give 1 for the trace's own pace, 2 for twice as fast")
    if trace.limit is not None and trace.limit < 1:
        raise SpaceError(t.child("limit"), "must be at least 1", "give a number of rows, or leave it out for all")
    t.done()
    if not Path(trace.path).is_file():
        raise SpaceError(t.child("path"), f"{trace.path} does not exist",
                         "give a local trace file (search_spaces/traces/ has an example of each format)")
    try:
        load_trace(trace.path, trace.format, trace.limit)
    except TraceError as exc:
        raise SpaceError("", str(exc), f"fix the file, or check probe.trace.format ({trace.format})") from None
    return trace


DATASET_FORMATS = ("jsonl", "sharegpt")


def _parse_shared_prefix(s: Section) -> SharedPrefix | None:
    if s.data.get("shared-prefix") is None:
        s.get("shared-prefix", dict, None)  # known key, left out or null
        return None
    sp = s.section("shared-prefix")
    parsed = SharedPrefix(sp.get("groups", int, 4), sp.get("system-prompt-len", int, 2048),
                          sp.get("question-len", int, 128))
    for key, value in (("groups", parsed.groups), ("system-prompt-len", parsed.system_prompt_len),
                       ("question-len", parsed.question_len)):
        if value < 1:
            raise SpaceError(sp.child(key), "must be at least 1", "give a positive number")
    sp.done()
    return parsed


def _check_dataset(probe: ProbeSpec, path: str) -> None:
    """The file is read now, so that a missing or malformed one is refused before anything is launched."""
    if not Path(probe.dataset).is_file():
        raise SpaceError(path, f"{probe.dataset} does not exist",
                         "give a local JSONL file of prompts, or a ShareGPT JSON file with dataset-format: sharegpt")
    try:
        rows = load_rows(probe.dataset, probe.dataset_format, probe.output_len)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise SpaceError(path, f"{probe.dataset} is not a {probe.dataset_format} dataset ({str(exc)[:80]})",
                         "check probe.dataset-format (jsonl or sharegpt) and the file") from None
    if not rows:
        raise SpaceError(path, f"{probe.dataset} has no usable prompts",
                         "ShareGPT rows need two turns; JSONL rows need a 'prompt'")


def _parse_objective(s: Section, probe: ProbeSpec) -> Objective:
    if s.data.get("metric") == RATE_METRIC:
        return _parse_rate_objective(s, probe)

    def metric(key: str, default: str | None) -> str | None:
        value = s.get(key, str, default)
        if value is not None and value not in METRICS:
            raise SpaceError(s.child(key), f"unknown metric '{value}'",
                             did_you_mean(value, (*METRICS, RATE_METRIC))
                             or f"use e.g. output_throughput, p99_ttft_ms or {RATE_METRIC}")
        return value

    def direction(key: str, metric_name: str | None) -> str:
        default = "maximize" if metric_name and "throughput" in metric_name else "minimize"
        value = s.get(key, str, default)
        if value not in ("maximize", "minimize"):
            raise SpaceError(s.child(key), f"'{value}' is not a direction", "write maximize or minimize")
        return value

    first = metric("metric", "output_throughput")
    second = metric("second-metric", None)
    slo_raw = s.get("slo", dict, {})
    slo = {}
    for key, value in slo_raw.items():
        if key not in METRICS:
            raise SpaceError(f"{s.child('slo')}.{key}", "is not a metric",
                             did_you_mean(str(key), METRICS) or "use e.g. p99_ttft_ms")
        slo[key] = float(check_type(value, float, f"{s.child('slo')}.{key}"))
    conc = _objective_level(s, probe)
    obj = Objective(first, direction("direction", first), conc, slo, second,
                    direction("second-direction", second) if second else "minimize")
    s.done()
    return obj


RATE_METRIC = "max_rate_under_slo"


def _objective_level(s: Section, probe: ProbeSpec) -> int | None:
    """Which closed-loop level counts (for max_rate_under_slo: whose rate starts the search); None: the highest."""
    conc = s.get("concurrency", int, None)
    if conc is not None and conc not in probe.concurrency:
        raise SpaceError(s.child("concurrency"), f"{conc} is not one of probe.concurrency {list(probe.concurrency)}",
                         "add it to probe.concurrency or choose a listed level")
    return conc


def _parse_rate_objective(s: Section, probe: ProbeSpec) -> Objective:
    """`metric: max_rate_under_slo`: SLOs in SGLang's goodput terms, the attainment, and the search's bounds."""
    s.get("metric", str)
    slo_section = s.section("slo", required=True)
    slo = {}
    for key in slo_section.data:
        path = slo_section.child(str(key))
        if key not in SLO_METRICS:
            raise SpaceError(path, "is not an SLO metric",
                             did_you_mean(str(key), SLO_METRICS) or f"use {', '.join(SLO_METRICS)} (milliseconds)")
        slo[key] = float(slo_section.get(key, float))
        if slo[key] <= 0:
            raise SpaceError(path, "must be positive", "give a limit in milliseconds, e.g. 2000")
    if not slo:
        raise SpaceError(s.child("slo"), "is empty", f"give at least one of {', '.join(SLO_METRICS)} in milliseconds")
    search = RateSearchSpec(slo, attainment=s.get("attainment", float, 0.99),
                            precision=s.get("precision", float, 0.05), budget=s.get("search-budget", float, 600.0),
                            seconds_per_rate=s.get("seconds-per-rate", float, 30.0))
    if not 0 < search.attainment <= 1:
        raise SpaceError(s.child("attainment"), f"{search.attainment:g} is outside (0, 1]",
                         "give the share of requests that must meet the SLO, e.g. 0.99")
    if not 0 < search.precision < 1:
        raise SpaceError(s.child("precision"), "must be in (0, 1)", "give a relative precision such as 0.05")
    if search.seconds_per_rate <= 0:
        raise SpaceError(s.child("seconds-per-rate"), "must be positive", "give seconds > 0, e.g. 30")
    if search.budget < search.seconds_per_rate:
        raise SpaceError(s.child("search-budget"),
                         f"{search.budget:g} s is too short for one rate of {search.seconds_per_rate:g} s",
                         "give at least objective.seconds-per-rate, or several times it for a search")
    conc = _objective_level(s, probe)
    s.done()
    return Objective(RATE_METRIC, "maximize", conc, rate_search=search)
