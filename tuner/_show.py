"""`tuner show`: a table of trials and which parameter values led to which failure kinds."""

from __future__ import annotations

from collections import Counter, defaultdict

from optuna.trial import FrozenTrial

from ._progress import format_value, table
from ._results import load_study


def show(storage: str, study_name: str | None, sort: str = "value", failed_only: bool = False) -> str:
    study = load_study(storage, study_name)
    trials = study.get_trials(deepcopy=False)
    varying = _varying_params(trials)
    metric = (study.metric_names or ["output_throughput"])[0]
    if failed_only:
        trials = [t for t in trials if not t.user_attrs.get("feasible")]
    keyed = {"number": lambda t: t.number, "time": lambda t: -t.user_attrs.get("total_seconds", 0.0),
             "value": lambda t: -float(t.user_attrs.get(metric, 0.0) if t.user_attrs.get("feasible") else -1)}
    key = keyed.get(sort, lambda t: -float(t.user_attrs.get(sort, 0.0) or 0.0))
    rows = []
    for t in sorted(trials, key=key):
        a = t.user_attrs
        rows.append([t.number, t.state.name, a.get("failure_kind", "-"),
                     *[t.params.get(p) for p in varying],
                     a.get("output_throughput"), a.get("p99_ttft_ms"), a.get("p99_itl_ms"), a.get("total_seconds"),
                     a.get("reused_from")])
    header = ["trial", "state", "failure", *varying, "out tok/s", "p99 TTFT ms", "p99 ITL ms", "seconds", "reused"]
    return table(rows, header) + "\n\n" + failure_breakdown(study.get_trials(deepcopy=False))


def _varying_params(trials: list[FrozenTrial]) -> list[str]:
    values: dict[str, set[str]] = defaultdict(set)
    for t in trials:
        for k, v in t.params.items():
            values[k].add(repr(v))
    return [k for k, v in values.items() if len(v) > 1]


def failure_breakdown(trials: list[FrozenTrial]) -> str:
    """For each failure kind, the parameter values most often present when it happened."""
    by_kind: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in trials:
        kind = t.user_attrs.get("failure_kind")
        if kind and kind != "none":
            by_kind[kind].append(t)
    if not by_kind:
        return "failures: none"
    lines = ["failures:"]
    for kind, ts in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        counts = Counter((k, format_value(v)) for t in ts for k, v in t.params.items())
        common = [f"{k}={v} ({n}/{len(ts)})" for (k, v), n in counts.most_common(4) if n > len(ts) / 2]
        lines.append(f"  {kind}: {len(ts)} trial(s)" + (f"; mostly with {', '.join(common)}" if common else ""))
    return "\n".join(lines)
