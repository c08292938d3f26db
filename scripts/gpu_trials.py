"""One line per trial of a real-GPU study, for the device call's log and docs/: what `show` leaves out.

    python3 scripts/gpu_trials.py trials.db [--study NAME]
    python3 scripts/gpu_trials.py trials.db --gate      # a Markdown table of what the gate saw, for docs/

Per trial: state, failure kind, output tok/s, the configuration, time per stage, the start-up breakdown from
SGLang's own startup timings, the KV pool (max_total_num_tokens), the gate's largest decode vs re-prefill
logprob difference, and the failure's message.

--gate: one row per trial: its planted fault (TUNER_FAULT), backend and graph setting, its failure kind, the
check that failed (read from the message: each check words its own), the stage, the seconds from launch to the
verdict, and the gate's measured figures.
"""

from __future__ import annotations

import argparse
import sys

import optuna


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db")
    parser.add_argument("--study", default=None)
    parser.add_argument("--gate", action="store_true", help="a Markdown table of the gate's verdicts and figures")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{args.db}"
    names = optuna.study.get_all_study_names(storage)
    name = args.study or (names[0] if len(names) == 1 else None)
    if name is None:
        print(f"gpu_trials: {args.db} holds {names}; pass --study", file=sys.stderr)
        return 2
    study = optuna.load_study(study_name=name, storage=storage)
    if args.gate:
        gate_table(study)
        return 0
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        u = t.user_attrs
        value = f"{t.values[0]:9.1f}" if t.values else f"{'-':>9}"
        stages = " ".join(f"{k}={v:.1f}" for k, v in (u.get("stage_seconds") or {}).items())
        startup = " ".join(f"{k}={v}" for k, v in (u.get("startup_breakdown") or {}).items())
        eff = u.get("effective_args") or {}
        print(f"trial {t.number:>3} {t.state.name:<8} {u.get('failure_kind', ''):<22} {value} tok/s  "
              f"kv_tokens={eff.get('max_total_num_tokens')} logprob_diff={u.get('gate_max_logprob_diff')}")
        print(f"    flags: {u.get('flags', t.params)}")
        print(f"    stages: {stages}")
        if startup:
            print(f"    startup: {startup}")
        if u.get("failure_message"):
            print(f"    failure ({u.get('failure_stage')}): {u['failure_message'][:400]}")
    return 0


# The check behind a failure, from the words of its message (tuner/trial/_gate.py): the self-comparisons start
# with their name; the others word their message their own way. Order matters: the first match wins.
CHECK_WORDS = (
    ("batch-consistency:", "batch-consistency"),
    ("long-context-consistency:", "long-context-consistency"),
    ("more than the baseline's worst", "logprob-excess"),
    ("decode and re-prefill", "logprob-consistency"),
    ("re-prefill returned", "logprob-consistency"),
    ("identical requests", "determinism"),
    ("leaves the baseline's", "baseline-agreement"),
    ("expected ", "known-answer"),
    ("is NaN or inf", "finite-logprobs"),
)


def failed_check(message: str, stage: str) -> str:
    check = next((name for words, name in CHECK_WORDS if words in message), "")
    if not check and stage == "gate":
        check = "degenerate-text"  # its reasons name the symptom (empty, repeated token, ...), not the check
    return check if stage != "recheck" else f"after-load {check}".strip()


def gate_table(study: optuna.Study) -> None:
    """One Markdown row a trial. Seconds after launch: the stages up to the verdict (teardown left out)."""
    print("| trial | fault | backend | decode graphs | chunk | result | check | stage | s after launch | "
          "logprob | batch | long context |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        u, p = t.user_attrs, t.params
        kind = u.get("failure_kind") or ("running" if t.state.name == "RUNNING" else t.state.name.lower())
        stage = u.get("failure_stage", "")
        seconds = sum(v for k, v in (u.get("stage_seconds") or {}).items() if k != "teardown")
        figures = u.get("gate_figures") or {}
        graphs = p.get("cuda-graph-backend-decode")
        graphs = f"to {p.get('cuda-graph-max-bs-decode')}" if graphs == "full" else graphs
        cells = [t.number, (u.get("env") or {}).get("TUNER_FAULT", p.get("TUNER_FAULT", "")),
                 p.get("attention-backend", ""), graphs, p.get("chunked-prefill-size", ""),
                 "ok" if kind == "none" else kind, failed_check(u.get("failure_message", ""), stage) if stage else "",
                 stage, f"{seconds:.0f}"]
        cells += [f"{figures[k]:.4f}" if k in figures else "" for k in
                  ("logprob-consistency", "batch-consistency", "long-context-consistency")]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
