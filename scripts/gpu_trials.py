"""One line per trial of a real-GPU study, for the device call's log and docs/: what `show` leaves out.

    python3 scripts/gpu_trials.py trials.db [--study NAME]

Per trial: state, failure kind, output tok/s, the configuration, time per stage, the start-up breakdown from
SGLang's own startup timings, the KV pool (max_total_num_tokens), the gate's largest decode vs re-prefill
logprob difference, and the failure's message.
"""

from __future__ import annotations

import argparse
import sys

import optuna


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db")
    parser.add_argument("--study", default=None)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{args.db}"
    names = optuna.study.get_all_study_names(storage)
    name = args.study or (names[0] if len(names) == 1 else None)
    if name is None:
        print(f"gpu_trials: {args.db} holds {names}; pass --study", file=sys.stderr)
        return 2
    study = optuna.load_study(study_name=name, storage=storage)
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


if __name__ == "__main__":
    sys.exit(main())
