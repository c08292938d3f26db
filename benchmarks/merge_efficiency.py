"""One set's figures from search_efficiency.py run in parts: `python benchmarks/merge_efficiency.py OUT...`.

A set too slow for one machine runs in parts (`--landscape-offset`, `--landscape-count`), each part printing
its own landscapes' tables. This reads the per-landscape tables of every part and prints, over all of their
landscapes, search_efficiency.py's own per-strategy table (`print_head_to_head`): each strategy's median over
the landscapes of its median restarts to 98%, tpe's median ratio to it, and its ratio to the best other anchor
in hindsight (tpe/hindsight on the tuner's row). Random is left out: its ratio needs its longer run
(`--random-trials`), which the per-landscape table does not hold.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _efficiency_problems import LABELS, STRATEGIES  # noqa: E402
from _efficiency_verdicts import print_head_to_head  # noqa: E402

_HEAD = re.compile(r"^== (\S+): \d+ parameters")
_ROW = re.compile(r"^   (?P<label>.+?)\s{2,}(?P<censored>>?)(?P<restarts>\d+(?:\.\d+)?) \[")
_BY_LABEL = {label: name for name, label in LABELS.items()}


def read(paths: Sequence[Path]) -> tuple[dict[str, dict[str, float]], int]:
    """Per landscape, each strategy's median restarts to 98% (trials + 1 where the median run never reached it,
    as search_efficiency.py counts it), and the trials per run. A landscape in two parts keeps the later one."""
    out: dict[str, dict[str, float]] = {}
    trials = 0
    for path in paths:
        landscape = None
        for line in path.read_text().splitlines():
            if line.startswith("search efficiency:"):
                trials = int(re.search(r"x (\d+) trials", line).group(1))
            if head := _HEAD.match(line):
                landscape = head.group(1)
                out[landscape] = {}
            elif landscape and (row := _ROW.match(line)) and row.group("label").strip() in _BY_LABEL:
                value = float(row.group("restarts"))
                out[landscape][_BY_LABEL[row.group("label").strip()]] = trials + 1 if row.group("censored") else value
    return {name: figures for name, figures in out.items() if figures}, trials


def report(figures: Mapping[str, Mapping[str, float]], trials: int) -> None:
    names = sorted(figures)
    ran = [s for s in STRATEGIES if s != "random" and all(s in figures[n] for n in names)]
    print(f"{len(names)} landscapes ({names[0]} ... {names[-1]}); strategies run on all of them: {', '.join(ran)}")
    # One median per landscape and strategy: the median of one value is itself.
    stats = {n: {s: {"restarts_to": [figures[n][s]]} for s in ran} for n in names}
    print_head_to_head("merged", stats, trials)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="+", type=Path, help="what search_efficiency.py printed, one file a part")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.outputs if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    figures, trials = read(args.outputs)
    if not figures:
        parser.error("no per-landscape table in these files: give what benchmarks/search_efficiency.py printed")
    report(figures, trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
