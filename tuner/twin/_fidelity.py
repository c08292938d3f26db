"""The twin's predictions against a real study's trials: rows per trial, and the verdict (rho, errors, failures).

Shared by `python -m tuner twin fit` (its held-out verdict) and benchmarks/twin_fidelity.py; that file's docstring
says what is compared and why.
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._failures import measured

METRIC = "output_throughput"  # what tuner.sim.predict predicts (output_tok_s)
RHO_TARGET = 0.8
ERROR_TARGET = 0.15
# Prediction statuses of tuner.sim.predict -> the failure kind the tuner records for them.
KIND_OF_STATUS = {"ok": "ok", "invalid_args": "invalid_config", "logprob_drift": "inconsistent_logprobs"}
CAPTURE_FAILURE = {"oom", "graph_capture_failed"}  # at CUDA-graph capture: one failure, two messages
NOT_MEASURED = {"interrupted", "worker_died", "surplus", "client_too_slow"}
# The baseline-agreement check before near-ties were allowed (trials 0-10 of the first real study) compared
# the first tokens exactly: its wrong answers say nothing of what today's gate would decide.
OLD_AGREEMENT = "greedy output differs from the baseline's in the first"


class BadInput(Exception):
    pass


@dataclass(frozen=True)
class Workload:
    concurrency: int
    requests: int
    input_len: int
    output_len: int
    input_source: str


@dataclass(frozen=True)
class Real:
    outcome: str  # ok | pruned | a failure kind
    tok_s: float | None  # ok: the level's figure; pruned: the figure at `step`
    step: int | None  # pruned: the last step reported to the pruner
    ready_s: float | None
    note: str = ""


@dataclass(frozen=True)
class Twin:
    outcome: str
    tok_s: float | None  # at the real trial's step for a pruned trial
    ready_s: float | None
    stage: str = ""


@dataclass(frozen=True)
class Row:
    number: int
    config: str
    real: Real | None
    twin: Twin | None
    skipped: str = ""  # why the trial is not compared

    @property
    def error(self) -> float | None:
        if self.real is None or self.twin is None or not self.real.tok_s or self.twin.tok_s is None:
            return None
        return (self.twin.tok_s - self.real.tok_s) / self.real.tok_s

    @property
    def kind_matches(self) -> bool:
        real, twin = self.real.outcome, self.twin.outcome
        if real == "pruned":
            return twin == "ok"
        return real == twin or (real in CAPTURE_FAILURE and twin in CAPTURE_FAILURE and self.twin.stage == "capture")


# -- input ----------------------------------------------------------------------------------------------------

def parse_range(text: str, flag: str) -> tuple[int, int | None]:
    """'11-' (11 and up), '0-10', or '7'."""
    lo, dash, hi = text.strip().partition("-")
    try:
        first = int(lo)
        last = (int(hi) if hi else None) if dash else first
    except ValueError:
        raise BadInput(f"{flag} {text!r}: not a trial range; write N-M, N- (N and up) or N") from None
    if first < 0 or (last is not None and last < first):
        raise BadInput(f"{flag} {text!r}: an empty range; write N-M with 0 <= N <= M")
    return first, last


def in_range(number: int, span: tuple[int, int | None]) -> bool:
    return span[0] <= number and (span[1] is None or number <= span[1])


@dataclass(frozen=True)
class Study:
    name: str
    attrs: dict[str, Any]
    trials: list[Any]


def load_study(db: Path, name: str | None, flag: str = "--db", study_flag: str = "--study") -> Study:
    """The study, read from a copy of the file: nothing is ever written to the real one. `flag` and `study_flag`
    name the options that gave the file and the study, for the messages."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not db.is_file():
        raise BadInput(f"{flag} {db}: no such file; give the trials.db a study wrote "
                       "(e.g. docs/gpu-sglang-0517/trials.db)")
    with tempfile.TemporaryDirectory(prefix="twin-fidelity-") as tmp:
        copy = Path(tmp) / "trials.db"
        shutil.copyfile(db, copy)
        try:
            storage = optuna.storages.RDBStorage(f"sqlite:///{copy}")
            names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        except Exception as exc:  # not an Optuna database
            raise BadInput(f"{flag} {db}: not an Optuna study database ({type(exc).__name__}); give a trials.db a "
                           "study wrote") from None
        if name is None:
            if len(names) != 1:
                raise BadInput(f"{flag} {db} holds {len(names)} studies ({', '.join(names) or 'none'}); "
                               f"name one with {study_flag}")
            name = names[0]
        elif name not in names:
            raise BadInput(f"{study_flag} {name}: not in {db} (it holds {', '.join(names) or 'no study'})")
        study = optuna.load_study(study_name=name, storage=storage)
        loaded = Study(name, dict(study.user_attrs), study.get_trials(deepcopy=True))
        storage.engine.dispose()
    return loaded


def study_spec(study: Study) -> Any:
    from tuner.spec import parse_spec

    source = study.attrs.get("space_source")
    if not source:
        raise BadInput(f"study {study.name!r} keeps no space (user attr space_source); it was not written by "
                       "`python -m tuner run`")
    return parse_spec(source, f"the space of study {study.name!r}", recorded=True)


def workload_of(spec: Any, trials: list[Any]) -> Workload:
    """The probe's level that the objective reads, with the prompt length the real tokenizer made of it."""
    probe = spec.probe
    concurrency = spec.objective.concurrency or max(probe.concurrency)
    measured = [(t.number, t.user_attrs["total_input_tokens"] / t.user_attrs["completed"]) for t in trials
                if t.user_attrs.get("total_input_tokens") and t.user_attrs.get("completed")]
    if measured:
        number, mean = measured[0]
        source = f"measured: total_input_tokens / completed of trial {number}"
        return Workload(concurrency, probe.requests, round(mean), probe.output_len, source)
    return Workload(concurrency, probe.requests, probe.input_len, probe.output_len, "the space's input-len")


# -- the real trial -------------------------------------------------------------------------------------------

def reread(kind: str, attrs: dict[str, Any], engine: str) -> tuple[str, str]:
    """A crash_on_start read again with today's log patterns, where its message and evidence say more."""
    if kind != "crash_on_start":
        return kind, ""
    from tuner.trial import LogWatcher
    from tuner.engines import get_engine

    text = "\n".join(str(attrs.get(k) or "") for k in ("failure_message", "failure_evidence"))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        log.write_text(text)
        watcher = LogWatcher(log, get_engine(engine))
        while watcher.poll():
            pass
    if watcher.fatal is None or watcher.fatal.kind.value == kind:
        return kind, ""
    now = watcher.fatal.kind.value
    return now, f"recorded as {kind}; today's log patterns read its message as {now}"


def real_outcome(trial: Any, spec: Any) -> Real | str:
    """What the real trial measured, or why it is not compared."""
    attrs = trial.user_attrs
    kind = attrs.get("failure_kind") or "none"
    state = trial.state.name
    ready = (attrs.get("stage_seconds") or {}).get("readiness") if attrs.get("server_version") else None
    if "reused_from" in attrs:
        return f"same measurement as trial {attrs['reused_from']} (not restarted)"
    if kind in NOT_MEASURED:
        return f"{kind}: measured nothing of the configuration"
    if not measured(attrs, spec.probe.requests):
        return "probe cut at its time budget before enough requests finished: not a measurement"
    if kind == "wrong_answer" and str(attrs.get("failure_message", "")).startswith(OLD_AGREEMENT):
        return "wrong_answer by the exact agreement check of its day; today's gate allows near-ties"
    if state == "COMPLETE" and kind == "none":
        value = attrs.get(METRIC)
        if value is None:
            return f"completed without {METRIC}"
        return Real("ok", float(value), None, ready)
    if state == "PRUNED" and kind == "none" and trial.intermediate_values:
        step = max(trial.intermediate_values)
        return Real("pruned", float(trial.intermediate_values[step]), step, ready)
    if kind != "none":
        kind, note = reread(kind, attrs, spec.engine)
        return Real(kind, None, None, ready, note)
    return f"{state.lower()} without a result"


# -- the twin -------------------------------------------------------------------------------------------------

def at_step(progress: tuple[tuple[int, float], ...], step: int) -> float | None:
    """The twin's output tok/s so far when it had produced `step` thousandths of the level's tokens."""
    value = None
    for share, rate in progress:
        if share > step:
            break
        value = rate
    return value


def twin_outcome(profile: Any, flags: dict[str, Any], work: Workload, startup_timeout: float,
                 real: Real) -> Twin:
    from tuner.engines import flag_argv
    from tuner.sim import predict

    p = predict(profile, flag_argv(flags), work.concurrency, work.input_len, work.output_len,
                num_requests=work.requests)
    started = p.status not in ("invalid_args", "crash_on_start", "oom", "graph_capture_failed", "startup_timeout")
    outcome = KIND_OF_STATUS.get(p.status, p.status)
    if started and p.startup_s > startup_timeout:
        return Twin("startup_timeout", None, p.startup_s)
    if not started:
        return Twin(outcome, None, None, p.stage)
    tok_s = at_step(p.progress, real.step) if real.outcome == "pruned" else p.output_tok_s
    return Twin(outcome, tok_s, p.startup_s)


def config_text(params: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """The parameters that differ from the space's baseline."""
    if baseline is None:
        return " ".join(f"{k}={v}" for k, v in params.items())
    diff = [f"{k}={_tidy(v)}" for k, v in params.items() if _tidy(v) != _tidy(baseline.get(k))]
    return " ".join(diff) or "baseline"


def _tidy(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def compare(trials: list[Any], span: tuple[int, int | None], spec: Any, profile: Any, work: Workload) -> list[Row]:
    rows = []
    for trial in trials:
        if not in_range(trial.number, span) or trial.state.name in ("RUNNING", "WAITING"):
            continue
        config = config_text(dict(trial.params), spec.space.baseline)
        real = real_outcome(trial, spec)
        if isinstance(real, str):
            rows.append(Row(trial.number, config, None, None, real))
            continue
        flags = trial.user_attrs.get("flags") or spec.space.config(dict(trial.params)).flags
        rows.append(Row(trial.number, config, real,
                        twin_outcome(profile, dict(flags), work, spec.server.startup_timeout, real)))
    return rows


# -- figures --------------------------------------------------------------------------------------------------

def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0  # ties share their mean rank
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho (Pearson's r of the ranks); None for fewer than 3 pairs or a constant side."""
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def fmt_num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(title: str, rows: list[Row]) -> None:
    print(f"\n== {title} ==")
    print(f"{'trial':>5}  {'real':<22} {'real tok/s':>10}  {'twin':<22} {'twin tok/s':>10}  {'error':>7}  "
          f"{'ready s real/twin':>17}  config (vs the baseline)")
    for r in rows:
        if r.real is None:
            print(f"{r.number:>5}  not compared: {r.skipped}")
            continue
        real = r.real.outcome + (f" @{r.real.step}" if r.real.step is not None else "")
        real += "*" if r.real.note else ""
        twin = r.twin.outcome + (f" at {r.twin.stage}" if r.twin.stage else "")
        twin += "" if r.kind_matches else " (differs)"
        ready = f"{fmt_num(r.real.ready_s)}/{fmt_num(r.twin.ready_s)}"
        print(f"{r.number:>5}  {real:<22} {fmt_num(r.real.tok_s):>10}  {twin:<22} {fmt_num(r.twin.tok_s):>10}  "
              f"{fmt_pct(r.error):>7}  {ready:>17}  {r.config}")

    for r in rows:
        if r.real is not None and r.real.note:
            print(f"    * trial {r.number}: {r.real.note}")
    compared = [r for r in rows if r.real is not None]
    done = [r for r in compared if r.real.outcome == "ok" and r.error is not None]
    pruned = [r for r in compared if r.real.outcome == "pruned" and r.error is not None]
    rho = spearman([r.twin.tok_s for r in done], [r.real.tok_s for r in done])
    median, worst = _errors(done)
    print(f"completed trials: n={len(done)}, Spearman rho {fmt_num(rho, 2) if rho is not None else 'n/a'}"
          f"{' (needs 3 trials)' if rho is None and len(done) < 3 else ''}, median |error| {median}, worst {worst}")
    median, worst = _errors(pruned)
    both = done + pruned
    rho_all = spearman([r.twin.tok_s for r in both], [r.real.tok_s for r in both])
    print(f"pruned trials at their stop step (not in the verdict): n={len(pruned)}, median |error| {median}, "
          f"worst {worst}; rho with the completed ones {fmt_num(rho_all, 2) if rho_all is not None else 'n/a'}")

    failed = [r for r in compared if r.real.outcome not in ("ok", "pruned")]
    kinds = sorted({r.real.outcome for r in failed})
    caught = {k: sum(1 for r in failed if r.real.outcome == k and r.kind_matches) for k in kinds}
    total = {k: sum(1 for r in failed if r.real.outcome == k) for k in kinds}
    alarms = [f"trial {r.number} ({r.twin.outcome})" for r in compared
              if r.real.outcome in ("ok", "pruned") and not r.kind_matches]
    wrong = [f"trial {r.number} ({r.real.outcome} predicted as {r.twin.outcome})" for r in failed if not r.kind_matches]
    print("real failure kinds predicted: " + (", ".join(f"{k} {caught[k]}/{total[k]}" for k in kinds) or "none failed")
          + "; false alarms: " + (", ".join(alarms) or "none")
          + ("; mispredicted: " + ", ".join(wrong) if wrong else ""))

    med = statistics.median(abs(r.error) for r in done) if done else None
    verdicts = [
        f"rho >= {RHO_TARGET}: " + ("n/a" if rho is None else f"{_met(rho >= RHO_TARGET)} ({rho:.2f})"),
        f"median |error| <= {ERROR_TARGET:.0%}: "
        + ("n/a" if med is None else f"{_met(med <= ERROR_TARGET)} ({med:.1%})"),
        "every real failure kind predicted: " + ("n/a" if not kinds else _met(caught == total)),
    ]
    print("verdict: " + "; ".join(verdicts))


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _errors(rows: list[Row]) -> tuple[str, str]:
    if not rows:
        return "n/a", "n/a"
    errors = [abs(r.error) for r in rows]
    worst = max(rows, key=lambda r: abs(r.error))
    return f"{statistics.median(errors):.1%}", f"{abs(worst.error):.1%} (trial {worst.number})"
