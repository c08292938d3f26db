"""How far the simulator's twin of a real GPU can be trusted: its predictions against a real study's trials.

    python benchmarks/twin_fidelity.py --db docs/gpu-sglang-0517/trials.db \
        --profile sglang-0.5.17-h100-llama3-8b [--calibration 0-29] [--held-out 30-]

For every trial of the real study in a range, the simulator predicts the same configuration without starting a
server (`tuner.sim.predict`: the simulated server's own scheduler and physics on a virtual clock, with the
study's workload) and the two are set side by side. The held-out range is the test: the profile must not have
been calibrated on it. `--calibration` prints the same figures for the trials the profile was fitted to
(in-sample), so that one sees how much of the fit is fitting. The defaults are the H100 twin's sets: it was
calibrated on trials 0-29 of the first real study; trials 30 and up are held out. Its held-out verdict on trials
19-29 came from the profile as calibrated on 0-18, kept as docs/gpu-sglang-0517/twin-calibrated-0-18.yaml.

What is compared, per trial:
- outcome: the real failure kind (or ok, or stopped by the pruner) against the predicted one. A predicted start
  longer than the space's startup-timeout is a predicted startup_timeout. A real crash_on_start is re-read
  with today's log patterns (tuner/trial/_logwatch.py), as older tuners recorded some failures that way. An OOM
  during CUDA-graph capture and a failed capture count as the same failure: SGLang 0.5.17 prints the capture
  failure first and the OOM in the traceback after it, and which of them a log excerpt holds is chance.
  A wrong answer from the old exact agreement check (before near-ties were allowed) is not compared.
- output tok/s of completed trials: the probe's figure over the whole level against the predicted one.
- pruned trials: the pruner stopped the probe part-way, so the real figure is tokens/elapsed at that point
  (the step it reported last, in thousandths of the level's tokens). It is compared with the twin's figure at
  the same step, and kept out of the headline figures: a figure taken in the middle of a wave of prefills
  says more about where the level was stopped than about the configuration.
Left out: trials that measured nothing of the configuration (interrupted, worker died, surplus, client too
slow), trials whose probe was cut at its time budget before enough requests finished (probe_cut, or recorded as
ok before that kind: tuner/_failures.py `measured`), and trials that reused another trial's measurement (no
restart). Start-up times are shown, not judged:
a first start on a machine adds JIT compiles the simulator does not model.

Targets (the verdict line): Spearman rho >= 0.8 between predicted and real output tok/s over the completed
trials, median |error| <= 15%, and every real failure kind predicted on every trial that failed that way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.twin._fidelity import (METRIC, BadInput, compare, load_study, parse_range, report,  # noqa: E402
                                  study_spec, workload_of)


# -- main -----------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, type=Path, help="a real study's trials.db")
    parser.add_argument("--profile", required=True, help="a shipped simulator profile, or a profile file")
    parser.add_argument("--study", help="the study's name, where the file holds several")
    parser.add_argument("--held-out", default="30-", help="trials the profile was not calibrated on (default 30-)")
    parser.add_argument("--calibration", default="0-29",
                        help="trials the profile was fitted to: their in-sample figures come first (default 0-29)")
    args = parser.parse_args(argv)
    try:
        from tuner._errors import UsageError
        from tuner.sim import ProfileError, load_profile

        held_out = parse_range(args.held_out, "--held-out")
        calibration = parse_range(args.calibration, "--calibration")
        try:
            profile = load_profile(args.profile)
        except ProfileError as exc:
            raise BadInput(f"--profile: {exc}") from None
        study = load_study(args.db, args.study)
        trials = study.trials
        try:
            spec = study_spec(study)
        except UsageError as exc:
            raise BadInput(str(exc)) from None
        if spec.objective.metric != METRIC:
            raise BadInput(f"study {study.name!r} maximises {spec.objective.metric}; the twin predicts {METRIC} "
                           "only: give a study of that objective")
    except BadInput as exc:
        print(f"twin_fidelity: {exc}", file=sys.stderr)
        return 2
    work = workload_of(spec, trials)
    print(f"twin fidelity: profile {profile.name} against study {study.name!r} ({args.db}), "
          f"{len(trials)} trials")
    print(f"workload: {work.requests} requests, {work.concurrency} concurrent, {work.input_len} input tokens "
          f"({work.input_source}), {work.output_len} output; objective {spec.objective.metric}")
    print(f"startup timeout {spec.server.startup_timeout:g} s (the space's): a longer predicted start is a "
          "predicted startup_timeout")
    for title, span in ((f"calibration set, in-sample: trials {args.calibration}", calibration),
                        (f"held-out set: trials {args.held_out}", held_out)):
        rows = compare(trials, span, spec, profile, work)
        if rows:
            report(title, rows)
        else:
            print(f"\n== {title} ==\nno trial of the study is in this range yet: nothing to measure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
