"""One set's figures from search_efficiency.py run in parts: `python benchmarks/merge_efficiency.py OUT...`.

A set too slow for one machine runs in parts (`--landscape-offset`, `--landscape-count`), each part printing
its own landscapes' tables. This reads the per-landscape tables of every part and prints, over all of their
landscapes, what search_efficiency.py's overall table would: each strategy's median over the landscapes of its
median restarts to 98%, tpe's median ratio to it, and tpe/hindsight (tpe over whichever anchor did best on
each landscape, picked afterwards). Random's ratio needs its longer run (`--random-trials`), which the
per-landscape table does not hold: run it with the tuner in one part when that figure is wanted.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _efficiency_problems import LABELS, STRATEGIES  # noqa: E402
from _efficiency_verdicts import ANCHORS  # noqa: E402

_HEAD = re.compile(r"^== (\S+): \d+ parameters")
_ROW = re.compile(r"^   (?P<label>.+?)\s{2,}(?P<censored>>?)(?P<restarts>\d+(?:\.\d+)?) \[")
_BY_LABEL = {label: name for name, label in LABELS.items()}


def read(paths: Sequence[Path]) -> dict[str, dict[str, float]]:
    """Per landscape, each strategy's median restarts to 98% (trials + 1 where the median run never reached it,
    as search_efficiency.py counts it). A landscape in two parts keeps the later one."""
    out: dict[str, dict[str, float]] = {}
    for path in paths:
        landscape, trials = None, None
        for line in path.read_text().splitlines():
            if line.startswith("search efficiency:"):
                trials = int(re.search(r"x (\d+) trials", line).group(1))
            if head := _HEAD.match(line):
                landscape = head.group(1)
                out[landscape] = {}
            elif landscape and (row := _ROW.match(line)) and row.group("label").strip() in _BY_LABEL:
                value = float(row.group("restarts"))
                out[landscape][_BY_LABEL[row.group("label").strip()]] = trials + 1 if row.group("censored") else value
            elif not line.strip():
                landscape = None if landscape and out[landscape] else landscape
    return {name: figures for name, figures in out.items() if figures}


def report(figures: Mapping[str, Mapping[str, float]]) -> None:
    names = sorted(figures)
    ran = [s for s in STRATEGIES if all(s in figures[n] for n in names)]
    print(f"{len(names)} landscapes ({names[0]} ... {names[-1]}); strategies run on all of them: {', '.join(ran)}")
    print(f"   {'strategy':<22} {'median':>7} {'tpe/it':>7} {'tpe fewer / more':>17} {'it/hindsight':>13}")
    for strategy in ran:
        mine = [figures[n][strategy] for n in names]
        others = [a for a in ANCHORS if a != strategy and a in ran]
        hindsight = statistics.median(m / min(figures[n][a] for a in others) for n, m in zip(names, mine)) \
            if strategy != "random" and others else None
        ratio = statistics.median(figures[n]["tpe"] / figures[n][strategy] for n in names) \
            if strategy not in ("tpe", "random") and "tpe" in ran else None
        versus = (f"{sum(figures[n]['tpe'] < figures[n][strategy] for n in names)} / "
                  f"{sum(figures[n]['tpe'] > figures[n][strategy] for n in names)}") if ratio is not None else "-"
        print(f"   {LABELS[strategy]:<22} {statistics.median(mine):>7g} "
              f"{'-' if ratio is None else f'{ratio:.2f}':>7} {versus:>17} "
              f"{'-' if hindsight is None else f'{hindsight:.2f}':>13}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="+", type=Path, help="what search_efficiency.py printed, one file a part")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.outputs if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    figures = read(args.outputs)
    if not figures:
        parser.error("no per-landscape table in these files: give what benchmarks/search_efficiency.py printed")
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
