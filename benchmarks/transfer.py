"""Whether carrying knowledge across studies pays (issue 36): `python benchmarks/transfer.py`.

A *family* is one host (a GPU from benchmarks/_landscapes.py and one engine version's backend speed and health
tables, `_landscapes.Host`) serving MODELS different models: each model's landscape has its own space, workload,
GPU count and constants, but a backend that NaNs or crashes at capture does so for every model of the family
that can run it. Families are drawn per seed (`--families train|test|FIRST-LAST`): TRAIN_FAMILIES to choose
constants on (tuner/search/_warm.py's), TEST_FAMILIES to report on once. Every other family (even seeds) also runs its
first model on the next engine version, where one backend's health changes: the backend of that model's optimum
(if the baseline does not use it; else the fastest other backend its space offers that runs fine) gives NaN.

For each family, seed and target model, the tuner's own sampler and worker run in-process on the simulator's
predict() as benchmarks/search_efficiency.py runs them (`SimulatedWorker`; one trial takes milliseconds):

- `cold`: a study with no earlier study to learn from (`make_sampler("tpe")`, baseline first), told only what
  its model's size says (`warm_start([], ...)`, as `run` does). The cold studies are also the earlier studies the
  warm rows learn from (a full --trials run each);
- `warm from 1`: warm-started from the cold study of the next model of the family (same seed), the way
  `run --learn-from` does it: `knowledge_of_trials` of the earlier study with its context (tuner/search/_context.py's
  facts of the simulated GPUs, model and workload), `warm_start(...)`, then `make_sampler(prior=warm.prior)` and
  `_initialise(first=warm.first)`;
- `warm from 3`: from the cold studies of the other three models;
- negative transfer, against the same target's cold row: `other GPU`, the first model warm-started from a study
  of the same model on another host (a GPU of another compute capability, its own tables); `other version`, the
  first model on the next engine version warm-started from its study on this one (its best backend now NaNs).

Judging is search_efficiency.py's (`judge`): the strategy's pick after each trial is its best observed feasible
trial; "restarts to 98%" counts the servers launched (baseline included) until that pick's noiseless value is
at least 98% of the optimum, N + 1 if it never is (the median shows ">N" then). The optimum is
search_efficiency's (`true_optimum`, cached under .cache/search_efficiency/), raised to any better point a run
measured. A target run that is not a source for others stops once it has reached 98% and run WARMUP trials:
what comes later changes none of its figures. "crash/NaN in first 10" is the share of servers launched in
trials 1-10 that crashed, hung, ran out of memory or answered NaN/garbage/drifting logprobs, over all runs.

Targets (issue 47), judged on the medians over every (family, target model, seed):
- restarts to 98%, warm from one study <= cold's;
- on no family, warm from one study more than 3 restarts above cold (medians per family);
- crash/NaN share in the first 10 trials, warm from one study <= 1/2 of cold's;
- negative transfer no worse than cold on the same targets by more than 10%, each kind (other GPU, other
  version) judged on its own.

`--carry` picks what the warm rows carry (run --carry's parts; default: the shipped default); `--split` adds warm
from 1 with each part alone, and with all, against cold on the same targets: the per-part table of docs/learning.md.

It also prints the ceiling of `warm from 1` (`carried_share`): on how many targets the next model's optimum itself,
carried as a study's best is carried, reaches 98% of the target's optimum; a search goes on from there.

`--quick` (the first training family, its first model as the only target, one seed, 12 trials, a cheaper optimum)
is the smoke run tests/test_bench_transfer.py parses.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import optuna  # noqa: E402
import yaml  # noqa: E402

import _landscapes  # noqa: E402
import search_efficiency as se  # noqa: E402
from tuner.search._context import EngineFacts, StudyContext, gpu_facts, model_facts, workload_facts  # noqa: E402
from tuner.search._knowledge import Knowledge, knowledge_of_trials  # noqa: E402
from tuner.search._warm import DEFAULT_PARTS, PARTS, WarmStart, adapt, fit_memory, parse_parts, warm_start  # noqa: E402
from tuner.sim._profile import load_profile  # noqa: E402

TRAIN_FAMILIES = range(0, 8)  # to choose constants on
TEST_FAMILIES = range(930, 942)  # to report on, once (500-505, 900-905 and 910-921: spent)
MODELS = 4  # per family
VERSION = _landscapes.SGLANG_VERSION
NEXT_VERSION = "0.5.24"  # the engine version whose health tables differ (one backend NaNs)
WARMUP = 10  # the crash/NaN share is counted over the first this many trials
WITHIN_COLD = 1.0  # warm from one: median restarts to 98% at most this share of cold's (issue 47)
FAMILY_SLACK = 3  # warm from one: on no family more than this many restarts above cold (medians per family)
CRASH_SHARE = 0.5  # warm from one: crash/NaN in the first 10 at most this share of cold's
NEGATIVE_SLACK = 1.10  # negative transfer: median restarts at most this times cold's on the same targets
LANDSCAPE_DIR = REPO / ".cache" / "transfer"
ROWS = ("cold", "warm from 1", "warm from 3")
# --split: warm from 1 with each part of a warm start alone (tuner/search/_warm.py's PARTS), and with all of them.
SPLIT = tuple(f"1: {part}" for part in PARTS) + ("1: all",)
NEGATIVE = ("other GPU", "other version")


# -- families ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Landscape:
    name: str
    profile: Path
    space: Path
    version: str  # the engine version its context reports


@dataclasses.dataclass(frozen=True)
class Family:
    seed: int
    gpu: str
    models: tuple[Landscape, ...]
    other_gpu: Landscape | None  # the first model on another host: the `other GPU` row's source (None: none draws)
    broken: str | None  # the backend that NaNs on the next engine version (None: no version pair)
    # Per target model: the share of its optimum that the next model's optimum reaches on it, carried as `warm
    # from 1` carries a good configuration (adapt, fit_memory); 0 where it fails or does not fit. Empty: not run.
    carried: tuple[float, ...] = ()


def _write(name: str, profile: dict[str, Any], space: dict[str, Any], version: str) -> Landscape:
    profile, space = {**profile, "name": name}, {**space, "name": name}
    LANDSCAPE_DIR.mkdir(parents=True, exist_ok=True)
    paths = LANDSCAPE_DIR / f"{name}.profile.yaml", LANDSCAPE_DIR / f"{name}.space.yaml"
    for path, data in zip(paths, (profile, space)):
        text = yaml.dump(data, Dumper=_landscapes._NoAliases, sort_keys=False)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return Landscape(name, *paths, version)


def draw_family(seed: int) -> Family:
    """The family of `seed`: a GPU with MODELS models that fit on it, each on the family's host; the first model
    also on another GPU (another compute capability, its own tables)."""
    rng = random.Random(f"transfer-family-{seed}")
    while True:
        gpu = _landscapes._pick(rng, _landscapes.GPUS)
        fitting = [m for m in _landscapes.FAMILIES if _landscapes.fits(gpu, m)]
        if len(fitting) >= MODELS:
            break
    host = _landscapes.Host(gpu, f"transfer-{seed}")
    models: list[Landscape] = []
    for i, model in enumerate(rng.sample(fitting, len(fitting))):
        try:
            profile, space = _landscapes.make_landscape(seed * 100 + i, host, model)
        except RuntimeError:  # no draw of this model on this host has a baseline that runs
            continue
        models.append(_write(f"fam{seed}-{len(models)}", profile, space, VERSION))
        if len(models) == MODELS:
            break
    first = load_profile(models[0].profile).model.name
    model = next(m for m in _landscapes.FAMILIES if m.name == first)
    others = [g for g in _landscapes.GPUS if g.sm != gpu.sm and _landscapes.fits(g, model)]
    other_gpu = None
    while others and other_gpu is None:
        other = _landscapes._pick(rng, others)
        host = _landscapes.Host(other, f"transfer-{seed}-other")
        try:
            profile, space = _landscapes.make_landscape(seed * 100 + 99, host, model)
        except RuntimeError:  # no draw of this model on that GPU has a baseline that runs: another GPU
            others.remove(other)
            continue
        other_gpu = _write(f"fam{seed}-other-gpu", profile, space, VERSION)
    return Family(seed, gpu.name, tuple(models), other_gpu, None)


def next_version(family: Family, optimum_point: Mapping[str, Any]) -> tuple[Family, Landscape | None]:
    """The family's first model on NEXT_VERSION, where one backend of its space now NaNs (even seeds only)."""
    if family.seed % 2:
        return family, None
    first = family.models[0]
    profile = yaml.safe_load(first.profile.read_text())
    space = yaml.safe_load(first.space.read_text())
    baseline = space["baseline"]["attention-backend"]
    fine = {n for n in space["params"]["attention-backend"]["choices"]
            if not any(r["when"] == {"decode_backend": n} for r in profile["health"])}
    best = optimum_point.get("attention-backend")
    if best == baseline or best not in fine:
        speeds = profile["performance"]["attention_backends"]
        best = max(sorted(fine - {baseline}), key=lambda n: speeds[n], default=None)
    if best is None:
        return family, None
    profile["health"] = [*profile["health"], {"when": {"decode_backend": best}, "effect": "nan_when_batch_over",
                                              "value": 1, "symptom": "token0"}]
    landscape = _write(f"fam{family.seed}-0-next", profile, space, NEXT_VERSION)
    return dataclasses.replace(family, broken=best), landscape


class FamilyProblem(se.Problem):
    """search_efficiency's Problem on a family landscape (written under .cache/transfer/, not a gen-SEED one)."""

    def __init__(self, landscape: Landscape) -> None:
        super().__init__(landscape.name, paths=(landscape.profile, landscape.space))


def context(landscape: Landscape, spec: Any) -> dict[str, Any]:
    """The context attr `run --simulate` would record for this landscape, with the family's engine version."""
    profile = str(landscape.profile)
    return StudyContext(EngineFacts("sglang", landscape.version, "simulator profile"), gpu_facts(None, None, profile),
                        model_facts(spec.server.model_path, profile), workload_facts(spec)).to_attr()


# -- one study ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Study:
    records: list[se.TrialRecord]
    knowledge: Knowledge  # what a later study learns from this one


def run_study(problem: FamilyProblem, landscape: Landscape, seed: int, trials: int, warm: WarmStart | None,
              stop_at: float | None) -> Study:
    """One study as `run --sampler tpe --seed SEED --trials N [--learn-from ...]` runs it, minus the server
    (search_efficiency.run_study). `stop_at`: the optimum, to stop once the pick reached 98% of it and WARMUP
    trials ran (None: run every trial)."""
    def reached(records: list[se.TrialRecord]) -> bool:
        return len(records) >= WARMUP and se.judge(problem, records, stop_at, trials).reached

    study, records = se.run_study(problem, "tpe", seed, trials, warm, reached if stop_at is not None else None)
    k = knowledge_of_trials(landscape.name, study.get_trials(deepcopy=False), context(landscape, problem.spec),
                            problem.maximize)
    return Study(records, k)


def early_crashes(records: Sequence[se.TrialRecord]) -> tuple[int, int]:
    """(servers launched in the first WARMUP trials, of those the ones that crashed, hung, OOMed or answered
    NaN/garbage)."""
    first = [r for r in records[:WARMUP] if r.restarted]
    return len(first), sum(1 for r in first if r.outcome not in ("none", "reused", "slo_violation"))


# -- one family --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    family: int
    target: str  # the landscape judged
    row: str  # cold | warm from 1 | warm from 3 | other GPU | other version
    seed: int
    restarts_to: int
    reached: bool
    launched10: int
    crashed10: int


def run_family(family: Family, seeds: Sequence[int], trials: int, targets: int, quick: bool, starts: int,
               log: Any, parts: frozenset[str] = DEFAULT_PARTS, split: bool = False) -> tuple[Family, list[Run]]:
    """`parts`: what the warm rows carry (tuner/search/_warm.py's PARTS); `split`: the SPLIT rows too."""
    problems = {m.name: FamilyProblem(m) for m in family.models}
    optima = {}
    for m in family.models[:targets]:
        optima[m.name] = se.true_optimum(problems[m.name], starts, quick, use_cache=not quick)
    family, next_landscape = next_version(family, optima[family.models[0].name].point)
    if next_landscape is not None:
        problems[next_landscape.name] = FamilyProblem(next_landscape)
        optima[next_landscape.name] = se.true_optimum(problems[next_landscape.name], starts, quick, not quick)
    if family.other_gpu is not None:
        problems[family.other_gpu.name] = FamilyProblem(family.other_gpu)
    n = len(family.models)
    pending: list[tuple[str, str, int, list[se.TrialRecord]]] = []  # judged once the optima are final

    def start(landscape: Landscape, sources: Sequence[Knowledge], carry: frozenset[str] = parts) -> WarmStart:
        """What `run` tells the study: with no sources, what the model's size says (weight_lesson)."""
        problem = problems[landscape.name]
        return warm_start(sources, problem.space, context(landscape, problem.spec), carry)

    def target(landscape: Landscape, row: str, seed: int, sources: Sequence[Knowledge],
               carry: frozenset[str] = parts) -> Study:
        problem = problems[landscape.name]
        study = run_study(problem, landscape, seed, trials, start(landscape, sources, carry),
                          optima[landscape.name].value)
        pending.append((landscape.name, row, seed, study.records))
        return study

    for seed in seeds:
        t0 = time.monotonic()
        cold: list[Study] = []
        for i, m in enumerate(family.models):  # every cold study runs whole: later ones learn from it
            study = run_study(problems[m.name], m, seed, trials, start(m, []), None)
            cold.append(study)
            if i < targets:
                pending.append((m.name, "cold", seed, study.records))
        for i, m in enumerate(family.models[:targets]):
            target(m, "warm from 1", seed, [cold[(i + 1) % n].knowledge])
            target(m, "warm from 3", seed, [cold[(i + j) % n].knowledge for j in range(1, min(4, n))])
            for row in SPLIT if split else ():
                part = row.removeprefix("1: ")
                target(m, row, seed, [cold[(i + 1) % n].knowledge], frozenset(PARTS if part == "all" else [part]))
        first = family.models[0]
        if family.other_gpu is not None:
            other = run_study(problems[family.other_gpu.name], family.other_gpu, seed, trials,
                              start(family.other_gpu, []), None)
            target(first, "other GPU", seed, [other.knowledge])
        if next_landscape is not None:
            target(next_landscape, "cold", seed, [])
            target(next_landscape, "other version", seed, [cold[0].knowledge])
        print(f"   family {family.seed} seed {seed}: {time.monotonic() - t0:.0f}s", file=log, flush=True)
    for name in optima:
        optima[name] = se.raise_optimum(problems[name], optima[name], [p[3] for p in pending if p[0] == name])
    if targets == n:  # every model's optimum is known: what the best one earlier study could find would carry
        sources = [family.models[(i + 1) % n] for i in range(n)]
        family = dataclasses.replace(family, carried=tuple(
            carried_share(problems[m.name], problems[s.name], m, s, optima[m.name].value, optima[s.name].point)
            for m, s in zip(family.models, sources)))
    runs = []
    for name, row, seed, records in pending:
        f = se.judge(problems[name], records, optima[name].value, trials)
        runs.append(Run(family.seed, name, row, seed, f.restarts_to, f.reached, *early_crashes(records)))
    return family, runs


def carried_share(problem: FamilyProblem, source: FamilyProblem, landscape: Landscape, source_landscape: Landscape,
                  optimum: float, source_optimum: Mapping[str, Any]) -> float:
    """How close the source model's optimum comes to this model's, carried as warm_start carries a good
    configuration; 0 where it fails here or no tensor-parallel size holds this model."""
    params = fit_memory(adapt(source_optimum, problem.space), problem.space,
                        context(source_landscape, source.spec), context(landscape, problem.spec))
    return problem.share(problem.point_value(params), optimum) if params is not None else 0.0


# -- the report ---------------------------------------------------------------------------------------------------

def _median(values: Sequence[int], trials: int) -> str:
    if not values:
        return "-"
    m = statistics.median(values)
    return f">{trials}" if m > trials else f"{m:g}"


def _share(runs: Sequence[Run]) -> float:
    launched = sum(r.launched10 for r in runs)
    return sum(r.crashed10 for r in runs) / launched if launched else 0.0


def _cell(runs: Sequence[Run], trials: int) -> str:
    return f"{_median([r.restarts_to for r in runs], trials)} ({sum(r.reached for r in runs)}/{len(runs)})"


def family_gaps(runs: Sequence[Run], row: str) -> dict[int, float]:
    """Per family: the median restarts to 98% of `row` minus cold's, over the same targets and seeds."""
    gaps = {}
    for family in sorted({r.family for r in runs}):
        warm = [r.restarts_to for r in runs if r.family == family and r.row == row and "-next" not in r.target]
        cold = [r.restarts_to for r in runs if r.family == family and r.row == "cold" and "-next" not in r.target]
        if warm and cold:
            gaps[family] = statistics.median(warm) - statistics.median(cold)
    return gaps


def report(families: Sequence[Family], runs: Sequence[Run], trials: int) -> bool:
    """The tables and the verdicts; True when every target is met."""
    print("\nrestarts to 98% of the optimum, median (runs that reached it / runs); crash/NaN share of the servers "
          f"launched in the first {WARMUP} trials; gap: warm from 1's median minus cold's")
    print(f"{'family':<8} {'GPU':<28} {'v-pair':<14} " + " ".join(f"{row:>12}" for row in ROWS)
          + " " + " ".join(f"{'crash ' + row.split()[-1]:>10}" for row in ROWS) + f" {'gap':>5}")
    gaps = family_gaps(runs, "warm from 1")
    for family in families:
        mine = [r for r in runs if r.family == family.seed and r.row in ROWS and "-next" not in r.target]
        cells = [_cell([r for r in mine if r.row == row], trials) for row in ROWS]
        crash = [f"{_share([r for r in mine if r.row == row]):.0%}" for row in ROWS]
        print(f"{'fam' + str(family.seed):<8} {family.gpu[:28]:<28} {family.broken or '-':<14} "
              + " ".join(f"{c:>12}" for c in cells) + " " + " ".join(f"{c:>10}" for c in crash)
              + f" {gaps.get(family.seed, 0):>+5g}")
    main = {row: [r for r in runs if r.row == row and "-next" not in r.target] for row in ROWS}
    print(f"{'all':<8} {'':<28} {'':<14} " + " ".join(f"{_cell(main[row], trials):>12}" for row in ROWS) + " "
          + " ".join(f"{_share(main[row]):>10.0%}" for row in ROWS))

    split = [row for row in SPLIT if any(r.row == row for r in runs)]
    if split:
        cold = [r.restarts_to for r in main["cold"]]
        print("\neach part of a warm start alone (warm from 1), against cold on the same targets and seeds: median "
              f"restarts to 98% (ratio), crash/NaN in the first {WARMUP} (ratio), families where it took more "
              f"restarts than cold, and more by over {FAMILY_SLACK}, the worst family's gap")
        print(f"{'part':<12} {'restarts':>12} {'ratio':>6} {'crash':>6} {'ratio':>6} {'worse':>6} "
              f"{'>' + str(FAMILY_SLACK):>4} {'worst':>6}")
        for row in ("cold", *split):
            mine = [r for r in runs if r.row == row and "-next" not in r.target]
            ratio = statistics.median([r.restarts_to for r in mine]) / statistics.median(cold)
            crash = _share(mine) / _share(main["cold"]) if _share(main["cold"]) else float("nan")
            row_gaps = family_gaps(runs, row).values() if row != "cold" else [0.0]
            print(f"{row.removeprefix('1: '):<12} {_cell(mine, trials):>12} {ratio:>6.2f} {_share(mine):>6.1%} "
                  f"{crash:>6.2f} {sum(g > 0 for g in row_gaps):>6} {sum(g > FAMILY_SLACK for g in row_gaps):>4} "
                  f"{max(row_gaps):>+6g}")

    carried = [share for family in families for share in family.carried]
    if carried:
        print(f"ceiling of warm from 1: the next model's optimum, carried to each target as warm from 1 carries its "
              f"best, reaches 98% of the target's optimum on {sum(c >= se.TARGET - 1e-12 for c in carried)} of "
              f"{len(carried)} targets (median share {statistics.median(carried):.2f}); a search goes on from there")

    print("\nnegative transfer: the same target, cold vs warm from a study that should not help")
    print(f"{'row':<14} {'runs':>5} {'cold':>12} {'warm':>12} {'crash cold':>11} {'crash warm':>11}")
    negative = {}
    for row in NEGATIVE:
        warm = [r for r in runs if r.row == row]
        cold = [r for r in runs if r.row == "cold" and any((w.target, w.seed) == (r.target, r.seed) for w in warm)]
        negative[row] = warm, cold
        print(f"{row:<14} {len(warm):>5} {_cell(cold, trials):>12} {_cell(warm, trials):>12} "
              f"{_share(cold):>11.0%} {_share(warm):>11.0%}")

    print("\ntargets (medians over every family, target model and seed):")
    cold, warm1 = [r.restarts_to for r in main["cold"]], [r.restarts_to for r in main["warm from 1"]]
    met = []
    ratio = statistics.median(warm1) / statistics.median(cold)
    met.append(ratio <= WITHIN_COLD)
    print(f"  restarts to 98%, warm from 1 <= {WITHIN_COLD:g} x cold: {_median(warm1, trials)} vs "
          f"{_median(cold, trials)} = {ratio:.2f} -> {'met' if met[-1] else 'MISSED'}")
    worst = max(gaps, key=gaps.get)
    met.append(gaps[worst] <= FAMILY_SLACK)
    print(f"  on no family more than {FAMILY_SLACK} restarts above cold (warm from 1): worst {gaps[worst]:+g} "
          f"(fam{worst}) -> {'met' if met[-1] else 'MISSED'}")
    c_cold, c_warm = _share(main["cold"]), _share(main["warm from 1"])
    ratio = c_warm / c_cold if c_cold else 0.0 if not c_warm else float("inf")
    met.append(c_warm <= CRASH_SHARE * c_cold)
    print(f"  crash/NaN in first {WARMUP}, warm from 1 <= {CRASH_SHARE:g} x cold: {c_warm:.1%} vs {c_cold:.1%} = "
          f"{ratio:.2f} -> {'met' if met[-1] else 'MISSED'}")
    for row, (warm, cold) in negative.items():  # each kind on its own: one that helps must not hide one that hurts
        if not warm:
            continue
        w, c = [r.restarts_to for r in warm], [r.restarts_to for r in cold]
        ratio = statistics.median(w) / statistics.median(c)
        met.append(ratio <= NEGATIVE_SLACK)
        print(f"  negative transfer, {row}, <= {NEGATIVE_SLACK:g} x cold: {_median(w, trials)} vs {_median(c, trials)} "
              f"= {ratio:.2f} -> {'met' if met[-1] else 'MISSED'}")
    print(f"verdict: {sum(met)}/{len(met)} targets met")
    return all(met)


def _family_task(task: tuple[int, int, int, int, bool, int, frozenset[str], bool]) -> tuple[Family, list[Run]]:
    seed, seeds, trials, targets, quick, starts, parts, split = task
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return run_family(draw_family(seed), range(seeds), trials, targets, quick, starts, sys.stderr, parts, split)


def family_seeds(which: str) -> range:
    if which == "train":
        return TRAIN_FAMILIES
    if which == "test":
        return TEST_FAMILIES
    first, _, last = which.partition("-")
    if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
        raise ValueError(f"--families {which!r}: name train ({TRAIN_FAMILIES[0]}-{TRAIN_FAMILIES[-1]}), test "
                         f"({TEST_FAMILIES[0]}-{TEST_FAMILIES[-1]}) or a range of family seeds such as 20-23")
    return range(int(first), int(last) + 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=None, metavar="SET",
                        help=f"train ({TRAIN_FAMILIES[0]}-{TRAIN_FAMILIES[-1]}: to choose constants on), test "
                             f"({TEST_FAMILIES[0]}-{TEST_FAMILIES[-1]}: to report on; the default), or FIRST-LAST "
                             "(--quick: train)")
    parser.add_argument("--family-count", type=int, default=None, metavar="N", help="at most N families of the set")
    parser.add_argument("--seeds", type=int, default=4, help="sampler seeds per target (default 4)")
    parser.add_argument("--trials", type=int, default=40, help="trials per study (default 40)")
    parser.add_argument("--starts", type=int, default=8,
                        help="local-search starts of the optimum search where a space is too big to enumerate")
    parser.add_argument("--jobs", type=int, default=1, help="families run at once, one process each (default 1)")
    parser.add_argument("--carry", default="default", metavar="PARTS",
                        help=f"what the warm rows carry, as run --carry: parts of {', '.join(PARTS)} joined by "
                             "commas, all, or default (the default)")
    parser.add_argument("--split", action="store_true",
                        help="also warm from 1 with each part alone, and with all: the per-part table")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: one family, its first model the only target, one seed, 12 trials")
    args = parser.parse_args(argv)
    for name in ("seeds", "trials", "starts", "family_count", "jobs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    try:
        seeds = list(family_seeds(args.families or ("train" if args.quick else "test")))
        parts = parse_parts(args.carry)
    except ValueError as e:
        parser.error(str(e))
    if args.quick:
        seeds, args.seeds, args.trials, targets = seeds[:1], 1, 12, 1
    else:
        seeds, targets = seeds[:args.family_count], MODELS
    if args.trials < WARMUP:
        parser.error(f"--trials must be at least {WARMUP} (the crash/NaN share counts the first {WARMUP}), got "
                     f"{args.trials}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    command = shlex.join(["python", "benchmarks/transfer.py", *(sys.argv[1:] if argv is None else argv)])
    print(f"{dt.date.today().isoformat()}: {command}")
    print(f"families {seeds[0]}-{seeds[-1]} ({len(seeds)}, {MODELS} models each), seeds 0-{args.seeds - 1}, "
          f"{args.trials} trials, targets per family: {targets}; warm rows carry: {', '.join(sorted(parts))}")
    t0 = time.monotonic()
    families, runs = [], []
    tasks = [(seed, args.seeds, args.trials, targets, args.quick, args.starts, parts, args.split) for seed in seeds]
    for family, mine in se._map(_family_task, tasks, args.jobs):
        families.append(family)
        runs += mine
    report(families, runs, args.trials)
    print(f"took {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
