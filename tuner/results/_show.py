"""`tuner show`: the trials in a table that fits a terminal, the winner, and the values the failures blame."""

from __future__ import annotations

import shlex
import shutil
import textwrap
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping

from optuna.trial import FrozenTrial

from .._errors import NoEligibleTrialError
from .._failures import FailureKind
from .._redact import redact_url
from ..search import CONTEXT_ATTR, LEARNED_ATTR, blame_failures, describe_context, describe_learning, load_study
from ..trial import LENGTHS_ATTR
from ._progress import fit, format_value, table
from ._results import certainty_lines, cut_note, gate_lines, objective_metric, winner
from ._which_study import target_args

# Each column one precision: throughput to 0.1 tok/s, TTFT to the ms, ITL to 0.1 ms, time to 0.1 s.
_METRICS = (("out tok/s", "output_throughput", "{:.1f}"), ("p99 TTFT ms", "p99_ttft_ms", "{:.0f}"),
            ("p99 ITL ms", "p99_itl_ms", "{:.1f}"), ("seconds", "total_seconds", "{:.1f}"))


def show(storage: str, study_name: str | None, sort: str = "value", failed_only: bool = False,
         wide: bool = False) -> str:
    study = load_study(storage, study_name)
    everything = study.get_trials(deepcopy=False)
    metric = objective_metric(study)
    width = shutil.get_terminal_size((120, 24)).columns
    try:
        best = winner(study)
    except NoEligibleTrialError:
        best = None
    # Probes cut short, recorded as probe_cut or (before that kind) as ok: what each measured, what budget fits.
    cut = {t.number: note for t in everything if (note := cut_note(t, study))}

    def ok(t: FrozenTrial) -> bool:
        return bool(t.user_attrs.get("feasible")) and t.number not in cut

    trials = [t for t in everything if not ok(t)] if failed_only else everything
    keyed = {"number": lambda t: t.number, "time": lambda t: -t.user_attrs.get("total_seconds", 0.0),
             "value": lambda t: -float(t.user_attrs.get(metric, 0.0) if ok(t) else -1)}
    trials = sorted(trials, key=keyed.get(sort, lambda t: -float(t.user_attrs.get(sort, 0.0) or 0.0)))
    # A cut probe's figures are no measurement: only its time is shown.
    rows = [[t.number, _outcome(t, best, t.number in cut),
             *[_cell(t.user_attrs.get(key) if t.number not in cut or key == "total_seconds" else None, fmt)
               for _, key, fmt in _METRICS]] for t in trials]
    header = ["trial", "outcome", *[name for name, _, _ in _METRICS]]
    if wide:  # every parameter, one column each
        names = list(dict.fromkeys(k for t in everything for k in t.params))
        text = table([[*row, *[t.params.get(k) for k in names]] for row, t in zip(rows, trials)], [*header, *names])
    else:  # the parameters in which each trial differs from the winner, cut to the terminal's width
        reference = best.trial if best else None
        title = f"differs from trial {reference.number} (--wide)" if reference else "flags (--wide)"
        room = max(20, width - max(map(len, table(rows, header).splitlines())) - 2)
        seen = Counter((k, format_value(v)) for t in everything for k, v in t.params.items())
        text = table([[*row, _differences(t, reference, room, seen)] for row, t in zip(rows, trials)],
                     [*header, title])
    # First, which study this is and its winner: a person with several studies must not read the wrong one.
    count = f"{len(everything)} trial{'' if len(everything) == 1 else 's'}"
    title = f"study '{study.study_name}' ({redact_url(storage)}), {count}; " + (
        f"winner: trial {best.trial.number} ({'confirmed' if best.confirmed else 'not confirmed'})" if best
        else "no trial qualified")
    parts = [textwrap.fill(title, width=width, subsequent_indent="  ", break_on_hyphens=False,
                           break_long_words=False), text]
    if best is not None:
        flags = " ".join(f"{k}={format_value(v)}" for k, v in best.trial.params.items())
        parts.append("\n".join(textwrap.fill(line, width=width, subsequent_indent="  ", break_on_hyphens=False)
                               for line in (f"winner: {best.describe(metric)}", f"  {flags}")))
        parts[-1] += _certainty(study, best, shlex.join(target_args(storage, study)), width)
    parts += gate_lines(study.user_attrs)
    if study.user_attrs.get(CONTEXT_ATTR):  # what the study ran on and for, as its first trial found it
        parts.append(textwrap.fill("context: " + describe_context(study.user_attrs[CONTEXT_ATTR]), width=width,
                                   subsequent_indent="  ", break_on_hyphens=False, break_long_words=False))
    sent = workload_as_sent(study.user_attrs, best.trial if best else None, everything)
    if sent:
        parts.append(textwrap.fill(sent, width=width, subsequent_indent="  ", break_on_hyphens=False,
                                   break_long_words=False))
    if study.user_attrs.get(LEARNED_ATTR):  # what earlier studies told it (run --learn-from)
        first: dict[str, list[int]] = {}
        for t in everything:
            if t.user_attrs.get("learned_from"):
                first.setdefault(t.user_attrs["learned_from"], []).append(t.number)
        parts.append(textwrap.fill("learned: " + describe_learning(study.user_attrs[LEARNED_ATTR], first),
                                   width=width, subsequent_indent="  ", break_on_hyphens=False,
                                   break_long_words=False))
    parts.append(failure_breakdown(everything, width, cut))
    parts.append(_messages(trials, width, cut))
    return "\n\n".join(p for p in parts if p)


def workload_as_sent(study_attrs: dict, best: FrozenTrial | None, trials: list[FrozenTrial]) -> str:
    """The probe's requests as the server counted them, at the winner's objective level (else the last trial
    that measured one): what a throughput figure was measured on. Studies from before per-request figures
    were kept give the level's mean (total_input_tokens / completed)."""
    measured = [t for t in trials if t.user_attrs.get("completed")]
    t = best if best is not None and best.user_attrs.get("completed") else (measured[-1] if measured else None)
    if t is None:
        return ""
    a = t.user_attrs
    level = f"concurrency {a['concurrency']}" if a.get("rate") is None else f"rate {a['rate']:g}/s"
    head = f"workload as sent (trial {t.number}, {level}): {a['completed']} requests"
    if a.get("prompt_tokens_counted"):
        prompt = (f"prompt {_span(a, 'prompt_tokens')} tokens (mean {a['prompt_tokens_mean']:.1f}, "
                  "server-counted)")
    else:
        prompt = f"prompt {a.get('total_input_tokens', 0) / a['completed']:.1f} tokens a request (level total)"
    output = (f"output {_span(a, 'output_tokens')} tokens" if "output_tokens_min" in a
              else f"output {a.get('total_output_tokens', 0) / a['completed']:.1f} tokens a request")
    lengths = study_attrs.get(LENGTHS_ATTR) or {}
    # Trials from before per-request figures were kept counted words.
    unit = lengths.get("unit") or a.get("probe_lengths") or ("words" if "prompt_tokens_counted" not in a else None)
    if ((study_attrs.get(CONTEXT_ATTR) or {}).get("workload") or {}).get("dataset"):
        unit = None  # a dataset's prompts are given text: input-len counts nothing
    asked = f"; probe.input-len counts {unit}" if unit else ""
    why = f" ({lengths['why']})" if unit == "words" and lengths.get("why") else ""
    return f"{head}, {prompt}, {output}{asked}{why}"


def _span(attrs: dict, name: str) -> str:
    low, high = attrs[f"{name}_min"], attrs[f"{name}_max"]
    return f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}"


def _certainty(study, best, where: str, width: int) -> str:
    """How sure confirm is of the winner; a suggested command (carrying `where`: --storage, --study) stays on one
    line, to be copied whole."""
    return "".join("\n  " + (line if line.startswith("  ") else textwrap.fill(
        line, width=width - 2, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False))
                   for line in certainty_lines(study, best, where))


def _cell(value, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "-"


def _outcome(t: FrozenTrial, best, cut: bool = False) -> str:
    a = t.user_attrs
    text = FailureKind.PROBE_CUT.value if cut else "ok" if a.get("feasible") else a.get("failure_kind") \
        or t.state.name.lower()
    if a.get("reused_from") is not None:
        text += f" (={a['reused_from']})"
    if best is not None and best.trial.number == t.number:
        text += " *confirmed" if best.confirmed else " *best"
    return text


def _differences(t: FrozenTrial, reference: FrozenTrial | None, room: int, seen: Counter) -> str:
    """The trial's parameters that differ from the reference's (all without one), cut at a whole flag. Choices
    come first (a backend, a switch: what failures hinge on), the rarest value in the study first; parameters
    with many values (memory fractions, sizes) last."""
    distinct = Counter(k for k, _ in seen)
    names = sorted((k for k, v in t.params.items()
                    if reference is None or format_value(v) != format_value(reference.params.get(k))),
                   key=lambda k: (distinct[k] > 8, seen[(k, format_value(t.params[k]))]))
    return fit([f"{k}={format_value(t.params[k])}" for k in names], room)


def failure_breakdown(trials: list[FrozenTrial], width: int = 120, cut: Collection[int] = ()) -> str:
    """Each failure kind's count, and the values its failures blame, as the search itself blames them
    (`blame_failures`: the lessons `knowledge export` writes, with their evidence counted). A correlation of values
    with failures would tell another story than the one the search acted on, and than the one a later study is
    told: a value frequent among failures may have run fine elsewhere, and a value from one failure is only
    suspected. `cut`: the trials whose probe was cut short (`cut_note`), counted as probe_cut whatever they
    recorded."""
    by_kind: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in trials:
        kind = FailureKind.PROBE_CUT.value if t.number in cut else t.user_attrs.get("failure_kind")
        if kind and kind != "none":
            by_kind[kind].append(t)
    if not by_kind:
        return "failures: none"
    blamed = blame_failures(trials)
    lessons: dict[str, list[str]] = defaultdict(list)
    for lesson in sorted(blamed.lessons, key=lambda lesson: (-lesson.count, -lesson.blame)):
        lessons[lesson.kind.value].append(f"{lesson.says()} {lesson.counted()}"
                                          + ("" if lesson.carries else " (not carried to later studies)"))
    lines = []
    for kind, ts in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        line = f"  {kind}: {len(ts)} trial(s)"
        alone = [t.number for t in ts if t.number in blamed.unexplained]
        if alone:  # failures that blame nothing in particular: every value in them ran fine elsewhere
            many = len(alone) > 1
            line += (f"; trial{'s' if many else ''} {', '.join(map(str, alone))} blame{'' if many else 's'} nothing in "
                     f"particular (every value in {'them' if many else 'it'} ran fine elsewhere)")
        lines.append(_wrap(line, width, "      "))
        lines += [_wrap(f"    {text}", width, "      ") for text in lessons.get(kind, ())]
    heading = ("failures, and the values the search blames (knowledge export writes the same):" if blamed.lessons
               else "failures:")
    return "\n".join([heading, *lines])


def _wrap(line: str, width: int, indent: str) -> str:
    return textwrap.fill(line, width=width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def _messages(trials: list[FrozenTrial], width: int, cut: Mapping[int, str]) -> str:
    """Every failure message in full, once per distinct message, with the trials that had it. A probe cut short
    says what it measured and the budget that would fit (`cut_note`), from what it recorded."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for t in sorted(trials, key=lambda t: t.number):
        a = t.user_attrs
        if a.get("reused_from") is not None:
            continue
        if t.number in cut:
            groups[(FailureKind.PROBE_CUT.value, cut[t.number])].append(t.number)
        elif a.get("failure_message") and not a.get("feasible"):
            groups[(a.get("failure_kind", "?"), a["failure_message"])].append(t.number)
    if not groups:
        return ""
    lines = ["messages:"]
    for (kind, message), numbers in groups.items():
        head = f"  trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))} ({kind}): "
        lines.append(textwrap.fill(message, width=width, initial_indent=head, subsequent_indent="      ",
                                   break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines)
